"""Polling the selector for a moment before sleeping, while a reply is due.

Goal: a tool call's round trip close to the cost of the work itself. What fails: on a
virtual machine, a process that sleeps in `epoll_wait` and is woken by the other side's write
pays for the wake-up twice: the wake-up of a halted vCPU, and then its code on cold caches,
which on these machines more than doubles the CPU a call costs (bench/README.md has the
figures). What we do: when one
side sends something that will be answered at once (a call, an answer, a script), it polls
its selector without sleeping for up to `window` seconds before it sleeps as usual.

The cost is CPU, bounded: at most one window per message sent. Both sides use it only while
there are spare cores (the host decides, and tells each kernel with its script), and a kind of
reply that keeps coming later than the window stops being polled for, tried again now and
then, less often each time it is late again. A reply is late when it comes after more
polling than a wake-up costs (`WORTH`), so polling backs off where replies come slowly, as
on a loaded machine, where the other side waits for a core. The kernel counts each tool
apart: an MCP tool that answers in milliseconds is not polled for, while a Python tool
beside it still is.

Polling must never cost more CPU than the wake-ups it saves. A reply found within `WORTH`
saved a wake-up and cost less; one found later, or not at all, cost its polling and the
wake-up too. So the window is short (a few wake-ups' worth, by default), two late replies
in a row are enough to back off, and a retry while backed off polls for `WORTH` at most: it
only asks whether replies come in time again, which a longer poll cannot tell better.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DEFAULT_WINDOW = 0.0002
"""Seconds each side polls for a reply before it sleeps, unless the runtime says otherwise."""

MAX_WINDOW = 0.01
"""A window the kernel is told must be shorter than this, or it does not poll."""

MISSES_BEFORE_BACKING_OFF = 2
"""Late replies in a row that come before polling is tried only now and then."""

RETRY_EVERY = 16
"""While backed off, one expected reply in this many is polled for, at first."""

WORTH = 0.00003
"""Seconds of polling a reply is worth: about what a wake-up costs on these machines (the
sleep's system calls, and the work after it run on cold caches: bench/README.md). A reply
found only after polling longer cost more CPU than the wake-up it saved, and counts as late.
(On a loaded machine the other side waits for a core, and replies come that way.)"""

MAX_DOUBLINGS = 4
"""Each retry that is late again doubles the wait for the next, this many times at most."""


class BusyPoll:
    """When a reply is due (`expect()`), `select` polls before it sleeps.

    `window` is in seconds; 0 turns polling off. `misses` and `skipped` count for the kind of
    reply expected last; the other kinds' counts wait in `_others`.
    """

    __slots__ = ("_others", "due", "misses", "reply", "skipped", "window")

    def __init__(self, window: float = 0.0) -> None:
        self.window = window
        self.due = 0.0
        self.misses = 0
        self.skipped = 0
        self.reply = ""
        self._others: dict[str, tuple[int, int]] = {}

    def expect(self, reply: str = "") -> None:
        """A reply of kind `reply` (a tool's key, or "" for any other) is due soon: the next
        sleep polls first, for up to `window` seconds, unless that kind keeps coming late."""
        if self.window <= 0:
            return
        if reply != self.reply:
            self._others[self.reply] = (self.misses, self.skipped)
            self.misses, self.skipped = self._others.pop(reply, (0, 0))
            self.reply = reply
        if self.misses >= MISSES_BEFORE_BACKING_OFF:
            self.skipped += 1
            late = min(self.misses - MISSES_BEFORE_BACKING_OFF, MAX_DOUBLINGS)
            if self.skipped % (RETRY_EVERY << late):
                return
            self.due = time.perf_counter() + min(self.window, WORTH)  # a retry
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
                self.misses = 0 if now - start <= WORTH else self.misses + 1
                return events
            now = time.perf_counter()
        if now >= due:
            self.misses += 1
        if timeout is not None:
            timeout = max(0.0, timeout - (now - start))
        return select(timeout)
