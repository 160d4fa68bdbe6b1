"""The host's side of the frame codec: the kernel's format, with a faster JSON library.

The kernel is standard-library only; the host is not, and decoding and encoding frames is
most of a tool call's cost in the host. orjson is used where it can be; where it refuses
(lone surrogates, integers over 64 bits, NaN and the infinities) the standard library takes
over, so what is valid for the kernel is valid here, and means the same.
"""

from __future__ import annotations

import orjson

from ..kernel import wire

_orjson_loads = orjson.loads
_orjson_dumps = orjson.dumps
_pack = wire.HEADER.pack


def encode(message: wire.Frame) -> bytes:
    """One frame holding `message`."""
    try:
        body = _orjson_dumps(message)
    except TypeError:
        return wire.encode(message)  # an integer over 64 bits: written exactly
    # orjson writes NaN and the infinities as null, where the standard library keeps them.
    # An answer whose value is None holds no other null: the common case stays on orjson.
    if b"null" in body and message.get("value", _NO_VALUE) is not None:
        return wire.encode(message)
    return _pack(len(body)) + body


def encoded_size(text: str) -> int:
    """The bytes `text` takes as a JSON string in a frame."""
    try:
        return len(_orjson_dumps(text))
    except TypeError:  # a lone surrogate: escaped, as `encode` falls back to
        import json

        return len(json.dumps(text))


def decode_body(body: bytes) -> wire.Message:
    """Decode one frame's body; any failure is a `wire.FrameError`."""
    if len(body) > wire.CONTAINERS_FROM and wire.too_many_containers(body):
        # Only a kernel the script has taken over sends one (the kernel refuses such a
        # call itself): decoded, it would cost the host memory and its loop's time.
        raise wire.FrameError(
            f"a frame holds over {wire.MAX_CONTAINERS:,} objects and arrays, more than a "
            "call may carry"
        )
    if len(body) > wire.VALUES_FROM and wire.too_many_values(body):
        raise wire.FrameError(
            f"a frame holds {wire.MAX_VALUES:,} values or more, more than a call may carry"
        )
    try:
        message = _orjson_loads(body)
    except orjson.JSONDecodeError:
        return wire.decode_body(body)  # lone surrogates, NaN, or really broken
    if type(message) is not dict:
        raise wire.FrameError(f"a frame holds a JSON {type(message).__name__}, not an object")
    if message.get("t") == "call" and _NINETEEN_DIGITS in body.translate(_DIGITS_AS_ZEROS):
        # orjson reads an integer out of 64 bits as a float: one has 19 digits in a row at
        # least (-2**63 - 1). Such a run in a string only costs the slower, exact decoding.
        return wire.decode_body(body)
    return message


_NO_VALUE = object()
_NINETEEN_DIGITS = b"0" * 19
_DIGITS_AS_ZEROS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))


def reader(max_frame: int = wire.MAX_FRAME) -> wire.FrameReader:
    """A frame reader that decodes with `decode_body`."""
    return wire.FrameReader(max_frame, decode_body)
