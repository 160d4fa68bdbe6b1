"""A local MCP server dies with its host, even one that no longer reads its stdin."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolscript import __file__ as PACKAGE

pytestmark = pytest.mark.timeout(60)

SOURCE = str(Path(PACKAGE).resolve().parents[1])
DEMO = str(Path(__file__).parent.parent / "mcp_servers" / "demo_server.py")

HOST = """
import asyncio, json, os, sys
from toolscript import Runtime

async def main():
    async with Runtime(state_dir=sys.argv[1], mcp_config=json.loads(sys.argv[2])) as rt:
        assert rt.mcp_failures == {}, rt.mcp_failures
        open(os.path.join(sys.argv[1], "ready"), "w").close()
        await asyncio.sleep(3600)
asyncio.run(main())
"""


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (nothing may reap an orphan here)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_a_server_that_outlives_its_stdin_and_sigterm_dies_when_its_host_is_killed(
    tmp_path: Path,
) -> None:
    # The server ignores SIGTERM and lives on after its stdin closes: only the host's
    # stop would end it, and a host killed with SIGKILL runs no stop.
    pid_file = tmp_path / "server.pid"
    config = {
        "mcpServers": {
            "stubborn": {
                "command": sys.executable,
                "args": [DEMO, "--linger", "--pid-file", str(pid_file)],
            }
        }
    }
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(tmp_path), json.dumps(config)],
        env={**os.environ, "PYTHONPATH": SOURCE},
    )
    try:
        deadline = time.monotonic() + 40
        while not (tmp_path / "ready").exists():  # polled: a test of a whole process
            assert host.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        server = int(pid_file.read_text())
        assert running(server)
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=10)
    deadline = time.monotonic() + 10
    while running(server) and time.monotonic() < deadline:  # polled: another process's end
        time.sleep(0.01)
    alive = running(server)
    if alive:
        os.kill(server, signal.SIGKILL)
    assert not alive, "the MCP server outlived its host"
