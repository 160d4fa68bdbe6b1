"""Hostile scripts: garbage on the protocol channel, huge or deep arguments. The host stays up."""

from __future__ import annotations

import asyncio
import json
import struct
import time

import pytest

from tests.conftest import FIND_CHANNEL, MakeRuntime
from toolscript import Runtime
from toolscript.tools.python import tool


@tool
async def measure(data: object) -> int:
    """How long the data is, as JSON."""
    return len(json.dumps(data))


def frame(message: object) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def writes_to_the_channel(payload: bytes) -> str:
    """A script that finds the kernel's protocol socket and writes `payload` to it."""
    return FIND_CHANNEL + f"import time\nos.write(channel(), {payload!r})\ntime.sleep(30)\n"


HOSTILE_PAYLOADS = {
    "text that is no frame": b"hello, host! this is not a frame at all\n" * 10,
    "a frame that claims 4 GB": b"\xff\xff\xff\xff",
    "a frame over the size bound": struct.pack(">I", 65 * 1024 * 1024) + b"{}",
    "a body that is not JSON": struct.pack(">I", 5) + b"hello",
    "the start of a frame that is not an object": struct.pack(">I", 1000) + b"not json",
    "a JSON array": frame([1, 2, 3]),
    "deeply nested JSON": struct.pack(">I", 200_000) + b"[" * 200_000,
    "an unknown kind": frame({"t": "surprise"}),
    "no kind at all": frame({"x": 1}),
    "a done for another script": frame({"t": "done", "script": "someone-else", "status": "ok"}),
    "a call without a number": frame({"t": "call", "tool": "measure", "args": {}}),
    "a call whose args are a list": frame({"t": "call", "n": 99, "tool": "measure", "args": []}),
    "an ack that is a number": frame({"t": "ack", "acks": 5}),
    "an ack of an unknown kind": frame({"t": "call", "n": 78, "tool": "nothing", "args": {}})
    + frame({"t": "ack", "acks": [[78, "maybe"]]}),
    "a call then a truncated ack for it": frame(
        {"t": "call", "n": 77, "tool": "nothing", "args": {}}
    )
    + frame({"t": "ack", "acks": [[77]]}),
    "an ack with an unhashable number": frame({"t": "ack", "acks": [[[1], "seen"]]}),
    "a call carrying acks that are a number": frame(
        {"t": "call", "n": 76, "tool": "measure", "args": {}, "acks": 5}
    ),
    "a call carrying an ack of an unknown kind for the call before it": frame(
        {"t": "call", "n": 74, "tool": "nothing", "args": {}}
    )
    + frame({"t": "call", "n": 75, "tool": "nothing", "args": {}, "acks": [[74, "maybe"]]}),
    "a seen list that is a number": frame({"t": "ack", "seen": 5}),
    "a seen list holding a list": frame({"t": "ack", "seen": [[1]]}),
    "a seen list holding a string": frame({"t": "ack", "seen": ["1"]}),
    "a seen list that is a string": frame({"t": "ack", "seen": "12"}),
    "a seen list holding a boolean": frame({"t": "ack", "seen": [True]}),
    "a call carrying a seen list of strings": frame(
        {"t": "call", "n": 73, "tool": "measure", "args": {}, "seen": ["x"]}
    ),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("payload", HOSTILE_PAYLOADS.values(), ids=HOSTILE_PAYLOADS.keys())
async def test_garbage_on_the_protocol_channel_crashes_only_that_interpreter(
    make_runtime: MakeRuntime, payload: bytes
) -> None:
    runtime = await make_runtime(tools=[measure])
    other = runtime.shell("other")
    await other.run("mine = 'still here'")
    await runtime.run("kept = 1")
    started = time.monotonic()
    result = await runtime.run(writes_to_the_channel(payload), time_limit=10)
    assert time.monotonic() - started < 5
    assert result.status == "crashed", result.text
    assert "broke the protocol" in result.note and "state is gone" in result.note
    assert "closed its channel" not in result.note  # the frame itself was the fault
    after = await runtime.run("'kept' in globals()")
    assert after.status == "ok" and after.value == "False"
    assert after.generation == result.generation + 1
    assert "fresh interpreter" in after.note
    assert (await other.run("mine")).value == "'still here'"


@pytest.mark.timeout(20)
@pytest.mark.parametrize("part", [b"\x00\x01", b"\x00\x00\x10"], ids=["2 bytes", "3 bytes"])
async def test_a_partial_header_on_the_channel_is_a_protocol_fault_at_once_not_a_slow_stop(
    make_runtime: MakeRuntime, part: bytes
) -> None:
    # The script's own frames follow the part it wrote, and read as the rest of a frame whose
    # body does not begin as a JSON object: the host need not wait for its announced length.
    runtime = await make_runtime()
    code = FIND_CHANNEL + f"os.write(channel(), {part!r})\n"
    started = time.monotonic()
    result = await runtime.run(code, time_limit=10)
    assert time.monotonic() - started < 5, result.text
    assert result.status == "crashed", result.text
    assert "broke the protocol" in result.note, result.note
    after = await runtime.run("1 + 1")
    assert after.value == "2" and "fresh interpreter" in after.note


@pytest.mark.timeout(20)
async def test_a_script_that_closes_the_protocol_channel_is_reported_and_replaced(
    runtime: Runtime,
) -> None:
    code = writes_to_the_channel(b"").replace("os.write(channel(), b'')", "os.close(channel())")
    result = await runtime.run(code, time_limit=10)
    assert result.status == "crashed", result.text
    after = await runtime.run("1 + 1")
    assert after.value == "2" and "fresh interpreter" in after.note


@pytest.mark.timeout(30)
async def test_a_fifty_megabyte_argument_reaches_the_tool_and_the_host_stays_up(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(tools=[measure])
    result = await runtime.run("await measure(data='x' * 50_000_000)", time_limit=20)
    assert result.status == "ok", result.text
    assert result.value == str(50_000_002)
    assert result.calls.made == 1
    assert (await runtime.run("1 + 1")).value == "2"


@pytest.mark.timeout(30)
async def test_an_argument_nested_a_hundred_thousand_deep_is_refused_not_fatal(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(tools=[measure])
    result = await runtime.run(
        "deep = []\n"
        "for _ in range(100_000):\n"
        "    deep = [deep]\n"
        "try:\n"
        "    await measure(data=deep)\n"
        "except ToolError as error:\n"
        "    print('refused:', error)\n",
        time_limit=20,
    )
    assert result.status == "ok", result.text
    assert "refused:" in result.stdout
    assert result.calls.by_fate.get("refused") == 1
    assert (await runtime.run("await measure(data=[1, [2, [3]]])")).value == "13"


@pytest.mark.timeout(30)
async def test_hostile_channels_in_many_shells_at_once_leave_a_clean_shell_working(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime()
    clean = runtime.shell("clean")
    hostile = [
        runtime.shell(f"hostile-{n}").run(writes_to_the_channel(payload), time_limit=10)
        for n, payload in enumerate(HOSTILE_PAYLOADS.values())
        if n < 4
    ]
    results = await asyncio.gather(*hostile, clean.run("sum(range(10))"))
    assert all(result.status == "crashed" for result in results[:-1])
    assert results[-1].value == "45"
