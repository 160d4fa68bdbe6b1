"""A command leaves toolscript's own modules compiled even when Python was told not to write
bytecode (`PYTHONDONTWRITEBYTECODE`), so the next command does not compile them again."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolscript import __file__ as PACKAGE

pytestmark = pytest.mark.timeout(120)


def test_a_command_compiles_toolscripts_modules_once_though_bytecode_is_not_written(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    shutil.copytree(
        Path(PACKAGE).resolve().parent,
        source / "toolscript",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (tmp_path / "script.py").write_text("print(6 * 7)\n")
    environment = {
        **os.environ,
        "PYTHONPATH": str(source),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TOOLSCRIPT_STATE": str(tmp_path / "state"),
    }
    command = [sys.executable, "-c", "from toolscript.cli import main; main()"]
    ran = subprocess.run(
        [*command, "exec", "script.py", "--sandbox", "off", "--journal", ":memory:"],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=tmp_path,
        env=environment,
    )
    assert ran.returncode == 0, ran.stderr
    assert "42" in ran.stdout
    for module in ("runtime.py", "cli/__init__.py", "kernel/runner.py", "host/journal/store.py"):
        cached = importlib.util.cache_from_source(str(source / "toolscript" / module))
        assert Path(cached).is_file(), module


@pytest.mark.skipif(os.environ.get("TOOLSCRIPT_TEST_SANDBOX") == "off", reason="the sandbox is off")
def test_the_kernel_is_compiled_before_a_sandboxed_interpreter_starts(tmp_path: Path) -> None:
    # The kernel of this source tree: a copy under the temporary folder would not be seen in
    # the sandbox, which has a /tmp of its own. Its bytecode is only a cache.
    kernel = Path(PACKAGE).resolve().parent / "kernel"
    shutil.rmtree(kernel / "__pycache__", ignore_errors=True)
    code = (
        "import asyncio\n"
        "from toolscript import Runtime\n"
        "async def main():\n"
        "    async with Runtime(journal=':memory:', pool_size=0, sandbox='required') as rt:\n"
        "        print((await rt.run('6 * 7')).value)\n"
        "asyncio.run(main())\n"
    )
    environment = {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",
        "TOOLSCRIPT_STATE": str(tmp_path / "state"),
    }
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=100, env=environment
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "42"
    for module in ("runner.py", "template.py", "cells.py"):
        assert Path(importlib.util.cache_from_source(str(kernel / module))).is_file(), module
