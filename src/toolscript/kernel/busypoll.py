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
wake-up too. So the window is short (a few wake-ups' worth, by default), and three late
replies in a row are enough to back off (two backed off where replies come just about in
time, as on a machine whose round trip is 36 µs with polling and 70 without one side's: a
kernel's reply there takes 25 µs of polling, often 31-38).

Goal: polling comes back once replies can come in time again. What fails: a retry by one
side alone. A reply comes in time only when the other side was polling too (awake, on warm
caches) when the message it answers arrived; once both sides have backed off, a retry by
either finds the other asleep and is late, so both stay backed off, for thousands of calls
at a time, on a machine where polling saves half of every call (bench/README.md, eleventh
pass: a run of sequential calls switched between 36 and 108 µs a call, every few thousand
calls). What we do: while backed off, each side retries in the same slots of the monotonic
clock, which the host and its kernels share: its first expected reply in the first
`RETRY_SLOT` of a `RETRY_PERIOD` begins a retry, and it polls for that one and the next
`RETRY_BURST - 1` replies it expects, wherever they fall. Both sides begin theirs within a
round trip of each other, and the round trips of a retry find both awake after the first
(a retry bound to the slot's end failed where vCPUs that had both slept took 200-500 µs to
wake: a round trip or less fit in the slot). Each retry that ends backed off doubles the
period (up to `MAX_DOUBLINGS` times), and a retry polls for each reply no longer than
`RETRY_WORTH` (a reply found later could not bring polling back), so where replies are slow
for good (a loaded machine, a slow tool) retrying costs at most `RETRY_BURST` polls of
`RETRY_WORTH` in every `RETRY_PERIOD << MAX_DOUBLINGS` seconds (0.3% of a core).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DEFAULT_WINDOW = 0.0002
"""Seconds each side polls for a reply before it sleeps, unless the runtime says otherwise."""

MAX_WINDOW = 0.01
"""A window the kernel is told must be shorter than this, or it does not poll."""

MISSES_BEFORE_BACKING_OFF = 3
"""Late replies in a row that come before polling is tried only now and then."""

RETRY_PERIOD = 0.004
"""While backed off, a retry begins in the first `RETRY_SLOT` of every this many seconds of
the monotonic clock, at first."""

RETRY_SLOT = 0.001
"""Seconds at the start of each `RETRY_PERIOD` in which a side that backed off begins a
retry with the first reply it expects: longer than a round trip between sleeping sides,
so that both begin theirs in the same slot."""

RETRY_WORTH = 0.00006
"""Seconds of polling a reply found by a retry is worth: it brings polling back if found
within this, twice `WORTH`. A side that has just woken answers slower than one that has been
polling all along (its caches are cold), so a retry judged by `WORTH` kept failing where a
polled reply takes 25 µs and a retried one 31-38 (bench/README.md, eleventh pass); once back,
three replies past `WORTH` in a row back it off again, so this costs at most a few polls of
up to `RETRY_WORTH` in each retry period where replies sit between the two. A retry polls no
longer than this for any reply."""

RETRY_BURST = 3
"""Expected replies a retry polls for: the first round trip of a retry is late for one side
or the other (its peer woke from a sleep to send it); the next ones find both awake."""

WORTH = 0.00003
"""Seconds of polling a reply is worth: about what a wake-up costs on these machines (the
sleep's system calls, and the work after it run on cold caches: bench/README.md). A reply
found only after polling longer cost more CPU than the wake-up it saved, and counts as late.
(On a loaded machine the other side waits for a core, and replies come that way.)"""

MAX_DOUBLINGS = 4
"""Each retry that does not bring polling back doubles `RETRY_PERIOD`, this many times at
most."""


class BusyPoll:
    """When a reply is due (`expect()`), `select` polls before it sleeps.

    `window` is in seconds; 0 turns polling off. For the kind of reply expected last,
    `misses` counts late replies in a row, `late` the retries since it backed off, `slot`
    is the number of the slot of the last of them and `burst` the replies it has still to
    poll for; the other kinds' wait in `_others`.
    """

    __slots__ = ("_others", "burst", "due", "late", "misses", "reply", "slot", "window")

    def __init__(self, window: float = 0.0) -> None:
        self.window = window
        self.due = 0.0
        self.misses = 0
        self.late = 0
        self.slot = -1
        self.burst = 0
        self.reply = ""
        self._others: dict[str, tuple[int, int, int, int]] = {}

    def expect(self, reply: str = "") -> None:
        """A reply of kind `reply` (a tool's key, or "" for any other) is due soon: the next
        sleep polls first, for up to `window` seconds, unless that kind keeps coming late
        (then only in the retry slots: see the module's docstring)."""
        if self.window <= 0:
            return
        if reply != self.reply:
            self._others[self.reply] = (self.misses, self.late, self.slot, self.burst)
            self.misses, self.late, self.slot, self.burst = self._others.pop(reply, (0, 0, -1, 0))
            self.reply = reply
        now = time.perf_counter()
        if self.misses >= MISSES_BEFORE_BACKING_OFF:
            if self.burst > 0:
                self.burst -= 1  # a retry goes on, past its slot if it must
            else:
                if now % RETRY_PERIOD >= RETRY_SLOT:
                    return
                slot = int(now // RETRY_PERIOD)
                if slot == self.slot or slot % (1 << min(self.late, MAX_DOUBLINGS)):
                    return
                self.slot = slot  # a retry begins
                self.late += 1
                self.burst = RETRY_BURST - 1
            # No reply found later could bring polling back: polling on would only cost.
            self.due = now + min(self.window, RETRY_WORTH)
            return
        self.due = now + self.window

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
                waited = now - start
                if waited <= WORTH or (
                    waited <= RETRY_WORTH and self.misses >= MISSES_BEFORE_BACKING_OFF
                ):
                    self.misses = self.late = self.burst = 0
                else:
                    self.misses += 1
                return events
            now = time.perf_counter()
        if now >= due:
            self.misses += 1
        if timeout is not None:
            timeout = max(0.0, timeout - (now - start))
        return select(timeout)
