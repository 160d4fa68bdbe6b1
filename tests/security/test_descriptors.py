"""A script that closes or overwrites descriptors cannot make the kernel lie or hang.

The kernel's own descriptors (its channel to the host, its event loop's epoll and wake-up
pair) sit just under the open-files limit and are checked when a script ends. A script that
breaks one is reported as having crashed the interpreter, naming the descriptor, and the next
run starts on a fresh interpreter with a note that says why. Every run here has a time limit
of 20 s: a next run that came back `ok` did not wait for it.
"""

from __future__ import annotations

import ast
import asyncio
import os
from pathlib import Path

import pytest

from tests.conftest import MakeRuntime, eventually
from toolscript import Runtime

KINDS = pytest.mark.parametrize("fork", [True, False], ids=["forked", "spawned"])
"""Every case runs on an interpreter forked from the template and on one spawned afresh."""

TIME_LIMIT = 20.0

EPOLL = (
    "import os\n"
    "epoll = max(\n"
    "    int(name) for name in os.listdir('/proc/self/fd')\n"
    "    if os.path.exists(f'/proc/self/fd/{name}')\n"
    "    and 'eventpoll' in os.readlink(f'/proc/self/fd/{name}')\n"
    ")\n"
)
"""Script lines that find the kernel's epoll (the highest-numbered one) and call it `epoll`."""


async def started(make_runtime: MakeRuntime, fork: bool, **knobs: object) -> Runtime:
    """A runtime of the kind asked for, whose default shell has run a script and kept `kept`."""
    runtime = await make_runtime(fork=fork, **knobs)
    assert await asyncio.wait_for(runtime.template_ready(), 20) is fork
    first = await runtime.run("kept = 1")
    assert first.status == "ok", first.text
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None and interpreter.forked is fork
    return runtime


async def assert_the_next_run_is_fresh(runtime: Runtime, hostile_generation: int) -> None:
    after = await runtime.run("'kept' in globals()", time_limit=TIME_LIMIT)
    assert after.status == "ok", after.text
    assert after.value == "False"
    assert after.generation == hostile_generation + 1
    assert "fresh interpreter" in after.note and "own descriptors" in after.note, after.note


def assert_crashed_by_its_descriptors(result_text: str, status: str, note: str) -> None:
    assert status == "crashed", result_text
    assert "own descriptors were closed or replaced" in note, note
    assert "state" in note or "variables" in note, note


@pytest.mark.timeout(30)
@KINDS
async def test_a_script_that_closes_every_descriptor_above_stderr_crashes_it_saying_so(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    runtime = await started(make_runtime, fork)
    result = await runtime.run("import os\nos.closerange(3, 1024)\n'closed'", time_limit=TIME_LIMIT)
    assert_crashed_by_its_descriptors(result.text, result.status, result.note)
    await assert_the_next_run_is_fresh(runtime, result.generation)


@pytest.mark.timeout(30)
@KINDS
async def test_a_script_that_closes_every_descriptor_up_to_the_open_files_limit_crashes_it(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    runtime = await started(make_runtime, fork, limits={"open_files": 256})
    result = await runtime.run(
        "import os, resource\n"
        "limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]\n"
        "os.closerange(3, limit)\n"
        "limit",
        time_limit=TIME_LIMIT,
    )
    assert_crashed_by_its_descriptors(result.text, result.status, result.note)
    await assert_the_next_run_is_fresh(runtime, result.generation)


@pytest.mark.timeout(30)
@KINDS
async def test_a_script_that_dup2s_a_file_over_every_descriptor_crashes_it_saying_so(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    runtime = await started(make_runtime, fork)
    result = await runtime.run(
        "import os\n"
        "null = os.open(os.devnull, os.O_RDONLY)\n"
        "for n in range(3, 1024):\n"
        "    if n != null:\n"
        "        os.dup2(null, n)\n"
        "'overwritten'",
        time_limit=TIME_LIMIT,
    )
    assert_crashed_by_its_descriptors(result.text, result.status, result.note)
    await assert_the_next_run_is_fresh(runtime, result.generation)


@pytest.mark.timeout(30)
@KINDS
async def test_a_script_that_closes_only_the_epoll_is_not_ok_and_the_next_run_does_not_hang(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    # The case that was reported `ok`, after which the next run waited out its time limit.
    runtime = await started(make_runtime, fork)
    result = await runtime.run(EPOLL + "os.close(epoll)\n'closed'", time_limit=TIME_LIMIT)
    assert_crashed_by_its_descriptors(result.text, result.status, result.note)
    assert "the event loop's selector" in result.note and "was closed" in result.note
    assert result.value == "'closed'" and result.error is None  # its own code did finish
    await assert_the_next_run_is_fresh(runtime, result.generation)


@pytest.mark.timeout(30)
@KINDS
async def test_a_script_that_closes_the_epoll_and_then_awaits_is_ended_saying_so(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    # Its loop fails under it before its code can end: the kernel notices that, not the end.
    runtime = await started(make_runtime, fork)
    result = await runtime.run(
        "import asyncio\n" + EPOLL + "os.close(epoll)\nawait asyncio.sleep(0.01)\n'after'",
        time_limit=TIME_LIMIT,
    )
    assert_crashed_by_its_descriptors(result.text, result.status, result.note)
    assert result.value is None
    await assert_the_next_run_is_fresh(runtime, result.generation)


@pytest.mark.timeout(30)
@KINDS
async def test_a_script_that_puts_another_epoll_in_place_of_the_kernels_is_caught(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    # Every epoll has the same inode: only what it holds tells the kernel's from another.
    runtime = await started(make_runtime, fork)
    result = await runtime.run(
        EPOLL + "import select\nother = select.epoll()\nos.dup2(other.fileno(), epoll)\n'swapped'",
        time_limit=TIME_LIMIT,
    )
    assert_crashed_by_its_descriptors(result.text, result.status, result.note)
    assert "replaced by another one of its kind" in result.note
    await assert_the_next_run_is_fresh(runtime, result.generation)


@pytest.mark.timeout(30)
@KINDS
async def test_a_thread_that_closes_the_epoll_between_two_scripts_does_not_blame_the_next(
    make_runtime: MakeRuntime, fork: bool, tmp_path: Path
) -> None:
    runtime = await started(make_runtime, fork, mounts={tmp_path: "rw"})
    go = tmp_path / "go"
    os.mkfifo(go)
    armed = await runtime.run(
        EPOLL + "import pathlib, threading\n"
        "def close():\n"
        f"    pathlib.Path({str(go)!r}).read_bytes()  # until the host says go\n"
        "    os.close(epoll)\n"
        "threading.Thread(target=close).start()\n"
        "epoll",
        time_limit=TIME_LIMIT,
    )
    assert armed.status == "ok", armed.text
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None
    kernel = interpreter.kernel_pid()  # in a sandbox, the init's child
    assert kernel is not None
    epoll = Path(f"/proc/{kernel}/fd/{armed.value}")
    assert epoll.exists()
    # The script has ended, its thread lives on: now it closes the epoll.
    os.close(os.open(go, os.O_WRONLY))
    # Closed (or the kernel, seeing it, exited).
    await eventually(lambda: not epoll.exists(), 10.0, "the epoll was never closed")
    # The innocent script never began on the broken interpreter: it runs on a fresh one.
    after = await runtime.run("'kept' in globals()", time_limit=TIME_LIMIT)
    assert after.status == "ok", after.text
    assert after.value == "False"
    assert after.generation == armed.generation + 1
    assert "fresh interpreter" in after.note and "own descriptors" in after.note, after.note


@pytest.mark.timeout(30)
@KINDS
async def test_a_script_that_closes_the_low_descriptors_leaves_the_interpreter_whole(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    # The kernel's descriptors sit just under the open-files limit (1024), out of the way of
    # a script that tidies up the numbers its own files get.
    runtime = await started(make_runtime, fork)
    result = await runtime.run("import os\nos.closerange(3, 1000)\n'tidied'", time_limit=TIME_LIMIT)
    assert result.status == "ok" and result.value == "'tidied'", result.text
    after = await runtime.run("'kept' in globals()", time_limit=TIME_LIMIT)
    assert after.status == "ok" and after.value == "True", after.text
    assert after.generation == result.generation


@pytest.mark.timeout(30)
@KINDS
async def test_the_interpreters_own_descriptors_are_the_six_at_the_top(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    # Its channel, its epoll and its loop's wake-up pair, just under the open-files limit
    # (1024), and below them the copies of its stdout and stderr pipes; further down,
    # nothing but stdin, stdout and stderr that a script could mistake for the channel.
    runtime = await started(make_runtime, fork)
    result = await runtime.run(
        "import os\n"
        "held = []\n"
        "for name in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        held.append((int(name), os.readlink(f'/proc/self/fd/{name}').split(':')[0]))\n"
        "    except OSError:\n"
        "        pass  # the listing's own descriptor\n"
        "sorted(held)"
    )
    held = dict(ast.literal_eval(result.value or "[]"))
    top = sorted(held[fd] for fd in held if fd >= 1020)
    assert top == ["anon_inode", "socket", "socket", "socket"], held
    assert [held[fd] for fd in (1018, 1019)] == ["pipe", "pipe"], held
    assert [fd for fd in held if 2 < fd < 1018 and held[fd] in ("socket", "pipe")] == [], held


@pytest.mark.timeout(30)
@KINDS
@pytest.mark.parametrize(
    "attack",
    [
        "os.close(1)\nos.close(2)",
        "null = os.open('/dev/null', os.O_WRONLY)\nos.dup2(null, 1)\nos.dup2(null, 2)",
    ],
    ids=["closes-stdout-and-stderr", "puts-dev-null-over-them"],
)
async def test_a_script_that_closes_or_replaces_fd_1_and_2_loses_only_its_own_output(
    make_runtime: MakeRuntime, fork: bool, attack: str
) -> None:
    runtime = await started(make_runtime, fork)
    hostile = await runtime.run(
        f"import os, sys\nprint('before', flush=True)\n{attack}\n'done'",
        time_limit=TIME_LIMIT,
    )
    assert hostile.status == "ok" and hostile.value == "'done'", hostile.text
    assert hostile.stdout == "before\n"
    after = await runtime.run("print('hello')\nimport sys\nprint('err', file=sys.stderr)\nkept")
    assert after.status == "ok", after.text
    assert (after.stdout, after.stderr, after.value) == ("hello\n", "err\n", "1")
    assert after.generation == hostile.generation
