"""`toolscript exec`: one process, one report; and the version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HOLDER = '''
import asyncio
from toolscript import tool


@tool
async def hold(x: int) -> int:
    """Never answers."""
    await asyncio.Event().wait()
    return x
'''


def toolscript(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "toolscript.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=folder,
    )


@pytest.mark.timeout(90)
def test_a_call_one_exec_left_in_doubt_is_not_reported_by_the_next(tmp_path: Path) -> None:
    (tmp_path / "holder.py").write_text(HOLDER)
    journal = str(tmp_path / "journal.sqlite3")
    (tmp_path / "first.py").write_text("await hold(x=1)\n")
    first = toolscript(
        tmp_path,
        "exec",
        "first.py",
        "--tools",
        "holder:hold",
        "--journal",
        journal,
        "--time-limit",
        "1",
    )
    assert first.returncode == 1, first.stdout + first.stderr
    assert "hold(x=1)" in first.stdout and "pending" in first.stdout
    (tmp_path / "second.py").write_text("print('hello')\n")
    second = toolscript(tmp_path, "exec", "second.py", "--journal", journal)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "hello" in second.stdout
    assert "hold" not in second.stdout and "restarted" not in second.stdout
    # The call is the journal's to report.
    calls = toolscript(tmp_path, "calls", "--uncertain", "--journal", journal, "--json")
    assert calls.returncode == 0, calls.stderr
    assert '"tool": "hold"' in calls.stdout


@pytest.mark.timeout(30)
def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    for command in (["--version"],):
        done = toolscript(tmp_path, *command)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("toolscript ")
    module = subprocess.run(
        [sys.executable, "-m", "toolscript", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert module.returncode == 0 and module.stdout.startswith("toolscript "), module.stderr
