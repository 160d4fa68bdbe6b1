"""Nothing hangs: a kernel that cannot start is refused within a bound; closing leaves nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import SANDBOX, MakeRuntime, eventually, is_gone, wait_for_file
from toolscript import Runtime

from .conftest import kernel_pid


def fake_python(tmp_path: Path, body: str) -> str:
    """A shell script standing in for a Python interpreter, in a folder of its own: the
    sandbox shows an interpreter's folder read-only even under a writable mount, and the
    tests mount `tmp_path` read-write for what the script writes there."""
    path = tmp_path / "bin" / "python"
    path.parent.mkdir()
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def children_of_this_process() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


@pytest.mark.timeout(20)
async def test_a_missing_python_is_refused_saying_why(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime(python="/nonexistent/python")
    started = time.monotonic()
    result = await runtime.run("print('never')")
    assert time.monotonic() - started < 2
    assert result.status == "refused" and result.exit_code == 1
    assert "Nothing ran" in result.note
    assert "/nonexistent/python" in result.note and "could not start" in result.note


@pytest.mark.timeout(20)
async def test_a_python_that_exits_at_once_is_refused_with_what_it_said(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    python = fake_python(tmp_path, "echo 'this is not python' >&2\nexit 1")
    runtime = await make_runtime(python=python, fork=False, pool_size=0, start_timeout=5)
    started = time.monotonic()
    result = await runtime.run("print('never')")
    assert time.monotonic() - started < 4
    assert result.status == "refused"
    assert "exit code 1" in result.note and "this is not python" in result.note
    assert "Nothing ran" in result.note


@pytest.mark.timeout(20)
async def test_a_python_that_never_becomes_ready_is_refused_within_the_start_timeout(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    python = fake_python(tmp_path, "exec sleep 60")
    runtime = await make_runtime(python=python, fork=False, pool_size=0, start_timeout=1)
    before = children_of_this_process()
    started = time.monotonic()
    result = await runtime.run("print('never')")
    assert time.monotonic() - started < 1 + 3
    assert result.status == "refused"
    assert "did not answer" in result.note and "1 s" in result.note
    left = children_of_this_process() - before
    assert all(is_gone(pid) for pid in left), "the kernel that never got ready is still running"


@pytest.mark.timeout(20)
async def test_a_shell_refused_for_a_broken_python_tries_again_on_the_next_run(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    python = fake_python(tmp_path, "echo broken >&2; exit 1")
    runtime = await make_runtime(python=python, fork=False, pool_size=0)
    assert (await runtime.run("1")).status == "refused"
    Path(python).write_text(f'#!/bin/sh\nexec {os.sys.executable} "$@"\n')
    assert (await runtime.run("1 + 1")).value == "2"


@pytest.mark.timeout(20)
async def test_closing_the_runtime_leaves_no_kernel_nor_its_children(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime()
    result = await runtime.shell("a").run(
        "import subprocess\np = subprocess.Popen(['sleep', '60'])\np.pid"
    )
    assert result.status == "ok", result.text
    [sleeper] = [child.pid for child in psutil.Process(kernel_pid(runtime, "a")).children()]
    await runtime.shell("b").run("1")
    kernels = [kernel_pid(runtime, "a"), kernel_pid(runtime, "b")]
    started = time.monotonic()
    await runtime.aclose()
    assert time.monotonic() - started < 5
    for pid in [*kernels, sleeper]:
        assert is_gone(pid), f"process {pid} outlived the runtime"


@pytest.mark.timeout(20)
async def test_closing_the_runtime_while_a_script_blocks_is_bounded_and_answers_the_run(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = await make_runtime()
    started_file = tmp_path / "started"
    running = asyncio.create_task(
        runtime.run(
            f"import pathlib, time\npathlib.Path({str(started_file)!r}).touch()\ntime.sleep(60)",
            time_limit=30,
        )
    )
    await wait_for_file(started_file)
    pid = kernel_pid(runtime)
    started = time.monotonic()
    await runtime.aclose()
    result = await asyncio.wait_for(running, 5)
    assert time.monotonic() - started < 5
    assert result.status == "cancelled", result.text
    assert "the runtime was closed" in result.note
    # Stopped within the grace period, or (on a loaded machine, where the interrupted
    # `sleep` can take longer than the suite's 0.5 s to return) killed after it: gone either way.
    assert re.search(r"its variables(, imports and tasks)? are gone", result.note), result.note
    assert "kept" not in result.note
    assert is_gone(pid)


@pytest.mark.timeout(20)
async def test_cancelling_a_run_while_its_interpreter_starts_leaves_no_process(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # A Python that announces itself, then never becomes ready: the cancel lands in start-up.
    announced = tmp_path / "announced"
    python = fake_python(tmp_path, f"touch {announced}\nexec sleep 60")
    runtime = await make_runtime(python=python, fork=False, pool_size=0, start_timeout=15)
    before = children_of_this_process()
    running = asyncio.create_task(runtime.run("1"))
    await wait_for_file(announced)
    started = children_of_this_process() - before
    assert started
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, 5)
    await runtime.aclose()
    for pid in started:
        assert is_gone(pid), f"the starting kernel {pid} was left running"


@pytest.mark.timeout(30)
async def test_a_broken_python_with_the_template_and_warm_pool_is_refused_and_leaves_nothing(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # The Runtime's defaults: the template and the warm pool start in the background under the
    # same broken Python. The run is still refused within the bound; closing ends them all.
    python = fake_python(tmp_path, "exec sleep 60")
    before = children_of_this_process()
    runtime = await make_runtime(python=python, start_timeout=1, pool_size=2)
    started = time.monotonic()
    result = await runtime.run("print('never')")
    assert time.monotonic() - started < 1 + 3
    assert result.status == "refused"
    assert "did not answer" in result.note
    assert await asyncio.wait_for(runtime.template_ready(), 5) is False
    assert runtime.template_failure is not None and "did not become ready" in (
        runtime.template_failure
    )
    await runtime.aclose()
    left = children_of_this_process() - before
    assert all(is_gone(pid) for pid in left), "a process of the broken Python was left running"


@pytest.mark.timeout(20)
async def test_a_closed_runtime_refuses_to_be_used_saying_so(make_runtime: MakeRuntime) -> None:
    from toolscript import RuntimeClosedError

    runtime = await make_runtime()
    await runtime.aclose()
    with pytest.raises(RuntimeClosedError, match="closed"):
        await runtime.run("1")


@pytest.mark.timeout(20)
async def test_a_runtime_not_started_says_how_to_start_it() -> None:
    from toolscript import RuntimeClosedError

    runtime = Runtime(journal=":memory:")
    with pytest.raises(RuntimeClosedError, match="async with"):
        await runtime.run("1")


@pytest.mark.timeout(30)
async def test_closing_a_shell_says_the_shell_was_closed_not_the_runtime(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = await make_runtime()
    started_file = tmp_path / "started"
    shell = runtime.shell("s")
    running = asyncio.ensure_future(
        shell.run(
            f"import pathlib, time\npathlib.Path({str(started_file)!r}).touch()\ntime.sleep(60)"
        )
    )
    await wait_for_file(started_file)
    await shell.close()
    result = await asyncio.wait_for(running, 10)
    assert result.status == "cancelled", result.text
    assert "the shell was closed" in result.note and "runtime" not in result.note, result.note
    assert "its variables are gone" in result.note
    assert (await runtime.shell("other").run("1")).value == "1"


@pytest.mark.timeout(20)
async def test_a_start_that_fails_leaves_no_journal_open(tmp_path: Path) -> None:
    """`async with` never reaches `__aexit__` when `start` raises, so `start` itself must
    close what it opened: the journal's connection and its intent files."""

    before = open_descriptors()
    for _ in range(3):
        with pytest.raises(Exception, match="neither"):
            async with Runtime(state_dir=tmp_path, mcp_config={"mcpServers": {"a": {}}}):
                pass
    assert open_descriptors() == before
    assert not list(tmp_path.glob("*.intents"))


@pytest.mark.timeout(30)
async def test_starting_from_two_tasks_at_once_starts_once_and_closes_everything(
    tmp_path: Path,
) -> None:
    # Each of two tasks that make sure the runtime is started awaits `start()`: a second
    # journal, sandbox or template made beside the first would outlive `aclose()`. A runtime
    # opened and closed first lets the event loop open what it opens once (uvloop's own).
    async with Runtime(state_dir=tmp_path / "first", pool_size=1, grace=0.5) as warm_up:
        await warm_up.run("1")
    before = open_descriptors()
    others = children_of_this_process()  # of other tests (a checker's type server, say)
    runtime = Runtime(state_dir=tmp_path, pool_size=1, grace=0.5)
    first, second = await asyncio.gather(runtime.start(), runtime.start())
    assert first is second is runtime
    assert (await runtime.run("1")).status == "ok"
    await runtime.aclose()
    await closed_all(others, before)
    assert not list(tmp_path.glob("*.intents"))


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def closed_all(others: set[int], descriptors: int) -> None:
    """Wait (bounded) until no process but `others` is a child of this one and the open
    descriptors are back to `descriptors`; fail saying which is not."""
    with contextlib.suppress(AssertionError):  # said below, with what is left
        await eventually(
            lambda: not children_of_this_process() - others and open_descriptors() == descriptors,
            5,
            "the runtime's processes and descriptors did not all close",
        )
    assert children_of_this_process() - others == set()
    assert open_descriptors() == descriptors


@pytest.mark.timeout(30)
async def test_an_aclose_made_while_another_closes_returns_once_all_is_closed(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    before = children_of_this_process()
    runtime = await make_runtime(pool_size=1)
    await runtime.run("1")
    began = tmp_path / "began"
    running = asyncio.ensure_future(
        runtime.run(
            f"open({str(began)!r}, 'w').close()\nimport time\ntime.sleep(30)", time_limit=40
        )
    )
    await wait_for_file(began)
    started = children_of_this_process() - before
    assert started
    first = asyncio.ensure_future(runtime.aclose())
    await asyncio.sleep(0)
    await asyncio.wait_for(runtime.aclose(), 20)
    assert first.done()
    assert all(is_gone(pid) for pid in started), "the second aclose returned before the close"
    assert (await running).status == "cancelled"


@pytest.mark.timeout(40)
async def test_an_aclose_made_while_the_runtime_starts_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    # `aclose` while `start` still connects a slow MCP server: the start must not go on to
    # make a template, a pool and a journal that nobody closes.
    import sys

    server = Path(__file__).parent.parent / "mcp_servers" / "demo_server.py"
    slow = {"command": "sh", "args": ["-c", f"sleep 1; exec {sys.executable} {server}"]}
    # A runtime with an MCP server opened and closed first lets the event loop open what it
    # opens once (uvloop's own); processes of other tests are not this one's.
    quick = {"command": sys.executable, "args": [str(server)]}
    async with Runtime(state_dir=tmp_path / "first", mcp_config={"mcpServers": {"s": quick}}):
        pass
    before = open_descriptors()
    others = children_of_this_process()
    runtime = Runtime(state_dir=tmp_path, pool_size=1, mcp_config={"mcpServers": {"s": slow}})
    starting = asyncio.ensure_future(runtime.start())
    await eventually(
        lambda: bool(children_of_this_process() - others), 10, "the MCP server did not start"
    )
    await runtime.aclose()
    with pytest.raises(Exception, match="closed"):
        await starting
    await closed_all(others, before)


SECOND_LOOP = """
import asyncio, sys
from toolscript import Runtime, RuntimeClosedError

runtime = Runtime(journal=":memory:", pool_size=0, sandbox=sys.argv[1])

async def first():
    await runtime.start()
    print("first:", (await runtime.run("1 + 1")).value, flush=True)

async def second():
    for use in (lambda: runtime.run("2"), runtime.start, runtime.aclose):
        try:
            await use()
        except RuntimeClosedError as error:
            print("refused:", error, flush=True)

asyncio.run(first())
asyncio.run(second())
"""


@pytest.mark.timeout(60)
def test_a_runtime_used_from_a_second_asyncio_run_says_it_belongs_to_the_first(
    tmp_path: Path,
) -> None:
    # Its locks, futures and pipes are the first loop's: asyncio's own error named no cause.
    # In a process of its own, which ends what the unclosed runtime left.
    done = subprocess.run(
        [sys.executable, "-c", SECOND_LOOP, SANDBOX],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=tmp_path,
        env={**os.environ, "TOOLSCRIPT_STATE": str(tmp_path / "state")},
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "first: 2", done.stdout + done.stderr
    assert len(lines) == 4, done.stdout + done.stderr
    for line in lines[1:]:
        assert "started on another event loop, which has ended" in line, line


def test_every_public_name_resolves_and_the_start_errors_are_exceptions() -> None:
    import toolscript

    for name in toolscript.__all__:
        assert getattr(toolscript, name) is not None, name
    for name in ("JournalFileError", "JournalVersionError", "KeeperError", "MCPConfigError"):
        assert issubclass(getattr(toolscript, name), Exception), name
    assert issubclass(toolscript.JournalOpenError, toolscript.JournalFileError)
    assert issubclass(toolscript.SandboxError, Exception)


@pytest.mark.timeout(30)
async def test_a_runtime_that_cannot_start_raises_the_public_error_saying_why(
    tmp_path: Path,
) -> None:
    import toolscript

    not_a_journal = tmp_path / "journal.db"
    not_a_journal.write_text("hello")
    with pytest.raises(toolscript.JournalFileError, match="is not a toolscript journal"):
        await Runtime(journal=not_a_journal, pool_size=0).start()
    with pytest.raises(toolscript.JournalOpenError, match="it is a folder"):
        await Runtime(journal=tmp_path, pool_size=0).start()
    bad_config = {"mcpServers": {"notes": {"args": []}}}
    with pytest.raises(toolscript.MCPConfigError, match="'notes'"):
        await Runtime(mcp_config=bad_config, journal=":memory:", pool_size=0).start()
