"""The `toolscript` command line starts with what it needs: `python -m toolscript` works, and
neither starting it nor running a plain script imports the MCP SDK, a web server or a model
provider's SDK. Each check runs in a fresh interpreter, which imports the toolscript under test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolscript import __file__ as PACKAGE

pytestmark = pytest.mark.timeout(60)

HEAVY = ("mcp", "starlette", "uvicorn", "anthropic", "openai")
"""Packages only `serve`, an MCP config or `agent` need."""


def python(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(PACKAGE).resolve().parents[1])}
    if cwd is not None:
        env["TOOLSCRIPT_STATE"] = str(cwd / "state")
    return subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, timeout=50, env=env, cwd=cwd
    )


def imported(importtime: str) -> set[str]:
    """The top-level packages named in `-X importtime` output."""
    return {
        line.rpartition("|")[2].strip().partition(".")[0]
        for line in importtime.splitlines()
        if line.startswith("import time:")
    }


def test_python_dash_m_toolscript_shows_every_command_in_its_help() -> None:
    done = python("-m", "toolscript", "--help")
    assert done.returncode == 0, done.stderr
    for command in ("exec", "tools", "calls", "agent", "serve"):
        assert f"  {command} " in done.stdout


def test_importing_the_command_line_imports_no_mcp_web_server_or_model_sdk() -> None:
    done = python(
        "-c",
        "import sys, toolscript.cli\n"
        f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_command_s_help_imports_no_mcp_web_server_or_model_sdk() -> None:
    for command in ("exec", "serve", "agent"):
        done = python("-X", "importtime", "-m", "toolscript.cli", command, "--help")
        assert done.returncode == 0, done.stderr
        assert imported(done.stderr).isdisjoint(HEAVY), command


def test_exec_of_a_plain_script_imports_no_mcp_web_server_or_model_sdk(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text("print(1)\n")
    done = python(
        "-X",
        "importtime",
        "-m",
        "toolscript.cli",
        "exec",
        "script.py",
        "--journal",
        ":memory:",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("exit 0 · ok\n")
    assert imported(done.stderr).isdisjoint(HEAVY)


def test_the_server_and_the_agent_do_not_import_the_command_line() -> None:
    done = python(
        "-c",
        "import sys, toolscript.serve, toolscript.agent\n"
        "print([name for name in sys.modules if name.startswith('toolscript.cli')])",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
