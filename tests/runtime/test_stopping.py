"""A time limit or a cancel stops the script within the limit plus the grace, whatever it does."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.conftest import GRACE, MakeRuntime, wait_for_file
from toolscript import Runtime, ScriptResult, tool

LIMIT = 1.0
SLACK = 2.0
"""Seconds allowed on top of the limit and the grace for starting, signalling and reporting."""


async def timed(runtime: Runtime, code: str, shell: str = "default") -> tuple[ScriptResult, float]:
    await runtime.shell(shell).run("kept = 'state'")
    started = time.monotonic()
    result = await runtime.shell(shell).run(code, time_limit=LIMIT)
    return result, time.monotonic() - started


async def assert_interrupted_and_kept(runtime: Runtime, result: ScriptResult) -> None:
    assert result.status == "time_limit" and result.exit_code == 1, result.text
    assert "time limit of 1 s" in result.note
    assert "interpreter and its variables are kept" in result.note
    assert "killed" not in result.note
    after = await runtime.run("kept")
    assert after.value == "'state'" and after.generation == result.generation
    assert "fresh interpreter" not in after.note


async def assert_killed_and_replaced(runtime: Runtime, result: ScriptResult) -> None:
    assert result.status == "time_limit" and result.exit_code == 1, result.text
    assert "interpreter was killed" in result.note and "gone" in result.note
    after = await runtime.run("'kept' in globals()")
    assert after.status == "ok"
    assert after.value == "False"
    assert after.generation == result.generation + 1
    assert "fresh interpreter" in after.note and "killed" in after.note


@pytest.mark.timeout(20)
async def test_time_sleep_in_c_is_interrupted_within_the_limit_and_the_interpreter_kept(
    runtime: Runtime,
) -> None:
    result, elapsed = await timed(runtime, "import time\ntime.sleep(60)")
    assert elapsed < LIMIT + GRACE + SLACK
    await assert_interrupted_and_kept(runtime, result)


@pytest.mark.timeout(20)
async def test_a_pure_python_loop_is_interrupted_within_the_limit(runtime: Runtime) -> None:
    result, elapsed = await timed(runtime, "n = 0\nwhile True:\n    n += 1")
    assert elapsed < LIMIT + GRACE + SLACK
    await assert_interrupted_and_kept(runtime, result)


@pytest.mark.timeout(20)
async def test_an_awaited_asyncio_sleep_is_cancelled_at_the_limit(runtime: Runtime) -> None:
    result, elapsed = await timed(runtime, "import asyncio\nawait asyncio.sleep(60)")
    assert elapsed < LIMIT + GRACE + SLACK
    await assert_interrupted_and_kept(runtime, result)


@pytest.mark.timeout(20)
async def test_the_script_can_clean_up_after_the_interrupt(runtime: Runtime) -> None:
    result, _ = await timed(
        runtime,
        "import time\ntry:\n    time.sleep(60)\nfinally:\n    print('cleaned up')\n",
    )
    assert result.status == "time_limit"
    assert "cleaned up" in result.stdout


@pytest.mark.timeout(20)
async def test_a_loop_that_ignores_keyboard_interrupt_is_killed_after_the_grace(
    runtime: Runtime,
) -> None:
    result, elapsed = await timed(
        runtime,
        "while True:\n    try:\n        while True:\n            pass\n"
        "    except KeyboardInterrupt:\n        pass\n",
    )
    assert LIMIT + GRACE - 0.1 < elapsed < LIMIT + GRACE + SLACK
    await assert_killed_and_replaced(runtime, result)


@pytest.mark.timeout(20)
async def test_an_await_that_ignores_cancellation_is_killed_after_the_grace(
    runtime: Runtime,
) -> None:
    result, elapsed = await timed(
        runtime,
        "import asyncio, time\n"
        "while True:\n"
        "    try:\n"
        "        await asyncio.sleep(60)\n"
        "    except (asyncio.CancelledError, KeyboardInterrupt):\n"
        "        pass\n",
    )
    assert elapsed < LIMIT + GRACE + SLACK
    await assert_killed_and_replaced(runtime, result)


@pytest.mark.timeout(20)
async def test_a_held_event_loop_is_stopped_at_the_limit(runtime: Runtime) -> None:
    # The script awaits, but a task it started holds the event loop in C (time.sleep).
    result, elapsed = await timed(
        runtime,
        "import asyncio, time\n"
        "async def hog():\n"
        "    time.sleep(60)\n"
        "asyncio.get_running_loop().create_task(hog())\n"
        "await asyncio.sleep(60)\n",
    )
    assert elapsed < LIMIT + GRACE + SLACK
    assert result.status == "time_limit", result.text
    after = await runtime.run("'after'")
    assert after.status == "ok" and after.value == "'after'"


@pytest.mark.timeout(20)
async def test_a_held_event_loop_that_ignores_the_interrupt_is_killed(runtime: Runtime) -> None:
    result, elapsed = await timed(
        runtime,
        "import asyncio\n"
        "async def hog():\n"
        "    while True:\n"
        "        try:\n"
        "            while True:\n"
        "                pass\n"
        "        except KeyboardInterrupt:\n"
        "            pass\n"
        "asyncio.get_running_loop().create_task(hog())\n"
        "await asyncio.sleep(60)\n",
    )
    assert elapsed < LIMIT + GRACE + SLACK
    await assert_killed_and_replaced(runtime, result)


@pytest.mark.timeout(20)
async def test_a_kernel_that_stops_answering_is_killed_at_the_limit_plus_the_grace(
    runtime: Runtime,
) -> None:
    result, elapsed = await timed(
        runtime, "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)"
    )
    assert elapsed < LIMIT + GRACE + SLACK
    await assert_killed_and_replaced(runtime, result)


async def start_and_cancel(
    runtime: Runtime, code: str, started: Path
) -> tuple[ScriptResult | None, float]:
    shell = runtime.shell("default")
    await shell.run("kept = 'state'")
    task = asyncio.create_task(shell.run(code, time_limit=30))
    await wait_for_file(started)
    asked = time.monotonic()
    task.cancel()
    try:
        result = await task
    except asyncio.CancelledError:
        result = None
    return result, time.monotonic() - asked


@pytest.mark.timeout(20)
async def test_cancelling_the_awaiting_task_interrupts_blocking_code_and_keeps_the_shell(
    runtime: Runtime, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    result, elapsed = await start_and_cancel(
        runtime,
        f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(60)",
        started,
    )
    assert result is None  # the caller's cancellation is propagated, not swallowed
    assert elapsed < GRACE + SLACK
    after = await runtime.run("kept")
    assert after.status == "ok" and after.value == "'state'"
    assert "fresh interpreter" not in after.note


@pytest.mark.timeout(20)
async def test_cancelling_a_script_that_ignores_the_interrupt_kills_it_and_the_next_run_says_so(
    runtime: Runtime, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    generation = (await runtime.run("1")).generation
    result, elapsed = await start_and_cancel(
        runtime,
        f"import pathlib\nwhile True:\n    try:\n        pathlib.Path({str(started)!r}).touch()\n"
        "        while True:\n            pass\n"
        "    except KeyboardInterrupt:\n        pass\n",
        started,
    )
    assert result is None
    assert GRACE - 0.1 < elapsed < GRACE + SLACK
    after = await runtime.run("'kept' in globals()")
    assert after.status == "ok" and after.value == "False"
    assert after.generation == generation + 1
    assert "fresh interpreter" in after.note


@pytest.mark.timeout(20)
async def test_a_cancelled_script_is_journaled_as_cancelled(
    runtime: Runtime, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    await start_and_cancel(
        runtime,
        f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(60)",
        started,
    )
    statuses = [script.status for script in runtime.journal.scripts()]
    assert "cancelled" in statuses


@pytest.mark.timeout(30)
async def test_a_second_cancel_kills_at_once_and_the_record_is_the_scripts_own(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # Two cancels of one run, the second while the first one's stop waits out its grace
    # period for a script that ignores the interrupt: the second kills it now, and what the
    # shell and the journal record is this script's end, not the one before it.
    calls: list[str] = []

    @tool
    def note(tag: str) -> str:
        """Note a tag."""
        calls.append(tag)
        return tag

    runtime = await make_runtime(tools=[note], grace=20.0)
    shell = runtime.shell("default")
    first = await shell.run("await note(tag='first')")
    started = tmp_path / "started"
    task = asyncio.create_task(
        shell.run(
            f"await note(tag='second')\nimport pathlib\n"
            f"pathlib.Path({str(started)!r}).touch()\n"
            "while True:\n    try:\n        while True:\n            pass\n"
            "    except KeyboardInterrupt:\n        pass\n",
            time_limit=60,
        )
    )
    await wait_for_file(started)
    asked = time.monotonic()
    task.cancel()
    await asyncio.sleep(0)  # the first cancel lands, and its stop begins
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - asked < SLACK + 3  # not the grace period of 20 s
    result = shell.last_result
    assert result is not None and result.script_id != first.script_id
    assert result.status == "cancelled"
    assert "cancelled again before it had stopped" in result.note, result.text
    assert [record.tool for record in result.calls.records] in ([], ["note"])
    assert result.calls.made == 1
    ended = {script.script_id: script.status for script in runtime.journal.scripts()}
    assert ended[result.script_id] == "cancelled"
    after = await shell.run("print('next')")
    assert after.status == "ok" and after.stdout == "next\n", after.text
    assert after.generation == first.generation + 1
    assert calls == ["first", "second"]


@pytest.mark.timeout(60)
async def test_a_time_limit_that_passes_before_the_script_begins_stops_it_every_time(
    runtime: Runtime,
) -> None:
    # The interrupt of a limit this small reaches the interpreter before (or while) it takes
    # up the script: ignored as stray, the script ran to its end (`ok` after 0.3 s), or an
    # interrupt that landed in the kernel's own code left it to be killed after the grace.
    await runtime.run("kept = 'state'")
    seen = []
    for limit in [1e-9, 1e-6, 1e-4] * 8:
        result = await runtime.run("import time\ntime.sleep(0.3)\nkept", time_limit=limit)
        seen.append((result.status, "killed" in result.note, result.generation))
    assert seen == [("time_limit", False, 1)] * len(seen), seen
    after = await runtime.run("kept")
    assert (after.value, after.generation) == ("'state'", 1), after.text
