"""A stop that comes while the script is giving up on a call itself.

The script's own give-up (its `asyncio.timeout`, its `task.cancel()`) and a stop can reach a
call in the same moment: the call's wait is cancelled, but the code that made it resumes only
after the stop came. The cause names who cancelled the wait first, not what was under way
when the code resumed. Each script holds its loop across the time limit, so the stop's signal
comes after the script's own give-up and before the cancelled code runs again.
"""

from __future__ import annotations

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime

from .conftest import Desk, only_record

HOLD = 2.0
"""Seconds each script holds its loop: well past its time limit of `LIMIT`."""
LIMIT = 0.5


@pytest.mark.timeout(30)
async def test_a_call_the_scripts_own_timeout_gave_up_on_as_the_stop_came_is_cancelled(
    make_runtime: MakeRuntime, desk: Desk
) -> None:
    # The script's timeout and a later timer of its own are both due when the loop comes
    # back: the timeout cancels the call's wait, then the timer holds the loop while the stop
    # arrives, and only then does the call's code resume. (A timer's callback is asyncio's
    # code to the stop, so it is not interrupted: the grace is long enough to wait for it.)
    runtime = await make_runtime(grace=4 * HOLD)
    code = (
        "import asyncio, time\n"
        "loop = asyncio.get_running_loop()\n"
        "when = loop.time() + 0.05\n"
        "async def give_up():\n"
        "    async with asyncio.timeout_at(when):\n"
        "        await slow(x=1)\n"
        "task = asyncio.create_task(give_up())\n"
        "await asyncio.sleep(0)\n"
        f"loop.call_at(when + 0.01, time.sleep, {HOLD})\n"
        "time.sleep(0.1)\n"
        "await task\n"
    )
    result = await runtime.run(code, time_limit=LIMIT)
    assert result.status == "time_limit", result.text
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause) == ("pending", "cancelled"), result.text


@pytest.mark.timeout(30)
async def test_a_call_the_script_cancelled_itself_as_the_stop_came_is_cancelled(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio, time\n"
        "task = asyncio.create_task(slow(x=1))\n"
        "await asyncio.sleep(0)\n"
        "task.cancel()\n"
        f"time.sleep({HOLD})\n"
    )
    result = await runtime.run(code, time_limit=LIMIT)
    assert result.status == "time_limit", result.text
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause) == ("pending", "cancelled"), result.text


@pytest.mark.timeout(30)
async def test_a_call_still_awaited_when_the_stop_comes_through_a_held_loop_is_stopped(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio, time\n"
        "task = asyncio.create_task(slow(x=1))\n"
        "await asyncio.sleep(0)\n"
        f"time.sleep({HOLD})\n"
    )
    result = await runtime.run(code, time_limit=LIMIT)
    assert result.status == "time_limit", result.text
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause) == ("pending", "stopped"), result.text
