"""Polling the selector for a moment before sleeping, while a reply is due.

Goal: a tool call's round trip close to the cost of the work itself. What fails: on a
virtual machine, a process that sleeps in `epoll_wait` and is woken by the other side's write
pays for the wake-up twice: the wake-up of a halted vCPU, and then its code on cold caches,
which on these machines more than doubles the CPU a call costs (bench/README.md has the
figures). What we do: when one
side sends something that will be answered at once (a call, an answer, a script), it polls
its selector without sleeping for up to `window` seconds before it sleeps as usual.

The cost is CPU, bounded: at most one window per message sent. Both sides use it only while
there are spare cores (the host decides, and tells each kernel with its script), and a side
whose replies keep coming later than its window stops polling, trying again now and then.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DEFAULT_WINDOW = 0.001
"""Seconds each side polls for a reply before it sleeps, unless the runtime says otherwise."""

MAX_WINDOW = 0.01
"""A window the kernel is told must be shorter than this, or it does not poll."""

MISSES_BEFORE_BACKING_OFF = 4
"""Windows in a row that end with nothing come before polling is tried only now and then."""

RETRY_EVERY = 16
"""While backed off, one expected reply in this many is polled for."""


class BusyPoll:
    """When a reply is due (`expect()`), `select` polls before it sleeps.

    `window` is in seconds; 0 turns polling off.
    """

    __slots__ = ("due", "misses", "skipped", "window")

    def __init__(self, window: float = 0.0) -> None:
        self.window = window
        self.due = 0.0
        self.misses = 0
        self.skipped = 0

    def expect(self) -> None:
        """A reply is due soon: the next sleep polls first, for up to `window` seconds."""
        if self.window <= 0:
            return
        if self.misses >= MISSES_BEFORE_BACKING_OFF:
            self.skipped += 1
            if self.skipped % RETRY_EVERY:
                return
        self.due = time.perf_counter() + self.window

    def select(self, select: Callable[[float | None], list[Any]], timeout: float | None) -> Any:
        """`select(timeout)`, polling first when a reply is due."""
        due = self.due
        if not due or timeout == 0:
            return select(timeout)
        self.due = 0.0
        start = now = time.perf_counter()
        if start >= due:
            return select(timeout)  # the loop was busy all through the window
        end = due if timeout is None else min(due, start + timeout)
        while now < end:
            events = select(0)
            if events:
                self.misses = 0
                return events
            now = time.perf_counter()
        if now >= due:
            self.misses += 1
        if timeout is not None:
            timeout = max(0.0, timeout - (now - start))
        return select(timeout)
