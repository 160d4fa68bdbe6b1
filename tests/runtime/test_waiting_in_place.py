"""A call awaited alone waits in the kernel's selector itself (`Kernel.wait_here`), not in a
pass of the event loop; whatever else the loop has to do still happens while it waits.

Each script below awaits a call whose answer the host holds until another part of the same
script has run: a timer, a thread, another descriptor. If the call's wait kept the loop from
seeing that part, the answer would never come, and the test would fail at its timeout.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime, tool


def _held_tools() -> list[object]:
    released = asyncio.Event()

    @tool
    async def held() -> str:
        """Answer once `release` was called."""
        await released.wait()
        return "released"

    @tool
    async def release() -> None:
        """Let `held` answer."""
        released.set()

    @tool
    async def noop(x: int) -> int:
        """Return x."""
        return x

    @tool
    async def size(text: str) -> int:
        """The length of text."""
        return len(text)

    return [held, release, noop, size]


@pytest.fixture
async def runtime(make_runtime: MakeRuntime) -> Runtime:
    return await make_runtime(tools=_held_tools())


# `later()` starts first and is parked on what it waits for (`await asyncio.sleep(0)` lets
# it run its first step) before `held()` is called, so nothing is ready when the call waits.
_AROUND = (
    "import asyncio, socket, threading, time\n"
    "loop = asyncio.get_running_loop()\n"
    "{setup}"
    "async def later():\n"
    "    {wait}\n"
    "    await release()\n"
    "task = asyncio.create_task(later())\n"
    "await asyncio.sleep(0)\n"
    "answer = await held()\n"
    "await task\n"
    "answer\n"
)


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("setup", "wait"),
    [
        pytest.param("", "await asyncio.sleep(0.05)", id="a timer"),
        pytest.param("", "await loop.run_in_executor(None, time.sleep, 0.05)", id="a thread"),
        pytest.param(
            "r, w = socket.socketpair()\n"
            "got = loop.create_future()\n"
            "loop.add_reader(r.fileno(), lambda: got.done() or got.set_result(r.recv(1)))\n"
            "threading.Timer(0.05, w.send, (b'x',)).start()\n",
            "await got",
            id="another descriptor",
        ),
    ],
)
async def test_what_the_loop_has_to_do_happens_while_a_call_waits(
    runtime: Runtime, setup: str, wait: str
) -> None:
    result = await runtime.run(_AROUND.format(setup=setup, wait=wait))
    assert result.status == "ok", result.text
    assert result.value == "'released'"
    assert result.calls.by_fate == {"seen": 2}


@pytest.mark.timeout(30)
async def test_a_call_too_large_for_one_write_is_written_whole_while_it_waits(
    runtime: Runtime,
) -> None:
    # The socket takes part of the frame; the loop writes the rest as the host reads it.
    result = await runtime.run("await size(text='x' * 20_000_000)")
    assert result.status == "ok", result.text
    assert result.value == "20000000"


@pytest.mark.timeout(20)
async def test_a_script_calling_one_call_after_another_stops_at_its_time_limit(
    runtime: Runtime,
) -> None:
    # Every call waits in place; the stop still reaches the script at one of them, or between
    # them, and it ends without being killed.
    code = "n = 0\nwhile True:\n    await noop(x=n)\n    n += 1\n"
    result = await runtime.run(code, time_limit=0.5)
    assert result.status == "time_limit", result.text
    assert "killed" not in result.note, result.note
    calls = result.calls
    assert calls.made > 10
    unseen = calls.made - calls.by_fate.get("seen", 0)
    assert unseen <= 1, calls.by_fate
    if unseen:  # the last call (the report lists only the first 1,000: the journal has all)
        [last] = runtime.journal.calls(script_id=result.script_id, limit=1)
        # The stop can land before the answer (pending), after it reached the kernel but
        # before the script resumed to read it (unread), or after the host answered but
        # before the answer reached the kernel (late). Each is said as what happened.
        assert (last.fate, last.cause) in {
            ("pending", "stopped"),
            ("unread", "stopped"),
            ("late", "stopped"),
        }, last
        assert (last.fate == "pending") == (last.answer_brief is None), last
    after = await runtime.run("await noop(x=7)")
    assert after.status == "ok" and after.value == "7", after.text


@pytest.mark.timeout(30)
async def test_a_script_that_closes_the_selector_under_a_waiting_call_ends_and_is_replaced(
    runtime: Runtime,
) -> None:
    # Hostile: a thread closes the loop's epoll while the call waits in it, and nothing will
    # ever answer the call. The time limit's stop finds the kernel's descriptor broken, and
    # the run ends saying so; the call stays pending; the next run has a new interpreter.
    code = (
        "import asyncio, os, threading\n"
        "fd = asyncio.get_running_loop()._selector._selector.fileno()\n"
        "threading.Timer(0.1, os.close, (fd,)).start()\n"
        "await held()\n"
    )
    result = await runtime.run(code, time_limit=0.5)
    assert result.status == "crashed", result.text
    assert "(the event loop's selector) was closed" in result.text
    [record] = result.calls.records
    assert (record.tool, record.fate, record.cause) == ("held", "pending", "interpreter_gone")
    after = await runtime.run("await noop(x=3)")
    assert after.status == "ok" and after.value == "3", after.text
    assert after.generation != result.generation


@tool
async def slow(x: int) -> int:
    """Return x after a tenth of a second: longer than the kernel's busy polling."""
    await asyncio.sleep(0.1)
    return x


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "code",
    [
        pytest.param("await slow(x=1, timeout=3_000_000)", id="a call's timeout of 35 days"),
        pytest.param("await slow(x=1, timeout=float('inf'))", id="a call's timeout of inf"),
        pytest.param(
            "import asyncio\nasyncio.get_running_loop().call_later(3e6, print)\nawait slow(x=1)",
            id="a timer of the script's 35 days away",
        ),
    ],
)
async def test_a_call_waits_in_place_however_far_off_the_next_timer_is(
    make_runtime: MakeRuntime, code: str
) -> None:
    # The wait in the selector is bounded as the loop's own is: a timer days away must not
    # overflow the selector's timeout and leave the call unread.
    runtime = await make_runtime(tools=[slow])
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.value == "1"
    assert result.calls.by_fate == {"seen": 1}
