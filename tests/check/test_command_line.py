"""`--check` on the command line: `exec`, `serve` and `agent` take it, and check its value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.test_cli import environment

DEMO = str(Path(__file__).resolve().parents[1] / "mcp_servers" / "demo_server.py")


def toolscript(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": [DEMO]}}})
    )
    return subprocess.run(
        [sys.executable, "-m", "toolscript.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=50,
        env=environment(tmp_path),
        cwd=tmp_path,
    )


@pytest.mark.timeout(60)
def test_exec_check_refuse_prints_the_findings_and_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(
        "await demo.echo(text='first')\nawait demo.ecko(text='x')\n"
    )
    done = toolscript(
        tmp_path, "exec", "script.py", "--mcp-config", "mcp.json", "--check", "refuse", "--json"
    )
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "refused" and result["calls"]["made"] == 0
    assert (
        "<script>:2: the server `demo` has no tool `ecko`: did you mean `demo.echo`?"
        in (result["note"])
    )


@pytest.mark.timeout(60)
def test_exec_warns_by_default_and_runs(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text("print(await demo.echo(text='ran'))\ndemo.echo(text='x')\n")
    done = toolscript(tmp_path, "exec", "script.py", "--mcp-config", "mcp.json")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line]
    assert lines[:3] == [
        "exit 0 · ok",
        "The check before running found 1 problem (the script ran anyway):",
        "<script>:2: `demo.echo(...)` is never awaited, so the call would not run: `await` it",
    ]
    assert "ran" in lines


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "command", [["exec", "script.py"], ["serve"], ["agent", "a task", "--model", "anthropic:any"]]
)
def test_a_check_value_that_does_not_exist_is_a_usage_error(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "script.py").write_text("print(1)\n")
    done = toolscript(tmp_path, *command, "--check", "strict")
    assert done.returncode == 2
    assert "--check" in done.stderr and "invalid choice: 'strict'" in done.stderr
