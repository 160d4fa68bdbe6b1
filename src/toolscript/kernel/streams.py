"""The script's stdout and stderr, and the markers that say which bytes are one script's.

fd 1 and fd 2 are pipes the host reads; the kernel writes a marker made from the script's
nonce to both before and after each script (see the host's `toolscript.host.output`), and
leaves either out when it cannot matter.
"""

from __future__ import annotations

import fcntl
import io
import os
import stat
import sys
import termios


class ScriptOutput:
    """`sys.stdout` and `sys.stderr` for scripts: text over fd 1 and fd 2, kept in place."""

    def __init__(self) -> None:
        self.stdout = _text_stream(1)
        self.stderr = _text_stream(2)
        self._pipes = _is_pipe(1) and _is_pipe(2)  # so `drained` can tell what is unread
        self.install()

    def install(self) -> None:
        """Make these the script's `sys.stdout` and `sys.stderr` again."""
        sys.stdout = self.stdout
        sys.stderr = self.stderr

    def flush(self) -> None:
        for stream in (self.stdout, self.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass

    def mark(self, marker: bytes) -> None:
        """Flush what Python holds for fd 1 and 2, then write `marker` to both."""
        self.flush()
        for fd in (1, 2):
            try:
                os.write(fd, marker)
            except OSError:
                pass

    def drained(self) -> bool:
        """Whether the host has read every byte written to both pipes."""
        return self._pipes and not _unread(1) and not _unread(2)


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
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
