"""A host killed mid-call: the next host on the same journal reports the call's outcome as
unknown, never as success or failure (docs/design.md: the promises, call fates)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import GRACE
from toolscript import Runtime

from .conftest import WAIT

_HOST = textwrap.dedent(
    """
    import asyncio, sys
    from toolscript import Runtime, tool

    journal = sys.argv[1]
    runtime = None

    @tool
    async def transfer(amount: int, to: str) -> str:
        \"\"\"Move money; this one never finishes.\"\"\"
        kernel = runtime.shell("main")._interpreter.pid
        print("in handler", kernel, flush=True)
        await asyncio.Event().wait()
        return "done"

    async def main():
        global runtime
        async with Runtime(tools=[transfer], journal=journal, grace=0.5, pool_size=0) as runtime:
            await runtime.shell("main").run("await transfer(amount=250, to='savings')")

    asyncio.run(main())
    """
)


async def _wait_until_gone(pid: int) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert asyncio.get_running_loop().time() < deadline, f"process {pid} is still alive"
        await asyncio.sleep(0.01)


@pytest.mark.timeout(40)
async def test_a_call_in_flight_when_the_host_was_killed_is_uncertain_and_told_once(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal.sqlite3"
    host = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOST,
        str(journal),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    kernel: int | None = None
    try:
        assert host.stdout is not None
        line = await asyncio.wait_for(host.stdout.readline(), 30)
        words = line.decode().split()
        if words[:2] != ["in", "handler"]:
            host.kill()
            _, stderr = await asyncio.wait_for(host.communicate(), WAIT)
            raise AssertionError(f"the host never reached the handler: {stderr.decode()[-2000:]}")
        kernel = int(words[2])
        host.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(host.wait(), WAIT) == -signal.SIGKILL
        # The kernel ends with its host: its channel closed.
        await _wait_until_gone(kernel)
    finally:
        if host.returncode is None:
            host.kill()
            await host.wait()
        if kernel is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(kernel, signal.SIGKILL)

    async with Runtime(journal=journal, grace=GRACE, pool_size=0) as runtime:
        [call] = runtime.journal.uncertain()
        assert (call.tool, call.args_brief, call.shell) == (
            "transfer",
            "amount=250, to='savings'",
            "main",
        )
        assert call.uncertain_reason == "host_gone"
        assert (call.answered_at, call.fate) == (None, None)
        assert call.script_id is not None and call.script_id.startswith("main:")
        # Its script ended with its host: not left in the journal as running for ever.
        [script] = [s for s in runtime.journal.scripts("main") if s.script_id == call.script_id]
        assert (script.status, script.ended_at is not None) == ("host_gone", True), script

        other = await runtime.shell("other").run("1")
        assert "transfer" not in other.note, other.text

        first = await runtime.shell("main").run("1")
        assert first.status == "ok", first.text
        assert "transfer(amount=250, to='savings')" in first.note
        assert "unknown outcome" in first.note and "may or may not" in first.note
        assert first.text.index("transfer(") < first.text.index("value:")

        second = await runtime.shell("main").run("2")
        assert second.status == "ok" and "transfer" not in second.note, second.text
        # Told once, still uncertain: the effect is still unknown.
        assert [c.call_id for c in runtime.journal.uncertain()] == [call.call_id]
