"""A script's stdout and stderr: attributed to the script that wrote them, held within a bound.

The kernel's fd 1 and fd 2 are pipes the host reads all the time, so output of subprocesses
and C extensions is captured along with `print`. To know which bytes are one script's, the
kernel writes two markers made from a nonce the host chose for that script to both pipes: a
start marker (NUL, `>`, the nonce, NUL) before the script runs, an end marker (NUL, the
nonce, NUL) after it ends. Bytes between them belong to the script; bytes outside them belong
to nobody (a thread or subprocess that outlived its script) and are only counted. The start
marker matters because the host may not have read everything written between two scripts
when it begins the next one: without it, those bytes would be taken as the next script's.

Either marker is left out when it cannot matter, since each costs two pipe writes and two
wake-ups of the host. The start marker: when the previous script left nothing running that
could write. The end marker: when, besides, the kernel finds both pipes read to the end as
the script ends (FIONREAD on the pipe), so the host has been fed every byte before it reads
`done`.

Memory is bounded however much is written: the first half of the limit and the last half are
kept, and what lies between is counted, never held.
"""

from __future__ import annotations

import asyncio
from typing import BinaryIO, NamedTuple


def cut_middle(text: str, limit: int, unit: str = "characters") -> str:
    """`text` with its middle replaced by a stated cut when it is longer than `limit`."""
    if len(text) <= limit:
        return text
    keep = max(limit, 2)
    head = keep // 2
    tail = keep - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n… {cut:,} {unit} cut …\n{text[len(text) - tail :]}"


def cut_head(text: str, limit: int, unit: str = "characters") -> str:
    """The last lines of `text` that fit in `limit`, after a stated cut when it is longer."""
    if len(text) <= limit:
        return text
    kept = text[len(text) - max(limit, 1) :]
    newline = kept.find("\n")
    if 0 <= newline < len(kept) - 1:
        kept = kept[newline + 1 :]
    return f"… {len(text) - len(kept):,} {unit} cut …\n{kept}"


class Captured(NamedTuple):
    """What one script wrote to one stream: the kept text and how much was written."""

    text: str
    total_bytes: int
    cut_bytes: int


class StreamCapture:
    """One output pipe of one interpreter, read from the first byte to the last."""

    def __init__(self, limit: int) -> None:
        self._half = max(limit // 2, 1)
        self._marker = b""
        self._start_marker = b""
        self._waiting = False
        self._window = b""
        self._capturing = False
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        self.unattributed_bytes = 0
        self._ended = asyncio.Event()
        self.closed = False
        self._sink: BinaryIO | None = None
        self._sink_room = LogRoom(0)

    def begin(self, nonce: str, *, at_start_marker: bool = True) -> None:
        """Attribute a new script's output, from the start marker made from `nonce` (or at
        once, when `at_start_marker` is false) until the end marker made from it."""
        self._marker = b"\x00" + nonce.encode("ascii") + b"\x00"
        self._start_marker = b"\x00>" + nonce.encode("ascii") + b"\x00"
        self._waiting = at_start_marker
        self._window = b""
        self._capturing = True
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        self._ended = asyncio.Event()

    def feed(self, data: bytes) -> None:
        if not self._capturing:
            self.unattributed_bytes += len(data)
            return
        window = self._window + data if self._window else data
        if self._waiting:
            found = window.find(self._start_marker)
            if found < 0:
                hold = min(len(window), len(self._start_marker) - 1)
                self.unattributed_bytes += len(window) - hold
                self._window = window[len(window) - hold :]
                return
            self.unattributed_bytes += found
            self._waiting = False
            window = window[found + len(self._start_marker) :]
        found = window.find(self._marker)
        if found >= 0:
            self._keep(window[:found])
            self.unattributed_bytes += len(window) - found - len(self._marker)
            self._window = b""
            self._capturing = False
            self._ended.set()
            return
        hold = len(self._marker) - 1
        if len(window) > hold:
            self._keep(window[: len(window) - hold])
            self._window = window[len(window) - hold :]
        else:
            self._window = window

    def close(self) -> None:
        """The pipe closed: whatever was held back as a possible marker start is the script's."""
        self.closed = True
        self._settle_window()
        self._ended.set()

    def end_here(self) -> None:
        """The script's output ends at what was read so far (the kernel found the pipe read to
        the end when the script ended, and nothing left that could write: no end marker)."""
        self._settle_window()
        self._capturing = False
        self._ended.set()

    async def wait_ended(self, timeout: float) -> bool:
        """Wait until the script's marker (or the pipe's end) was read; False on timeout."""
        if self._ended.is_set():
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._ended.wait()
        except TimeoutError:
            return False
        return True

    def take(self) -> Captured:
        """The current script's output so far; capturing stops."""
        self._settle_window()
        self._capturing = False
        captured = self._held()
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        return captured

    def so_far(self) -> str:
        """The current script's output read so far, as `take` would give it; capturing goes
        on. Of the last bytes, held back while they could begin a marker, those before a NUL
        (where a marker would begin) are shown."""
        window = self._window if self._capturing and not self._waiting else b""
        nul = window.find(b"\x00")
        return self._held(window if nul < 0 else window[:nul]).text

    def _held(self, more: bytes = b"") -> Captured:
        head = bytes(self._head)
        tail = bytes(self._tail[-self._half :])
        cut = self._total - len(head) - len(tail)
        if cut:
            text = _decode(head) + f"\n… {cut:,} bytes of output cut …\n" + _decode(tail + more)
        else:
            text = _decode(head + tail + more)
        return Captured(text=text, total_bytes=self._total, cut_bytes=cut)

    def _settle_window(self) -> None:
        """What was held back as a possible marker's start is the script's after all (or
        nobody's, before its start marker)."""
        if self._capturing and self._window:
            if self._waiting:
                self.unattributed_bytes += len(self._window)
            else:
                self._keep(self._window)
            self._window = b""

    def _keep(self, data: bytes) -> None:
        if not data:
            return
        if self._sink is not None:
            self._write_log(data)
        self._total += len(data)
        room = self._half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
            if not data:
                return
        tail = self._tail
        tail += data
        if len(tail) > 2 * self._half:
            del tail[: len(tail) - self._half]

    @property
    def started(self) -> bool:
        """Whether the current script's start marker was read (so the script began)."""
        return not self._waiting

    def log_to(self, sink: BinaryIO | None, room: LogRoom) -> None:
        """Also write every byte of the current script's output to `sink`, while `room`
        (which the other stream written there shares) lasts."""
        self._sink = sink
        self._sink_room = room

    def _write_log(self, data: bytes) -> None:
        assert self._sink is not None
        room = self._sink_room
        if room.left <= 0:
            return
        chunk = data[: room.left]
        room.left -= len(chunk)
        if not _write_log_chunk(self._sink, chunk):
            self._sink = None
            return
        if room.left <= 0:
            _write_log_chunk(self._sink, b"\n[toolscript: the log reached its size limit here]\n")

    @property
    def held_bytes(self) -> int:
        return len(self._head) + len(self._tail) + len(self._window)


class LogRoom:
    """The bytes a log file may still take: one for both of a script's streams."""

    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        self.left = limit


def _write_log_chunk(sink: BinaryIO, data: bytes) -> bool:
    try:
        sink.write(data)
        sink.flush()
    except (OSError, ValueError):
        return False
    return True


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")
