"""The frames between the kernel and the host: their codec, their limits, their shapes.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON holding one
object. Both sides batch: a reader turns whatever bytes have arrived into every complete frame
in them at once, so a burst of tool calls costs one wake-up, not one per call.

Frames are JSON as `json.dumps` writes it with its defaults: non-ASCII escaped (lone
surrogates included), so every frame is valid UTF-8. The kernel encodes and decodes one frame
per tool call each way, so both go straight to the `json` module's C encoder and scanner, made
once: `json.dumps` builds a new C encoder for every call, and `json.loads` of bytes first
guesses their encoding in Python. Anything the fast decoder does not take whole goes through
`json.loads`, which decides.

What each kind of frame holds is written below as `TypedDict`s, for the type checker only.
A frame as decoded is a `Message`: the host never takes the kernel's frames for what they
claim to be, and checks each field where it reads it.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
import re
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

Message = dict[str, Any]
"""A frame as decoded: one JSON object, its fields unchecked."""

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024
"""The largest frame body either side accepts, in bytes. A larger announced length is a fault."""

LONGEST_FRAME = HEADER.size + MAX_FRAME
"""The longest frame either side takes: its header and a body of `MAX_FRAME` bytes."""

MAX_CONTAINERS = 1_000_000
"""The most objects and arrays a call's frame may hold. What decoding a frame costs the side
that reads it is bounded by its containers, not its bytes: an empty object is two bytes of
JSON and 64 of memory, so 64 MiB of them would cost the host 1.4 GiB and seconds of its
event loop. `{` and `[` inside strings do not count, in a body of up to `PRECISE_UP_TO`."""

MAX_VALUES = 4_000_000
"""The most values (strings, numbers, objects, arrays, keys) a frame of a call may hold.
Decoding also costs per value, whatever its kind: about 65 ns and 50-100 bytes of memory
each on the CI-like machine, so 12 million short strings in a 60 MB frame cost the host
1.3 GB and over a second of its event loop. A comma or a colon in a string counts as one
more value (`too_many_values`): telling them apart would cost more than the decoding."""

VALUES_FROM = 2 * MAX_VALUES
"""The shortest body that can hold `MAX_VALUES` values."""

CONTAINERS_FROM = 2 * MAX_CONTAINERS
"""The shortest body that can hold more than `MAX_CONTAINERS` (a container takes two bytes
at least): callers test the length first, so a call's frame costs a comparison, not a call."""

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


# The frames' shapes. Only for the type checker: classes made at import would slow every
# spawned kernel's start, and nothing needs them at run time.
if TYPE_CHECKING:
    from typing import Literal, NotRequired, Required, TypeAlias, TypedDict

    # -- from the host --------------------------------------------------------------------

    class ExecFrame(TypedDict):
        """Run a script. `marker` is the nonce of its output's markers; `start_marker`,
        whether the host waits for one before the script's output (without it: unless the
        last script left nothing running); `check`, the token of the last script's end, to
        confirm first; `busy_poll`, the window to poll for."""

        t: Literal["exec"]
        script: str
        code: str
        marker: str
        grace: float
        start_marker: NotRequired[bool]
        check: NotRequired[str]
        busy_poll: NotRequired[float]

    class AnswerFrame(TypedDict):
        """A call's answer: `value` when `ok`, else `error` (the exception's name) and
        `message`."""

        t: Literal["answer"]
        n: int
        ok: bool
        value: NotRequired[Any]
        error: NotRequired[str]
        message: NotRequired[str]
        cause: NotRequired[str]
        plain: NotRequired[bool]  # take `value` as it is: no content blocks in it

    class CheckFrame(TypedDict):
        """Does the code of the script that said `done` still run? Answer with `token`."""

        t: Literal["check"]
        token: str

    class BindFrame(TypedDict):
        """Bind these tools (binding plans, made by `toolscript.tools.binding`), and under
        each name of `down` a server that did not start, whose use raises `ToolError` with
        the message."""

        t: Literal["bind"]
        plans: list[dict[str, Any]]
        down: NotRequired[dict[str, str]]

    class SetupFrame(TypedDict):
        """Work in `cwd`; in the sandbox, `folder` is the shell's folder for the init to mount."""

        t: Literal["setup"]
        cwd: str
        folder: NotRequired[str]

    class ShutdownFrame(TypedDict):
        t: Literal["shutdown"]

    class HeldFrame(TypedDict):
        """Which calls wait for an answer? (A host that took this kernel back from a keeper
        asks once, to answer the calls the host before it left. Its `token` comes back in
        the answer, so that an answer to a host that asked and died is not taken for its own.)"""

        t: Literal["held"]
        token: str

    # -- from the kernel ------------------------------------------------------------------

    class ReadyFrame(TypedDict, total=False):
        t: Required[Literal["ready"]]
        pid: Required[int]
        python: Required[str]
        executable: Required[str]
        preload_failures: list[list[str]]
        """Modules of `preload` a kernel started afresh (not forked) could not import."""

    class NameChanges(TypedDict, total=False):
        """The global names a shell's namespace gained and lost since the kernel last told
        (`toolscript.kernel.names`); `names_many`: too many to tell (True), or told again."""

        names_new: list[str]
        names_gone: list[str]
        names_many: bool

    class BoundFrame(NameChanges):
        """The tools bound; `failures`, `[key, why]` for each that could not be."""

        t: Literal["bound"]
        failures: list[list[str]]

    class SetFrame(TypedDict):
        """`setup` done, or the `error` that stopped it."""

        t: Literal["set"]
        error: str | None

    Unwaited: TypeAlias = list[Any]
    """`[n, "unwaited", cause, arrived]`: call `n`'s code stopped waiting first."""

    class CallFrame(TypedDict):
        """A tool call, numbered one after another. One the kernel would not send carries
        `refused` (why) and `brief` (its arguments in short) instead of `args`. `acks` and
        `seen` carry acknowledgements of earlier calls along."""

        t: Literal["call"]
        n: int
        tool: str
        args: NotRequired[dict[str, Any]]
        script: str | None
        refused: NotRequired[str]
        brief: NotRequired[str]
        acks: NotRequired[list[Unwaited]]
        seen: NotRequired[list[int]]

    class AckFrame(TypedDict, total=False):
        """Acknowledgements alone: `seen`, the calls whose answer code took; `acks`, the
        calls whose code stopped waiting first."""

        t: Required[Literal["ack"]]
        acks: list[Unwaited]
        seen: list[int]

    class CheckedFrame(TypedDict):
        """The answer to `check` (or to an `exec`'s): the script still running, or None."""

        t: Literal["checked"]
        token: object
        running: str | None

    class ImageFrame(TypedDict):
        """An image the running script showed (`show(...)`): its type and base64 data."""

        t: Literal["image"]
        script: str | None
        mime_type: str
        data: str

    class DoneFrame(NameChanges, total=False):
        """How a script ended. The host's own words on an end (`killed`, `crashed`, `fault`)
        have the same shape, with only `status`."""

        t: Literal["done"]
        script: str
        status: Required[str]
        """`ok`, `error` or `stopped`; the host adds `killed`, `crashed`, `fault`, `broken`."""
        value: str | None
        """The repr of the last expression's value."""
        error: str
        """The traceback, or what went wrong, in words."""
        reason: str
        exit: int
        """The code the script gave `sys.exit`."""
        memory: bool
        never_awaited: list[str]
        quiet: bool
        """Nothing the script started is left running: the next script needs no start
        marker."""
        drained: bool
        """Both pipes were read to the end: the script's output needs no end marker."""
        broken: str
        """The kernel's own descriptors were broken, in words; it is ended."""
        threads_left: int
        timers_left: int
        connections_closed: int
        """Connections and servers of the script's event loop that a stop closed."""
        """POSIX timers (and interval timers armed again) that a stop could not end."""
        processes_left: int
        """The host's own: processes of the sandbox it found alive after a stop."""
        hurried: bool
        """The host's own: a second cancel cut the stop's grace period short."""
        partial_frame: int
        """The host's own: bytes of a frame cut short on the channel when it killed the
        interpreter (code writing to the channel leaves one so)."""
        again: bool
        """The kernel says its last `done` again, for a kept kernel's new host: a host that
        saw it already ignores it."""

    class HoldingFrame(TypedDict):
        """The answer to `held`: every call whose answer has not arrived, as its frame said
        (`n`, `tool`, `args`, `script`); the script running now, if any; the last `done`
        sent, if any (the host before may have read it and died before it could report it);
        the acknowledgements sent lately (`seen`, `acks`, as in `AckFrame`), said again for
        the same reason; the `token` of the `held` it answers."""

        t: Literal["holding"]
        calls: list[dict[str, Any]]
        seen: list[int]
        acks: list[Unwaited]
        running: str | None
        done: DoneFrame | None
        token: str | None

    HostFrame: TypeAlias = (
        ExecFrame | AnswerFrame | CheckFrame | BindFrame | SetupFrame | ShutdownFrame | HeldFrame
    )
    KernelFrame: TypeAlias = (
        ReadyFrame
        | BoundFrame
        | SetFrame
        | CallFrame
        | AckFrame
        | CheckedFrame
        | ImageFrame
        | DoneFrame
        | HoldingFrame
    )
    Frame: TypeAlias = HostFrame | KernelFrame


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def too_many_containers(body: bytes, most: int = MAX_CONTAINERS) -> bool:
    """Whether the JSON `body` holds more than `most` objects and arrays. A count of `{` and
    `[` answers at C speed; only when it is over `most` are the strings taken out to count
    again (`[` and `{` in a string are text), and only in a body of at most `PRECISE_UP_TO`
    bytes: taking them out costs up to 45 ms a MB, and a larger body is over either way."""
    if len(body) <= 2 * most:  # a container takes two bytes at least
        return False
    if body.count(b"{") + body.count(b"[") <= most:
        return False
    if len(body) > PRECISE_UP_TO:
        return True
    outside = _STRING.sub(b"", body)
    return outside.count(b"{") + outside.count(b"[") > most


def too_many_values(body: bytes, most: int = MAX_VALUES) -> bool:
    """Whether the JSON `body` may hold `most` values or more, by its commas and colons
    (each value but the first of a frame follows one); in a string they count too. Only a
    body of over `VALUES_FROM` bytes can (a value takes two bytes at least, with its comma)."""
    return len(body) > 2 * most and body.count(b",") + body.count(b":") >= most


PRECISE_UP_TO = 4 * 1024 * 1024
"""The largest body whose `{` and `[` in strings are told from containers: over it, a body
with more than `MAX_CONTAINERS` of them in all is refused."""


class FrameError(Exception):
    """The peer sent bytes that are not a valid frame. The connection cannot be trusted after it."""


def encode(message: Frame) -> bytes:
    """One frame holding `message`. Raises `ValueError`/`TypeError`/`RecursionError` on bad data."""
    if _encoder is None:
        body = _dumps(message).encode("ascii")
    else:
        body = "".join(_encoder(message, 0)).encode("ascii")
    return _pack(len(body)) + body


_OPEN_BRACE = ord("{")


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
        decode: Callable[[bytes], Message] | None = None,
    ) -> None:
        self._buffer = bytearray()
        self._max_frame = max_frame
        self._decode = decode or decode_body

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buffer)

    def held(self) -> bytes:
        """The bytes held of a frame not yet complete."""
        return bytes(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Message]:
        """Every message completed by `data`. `data` may be a view of the caller's receive
        buffer: nothing here keeps it past the call (a partial frame is copied)."""
        buffer = self._buffer
        if buffer:
            buffer += data
            view: bytes | bytearray | memoryview = buffer
        else:
            view = data  # the usual case: whole frames, read straight from what arrived
        messages: list[Message] = []
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
                if end - position > 4 and view[position + 4] != _OPEN_BRACE:
                    # Every frame is one JSON object, so its body begins with `{`. Not
                    # waiting for the announced length: a partial header the script wrote
                    # would take the next frames' bytes as its own and wait out the run.
                    raise FrameError("a frame's body does not begin as a JSON object")
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
    which the allocator maps and unmaps each time. 64 KiB: each interpreter holds one on
    each side, and a larger one only saves reads of frames that large.
    """

    __slots__ = ("_view",)

    def __init__(self, size: int = 64 * 1024) -> None:
        self._view = memoryview(bytearray(size))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def received(self, nbytes: int) -> memoryview:
        """The bytes the last read put in the buffer; valid until the next read."""
        return self._view[:nbytes]


def decode_body(body: bytes) -> Message:
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
