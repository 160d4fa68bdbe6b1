"""A dead interpreter is reported as crashed, with the cause in words, and replaced."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.conftest import MakeRuntime, eventually, is_gone, wait_for_file
from toolscript import Runtime, ScriptResult

from .conftest import kernel_pid


async def assert_crashed_and_replaced(runtime: Runtime, result: ScriptResult, *words: str) -> None:
    assert result.status == "crashed" and result.exit_code == 1, result.text
    for word in words:
        assert word in result.note, result.note
    assert "state is gone" in result.note
    after = await runtime.run("'kept' in globals()")
    assert after.status == "ok", after.text
    assert after.value == "False"
    assert after.generation == result.generation + 1
    assert "fresh interpreter" in after.note


@pytest.mark.timeout(20)
async def test_os_exit_is_a_crash_naming_the_exit_code(runtime: Runtime) -> None:
    await runtime.run("kept = 1")
    result = await runtime.run("import os\nprint('last words', flush=True)\nos._exit(3)")
    await assert_crashed_and_replaced(
        runtime, result, "exit code 3", "os._exit", "Likely cause", "What to look for"
    )
    assert result.stdout == "last words\n"


@pytest.mark.timeout(20)
async def test_os_abort_is_a_crash_naming_sigabrt(runtime: Runtime) -> None:
    await runtime.run("kept = 1")
    result = await runtime.run("import os\nos.abort()")
    await assert_crashed_and_replaced(
        runtime, result, "SIGABRT", "os.abort()", "Likely cause", "What to look for"
    )


@pytest.mark.timeout(20)
async def test_a_segfault_through_ctypes_is_a_crash_naming_sigsegv(runtime: Runtime) -> None:
    await runtime.run("kept = 1")
    result = await runtime.run("import ctypes\nctypes.string_at(0)")
    await assert_crashed_and_replaced(
        runtime, result, "SIGSEGV", "C code", "Likely cause", "What to look for"
    )


@pytest.mark.timeout(20)
async def test_a_kernel_killed_from_outside_during_a_run_is_a_crash_naming_sigkill(
    runtime: Runtime, tmp_path: Path
) -> None:
    await runtime.run("kept = 1")
    pid = kernel_pid(runtime)
    started = tmp_path / "started"
    running = asyncio.create_task(
        runtime.run(
            f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(60)",
            time_limit=30,
        )
    )
    await wait_for_file(started)
    os.kill(pid, signal.SIGKILL)
    result = await asyncio.wait_for(running, 10)
    await assert_crashed_and_replaced(
        runtime, result, "SIGKILL", "killed from outside", "What to look for"
    )
    assert is_gone(pid)


@pytest.mark.timeout(20)
async def test_a_kernel_killed_between_runs_is_replaced_and_the_next_run_says_so(
    runtime: Runtime,
) -> None:
    first = await runtime.run("kept = 1")
    pid = kernel_pid(runtime)
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None
    os.kill(pid, signal.SIGKILL)
    await eventually(lambda: not interpreter.alive, 10.0, "the host never saw the exit")
    after = await runtime.run("'kept' in globals()")
    assert after.status == "ok", after.text
    assert after.value == "False"
    assert after.generation == first.generation + 1
    assert "fresh interpreter" in after.note
    assert "killed by signal 9 (SIGKILL)" in after.note, after.note


@pytest.mark.timeout(30)
async def test_memory_exhausted_under_the_memory_limit_is_a_crash_saying_so(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(limits={"address_space": 512 * 1024**2})
    await runtime.run("kept = 1")
    pid = kernel_pid(runtime)
    result = await runtime.run("hog = []\nwhile True:\n    hog.append(bytearray(50 * 1024**2))")
    await assert_crashed_and_replaced(runtime, result, "out of memory", "512 MiB", "Look for")
    assert "MemoryError" in result.text
    assert kernel_pid(runtime) != pid
    assert is_gone(pid), "the interpreter that ran out of memory is still running"


@pytest.mark.timeout(30)
async def test_one_large_allocation_over_the_memory_limit_is_a_crash_too(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(limits={"address_space": 512 * 1024**2})
    await runtime.run("kept = 1")
    result = await runtime.run("b'x' * (1024**3)")
    await assert_crashed_and_replaced(runtime, result, "out of memory")


@pytest.mark.timeout(30)
async def test_a_memory_error_the_script_raises_with_words_is_its_error_not_a_crash(
    runtime: Runtime,
) -> None:
    await runtime.run("kept = 1")
    result = await runtime.run("raise MemoryError('not really')")
    assert result.status == "error", result.text
    assert "out of memory" not in result.note and "MemoryError: not really" in result.text
    after = await runtime.run("kept")
    assert after.value == "1", after.text  # the interpreter and its state were kept


@pytest.mark.timeout(20)
async def test_a_crash_in_one_shell_leaves_the_other_shells_running(runtime: Runtime) -> None:
    other = runtime.shell("other")
    await other.run("mine = 'still here'")
    crashed = await runtime.run("import os\nos._exit(1)")
    assert crashed.status == "crashed"
    after = await other.run("mine")
    assert after.value == "'still here'"
