"""Background scripts: started at once, reported like a foreground run, logged, bounded."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.conftest import MakeRuntime, eventually, wait_for_file
from toolscript import ScriptResult, tool
from toolscript.background import LOG_DAYS, prune_logs

gate = asyncio.Event()


@tool
async def echo(x: int) -> int:
    """Answer x at once."""
    return x


@tool
async def held(x: int) -> int:
    """Answer x once the test opens the gate."""
    await gate.wait()
    return x


@pytest.fixture(autouse=True)
def closed_gate() -> None:
    # An Event belongs to the first loop that waits on it: each test gets a new one.
    global gate
    gate = asyncio.Event()


@pytest.mark.timeout(30)
async def test_a_background_script_returns_at_once_and_reports_like_a_foreground_run(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime(echo)
    shell = rt.shell("main")
    go = tmp_path / "go"
    done: list[ScriptResult] = []
    started = time.monotonic()
    handle = await shell.start(
        "import os, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "print('from the background')\n"
        "print(await echo(x=7))\n"
        "'finished'",
        time_limit=20,
        on_done=done.append,
    )
    assert time.monotonic() - started < 2
    assert handle.status() == "running"
    # The shell's foreground runs go on beside it, in their own namespace.
    beside = await shell.run("x = 1\nx + 1")
    assert beside.value == "2"
    go.touch()
    result = await asyncio.wait_for(handle.result(), 20)
    assert result.status == "ok", result.text
    assert result.value == "'finished'"
    assert "from the background\n7" in result.stdout
    assert result.calls.made == 1 and result.calls.by_fate == {"seen": 1}
    assert result.script_id == handle.id
    assert result.log_path is not None
    log = Path(result.log_path).read_text()
    assert "from the background" in log and "7" in log
    await asyncio.sleep(0)
    assert done == [result]
    assert handle.status() == "ok"
    assert rt.journal.scripts(shell="main")[-1].status in ("ok",)


@pytest.mark.timeout(30)
async def test_a_background_script_that_crashes_fires_on_done_with_crashed_and_its_calls(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(echo, held)
    finished = asyncio.Event()
    seen: list[ScriptResult] = []

    def on_done(result: ScriptResult) -> None:
        seen.append(result)
        finished.set()

    handle = await rt.shell("main").start(
        "import asyncio, os\n"
        "await echo(x=1)\n"
        "t = asyncio.create_task(held(x=2))\n"
        "await asyncio.sleep(0.2)\n"
        "os._exit(3)",
        on_done=on_done,
    )
    await asyncio.wait_for(finished.wait(), 20)
    gate.set()
    [result] = seen
    assert result.status == "crashed"
    assert "exit code 3" in result.note
    assert "next run" not in result.note  # its interpreter was its own: nothing runs next
    assert result.calls.made == 2
    fates = {record.args_brief: (record.fate, record.cause) for record in result.calls.records}
    assert fates["x=1"] == ("seen", None)
    assert fates["x=2"] == ("pending", "interpreter_gone")
    assert handle.status() == "crashed"


@pytest.mark.timeout(30)
async def test_a_background_script_cancelled_while_a_call_is_in_flight_says_so(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(held)
    handle = await rt.shell("main").start("print('waiting')\nawait held(x=5)", time_limit=20)
    deadline = time.monotonic() + 10
    while rt.journal.calls() == [] and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    result = await asyncio.wait_for(handle.cancel(), 20)
    assert result.status == "cancelled", result.text
    assert "Cancelled by the caller" in result.note
    [record] = result.calls.records
    assert (record.tool, record.fate, record.cause) == ("held", "pending", "stopped")
    assert handle.status() == "cancelled"
    gate.set()


@pytest.mark.timeout(30)
async def test_background_scripts_over_the_cap_are_refused_with_the_reason(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime(max_background=1)
    go = tmp_path / "go"
    first = await rt.shell("a").start(
        f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)", time_limit=20
    )
    second = await rt.shell("b").start("1")
    assert second.done()
    refused = await second.result()
    assert refused.status == "refused"
    assert "max_background=1" in refused.note and "Nothing ran" in refused.note
    go.touch()
    assert (await asyncio.wait_for(first.result(), 20)).status == "ok"
    third = await rt.shell("b").start("3")
    assert (await asyncio.wait_for(third.result(), 20)).value == "3"


@pytest.mark.timeout(30)
async def test_a_background_script_stops_at_its_time_limit(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime()
    handle = await rt.shell("main").start("import time\ntime.sleep(30)", time_limit=1)
    result = await asyncio.wait_for(handle.result(), 10)
    assert result.status == "time_limit"


@pytest.mark.timeout(30)
async def test_a_background_script_cancelled_before_it_began_says_why_and_that_nothing_ran(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime()
    # Cancelled in the same step as it was started: no interpreter had taken it up.
    # (Before its task first ran, or while it waited for its interpreter.)
    plain = await rt.shell("a").start("print('ran')")
    said = await asyncio.wait_for(plain.cancel(), 10)
    assert (said.status, said.stdout) == ("cancelled", ""), said.text
    assert said.note.startswith("The background script was cancelled "), said.note
    assert " it started" in said.note, said.note
    closing = await rt.shell("b").start("print('ran')")
    said = await asyncio.wait_for(closing.cancel("the shell was closed because serve stopped"), 10)
    assert said.note.startswith("The background script was stopped "), said.note
    assert " it started (the shell was closed because serve stopped)" in said.note, said.note


@pytest.mark.timeout(30)
async def test_closing_the_runtime_cancels_its_background_scripts(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime()
    started = tmp_path / "started"
    handle = await rt.shell("main").start(
        f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(30)", time_limit=60
    )
    await wait_for_file(started)
    await asyncio.wait_for(rt.aclose(), 15)
    result = await asyncio.wait_for(handle.result(), 5)
    assert result.status == "cancelled"
    assert "the runtime was closed" in result.note


@pytest.mark.timeout(30)
async def test_a_background_log_is_bounded_and_says_where_it_was_cut(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(log_limit=10_000)
    # Both streams go to the one log, and the limit is the log's: not one for each.
    code = "import sys\nprint('y' * 100_000)\nprint('z' * 100_000, file=sys.stderr)"
    handle = await rt.shell("main").start(code)
    result = await asyncio.wait_for(handle.result(), 20)
    assert result.log_path is not None
    log = Path(result.log_path).read_bytes()
    assert len(log) < 10_000 + 200, len(log)
    assert log.count(b"the log reached its size limit here") == 1


@pytest.mark.timeout(30)
async def test_a_background_script_cancelled_at_once_is_answered_cancelled_and_ran_nothing(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime()
    handle = await rt.shell("a").start("print('never')", time_limit=10)
    result = await asyncio.wait_for(handle.cancel(), 10)
    assert result.status == "cancelled", result.text
    assert result.stdout == ""
    assert handle.status() == "cancelled"


@pytest.mark.timeout(30)
async def test_a_running_background_scripts_output_so_far_is_its_last_lines(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime(text_limit=2_000)
    go = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        "for n in range(1, 2001):\n"
        "    print(f'line {n}', flush=True)\n"
        "print('a warning', file=sys.stderr, flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "print('after the gate')\n"
    )
    handle = await rt.shell("main").start(code, time_limit=20)
    await eventually(lambda: "line 2000" in handle.output(), 15, "the output did not show")
    output = handle.output()
    assert handle.status() == "running"
    assert output.startswith("stderr:\na warning\n\nstdout:\n… ")
    assert " characters cut …\nline " in output and output.endswith("line 2000")
    assert "\nline 1\n" not in output and len(output) < 2_100
    assert handle.output(limit=300).endswith("line 2000") and len(handle.output(limit=300)) < 500
    go.write_text("go")
    result = await asyncio.wait_for(handle.result(), 20)
    assert result.status == "ok", result.text
    assert handle.output().endswith("after the gate")


@pytest.mark.timeout(30)
async def test_an_output_limit_that_is_not_a_count_of_characters_is_refused_clearly(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime()
    shell = rt.shell("main")
    handle = await shell.start("print('hi')", time_limit=20)
    await asyncio.wait_for(handle.result(), 20)
    for output in (handle.output, shell.output):
        with pytest.raises(TypeError, match="limit must be a whole number of characters"):
            output("300")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="limit must be a whole number of characters"):
            output(2.5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit must be at least 0 characters, not -1"):
            output(-1)
    assert handle.output(0) == handle.output(limit=0)
    assert "hi" in handle.output()


@pytest.mark.timeout(30)
async def test_a_callback_that_cannot_be_called_is_refused_when_it_is_given(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime()
    shell = rt.shell("main")
    with pytest.raises(TypeError, match="on_done must be callable or None, not 5"):
        await shell.start("1", on_done=5)  # type: ignore[arg-type]
    assert rt.background == []  # nothing was started
    handle = await shell.start("1", time_limit=20)
    with pytest.raises(TypeError, match="callback must be callable, not 7"):
        handle.add_done_callback(7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="listener must be callable, not 'x'"):
        rt.on_catalogue_change("x")  # type: ignore[arg-type]
    assert (await asyncio.wait_for(handle.result(), 20)).status == "ok"


@pytest.mark.timeout(30)
async def test_a_cancelled_background_scripts_note_keeps_no_variables(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime()
    started = tmp_path / "started"
    code = f"import pathlib, time\npathlib.Path({str(started)!r}).write_text('yes')\ntime.sleep(60)"
    handle = await rt.shell("main").start(code, time_limit=30)
    await wait_for_file(started)
    result = await asyncio.wait_for(handle.cancel(), 20)
    assert result.status == "cancelled", result.text
    # The note's last line is the cancel's (without a sandbox, a line before it says so).
    assert result.note.splitlines()[-1] == (
        "Cancelled by the caller. It was interrupted and stopped within the grace period."
    )
    assert "kept" not in result.text and "next run" not in result.text


@pytest.mark.timeout(30)
async def test_old_background_logs_are_removed_and_recent_ones_kept(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # A log per background script, up to `log_limit` each: kept for ever, they fill the disk.
    state = tmp_path / "state"
    logs = state / "logs" / "background"
    logs.mkdir(parents=True)
    now = time.time()
    old, recent = logs / "main_bg-old.log", logs / "main_bg-recent.log"
    for path, age_days in ((old, LOG_DAYS + 1), (recent, 1)):
        path.write_text("output\n")
        os.utime(path, (now - age_days * 86_400, now - age_days * 86_400))
    rt = await make_runtime(state_dir=state)
    result = await (await rt.shell("main").start("print('hi')")).result()
    assert result.status == "ok", result.text
    assert result.log_path is not None and Path(result.log_path).exists()
    assert not old.exists() and recent.exists()


def test_past_the_newest_kept_logs_only_ones_no_script_can_still_write_are_removed(
    tmp_path: Path,
) -> None:
    now = time.time()
    for i in range(6):  # written 0, 1, ... 5 hours ago
        path = tmp_path / f"s_bg-{i}.log"
        path.write_text("x")
        os.utime(path, (now - i * 3600, now - i * 3600))
    (tmp_path / "notes.txt").write_text("not a log")
    # Keep the newest two; of the rest, those written within 2.5 hours may still be written.
    assert prune_logs(tmp_path, busy=2.5 * 3600, kept=2) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt",
        "s_bg-0.log",
        "s_bg-1.log",
        "s_bg-2.log",
    ]


@pytest.mark.timeout(30)
async def test_a_background_script_cancelled_as_it_ends_keeps_its_result_and_frees_its_place(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(echo, max_interpreters=2, queue_timeout=2)
    for _ in range(3):
        handle = await rt.shell("a").start("print('ran')\nx = await echo(x=1)", time_limit=10)
        # The script has ended in its interpreter, whose closing the handle still waits for.
        while handle.status() == "running":
            interpreter = handle._interpreter
            if interpreter is not None and interpreter.runs and not interpreter.busy:
                break
            await asyncio.sleep(0)
        assert handle.status() == "running"
        result = await asyncio.wait_for(handle.cancel(), 10)
        assert result.status == "ok", result.text
        assert result.stdout == "ran\n" and result.calls.by_fate == {"seen": 1}
        assert [s.status for s in rt.journal.scripts() if s.script_id == handle.id] == ["ok"]
    pool = rt._pool
    assert pool is not None and pool.live == 0
    assert (await rt.shell("b").run("1")).status == "ok"


@pytest.mark.timeout(30)
async def test_a_second_cancel_does_not_cut_short_the_clean_up_after_the_first(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime(grace=5)
    started, interrupted = tmp_path / "started", tmp_path / "interrupted"
    code = (
        # the marker is made inside the try, so the interrupt it invites is always caught
        f"import pathlib, time\ntry:\n    pathlib.Path({str(started)!r}).write_text('')\n"
        "    time.sleep(30)\nexcept KeyboardInterrupt:\n"
        f"    pathlib.Path({str(interrupted)!r}).write_text('')\n"
        "    time.sleep(1)\n    print('cleaned up', flush=True)\n    raise\n"
    )
    handle = await rt.shell("main").start(code, time_limit=20)
    await wait_for_file(started)
    first = asyncio.ensure_future(handle.cancel("the first reason"))
    await wait_for_file(interrupted)  # the script is cleaning up after the first interrupt
    result = await asyncio.wait_for(handle.cancel("the second reason"), 20)
    assert (await first) is result
    assert result.status == "cancelled", result.text
    assert result.stdout == "cleaned up\n"
    # The stop is the first one's: its reason is the one said.
    assert "the first reason" in result.note and "second" not in result.note, result.note


@pytest.mark.timeout(60)
async def test_a_background_script_of_a_shell_with_a_long_name_runs_and_logs(
    make_runtime: MakeRuntime,
) -> None:
    # The log file is named after the script's id, which holds the shell's name: 250
    # characters of it made a file name too long, and the start failed as "abandoned".
    runtime = await make_runtime()
    handle = await runtime.shell("n" * 250).start("print('hi')\n6 * 7")
    result = await asyncio.wait_for(handle.result(), 30)
    assert (result.status, result.value) == ("ok", "42"), result.text
    assert result.log_path is not None and "hi" in Path(result.log_path).read_text()


@pytest.mark.timeout(60)
async def test_a_background_log_that_cannot_be_written_refuses_the_script_saying_why(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = await make_runtime(state_dir=tmp_path / "state")
    logs = tmp_path / "state" / "logs" / "background"
    logs.parent.mkdir(parents=True, exist_ok=True)
    logs.write_text("a file where the folder goes")
    handle = await runtime.shell("main").start("6 * 7")
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "refused", result.text
    assert "log" in result.note and "abandoned" not in result.note, result.note


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["plain", "async"])
async def test_an_on_done_that_raises_is_logged_as_failed_whether_plain_or_async(
    make_runtime: MakeRuntime, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    called = asyncio.Event()

    def plain(result: ScriptResult) -> None:
        called.set()
        raise RuntimeError("the callback broke")

    async def in_a_task(result: ScriptResult) -> None:
        called.set()
        raise RuntimeError("the callback broke")

    runtime = await make_runtime()
    handle = await runtime.shell("main").start(
        "6 * 7", on_done=plain if kind == "plain" else in_a_task
    )
    await asyncio.wait_for(handle.result(), 30)
    await asyncio.wait_for(called.wait(), 10)
    await eventually(
        lambda: any("on_done of background script" in r.getMessage() for r in caplog.records),
        10,
        "the failing on_done was not logged",
    )
    [record] = [r for r in caplog.records if "on_done of background script" in r.getMessage()]
    assert record.exc_info is not None and "the callback broke" in str(record.exc_info[1])
