"""`late` and `pending` with the causes the kernel reports: the code stopped waiting first.

A call's code can stop waiting because of its own timeout (`timeout`), because the script
cancelled it (`cancelled`), or because the script was stopped (`stopped`). Whether the answer
came before the result was settled makes it `late` (the answer's start is quoted) or
`pending` (it may still take effect).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolscript import Runtime

from .conftest import Desk, call_line, hold_the_loop_source, holding_file, only_record


@pytest.mark.timeout(20)
async def test_a_call_awaited_at_the_time_limit_is_pending_stopped_until_its_answer_comes(
    runtime: Runtime, desk: Desk
) -> None:
    result = await runtime.run("print('waiting')\nawait slow(x=1)", time_limit=0.5)
    assert result.status == "time_limit", result.text
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause, record.answered_at) == ("pending", "stopped", None)
    line = call_line(result.text, "slow", "x=1")
    assert "pending" in line and "may still take effect" in line
    assert result.to_dict()["calls"]["records"][0]["cause"] == "stopped"
    [uncertain] = runtime.journal.uncertain()
    assert (uncertain.tool, uncertain.fate, uncertain.cause) == ("slow", "pending", "stopped")
    assert uncertain.uncertain_reason == "pending_at_settle"
    assert uncertain.script_id == result.script_id and uncertain.shell == "default"

    await desk.open_and_wait_answered(1)
    assert runtime.journal.uncertain() == []
    [journaled] = runtime.journal.calls(script_id=result.script_id)
    assert (journaled.fate, journaled.cause) == ("pending", "stopped")
    assert journaled.answered_at is not None
    assert journaled.answer_brief is not None and "slow-answer-1" in journaled.answer_brief
    after = await runtime.run("'kept'")
    assert after.status == "ok" and after.calls.made == 0, after.text


@pytest.mark.timeout(20)
async def test_a_call_answered_after_the_stop_is_reported_late_with_its_answers_start(
    runtime: Runtime, desk: Desk
) -> None:
    # The stop cancels the await; the script's cleanup lets the handler answer before the
    # script ends, so the answer came after the code stopped waiting: late, stopped.
    code = (
        "import asyncio\n"
        "try:\n"
        "    await slow(x=1)\n"
        "except asyncio.CancelledError:\n"
        "    await release(x=1)\n"
        "    raise\n"
    )
    result = await runtime.run(code, time_limit=0.5)
    assert result.status == "time_limit", result.text
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause, record.is_error) == ("late", "stopped", False)
    assert record.answered_at is not None
    assert record.answer_brief is not None and "slow-answer-1" in record.answer_brief
    line = call_line(result.text, "slow", "x=1")
    assert "late" in line and "slow-answer-1" in line and "stopped" in line
    assert only_record(result.calls.records, "release", "x=1").fate == "seen"
    assert runtime.journal.uncertain() == []


@pytest.mark.timeout(20)
async def test_a_call_past_its_own_timeout_raises_tool_timeout_and_is_pending_timeout(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "try:\n"
        "    await slow(x=1, timeout=0.1)\n"
        "except ToolTimeout as error:\n"
        "    print(type(error).__name__, isinstance(error, TimeoutError), error)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.stdout.startswith("ToolTimeout True slow did not answer within the 0.1 s")
    assert "may still take effect" in result.stdout
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause, record.answered_at) == ("pending", "timeout", None)
    assert "its own timeout" in call_line(result.text, "slow", "x=1")
    assert "calls: 1 made (1 pending)" in result.text


@pytest.mark.timeout(20)
async def test_a_call_answered_after_its_own_timeout_is_late_timeout(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "try:\n"
        "    await slow(x=1, timeout=0.1)\n"
        "except ToolTimeout:\n"
        "    print('timed out')\n"
        "await release(x=1)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.stdout == "timed out\n"
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause) == ("late", "timeout")
    assert record.answer_brief is not None and "slow-answer-1" in record.answer_brief
    line = call_line(result.text, "slow", "x=1")
    assert "late" in line and "its own timeout passed" in line and "slow-answer-1" in line


@pytest.mark.timeout(20)
async def test_a_late_error_answer_is_quoted_as_an_error(runtime: Runtime, desk: Desk) -> None:
    code = (
        "try:\n"
        "    await slow(x=-1, timeout=0.1)\n"
        "except ToolTimeout:\n"
        "    pass\n"
        "await release(x=-1)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    record = only_record(result.calls.records, "slow", "x=-1")
    assert (record.fate, record.cause, record.is_error) == ("late", "timeout", True)
    assert record.answer_brief is not None and "slow-failure--1" in record.answer_brief
    line = call_line(result.text, "slow", "x=-1")
    assert "an error began" in line and "slow-failure--1" in line


@pytest.mark.timeout(20)
async def test_a_call_the_script_holds_its_loop_past_is_late_with_the_answer_it_never_saw(
    runtime: Runtime, tmp_path: Path
) -> None:
    # The answer reaches the kernel while a sibling task blocks the loop with time.sleep
    # until well after the call's own 0.2 s. docs/design.md#call-fates accepts either outcome if the report
    # agrees with what the script saw; this kernel lets the timeout win, so the script gets
    # ToolTimeout and the call is late, quoting the answer it never saw.
    flag = tmp_path / "answered"
    code = hold_the_loop_source(flag, then=0.4) + (
        "import asyncio\n"
        "async def holder_task():\n"
        "    await asyncio.sleep(0)  # the call's frame goes out first\n"
        "    hold_the_loop()\n"
        "holder = asyncio.create_task(holder_task())\n"
        "try:\n"
        f"    got = await stamp(path={str(flag)!r}, after={holding_file(flag)!r}, timeout=0.2)\n"
        "except ToolTimeout:\n"
        "    got = 'ToolTimeout'\n"
        "await holder\n"
        "got\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert flag.exists()
    assert result.value == "'ToolTimeout'"
    [record] = result.calls.records
    assert (record.tool, record.fate, record.cause) == ("stamp", "late", "timeout")
    assert record.answer_brief is not None and "stamped" in record.answer_brief
    assert record.answered_at is not None and not record.is_error
    line = call_line(result.text, "stamp", record.args_brief)
    assert "late" in line and "stamped" in line
    assert result.to_dict()["calls"]["records"][0]["answer_brief"] == record.answer_brief


@pytest.mark.timeout(20)
async def test_a_call_the_script_stops_with_wait_for_is_cancelled_not_timeout(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio\n"
        "try:\n"
        "    await asyncio.wait_for(slow(x=1), 0.1)\n"
        "except TimeoutError as error:\n"
        "    print(type(error).__name__)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.stdout == "TimeoutError\n"
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause) == ("pending", "cancelled")
    assert "the script cancelled it" in call_line(result.text, "slow", "x=1")


@pytest.mark.timeout(20)
async def test_a_call_cancelled_by_the_script_and_answered_before_the_end_is_late_cancelled(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio\n"
        "task = asyncio.create_task(slow(x=1))\n"
        "await asyncio.sleep(0)\n"
        "task.cancel()\n"
        "await asyncio.wait([task])\n"
        "await release(x=1)\n"
        "task.cancelled()"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.value == "True"
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause) == ("late", "cancelled")
    assert record.answer_brief is not None and "slow-answer-1" in record.answer_brief


@pytest.mark.timeout(20)
async def test_a_failed_task_group_cancels_its_siblings_late_if_answered_else_pending(
    runtime: Runtime, desk: Desk
) -> None:
    # The group's failure cancels slow(x=1) and slow(x=2) while both wait. Then the script
    # lets only slow(x=1) answer: it is late, slow(x=2) is pending; both were cancelled.
    code = (
        "import asyncio\n"
        "try:\n"
        "    async with asyncio.TaskGroup() as group:\n"
        "        group.create_task(slow(x=1))\n"
        "        group.create_task(slow(x=2))\n"
        "        group.create_task(fails(x=3))\n"
        "except* ToolError as errors:\n"
        "    print('group failed:', *errors.exceptions)\n"
        "await release(x=1)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.stdout == "group failed: fails-3 refused the work\n"
    records = result.calls.records
    answered = only_record(records, "slow", "x=1")
    assert (answered.fate, answered.cause) == ("late", "cancelled")
    assert answered.answer_brief is not None and "slow-answer-1" in answered.answer_brief
    unanswered = only_record(records, "slow", "x=2")
    assert (unanswered.fate, unanswered.cause) == ("pending", "cancelled")
    assert unanswered.answer_brief is None
    assert only_record(records, "fails", "x=3").fate == "seen"
    assert result.calls.by_fate == {"seen": 2, "late": 1, "pending": 1}
    assert "calls: 4 made (2 seen, 1 late, 1 pending)" in result.text
    assert [call.args_brief for call in runtime.journal.uncertain()] == ["x=2"]
