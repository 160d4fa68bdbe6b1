"""The host checks what the kernel claims against what it knows (DESIGN §6).

A script shares its kernel's process, so it can write any frame to the channel. A frame that
contradicts the host (an answer seen that the host never gave, a call out of its turn, a
`done` for another script, or one sent while the script's code runs on) is a protocol
violation: the interpreter is replaced, the result and the journal say so, and no fate is
taken from the forged frame.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.conftest import GRACE, MakeRuntime, eventually, is_gone
from toolscript import Runtime
from toolscript.host.journal import JournalScript
from toolscript.tools.python import tool

from .conftest import forging


@tool
async def echo(value: int) -> int:
    """Give `value` back."""
    return value


def violation_of(runtime: Runtime, script_id: str) -> str | None:
    scripts: list[JournalScript] = runtime.journal.scripts()
    return next(script.violation for script in scripts if script.script_id == script_id)


def forging_a_call(number: str, carried: str = "") -> str:
    """A script that calls `echo` once, then writes a call frame of its own: numbered `number`
    (Python source, in terms of `due`, the number the kernel would give next), with the frame
    fields `carried` (Python source, after a comma) besides its own."""
    return forging(
        "await echo(value=1)\n"
        "due = int(repr(kernel.calls._numbers)[len('count('):-1])\n"
        f"forge({{'t': 'call', 'n': {number}, 'tool': 'echo', 'args': {{'value': 2}},\n"
        f"       'script': kernel._script.id{carried}}})\n"
        "await asyncio.sleep(5)\n"
    )


async def kernel_of(runtime: Runtime) -> int:
    """The host's pid of the default shell's kernel (in a sandbox, not the one it sees)."""
    assert (await runtime.run("0")).status == "ok"
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None
    pid = interpreter.kernel_pid()
    assert pid is not None
    return pid


@pytest.mark.timeout(30)
async def test_a_forged_seen_for_an_unanswered_call_is_a_violation_and_leaves_it_uncertain(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    entered = tmp_path / "entered"
    release = asyncio.Event()

    @tool
    async def hold() -> str:
        """Wait until the test lets go."""
        entered.touch()
        await release.wait()
        return "let go"

    runtime = await make_runtime(tools=[hold])
    code = forging(
        "call = asyncio.ensure_future(hold())\n"
        f"while not os.path.exists({str(entered)!r}):\n"
        "    await asyncio.sleep(0.005)\n"
        "forge({'t': 'ack', 'seen': [max(kernel.calls._waiting)]})\n"
        "await asyncio.sleep(5)\n"
    )
    try:
        result = await runtime.run(code, time_limit=10)
    finally:
        release.set()
    assert result.status == "crashed", result.text
    assert "broke the protocol" in result.note and "had not answered" in result.note
    (record,) = result.calls.records
    assert record.tool == "hold" and record.fate == "pending"
    assert [call.call_id for call in runtime.journal.uncertain()] == [record.id]
    assert "had not answered" in (violation_of(runtime, result.script_id) or "")
    after = await runtime.run("1 + 1")
    assert after.value == "2" and after.generation == result.generation + 1
    assert "fresh interpreter" in after.note


@pytest.mark.timeout(30)
@pytest.mark.parametrize("offset", [1, -1], ids=["a number skipped", "a number used again"])
async def test_a_call_out_of_its_turn_is_a_violation(
    make_runtime: MakeRuntime, offset: int
) -> None:
    runtime = await make_runtime(tools=[echo])
    code = forging_a_call(f"due + {offset}")
    result = await runtime.run(code, time_limit=10)
    assert result.status == "crashed", result.text
    assert "broke the protocol" in result.note and "where call 2 was due" in result.note
    assert result.calls.made == 1  # the forged call was neither counted nor dispatched
    assert "where call 2 was due" in (violation_of(runtime, result.script_id) or "")
    assert (await runtime.run("1 + 1")).generation == result.generation + 1


@pytest.mark.timeout(30)
async def test_a_call_frame_that_says_its_own_answer_was_seen_is_a_violation(
    make_runtime: MakeRuntime,
) -> None:
    # The host takes a frame's acknowledgements after it dispatched the frame's call, and
    # `echo` answers at once: by then the claim would match what the host did. It still
    # could not have been true when the kernel wrote it.
    runtime = await make_runtime(tools=[echo])
    code = forging_a_call("due", ", 'seen': [due]")
    result = await runtime.run(code, time_limit=10)
    assert result.status == "crashed", result.text
    assert "broke the protocol" in result.note
    assert "can only acknowledge calls made before its own" in result.note
    assert result.calls.made == 2
    forged = result.calls.records[1]
    assert forged.fate == "late"  # answered, and the claim that it was seen not taken
    assert "on the frame of call 2" in (violation_of(runtime, result.script_id) or "")
    assert (await runtime.run("1 + 1")).generation == result.generation + 1


@pytest.mark.timeout(30)
async def test_a_forged_claim_on_a_call_out_of_its_turn_cannot_hide_the_fault(
    make_runtime: MakeRuntime,
) -> None:
    # The claims a read's call frames carry are taken after its calls are dispatched, and
    # still when a frame breaks the protocol; a false claim among them must not become the
    # reason the run is said to have ended for.
    runtime = await make_runtime(tools=[echo])
    code = forging_a_call("due + 1", ", 'seen': [due + 5]")
    result = await runtime.run(code, time_limit=10)
    assert result.status == "crashed", result.text
    assert "where call 2 was due" in result.note
    assert "can only acknowledge" not in result.note
    assert result.calls.made == 1
    assert "where call 2 was due" in (violation_of(runtime, result.script_id) or "")


@pytest.mark.timeout(30)
async def test_a_done_for_another_script_is_a_violation(runtime_with_echo: Runtime) -> None:
    runtime = runtime_with_echo
    code = forging(
        "forge({'t': 'done', 'script': 'someone-else', 'status': 'ok'})\ntime.sleep(30)\n"
    )
    started = time.monotonic()
    result = await runtime.run(code, time_limit=10)
    assert time.monotonic() - started < 5
    assert result.status == "crashed", result.text
    assert "a 'done' came for script someone-else" in result.note
    assert "someone-else" in (violation_of(runtime, result.script_id) or "")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("again", [False, True], ids=["done", "said_again"])
async def test_a_forged_done_buys_no_time_for_code_that_goes_on_running(
    make_runtime: MakeRuntime, tmp_path: Path, again: bool
) -> None:
    runtime = await make_runtime(mounts={tmp_path: "rw"})
    pid = await kernel_of(runtime)
    beat = tmp_path / "beat"
    # The forged `done` says all a real one can (nothing left running, output all read), so
    # the run returns at once; the loop never yields to the kernel again.
    # Said "again", as a kernel says its last `done` to a host that took it back from a
    # keeper: checked all the same.
    code = forging(
        "forge({'t': 'done', 'script': kernel._script.id, 'status': 'ok', 'quiet': True,\n"
        f"       'drained': True, 'never_awaited': [], 'again': {again}}})\n"
        "while True:\n"
        f"    open({str(beat)!r}, 'w').write(str(time.monotonic()))\n"
        "    time.sleep(0.01)\n"
    )
    limit = 1.0
    started = time.monotonic()
    result = await runtime.run(code, time_limit=limit)
    await eventually(
        lambda: is_gone(pid),
        started + limit + GRACE + 1.0 - time.monotonic(),
        f"the interpreter {pid} still ran",
    )
    assert beat.exists()  # it did run on after its forged `done`, until it was killed
    assert "did not confirm that its code had stopped" in (
        violation_of(runtime, result.script_id) or ""
    )
    after = await runtime.run("1 + 1")
    assert after.value == "2" and after.generation == result.generation + 1
    if result.status == "ok":  # it returned before the forgery was found: the next run says
        assert "broke the protocol" in after.note and "forged" in after.note
    else:
        assert result.status == "crashed" and "forged" in result.note


@pytest.mark.timeout(30)
async def test_a_forged_done_from_code_that_goes_on_awaiting_is_found_at_once(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = await make_runtime()
    pid = await kernel_of(runtime)
    code = forging(
        "forge({'t': 'done', 'script': kernel._script.id, 'status': 'ok', 'quiet': True,\n"
        "       'drained': True, 'never_awaited': []})\n"
        "while True:\n"
        "    await asyncio.sleep(0.01)\n"
    )
    started = time.monotonic()
    result = await runtime.run(code, time_limit=10)
    # Long before its time limit of 10 s.
    await eventually(
        lambda: is_gone(pid), started + 3.0 - time.monotonic(), f"the interpreter {pid} still ran"
    )
    assert "still running" in (violation_of(runtime, result.script_id) or "")
    after = await runtime.run("1 + 1")
    assert after.value == "2" and after.generation == result.generation + 1


@pytest.mark.timeout(30)
async def test_a_forged_done_as_the_last_statement_is_a_violation_when_the_real_one_comes(
    make_runtime: MakeRuntime,
) -> None:
    # The kernel's own `done` follows at once, in the same read or the next: two for one
    # script, so one was forged. Its value and error, 3 MB each, are not kept whole.
    runtime = await make_runtime()
    pid = await kernel_of(runtime)
    code = forging(
        "import select\n"
        "message = {'t': 'done', 'script': kernel._script.id, 'status': 'ok', 'quiet': True,\n"
        "           'drained': True, 'never_awaited': [], 'value': 'v' * 3_000_000,\n"
        "           'error': 'e' * 3_000_000}\n"
        "body = json.dumps(message).encode()\n"
        "left = memoryview(struct.pack('>I', len(body)) + body)\n"
        "while left:  # the channel does not block: written whole, not cut short\n"
        "    select.select([], [channel()], [])\n"
        "    left = left[os.write(channel(), left):]\n"
    )
    result = await runtime.run(code, time_limit=10)
    assert len(result.value or "") < 1_001_000 and len(result.error or "") < 1_001_000
    await eventually(lambda: is_gone(pid), 5.0, f"the interpreter {pid} still ran")
    assert "a second 'done' came" in (violation_of(runtime, result.script_id) or "")
    after = await runtime.run("1 + 1")
    assert after.value == "2" and after.generation == result.generation + 1
    assert result.status == "crashed" or "broke the protocol" in after.note


@pytest.mark.timeout(30)
async def test_a_frame_cut_short_by_the_script_is_named_when_the_interpreter_is_killed(
    make_runtime: MakeRuntime,
) -> None:
    # The script announces a frame of 4,096 bytes and writes 4: everything the kernel says
    # after (its `done` too) is read as the rest of that frame, so the host hears nothing,
    # stops the script at its limit and kills it after the grace. The note must not say
    # only that the script ignored the interrupt.
    runtime = await make_runtime()
    code = forging("os.write(channel(), struct.pack('>I', 4096) + b'{\"t\"')\n'ended'\n")
    result = await runtime.run(code, time_limit=1.0)
    assert result.status == "time_limit", result.text
    assert "held the start of a frame" in result.note, result.note
    after = await runtime.run("1 + 1")
    assert after.value == "2" and after.generation == result.generation + 1


@pytest.fixture
async def runtime_with_echo(make_runtime: MakeRuntime) -> Runtime:
    return await make_runtime(tools=[echo])


@pytest.mark.timeout(30)
async def test_a_stop_caught_inside_a_calls_send_says_its_acknowledgements_once_to_the_host(
    make_runtime: MakeRuntime,
) -> None:
    # The stop sends the acknowledgements still waiting (`seen` of echo(value=1)). Caught in
    # the script's own code that the kernel runs while it builds the next call's frame (a
    # dict's `items`), the call goes on, and its frame may carry them again: no violation,
    # no fate changed, and the interpreter is kept.
    runtime = await make_runtime(tools=[echo], grace=5)
    code = (
        "import time\n"
        "class Slow(dict):\n"
        "    def items(self):\n"
        "        try:\n"
        "            time.sleep(10)\n"
        "        except KeyboardInterrupt:\n"
        "            print('caught', flush=True)\n"
        "        return super().items()\n"
        "await echo(value=1)\n"
        "await echo(value=Slow(a=1))\n"
    )
    result = await runtime.run(code, time_limit=1)
    assert result.status == "time_limit", result.text
    assert "caught" in result.stdout, result.text  # the stop landed inside the call's send
    assert violation_of(runtime, str(result.script_id)) is None
    first = result.calls.records[0]
    assert (first.args_brief, first.fate) == ("value=1", "seen")
    after = await runtime.run("'kept'")
    assert (after.status, after.generation) == ("ok", result.generation), after.text
