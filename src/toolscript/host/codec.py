"""The host's side of the frame codec: the kernel's format, with a faster JSON library.

The kernel is standard-library only; the host is not, and decoding and encoding frames is
most of a tool call's cost in the host. orjson is used where it can be; where it refuses
(lone surrogates, integers over 64 bits) the standard library takes over, so what is valid
for the kernel is valid here.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..kernel import wire

_orjson_loads = orjson.loads
_orjson_dumps = orjson.dumps
_pack = wire.HEADER.pack


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding `message`."""
    try:
        body = _orjson_dumps(message)
    except TypeError:
        return wire.encode(message)
    return _pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode one frame's body; any failure is a `wire.FrameError`."""
    try:
        message = _orjson_loads(body)
    except orjson.JSONDecodeError:
        return wire.decode_body(body)  # lone surrogates, huge numbers, or really broken
    if type(message) is not dict:
        raise wire.FrameError(f"a frame holds a JSON {type(message).__name__}, not an object")
    return message


def reader(max_frame: int = wire.MAX_FRAME) -> wire.FrameReader:
    """A frame reader that decodes with `decode_body`."""
    return wire.FrameReader(max_frame, decode_body)
