"""What the journal keeps of a host killed with SIGKILL: every script that ended, ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolscript import Journal
from toolscript import __file__ as PACKAGE

pytestmark = pytest.mark.timeout(60)

SOURCE = str(Path(PACKAGE).resolve().parents[1])

HOST = """
import asyncio, os, sys
from toolscript import Runtime, tool

started = asyncio.Event()

@tool
async def running() -> None:
    \"\"\"Say that the long script runs.\"\"\"
    started.set()

async def main():
    async with Runtime(state_dir=sys.argv[1], tools=[running]) as rt:
        # While a script runs, the journal's flush waits: the ends of the three scripts that
        # run beside it stay out of SQLite until the kill.
        long = asyncio.ensure_future(
            rt.shell("long").run("await running()\\nimport time\\ntime.sleep(50)")
        )
        await started.wait()
        for _ in range(3):
            result = await rt.shell("main").run("print('hi')")
            print(result.script_id, result.status, flush=True)
        open(os.path.join(sys.argv[1], "ended"), "w").close()
        await long
asyncio.run(main())
"""


def test_scripts_that_ended_before_a_kill_are_journaled_as_ended(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SOURCE}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 40
        while not (tmp_path / "ended").exists():  # polled: a test of a whole process
            assert host.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        host.send_signal(signal.SIGKILL)
        told = dict(line.split() for line in host.communicate()[0].splitlines())

    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journaled = {script.script_id: script.status for script in journal.scripts()}
    assert len(told) == 3
    assert {script_id: journaled.get(script_id) for script_id in told} == told
