"""`seen` and `unread`: answered calls, and whether any code took the answer (docs/design.md#call-fates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolscript import Runtime

from .conftest import Desk, call_line, hold_the_loop_source, holding_file, only_record


@pytest.mark.timeout(20)
async def test_an_awaited_call_is_seen_and_an_ok_script_gets_no_call_lines(
    runtime: Runtime,
) -> None:
    result = await runtime.run("a = await fast(x=1)\nb = await fast(x=2)\n(a, b)")
    assert result.status == "ok", result.text
    assert result.value == "('fast-1', 'fast-2')"
    calls = result.calls
    assert (calls.made, calls.made_before_start) == (2, 0)
    assert calls.by_fate == {"seen": 2}
    assert [(r.tool, r.args_brief, r.fate, r.cause) for r in calls.records] == [
        ("fast", "x=1", "seen", None),
        ("fast", "x=2", "seen", None),
    ]
    for record in calls.records:
        assert record.answered_at is not None and record.answered_at >= record.made_at
        assert not record.is_error and not record.made_before_start
    assert "calls:" not in result.text
    assert result.to_dict()["calls"]["by_fate"] == {"seen": 2}


@pytest.mark.timeout(20)
async def test_a_call_answered_with_an_error_that_the_code_caught_is_seen_as_an_error(
    runtime: Runtime,
) -> None:
    code = "try:\n    await fails(x=1)\nexcept ToolError as error:\n    caught = str(error)\ncaught"
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert "fails-1 refused the work" in (result.value or "")
    record = only_record(result.calls.records, "fails", "x=1")
    assert (record.fate, record.cause, record.is_error) == ("seen", None, True)
    assert "calls:" not in result.text


@pytest.mark.timeout(20)
async def test_a_task_whose_result_the_code_takes_has_its_call_seen(runtime: Runtime) -> None:
    code = (
        "import asyncio\n"
        "task = asyncio.create_task(fast(x=1))\n"
        "both = await asyncio.gather(fast(x=2), fast(x=3))\n"
        "(await task, both)"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.value == "('fast-1', ['fast-2', 'fast-3'])"
    assert result.calls.by_fate == {"seen": 3}
    assert "calls:" not in result.text


@pytest.mark.timeout(20)
async def test_a_task_nobody_awaited_has_its_answered_call_unread(runtime: Runtime) -> None:
    # asyncio.wait waits for the task without taking its result: the answer came while
    # the script ran, and no code ever looked at it.
    code = (
        "import asyncio\n"
        "task = asyncio.create_task(fast(x=7))\n"
        "await asyncio.wait([task])\n"
        "task.done()"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.value == "True"
    record = only_record(result.calls.records, "fast", "x=7")
    assert (record.fate, record.cause, record.is_error) == ("unread", None, False)
    assert record.answered_at is not None
    assert record.answer_brief is not None and "fast-7" in record.answer_brief
    line = call_line(result.text, "fast", "x=7")
    assert "unread" in line and "fast-7" in line
    assert "calls: 1 made (1 unread)" in result.text


@pytest.mark.timeout(20)
async def test_the_siblings_of_a_failed_gather_answered_later_are_unread_never_seen(
    runtime: Runtime, desk: Desk
) -> None:
    # gather raises the first error at once and leaves its other children running; their
    # answers come later (the script opens their gates), and no code ever takes them.
    code = (
        "import asyncio\n"
        "siblings = [asyncio.create_task(slow(x=1)), asyncio.create_task(slow(x=2))]\n"
        "try:\n"
        "    await asyncio.gather(siblings[0], fails(x=3), siblings[1])\n"
        "except ToolError as error:\n"
        "    print('gather failed:', error)\n"
        "await release(x=1)\n"
        "await release(x=2)\n"
        "await asyncio.wait(siblings)\n"
        "[task.done() for task in siblings]"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert "gather failed: fails-3 refused the work" in result.stdout
    assert result.value == "[True, True]"
    records = result.calls.records
    failed = only_record(records, "fails", "x=3")
    assert (failed.fate, failed.is_error) == ("seen", True)
    for x in (1, 2):
        sibling = only_record(records, "slow", f"x={x}")
        assert (sibling.fate, sibling.cause, sibling.is_error) == ("unread", None, False)
        assert sibling.answer_brief is not None and f"slow-answer-{x}" in sibling.answer_brief
        assert "unread" in call_line(result.text, "slow", f"x={x}")
    assert result.calls.by_fate == {"seen": 3, "unread": 2}


@pytest.mark.timeout(20)
async def test_the_siblings_of_a_failed_gather_still_running_at_the_end_are_pending(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio\n"
        "try:\n"
        "    await asyncio.gather(slow(x=1), fails(x=2))\n"
        "except ToolError:\n"
        "    pass\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    sibling = only_record(result.calls.records, "slow", "x=1")
    assert (sibling.fate, sibling.cause, sibling.answer_brief) == ("pending", None, None)
    line = call_line(result.text, "slow", "x=1")
    assert "pending" in line and "may still take effect" in line
    assert [call.tool for call in runtime.journal.uncertain()] == ["slow"]


@pytest.mark.timeout(20)
async def test_a_call_cancelled_after_its_answer_arrived_but_before_its_code_took_it_is_unread(
    runtime: Runtime, tmp_path: Path
) -> None:
    # The loop is held until the host has answered; then, in the loop's next pass, the
    # answer is handed to the waiting code (I/O callbacks run first) and a timer due by
    # then cancels the task before it resumes: the kernel had the answer, the code never
    # took it, and it was cancelled.
    flag = tmp_path / "answered"
    code = hold_the_loop_source(flag, then=0.2) + (
        "import asyncio\n"
        "async def wrapper():\n"
        f"    return await stamp(path={str(flag)!r}, after={holding_file(flag)!r})\n"
        "loop = asyncio.get_running_loop()\n"
        "def hold_then_cancel():\n"
        "    hold_the_loop()\n"
        "    loop.call_later(0, task.cancel)\n"
        "task = asyncio.create_task(wrapper())\n"
        "await asyncio.sleep(0)  # the call is made\n"
        "loop.call_soon(hold_then_cancel)  # runs after the call's frame is sent\n"
        "await asyncio.wait([task])\n"
        "task.cancelled()\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.value == "True"
    [record] = result.calls.records
    assert (record.tool, record.fate, record.cause) == ("stamp", "unread", "cancelled")
    assert record.answer_brief == "'stamped'"
    line = call_line(result.text, "stamp", record.args_brief)
    assert "unread" in line and "the script cancelled it" in line and "'stamped'" in line


@pytest.mark.timeout(30)
async def test_a_call_made_and_read_after_the_stop_is_seen_though_the_script_is_then_killed(
    runtime: Runtime,
) -> None:
    # The script catches the interrupt, makes one more call and reads its answer, then
    # blocks until the kill. Its loop never runs again: the acknowledgement that it saw
    # the answer must not wait for it.
    code = (
        "try:\n"
        "    while True:\n"
        "        pass\n"
        "except KeyboardInterrupt:\n"
        "    got = await fast(x=7)\n"
        "    print(got, flush=True)\n"
        "    import time\n"
        "    time.sleep(60)\n"
    )
    result = await runtime.run(code, time_limit=0.5)
    assert result.status == "time_limit", result.text
    assert "killed" in result.note, result.note
    assert "fast-7" in result.stdout
    [record] = result.calls.records
    assert (record.tool, record.fate) == ("fast", "seen"), record
