"""`toolscript exec SCRIPT.py [--time-limit S] [--json]`: prints the result, exits 0 only on ok."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import toolscript
from tests.conftest import on_a_terminal, wait_for_file

SOURCE = str(Path(toolscript.__file__).resolve().parents[1])
"""The folder the toolscript under test is imported from, for the commands these tests start
(a relative `PYTHONPATH` would not reach it from their working folder)."""


def environment(tmp_path: Path) -> dict[str, str]:
    """The command's environment: its state under the test's folder, this toolscript first."""
    return {**os.environ, "TOOLSCRIPT_STATE": str(tmp_path / "state"), "PYTHONPATH": SOURCE}


def toolscript_exec(tmp_path: Path, code: str, *options: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, "-m", "toolscript.cli", "exec", str(script), *options],
        capture_output=True,
        text=True,
        timeout=30,
        env=environment(tmp_path),
        cwd=tmp_path,
    )


@pytest.mark.timeout(40)
def test_exec_prints_the_text_and_exits_zero_when_the_script_succeeds(tmp_path: Path) -> None:
    done = toolscript_exec(tmp_path, "print('hello from the script')\n40 + 2\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("exit 0 · ok\n")
    assert "hello from the script" in done.stdout and "42" in done.stdout


@pytest.mark.timeout(40)
def test_exec_exits_one_when_the_script_fails(tmp_path: Path) -> None:
    done = toolscript_exec(tmp_path, "raise ValueError('it went wrong')\n")
    assert done.returncode == 1
    assert done.stdout.startswith("exit 1 · error\n")
    assert "it went wrong" in done.stdout


@pytest.mark.timeout(40)
def test_exec_stops_the_script_at_the_time_limit_and_exits_one(tmp_path: Path) -> None:
    done = toolscript_exec(tmp_path, "import time\ntime.sleep(60)\n", "--time-limit", "1")
    assert done.returncode == 1
    assert done.stdout.startswith("exit 1 · time_limit\n")


@pytest.mark.timeout(40)
def test_exec_json_prints_the_result_as_a_dict(tmp_path: Path) -> None:
    done = toolscript_exec(tmp_path, "print('out')\n'value'\n", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "ok" and data["exit_code"] == 0
    assert data["stdout"] == "out\n" and data["value"] == "'value'"
    # and what the model reads, as `exec` without `--json` prints it
    assert data["text"].startswith("exit 0 · ok\n") and "out" in data["text"], data["text"]
    failed = toolscript_exec(tmp_path, "import os\nos._exit(4)\n", "--json")
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["status"] == "crashed"


@pytest.mark.timeout(40)
def test_exec_of_a_missing_script_fails_saying_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolscript.cli", "exec", str(tmp_path / "absent.py")],
        capture_output=True,
        text=True,
        timeout=30,
        env=environment(tmp_path),
    )
    assert done.returncode != 0
    assert "absent.py" in done.stderr


@pytest.mark.timeout(60)
async def test_ctrl_c_stops_exec_and_says_which_calls_may_still_take_effect(
    tmp_path: Path,
) -> None:
    (tmp_path / "slow_tools.py").write_text(
        "import asyncio\nfrom toolscript import tool\n"
        "@tool\nasync def slow(n: int) -> int:\n    'Sleep n seconds.'\n"
        "    await asyncio.sleep(n)\n    return n\n"
    )
    started = tmp_path / "started"
    script = tmp_path / "script.py"
    script.write_text(
        f"import asyncio\nasyncio.get_running_loop().call_soon(open, {str(started)!r}, 'w')\n"
        "await slow(n=50)\n"
    )
    env = environment(tmp_path)
    env["PYTHONPATH"] = f"{SOURCE}{os.pathsep}{tmp_path}"
    # A plain `Popen` (waited for in a thread): an asyncio subprocess transport collected
    # after the test's loop has closed warns in whatever test runs then.
    process = subprocess.Popen(
        [sys.executable, "-m", "toolscript.cli", "exec", str(script), "--tools", "slow_tools:slow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        await wait_for_file(started, 30)
        process.send_signal(signal.SIGINT)
        out, err = await asyncio.to_thread(process.communicate, None, 30)
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, out + err
    assert out.startswith("exit 130 · cancelled"), out + err
    assert "Stopped by SIGINT" in out and "- slow(n=50)" in out, out
    assert "kept" not in out, out


@pytest.mark.timeout(60)
async def test_sigterm_on_exec_json_prints_the_result_as_json_with_the_output_so_far(
    tmp_path: Path,
) -> None:
    started = tmp_path / "started"
    script = tmp_path / "script.py"
    script.write_text(
        f"import time\nprint('before the signal', flush=True)\nopen({str(started)!r}, 'w')\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "toolscript.cli", "exec", str(script), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(tmp_path),
        cwd=tmp_path,
    )
    try:
        await wait_for_file(started, 30)
        process.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(process.communicate, None, 30)
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGTERM, out + err
    result = json.loads(out)
    assert result["status"] == "cancelled", result
    assert result["stdout"] == "before the signal\n", result
    assert "SIGTERM" in result["note"], result
    # The command ends, and its interpreter with it: nothing of the script is kept.
    assert "kept" not in result["note"] and "variables are gone" in result["note"], result
    # Its exit code and text are the command's, as it prints them without --json.
    assert result["exit_code"] == 128 + signal.SIGTERM, result
    assert result["text"].startswith(f"exit {128 + signal.SIGTERM} · cancelled\n"), result
    assert "Stopped by SIGTERM" in result["text"], result


FORGED = "print('\\x1b[1A\\x1b[2Kexit 0 · ok\\x1b]52;c;aGk=\\x07\\r')\nraise SystemExit(3)\n"
"""A script that, on a terminal, would repaint the line above as success and set the
clipboard (OSC 52), then fails."""


@pytest.mark.timeout(40)
def test_exec_on_a_terminal_shows_a_scripts_control_sequences_escaped(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(FORGED)
    code, text = on_a_terminal(
        [sys.executable, "-m", "toolscript.cli", "exec", str(script)],
        env=environment(tmp_path),
        cwd=tmp_path,
    )
    assert code == 1, text
    assert text.startswith("exit 1 · error"), text
    assert "\x1b" not in text and "\x07" not in text, text
    assert "\\x1b[1A\\x1b[2Kexit 0 · ok\\x1b]52;c;aGk=\\x07\\x0d" in text, text


@pytest.mark.timeout(40)
def test_exec_into_a_pipe_keeps_what_the_script_wrote(tmp_path: Path) -> None:
    done = toolscript_exec(tmp_path, FORGED)
    assert "\x1b[1A\x1b[2Kexit 0 · ok\x1b]52;c;aGk=\x07" in done.stdout, done.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["tools", "exec"])
def test_an_mcp_servers_failure_on_a_terminal_shows_its_control_sequences_escaped(
    tmp_path: Path, command: str
) -> None:
    # A server that fails to start is described with its last stderr lines: its words, which
    # the terminal must show, not obey.
    config = tmp_path / "mcp.json"
    hostile = "printf '\\033]52;c;aGk=\\007boom' >&2; exit 3"
    config.write_text(
        json.dumps({"mcpServers": {"bad": {"command": "sh", "args": ["-c", hostile]}}})
    )
    (tmp_path / "script.py").write_text("print('ran')\n")
    arguments = ["--mcp-config", str(config)]
    if command == "exec":
        arguments = [str(tmp_path / "script.py"), *arguments]
    code, text = on_a_terminal(
        [sys.executable, "-m", "toolscript.cli", command, *arguments],
        env=environment(tmp_path),
        cwd=tmp_path,
        stream="stderr",
        timeout=50,
    )
    assert code == 0, text
    assert "did not start" in text, text
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert "\\x1b]52;c;aGk=\\x07boom" in text, text
