"""The frame codec shared by the kernel and the host.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON holding one
object. Both sides batch: a reader turns whatever bytes have arrived into every complete frame
in them at once, so a burst of tool calls costs one wake-up, not one per call.

Frames are JSON as `json.dumps` writes it with its defaults: non-ASCII escaped (lone
surrogates included), so every frame is valid UTF-8. The kernel encodes and decodes one frame
per tool call each way, so both go straight to the `json` module's C encoder and scanner, made
once: `json.dumps` builds a new C encoder for every call, and `json.loads` of bytes first
guesses their encoding in Python (3.5 -> 1.6 µs to encode a call, 2.9 -> 0.9 µs to decode an
answer). Anything the fast decoder does not take whole goes through `json.loads`, which
decides.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
import struct
from collections.abc import Callable
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024
"""The largest frame body either side accepts, in bytes. A larger announced length is a fault."""

LONGEST_FRAME = HEADER.size + MAX_FRAME
"""The longest frame either side takes: its header and a body of `MAX_FRAME` bytes."""

BATCH = 64
"""Frames a burst may hold before a piece of it is written (the same on both sides)."""

_dumps = json.dumps
_loads = json.loads
_pack = HEADER.pack
_unpack_from = HEADER.unpack_from


def _not_json(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# No circular-reference markers: a cycle, like any structure too deep, ends in RecursionError.
_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # None without the C module
_encoder: Any = (
    _make_encoder(
        None, _not_json, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    if _make_encoder is not None
    else None
)
_make_scanner: Any = json.scanner.make_scanner
_scan: Any = _make_scanner(json.JSONDecoder())


_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


def encode_call(n: int, tool: str, args: dict[str, Any], script: str | None) -> bytes:
    """The frame of a tool call: the same bytes as `encode` of `{"t": "call", "n": n, "tool":
    tool, "args": args, "script": script}`, with only `args` through the encoder (a call's
    frame is most of the kernel's encoding, and its other fields are two strings and an int).
    Raises as `encode` does."""
    if _encoder is None or type(n) is not int:
        return encode({"t": "call", "n": n, "tool": tool, "args": args, "script": script})
    body = (
        f'{{"t": "call", "n": {n}, "tool": {_string(tool)}, "args": '
        f'{"".join(_encoder(args, 0))}, "script": '
        f"{'null' if script is None else _string(script)}}}"
    ).encode("ascii")
    return _pack(len(body)) + body


class FrameError(Exception):
    """The peer sent bytes that are not a valid frame. The connection cannot be trusted after it."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding `message`. Raises `ValueError`/`TypeError`/`RecursionError` on bad data."""
    if _encoder is None:
        body = _dumps(message).encode("ascii")
    else:
        body = "".join(_encoder(message, 0)).encode("ascii")
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

    def feed(self, data: bytes | bytearray | memoryview) -> list[dict[str, Any]]:
        """Every message completed by `data`. `data` may be a view of the caller's receive
        buffer: nothing here keeps it past the call (a partial frame is copied)."""
        buffer = self._buffer
        if buffer:
            buffer += data
            view: bytes | bytearray | memoryview = buffer
        else:
            view = data  # the usual case: whole frames, read straight from what arrived
        messages: list[dict[str, Any]] = []
        decode = self._decode
        position = 0
        end = len(view)
        while True:
            if end - position < 4:
                break
            (length,) = _unpack_from(view, position)
            if length > self._max_frame:
                raise FrameError(
                    f"a frame announced {length:,} bytes, over the bound of {self._max_frame:,}"
                )
            if end - position - 4 < length:
                break
            body = bytes(view[position + 4 : position + 4 + length])
            position += 4 + length
            messages.append(decode(body))
        if view is buffer:
            if position:
                del buffer[:position]
        elif position < end:
            buffer += view[position:]
        return messages


class ChannelReader:
    """A receive buffer for `asyncio.BufferedProtocol`: the transport reads into it in place.

    A plain `Protocol` costs a fresh 256 KiB bytes object per read (asyncio's read size),
    which the allocator maps and unmaps each time: about 16 µs per read warm, twice that cold.
    64 KiB: each interpreter holds one on each side, and a larger one only saves reads of
    frames that large.
    """

    __slots__ = ("_view",)

    def __init__(self, size: int = 64 * 1024) -> None:
        self._view = memoryview(bytearray(size))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def received(self, nbytes: int) -> memoryview:
        """The bytes the last read put in the buffer; valid until the next read."""
        return self._view[:nbytes]


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode one frame's body defensively: any failure is a `FrameError`, never another error."""
    try:
        text = body.decode("utf-8")
        found, end = _scan(text, 0)
        if end == len(text) and type(found) is dict:
            return found
    except (StopIteration, ValueError, RecursionError, MemoryError):
        pass  # not one JSON object and nothing else, as a frame should be: json.loads decides
    try:
        message = _loads(body)
    except (ValueError, RecursionError, MemoryError) as error:
        raise FrameError(f"a frame's body is not valid JSON ({type(error).__name__})") from None
    if type(message) is not dict:
        raise FrameError(f"a frame holds a JSON {type(message).__name__}, not an object")
    return message
