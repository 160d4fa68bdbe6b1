"""Handlers of calls whose interpreter is gone: a background script's, after it ends, finish
under their own timeouts, as a shell script's do, so the journal learns what they did; and
closing the runtime ends every such handler, whatever interpreter it answered."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import MakeRuntime, eventually
from toolscript import Journal, tool

from .conftest import Desk


async def test_a_background_scripts_call_in_flight_at_its_end_is_answered_not_cancelled(
    make_runtime: MakeRuntime, desk: Desk
) -> None:
    rt = await make_runtime()
    handle = await rt.shell("main").start(
        "import asyncio\nasyncio.ensure_future(slow(x=1))\nawait asyncio.sleep(0)\n"
    )
    await desk.wait_entered(1)
    result = await handle.result()
    [record] = result.calls.records
    assert record.fate == "pending"

    # The script's interpreter is gone; its handler goes on, as a shell's would.
    await desk.open_and_wait_answered(1)

    def answered() -> bool:
        calls = rt.journal.calls(script_id=result.script_id)
        return len(calls) == 1 and calls[0].answer_brief is not None

    await eventually(answered, 10, "the call's answer was not journaled")
    [call] = rt.journal.calls(script_id=result.script_id)
    assert call.answer_brief == "'slow-answer-1'"
    assert not call.uncertain


async def test_closing_the_runtime_ends_handlers_left_by_interpreters_already_gone(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    @tool
    async def send(text: str) -> str:
        """Send, slowly."""
        entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "sent"

    path = tmp_path / "journal.sqlite3"
    rt = await make_runtime(tools=[send], journal=str(path))
    crashed = await rt.shell("main").run(
        "import asyncio, os\nasyncio.ensure_future(send(text='a'))\n"
        "await asyncio.sleep(0)\nos._exit(1)\n"
    )
    assert crashed.status == "crashed"
    await asyncio.wait_for(entered.wait(), 10)
    await rt.aclose()
    # The handler of the crashed interpreter's call ended with the runtime, not after it.
    assert cancelled.is_set()
    with Journal.open(path) as reopened:
        [call] = reopened.calls(script_id=crashed.script_id)
    assert (call.fate, call.answered_at, call.uncertain) == ("pending", None, True)
