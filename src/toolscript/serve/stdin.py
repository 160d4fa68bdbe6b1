"""Standard input for the stdio server, which a stop can end the way end of input does.

Goal: on SIGTERM or SIGINT, `toolscript serve` over stdio ends as it does when the client
closes its stdin: scripts stopped, interpreters, upstream servers and the journal closed, the
working folder removed. What fails: the MCP SDK reads stdin with a blocking `readline` in a
worker thread, which no cancellation reaches, so the server waits for the client's next line
(forever, from an idle client) and the process cannot end while the thread reads. What we do:
read the wire in that thread ourselves, waiting on stdin and on a pipe of our own at once;
`end()` writes to the pipe, and the reader answers end of input. As the SDK does, fd 0 points
at the null device while serving, so a child process a tool starts cannot read the protocol.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
from collections.abc import Callable, Iterator

__all__ = ["StdinLines"]

_CHUNK = 65536


class StdinLines:
    """The lines of a file descriptor, read with blocking calls, until it ends or `end()`.

    `readline` runs in one worker thread at a time (anyio's `AsyncFile` calls it there);
    `end` may be called from any thread, any number of times.
    """

    def __init__(self, wire: int) -> None:
        self._wire = wire
        self._wake_read, self._wake_write = os.pipe()
        self._buffer = b""
        self.on_end_of_input: Callable[[], None] | None = None
        """Called (in the reading thread) when the client closes its end, if set; the end of
        input then waits for `end()`, so that the stop it starts can still answer the
        client's calls in progress before the server's session ends."""
        self._poll = select.poll()
        self._poll.register(wire, select.POLLIN)
        self._poll.register(self._wake_read, select.POLLIN)

    @classmethod
    @contextlib.contextmanager
    def claim(cls) -> Iterator[StdinLines]:
        """The lines of this process's stdin; meanwhile fd 0 reads the null device."""
        wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        lines = cls(wire)
        try:
            yield lines
        finally:
            lines.end()
            os.dup2(wire, 0)
            os.close(wire)
            lines._close_pipe()

    def readline(self) -> str:
        """The next line with its newline; at end of input, or once ended, the empty string."""
        while b"\n" not in self._buffer:
            ready = {fd for fd, _ in self._poll.poll()}
            if self._wake_read in ready:
                return ""
            chunk = os.read(self._wire, _CHUNK)
            if not chunk:
                rest, self._buffer = self._buffer, b""
                if rest:
                    return rest.decode("utf-8", errors="replace")
                stop, self.on_end_of_input = self.on_end_of_input, None
                if stop is not None:
                    self._poll.unregister(self._wire)  # at its end: it would wake us for ever
                    stop()
                    continue  # until `end()`
                return ""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", errors="replace") + "\n"

    def end(self) -> None:
        """Make `readline` answer end of input from now on, waking it if it waits."""
        with contextlib.suppress(OSError):  # the pipe is full or closed: it is already ended
            os.write(self._wake_write, b"x")

    def close(self) -> None:
        """Nothing to release here: `claim` gives the descriptors back when it ends."""

    def _close_pipe(self) -> None:
        for descriptor in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(descriptor)
        self._wake_read = self._wake_write = -1
