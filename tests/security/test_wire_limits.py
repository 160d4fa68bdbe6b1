"""What the wire cannot carry is an error the script can handle, and what it carries is exact.

- An answer over the channel's frame bound (`wire.MAX_FRAME`, 64 MiB) is a `ToolError` in the
  script; the interpreter is kept. So is a call whose arguments are over it, or hold more
  lists and dicts than `wire.MAX_CONTAINERS`; the host refuses a frame that does, forged.
- Integers of any size reach a tool, and come back from it, as the same integer.
- NaN and the infinities are kept both ways (JSON as Python's `json` writes it), never turned
  into None.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.conftest import MakeRuntime, eventually
from toolscript.host import channel as host_channel
from toolscript.host import codec
from toolscript.kernel import wire
from toolscript.tools.python import tool


@tool
async def huge() -> str:
    """A hundred million characters."""
    return "x" * 100_000_000


@tool
async def describe(value: Any) -> str:
    """The type and repr of `value`, as the tool got it."""
    return f"{type(value).__name__}:{value!r}"


@tool
async def give(name: str) -> Any:
    """The value called `name`."""
    return {
        "2**70": 2**70,
        "10**30": 10**30,
        "-10**30": -(10**30),
        "nan": math.nan,
        "inf": math.inf,
        "-inf": -math.inf,
        "nested": {"none": None, "nan": [math.nan], "big": [2**64 - 1]},
    }[name]


@pytest.mark.timeout(60)
async def test_an_answer_over_the_frame_bound_is_a_tool_error_and_the_interpreter_stays(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(tools=[huge])
    await runtime.run("kept = 1")
    result = await runtime.run(
        "try:\n    await huge()\nexcept ToolError as error:\n    print(error)\n", time_limit=30
    )
    assert result.status == "ok", result.text
    assert "the answer of huge was 100 MB" in result.stdout
    assert "over the 64 MiB limit" in result.stdout
    (record,) = result.calls.records
    assert record.fate == "seen" and record.is_error
    after = await runtime.run("kept")
    assert after.value == "1" and after.generation == result.generation


@pytest.mark.timeout(60)
async def test_arguments_over_the_frame_bound_are_a_tool_error_and_the_interpreter_stays(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(tools=[describe])
    result = await runtime.run(
        "try:\n"
        "    await describe(value='x' * 70_000_000)\n"
        "except ToolError as error:\n"
        "    print(error)\n",
        time_limit=30,
    )
    assert result.status == "ok", result.text
    assert "over the 64 MiB limit" in result.stdout and "not sent" in result.stdout
    assert result.calls.by_fate == {"refused": 1}
    assert (await runtime.run("1 + 1")).generation == result.generation


@pytest.mark.timeout(60)
async def test_arguments_of_too_many_lists_and_dicts_are_a_tool_error_but_brackets_in_text_pass(
    make_runtime: MakeRuntime,
) -> None:
    # Decoding a million empty dicts costs the decoding side 64 MB and a good part of a
    # second: the host must not pay that for a script (its loop enforces every time limit).
    runtime = await make_runtime(tools=[describe])
    many = wire.MAX_CONTAINERS
    result = await runtime.run(
        "try:\n"
        f"    await describe(value=[{{}}] * {many})\n"
        "except ToolError as error:\n"
        "    print(error)\n"
        f"text = await describe(value='{{[' * {many})\n"
        "len(text)\n",
        time_limit=30,
    )
    assert result.status == "ok", result.text
    assert f"over {many:,} lists and dicts" in result.stdout, result.text
    assert result.value == str(len("str:''") + 2 * many)
    assert result.calls.by_fate == {"refused": 1, "seen": 1}
    assert (await runtime.run("1 + 1")).generation == result.generation


@pytest.mark.timeout(60)
async def test_arguments_of_too_many_values_are_a_tool_error_and_the_interpreter_stays(
    make_runtime: MakeRuntime,
) -> None:
    # Short strings cost the decoding side per value too: 12 million of them in a 60 MB
    # frame cost the host 1.3 GB and over a second of its loop.
    runtime = await make_runtime(tools=[describe])
    many = wire.MAX_VALUES
    result = await runtime.run(
        "try:\n"
        f"    await describe(value=['ab'] * {many})\n"
        "except ToolError as error:\n"
        "    print(error)\n"
        f"await describe(value=['ab'] * {many // 2})\n",
        time_limit=30,
    )
    assert result.status == "ok", result.text
    assert f"{many:,} values or more" in result.stdout, result.text
    assert result.calls.by_fate == {"refused": 1, "seen": 1}
    assert (await runtime.run("1 + 1")).generation == result.generation


def test_the_host_refuses_a_frame_of_too_many_values_before_decoding_it() -> None:
    body = b'{"t": "call", "n": 1, "tool": "x", "args": {"v": [' + b'"ab",' * 4_000_000 + b"1]}}"
    with pytest.raises(wire.FrameError, match="values or more"):
        codec.decode_body(body)
    fewer = b'{"t": "call", "n": 1, "tool": "x", "args": {"v": [' + b"12345678," * 3_000_000
    assert len(codec.decode_body(fewer + b"1]}}")["args"]["v"]) == 3_000_001


@pytest.mark.timeout(30)
async def test_a_kernel_whose_read_took_the_loop_long_is_not_read_for_as_long_again(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A frame within every bound still costs about a second to decode at 64 MiB: a script
    # sending one after another would have the host's loop, every other shell's too.
    runtime = await make_runtime(tools=[describe])
    assert (await runtime.run("1")).value == "1"
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None
    channel = interpreter._channel
    transport = channel._transport
    assert transport is not None and transport.is_reading()
    clock = iter([10.0, 10.0 + 2 * host_channel.HOGGING])
    monkeypatch.setattr(host_channel.time, "perf_counter", lambda: next(clock))
    channel.received(b"")  # a read that took twice as long as a kernel may take
    monkeypatch.undo()
    assert not transport.is_reading()
    await eventually(transport.is_reading, 5.0, "the channel was not read again")
    after = await runtime.run("await describe(value=1)")
    assert after.status == "ok", after.text


@pytest.mark.timeout(30)
async def test_a_read_that_holds_a_heavy_frame_rests_its_kernel_however_quick_it_was(
    make_runtime: MakeRuntime,
) -> None:
    # Frames that each cost the host just under `HOGGING`, one after another, would have
    # most of its loop: a frame that large is rare, or forged to cost the host.
    runtime = await make_runtime(tools=[describe])
    assert (await runtime.run("1")).value == "1"
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None
    channel = interpreter._channel
    transport = channel._transport
    assert transport is not None and transport.is_reading()
    channel.received(codec.encode({"t": "ack", "seen": [], "padding": "x" * 4096}))
    assert transport.is_reading()  # an ordinary frame: read on
    channel.received(codec.encode({"t": "ack", "seen": [], "padding": "x" * (1 << 20)}))
    assert not transport.is_reading()
    await eventually(transport.is_reading, 5.0, "the channel was not read again")
    assert (await runtime.run("await describe(value=1)")).status == "ok"


def test_the_host_refuses_a_frame_of_too_many_containers_before_decoding_it() -> None:
    body = b'{"t": "call", "n": 1, "tool": "x", "args": {"v": [' + b"{}," * 1_200_000 + b"{}]}}"
    with pytest.raises(wire.FrameError, match="objects and arrays"):
        codec.decode_body(body)
    text = b'{"t": "call", "n": 1, "tool": "x", "args": {"v": "' + b"{[" * 1_200_000 + b'"}}'
    assert codec.decode_body(text)["args"]["v"] == "{[" * 1_200_000


@pytest.mark.timeout(30)
@pytest.mark.parametrize("number", ["2**70", "10**30", "-10**30"])
async def test_an_integer_of_any_size_reaches_the_tool_and_comes_back_exactly(
    make_runtime: MakeRuntime, number: str
) -> None:
    runtime = await make_runtime(tools=[describe, give])
    result = await runtime.run(
        f"sent = await describe(value={number})\n"
        f"got = await give(name={number!r})\n"
        f"assert got == {number} and type(got) is int, got\n"
        "sent\n"
    )
    assert result.status == "ok", result.text
    assert result.value == repr(f"int:{eval(number)}")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["nan", "inf", "-inf"])
async def test_nan_and_the_infinities_are_kept_both_ways(
    make_runtime: MakeRuntime, name: str
) -> None:
    runtime = await make_runtime(tools=[describe, give])
    result = await runtime.run(
        "import math\n"
        f"sent = await describe(value=float({name!r}))\n"
        f"got = await give(name={name!r})\n"
        "assert type(got) is float, got\n"
        f"assert repr(got) == repr(float({name!r})), got\n"
        "sent\n"
    )
    assert result.status == "ok", result.text
    assert result.value == repr(f"float:{float(name)!r}")


@pytest.mark.timeout(30)
async def test_nan_nested_beside_none_in_an_answer_is_kept(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(tools=[give])
    result = await runtime.run(
        "import math\n"
        "got = await give(name='nested')\n"
        "assert got['none'] is None and math.isnan(got['nan'][0]), got\n"
        "assert got['big'] == [2**64 - 1], got\n"
    )
    assert result.status == "ok", result.text


@pytest.mark.parametrize("number", [-(2**63) - 1, 2**64, 10**30, -(10**30)])
def test_the_host_codec_decodes_a_call_with_an_integer_out_of_64_bits_exactly(number: int) -> None:
    frame = wire.encode({"t": "call", "n": 1, "tool": "t", "args": {"x": number}, "script": None})
    assert codec.decode_body(frame[4:])["args"]["x"] == number


def test_the_host_codec_keeps_nan_beside_none_in_an_answer() -> None:
    frame = codec.encode({"t": "answer", "n": 1, "ok": True, "value": [None, math.nan]})
    value = wire.decode_body(frame[4:])["value"]
    assert value[0] is None and math.isnan(value[1])
