"""`toolscript exec` shows the script the folder it was run from, and only that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def toolscript_exec(folder: Path, code: str, *options: str) -> subprocess.CompletedProcess[str]:
    script = folder / "script.py"
    script.write_text(code)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "toolscript.cli",
            "exec",
            "script.py",
            "--journal",
            ":memory:",
            "--sandbox",
            "required",
            *options,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=50,
    )


def test_exec_works_in_the_current_directory_read_write(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    done = toolscript_exec(
        tmp_path, "import os\nopen('plot.png', 'wb').write(b'png')\nprint(open('data.csv').read())"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a,b" in done.stdout
    assert (tmp_path / "plot.png").read_bytes() == b"png"


def test_exec_cwd_chooses_another_folder(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "in.txt").write_text("from other")
    done = toolscript_exec(tmp_path, "print(open('in.txt').read())", "--cwd", str(other))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "from other" in done.stdout


def test_exec_no_cwd_shows_none_of_the_callers_folders(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("secret")
    done = toolscript_exec(
        tmp_path, f"import os\nprint(os.path.exists({str(tmp_path / 'data.csv')!r}))", "--no-cwd"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "False" in done.stdout
