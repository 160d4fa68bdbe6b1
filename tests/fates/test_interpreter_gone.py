"""`interpreter_gone`: the interpreter died before it could say what its code received.

The host never infers `seen` from timing. An answer the host sent to an interpreter that
died without acknowledging it is `late`; a call with no answer is `pending`. And an answer
meant for a replaced interpreter never settles a call of the new one.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from toolscript import Runtime

from .conftest import WAIT, Desk, call_line, only_record


@pytest.mark.timeout(20)
@pytest.mark.parametrize("death", ["os._exit(1)", "os.kill(os.getpid(), 9)"])
async def test_a_call_in_flight_when_the_interpreter_dies_is_pending_interpreter_gone(
    runtime: Runtime, desk: Desk, death: str
) -> None:
    # fast(x=0) is a round trip made after slow(x=1): once it is answered, the host has
    # dispatched slow(x=1). The script dies before the kernel can acknowledge fast's answer.
    code = (
        "import asyncio, os\n"
        "task = asyncio.create_task(slow(x=1))\n"
        "await asyncio.sleep(0)\n"
        "await fast(x=0)\n"
        f"{death}\n"
    )
    result = await runtime.run(code)
    assert result.status == "crashed", result.text
    assert desk.entered[1].is_set()
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause, record.answered_at) == (
        "pending",
        "interpreter_gone",
        None,
    )
    line = call_line(result.text, "slow", "x=1")
    assert "pending" in line and "interpreter died" in line and "may still take effect" in line
    [uncertain] = runtime.journal.uncertain()
    assert (uncertain.tool, uncertain.cause) == ("slow", "interpreter_gone")
    unacknowledged = only_record(result.calls.records, "fast", "x=0")
    assert (unacknowledged.fate, unacknowledged.cause) == ("late", "interpreter_gone")


@pytest.mark.timeout(20)
async def test_answers_the_host_sent_before_the_interpreter_died_unacknowledged_are_late(
    runtime: Runtime, desk: Desk
) -> None:
    # release(x=1) answers only after slow(x=1) has, so both answers reach the kernel; the
    # script dies in the same step as it resumes, before the kernel can acknowledge either.
    code = (
        "import asyncio, os\n"
        "task = asyncio.create_task(slow(x=1))\n"
        "await release(x=1)\n"
        "os._exit(1)\n"
    )
    result = await runtime.run(code)
    assert result.status == "crashed", result.text
    for tool, args, answer in (("slow", "x=1", "slow-answer-1"), ("release", "x=1", "released-1")):
        record = only_record(result.calls.records, tool, args)
        assert (record.fate, record.cause) == ("late", "interpreter_gone")
        assert record.answer_brief is not None and answer in record.answer_brief
        line = call_line(result.text, tool, args)
        assert (
            "late" in line and answer in line and "the interpreter died before it could say" in line
        )
    assert result.calls.by_fate == {"late": 2}
    assert runtime.journal.uncertain() == []


@pytest.mark.timeout(20)
async def test_a_call_in_flight_when_a_stubborn_script_is_killed_is_pending_interpreter_gone(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio, time\n"
        "task = asyncio.create_task(slow(x=1))\n"
        "await asyncio.sleep(0)\n"
        "await fast(x=0)\n"
        "while True:\n"
        "    try:\n"
        "        time.sleep(1)\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
    )
    result = await runtime.run(code, time_limit=0.5)
    assert result.status == "time_limit", result.text
    assert "killed" in result.note
    record = only_record(result.calls.records, "slow", "x=1")
    assert (record.fate, record.cause) == ("pending", "interpreter_gone")
    # fast(x=0)'s code took its answer, and the loop never ran again to send the
    # acknowledgement: the stop's interrupt, which the script caught, sent it.
    acknowledged = only_record(result.calls.records, "fast", "x=0")
    assert (acknowledged.fate, acknowledged.cause) == ("seen", None)


@pytest.mark.timeout(20)
async def test_a_late_answer_meant_for_a_replaced_interpreter_never_settles_a_call_of_the_new_one(
    runtime: Runtime, desk: Desk, tmp_path: Path
) -> None:
    # The first interpreter is killed while its call number 1 is in flight; the new
    # interpreter's first call is number 1 too. The old handler (one that finishes even when
    # the host cancels it) answers while the new call waits: the new call must get its own.
    first_run = asyncio.create_task(runtime.run("await stubborn(x=1)\n"))
    await desk.wait_entered(1)
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None
    os.kill(interpreter.kernel_pid() or 0, signal.SIGKILL)
    first = await asyncio.wait_for(first_run, WAIT)
    assert first.status == "crashed", first.text
    [old] = first.calls.records
    assert (old.id.endswith(".1"), old.fate, old.cause) == (True, "pending", "interpreter_gone")

    second_run = asyncio.create_task(runtime.run("await stubborn(x=2)"))
    await desk.wait_entered(2)
    await desk.open_and_wait_answered(1)  # the old interpreter's answer goes out now
    # The journal keeps the late answer: that call's effect is known now.
    [journaled] = runtime.journal.calls(script_id=first.script_id)
    assert (journaled.fate, journaled.cause) == ("pending", "interpreter_gone")
    assert journaled.answer_brief == "'stubborn-1'" and not journaled.uncertain
    assert runtime.journal.uncertain() == []
    await desk.open_and_wait_answered(2)
    second = await asyncio.wait_for(second_run, WAIT)
    assert second.status == "ok", second.text
    assert second.generation == first.generation + 1
    assert second.value == "'stubborn-2'"
    [new] = second.calls.records
    assert new.id.endswith(".1") and new.id != old.id
    assert (new.args_brief, new.fate, new.cause) == ("x=2", "seen", None)
    assert second.calls.made == 1 and second.calls.made_before_start == 0
    assert "calls:" not in second.text
