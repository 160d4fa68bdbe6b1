"""Calls made outside the script's own code: by tasks left running between scripts, and by
threads the script starts. Each is recorded like any other (docs/design.md#call-fates)."""

from __future__ import annotations

import asyncio

import pytest

from toolscript import Runtime

from .conftest import WAIT, Desk, call_line, only_record


@pytest.mark.timeout(20)
async def test_calls_made_while_no_script_ran_count_in_the_next_report_as_made_before_it(
    runtime: Runtime, desk: Desk
) -> None:
    # The first script leaves a task that waits on slow(x=1). Once the first script has
    # ended, the test lets slow(x=1) answer: the task then makes fast(x=2) (seen by its code)
    # and slow(x=3) (no answer yet), with no script running.
    first = await runtime.run(
        "import asyncio\n"
        "async def later():\n"
        "    await slow(x=1)\n"
        "    await fast(x=2)\n"
        "    await slow(x=3)\n"
        "left_running = asyncio.create_task(later())\n"
    )
    assert first.status == "ok", first.text
    assert first.calls.made == 1
    assert only_record(first.calls.records, "slow", "x=1").fate == "pending"

    await desk.open_and_wait_answered(1)
    await desk.wait_entered(3)

    second = await runtime.run("'second'")
    assert second.status == "ok", second.text
    calls = second.calls
    assert (calls.made, calls.made_before_start) == (0, 2)
    assert calls.by_fate == {"seen": 1, "pending": 1}
    taken = only_record(calls.records, "fast", "x=2")
    assert (taken.fate, taken.made_before_start) == ("seen", True)
    waiting = only_record(calls.records, "slow", "x=3")
    assert (waiting.fate, waiting.cause, waiting.made_before_start) == ("pending", None, True)
    scripts = {script.script_id: script for script in runtime.journal.scripts()}
    first_ended = scripts[first.script_id].ended_at
    assert first_ended is not None
    assert first_ended <= taken.made_at <= waiting.made_at <= scripts[second.script_id].started_at
    assert "calls: 0 made, 2 made before this script started (1 seen, 1 pending)" in second.text
    assert "may still take effect" in call_line(second.text, "slow", "x=3")
    # Nothing of the first script's report moves into the second.
    assert all(record.args_brief != "x=1" for record in calls.records)
    journaled = {call.args_brief: call for call in runtime.journal.calls()}
    assert journaled["x=2"].script_id is None and journaled["x=3"].script_id is None

    third = await runtime.run("'third'")
    assert third.calls.made == 0 and third.calls.made_before_start == 0, third.text


@pytest.mark.timeout(20)
async def test_a_call_made_between_scripts_and_answered_unread_is_reported_unread(
    runtime: Runtime, desk: Desk
) -> None:
    first = await runtime.run(
        "import asyncio\n"
        "async def later():\n"
        "    await slow(x=1)\n"
        "    global orphan\n"
        "    orphan = asyncio.create_task(fast(x=2))\n"
        "    await asyncio.wait([orphan])\n"
        "    await slow(x=3)\n"
        "left_running = asyncio.create_task(later())\n"
    )
    assert first.status == "ok", first.text
    await desk.open_and_wait_answered(1)
    await desk.wait_entered(3)
    second = await runtime.run("orphan.done()")
    assert second.value == "True", second.text
    orphan = only_record(second.calls.records, "fast", "x=2")
    assert (orphan.fate, orphan.made_before_start) == ("unread", True)
    assert orphan.answer_brief is not None and "fast-2" in orphan.answer_brief


@pytest.mark.timeout(20)
async def test_calls_from_threads_the_script_starts_are_recorded_like_any_other(
    runtime: Runtime,
) -> None:
    # One thread hands a call to the script's loop with run_coroutine_threadsafe; another
    # runs its own event loop with asyncio.run (allowed off the main thread).
    code = (
        "import asyncio, threading\n"
        "loop = asyncio.get_running_loop()\n"
        "got = {}\n"
        "def onto_the_loop():\n"
        "    got['threadsafe'] = asyncio.run_coroutine_threadsafe(fast(x=1), loop).result(10)\n"
        "def own_loop():\n"
        "    async def main():\n"
        "        return await fast(x=2)\n"
        "    got['own_loop'] = asyncio.run(main())\n"
        "threads = [threading.Thread(target=onto_the_loop), threading.Thread(target=own_loop)]\n"
        "for thread in threads:\n"
        "    thread.start()\n"
        "for thread in threads:\n"
        "    await asyncio.to_thread(thread.join, 10)\n"
        "sorted(got.items())"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.value == "[('own_loop', 'fast-2'), ('threadsafe', 'fast-1')]"
    calls = result.calls
    assert (calls.made, calls.made_before_start) == (2, 0)
    assert calls.by_fate == {"seen": 2}
    for x in (1, 2):
        record = only_record(calls.records, "fast", f"x={x}")
        assert (record.fate, record.cause, record.made_before_start) == ("seen", None, False)
    assert "calls:" not in result.text


@pytest.mark.timeout(20)
async def test_a_call_from_a_threads_own_loop_at_the_time_limit_is_pending_stopped(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio, threading\n"
        "def own_loop():\n"
        "    async def main():\n"
        "        try:\n"
        "            await slow(x=1)\n"
        "        except asyncio.CancelledError:\n"
        "            print('thread call cancelled', flush=True)\n"
        "    asyncio.run(main())\n"
        "thread = threading.Thread(target=own_loop)\n"
        "thread.start()\n"
        "await asyncio.to_thread(thread.join)\n"
    )
    run = asyncio.create_task(runtime.run(code, time_limit=1.0))
    await desk.wait_entered(1)
    result = await asyncio.wait_for(run, WAIT)
    assert result.status == "time_limit", result.text
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause) == ("pending", "stopped")
