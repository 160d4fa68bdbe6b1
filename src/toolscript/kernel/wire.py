"""The frame codec shared by the kernel and the host.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON holding one
object. Both sides batch: a reader turns whatever bytes have arrived into every complete frame
in them at once, so a burst of tool calls costs one wake-up, not one per call.

`json.dumps` with its defaults is used on purpose: it escapes non-ASCII (lone surrogates
included) so every frame is valid UTF-8, and it is the fastest stdlib encoder (passing
`separators` builds a new encoder per call).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024
"""The largest frame either side accepts, in bytes. A larger announced length is a fault."""

_dumps = json.dumps
_loads = json.loads
_pack = HEADER.pack
_unpack_from = HEADER.unpack_from


class FrameError(Exception):
    """The peer sent bytes that are not a valid frame. The connection cannot be trusted after it."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding `message`. Raises `ValueError`/`TypeError`/`RecursionError` on bad data."""
    body = _dumps(message).encode("ascii")
    return _pack(len(body)) + body


class FrameReader:
    """Turns a byte stream into messages, holding at most one partial frame.

    `feed(data)` returns every message completed by `data`. A length over `max_frame`, a body
    that is not JSON, or a JSON value that is not an object raises `FrameError`; the reader is
    useless after that, as is the connection it reads.
    """

    __slots__ = ("_buffer", "_decode", "_max_frame")

    def __init__(
        self,
        max_frame: int = MAX_FRAME,
        decode: Callable[[bytes], dict[str, Any]] | None = None,
    ) -> None:
        self._buffer = bytearray()
        self._max_frame = max_frame
        self._decode = decode or decode_body

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        buffer = self._buffer
        buffer += data
        messages: list[dict[str, Any]] = []
        decode = self._decode
        position = 0
        end = len(buffer)
        while True:
            if end - position < 4:
                break
            (length,) = _unpack_from(buffer, position)
            if length > self._max_frame:
                raise FrameError(
                    f"a frame announced {length:,} bytes, over the bound of {self._max_frame:,}"
                )
            if end - position - 4 < length:
                break
            body = bytes(buffer[position + 4 : position + 4 + length])
            position += 4 + length
            messages.append(decode(body))
        if position:
            del buffer[:position]
        return messages


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode one frame's body defensively: any failure is a `FrameError`, never another error."""
    try:
        message = _loads(body)
    except (ValueError, RecursionError, MemoryError) as error:
        raise FrameError(f"a frame's body is not valid JSON ({type(error).__name__})") from None
    if type(message) is not dict:
        raise FrameError(f"a frame holds a JSON {type(message).__name__}, not an object")
    return message
