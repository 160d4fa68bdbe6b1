"""The script's stdout and stderr, and the markers that say which bytes are one script's.

fd 1 and fd 2 are pipes the host reads; the kernel writes a marker made from the script's
nonce to both before and after each script (see the host's `toolscript.host.output`), and
leaves either out when it cannot matter.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import stat
import sys
import termios
from typing import TYPE_CHECKING

# Taken once, before any script runs: a script may replace `os.write` (to mock it, say) in
# the module it shares with the kernel, and the markers must still be written.
_write = os.write
_dup2 = os.dup2
_fstat = os.fstat

if TYPE_CHECKING:
    from .descriptors import OwnDescriptors


class ScriptOutput:
    """`sys.stdout` and `sys.stderr` for scripts: text over fd 1 and fd 2, kept in place.

    Goal: a script that closes fd 1 or 2, or puts another file there (`os.dup2`), loses its
    own output only, not the next script's. What fails: the markers then go nowhere, and the
    host waits for them on every later script, whose output is lost too. What we do: keep a
    copy of each pipe among the kernel's own descriptors (`OwnDescriptors`), and put it back
    at fd 1 and 2 before each marker, so every script starts and ends on the host's pipes.
    """

    def __init__(self, own: OwnDescriptors | None = None) -> None:
        self.stdout = _text_stream(1)
        self.stderr = _text_stream(2)
        self._pipes = _is_pipe(1) and _is_pipe(2)  # so `drained` can tell what is unread
        self._copies: dict[int, int] = {}
        if own is not None:
            for fd, what in ((1, "the copy of stdout's pipe"), (2, "the copy of stderr's pipe")):
                with contextlib.suppress(OSError):
                    copy = own.place(fd, what)
                    if copy != fd:
                        self._copies[fd] = copy
        self.install()

    def install(self) -> None:
        """Make these the script's `sys.stdout` and `sys.stderr` again."""
        if self.stdout.closed:
            self.stdout = _text_stream(1)
        if self.stderr.closed:
            self.stderr = _text_stream(2)
        sys.stdout = self.stdout
        sys.stderr = self.stderr

    def restore(self) -> None:
        """Put the host's pipes back at fd 1 and 2 if a script closed or replaced them."""
        for fd, copy in self._copies.items():
            try:
                now = _fstat(fd)
                kept = _fstat(copy)
                if (now.st_dev, now.st_ino) == (kept.st_dev, kept.st_ino):
                    continue
            except OSError:
                pass
            with contextlib.suppress(OSError):
                _dup2(copy, fd)

    def flush(self, *, drop: bool = False) -> None:
        """Write out what Python holds for fd 1 and 2; with `drop`, a stream whose flush
        fails is replaced, so that what it held is never written later."""
        for fd, stream in ((1, self.stdout), (2, self.stderr)):
            try:
                stream.flush()
            except (OSError, ValueError):
                if drop and not stream.closed:
                    if fd == 1:
                        self.stdout = _text_stream(1)
                    else:
                        self.stderr = _text_stream(2)

    def mark(self, marker: bytes) -> None:
        """Flush what Python holds for fd 1 and 2, then write `marker` to both (on the host's
        pipes, put back first if a script moved them). What a script wrote while it had closed
        or moved fd 1 or 2 goes out before the marker, as its own; what cannot, never."""
        self.flush()
        self.restore()
        self.flush(drop=True)
        for fd in (1, 2):
            try:
                _write(fd, marker)
            except OSError:
                pass

    def drained(self) -> bool:
        """Whether the host has read every byte written to both pipes."""
        return self._pipes and not _unread(1) and not _unread(2)


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(_fstat(fd).st_mode)
    except OSError:
        return False


def _unread(fd: int) -> int:
    """Bytes written to the pipe `fd` that its reader (the host) has not read yet; a pipe's
    write end answers FIONREAD for the whole pipe. -1 when it cannot be told."""
    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
    except OSError:
        return -1


def _text_stream(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        open(fd, "wb", buffering=1 << 16, closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
