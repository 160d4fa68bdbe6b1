"""The frame reader, fed the way the channels feed it: views of one reused receive buffer."""

from __future__ import annotations

import json

import pytest

from toolscript.kernel.wire import ChannelReader, FrameError, FrameReader, encode


def frames(*messages: dict[str, object]) -> bytes:
    return b"".join(encode(message) for message in messages)


def feed_through_buffer(reader: FrameReader, data: bytes, chunk: int) -> list[dict[str, object]]:
    """Feed `data` in pieces of `chunk` bytes, each copied into the same receive buffer and
    overwritten by the next, as `asyncio.BufferedProtocol` does."""
    channel = ChannelReader(size=max(chunk, 1))
    got: list[dict[str, object]] = []
    for start in range(0, len(data), chunk):
        piece = data[start : start + chunk]
        buffer = channel.get_buffer(-1)
        buffer[: len(piece)] = piece
        got.extend(reader.feed(channel.received(len(piece))))
    return got


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 4096])
def test_frames_split_anywhere_across_reads_of_one_buffer_come_out_whole(chunk: int) -> None:
    messages = [{"t": "call", "n": n, "args": {"text": "é" * n}} for n in range(30)]
    data = frames(*messages)
    assert feed_through_buffer(FrameReader(), data, chunk) == messages


def test_a_partial_frame_is_kept_even_when_the_buffer_is_overwritten() -> None:
    reader = FrameReader()
    data = frames({"t": "a"}, {"t": "b", "x": "y" * 100})
    channel = ChannelReader(size=len(data))
    view = channel.get_buffer(-1)
    view[: len(data) - 10] = data[:-10]
    assert reader.feed(channel.received(len(data) - 10)) == [{"t": "a"}]
    view[:] = b"\xff" * len(view)  # the next read overwrites the whole buffer
    view[:10] = data[-10:]
    assert reader.feed(channel.received(10)) == [{"t": "b", "x": "y" * 100}]


def test_a_length_over_the_bound_is_a_frame_error() -> None:
    reader = FrameReader(max_frame=100)
    with pytest.raises(FrameError, match="over the bound"):
        reader.feed(memoryview((101).to_bytes(4, "big") + b"{}"))


def test_a_body_that_is_not_a_json_object_is_a_frame_error() -> None:
    body = json.dumps([1, 2]).encode()
    with pytest.raises(FrameError, match="not an object"):
        FrameReader().feed(memoryview(len(body).to_bytes(4, "big") + body))


@pytest.mark.parametrize(
    "message",
    [
        {"t": "call", "n": 1, "tool": "noop", "args": {"x": 5}, "script": None},
        {"text": 'é ü 漢字 \ud800 \x00 "quoted" \\ back', "emoji": "🙂"},
        {"nested": [1, [2, [3, {"k": [True, False, None]}]]], "float": 1.5e-300},
        {"nan": float("nan"), "inf": float("inf"), "big": 2**80},
    ],
)
def test_a_frame_is_what_json_dumps_writes_and_reads_back(message: dict[str, object]) -> None:
    frame = encode(message)
    body = frame[4:]
    assert body == json.dumps(message).encode("ascii")
    [read] = FrameReader().feed(frame)
    assert json.dumps(read) == json.dumps(message)


def test_what_json_cannot_hold_is_refused_as_json_dumps_would() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode({"x": object()})
    cycle: dict[str, object] = {}
    cycle["self"] = cycle
    with pytest.raises(RecursionError):
        encode(cycle)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b' {"t": "a"} ', {"t": "a"}),  # whitespace around: json.loads takes it
        (b'{"t": "a"}{"t": "b"}', None),  # two values in one frame
        (b'{"t": "a"} x', None),
        (b"\xff\xfe{}", None),  # not UTF-8
        (b"", None),
    ],
)
def test_a_body_the_fast_decoder_does_not_take_whole_is_decided_by_json_loads(
    body: bytes, expected: dict[str, object] | None
) -> None:
    frame = len(body).to_bytes(4, "big") + body
    if expected is None:
        with pytest.raises(FrameError):
            FrameReader().feed(frame)
    else:
        assert FrameReader().feed(frame) == [expected]
