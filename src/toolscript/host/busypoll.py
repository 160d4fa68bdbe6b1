"""The host's side of busy polling: its event loop polls before it sleeps while a kernel's
reply is due (see `toolscript.kernel.busypoll` for why).

The host's event loop is the caller's, so this is careful with it:

- It works only on the standard library's selector event loops (on another loop, uvloop
  included, the host never polls; kernels still do).
- It changes nothing but the timing of the selector's `select`: the loop's own selector is
  asked `select(0)` in turn until something is ready or the window ends, then sleeps as usual.
  Any ready file descriptor ends the polling, not only a kernel's.
- It polls only while scripts running on this loop leave a core spare for it: at most one
  script per other core. With more, every core already has work, and polling would take a
  core from a kernel or a tool.
- `detach` by the last runtime on the loop puts the selector back as it was.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

from ..kernel.busypoll import DEFAULT_WINDOW, MAX_WINDOW, BusyPoll

__all__ = ["DEFAULT_WINDOW", "MAX_WINDOW", "LoopPoll", "attach", "detach"]


class LoopPoll:
    """Busy polling on one event loop, shared by the runtimes on it."""

    def __init__(self, window: float, cores: int) -> None:
        self.poll = BusyPoll(window)
        self.cores = cores
        self.running = 0
        """Scripts running now in the interpreters of the runtimes on this loop."""
        self.users = 0
        self._select: Any = None
        self._selector: Any = None

    def script_started(self) -> float:
        """Count a script in; the window its kernel may poll for (0 when no core is spare)."""
        self.running += 1
        return self.poll.window if self.running < self.cores else 0.0

    def script_ended(self) -> None:
        self.running = max(0, self.running - 1)

    def expect(self, reply: str = "") -> None:
        """A kernel will answer what was just sent: poll for it, if a core is spare. `reply`
        is the kind of frame expected, counted apart as `BusyPoll.expect` says: a script's
        first frame ("start"), which can take a while, or (by default) the next call."""
        if self._select is not None and self.running < self.cores:
            self.poll.expect(reply)

    def _install(self, loop: asyncio.AbstractEventLoop) -> None:
        selector = getattr(loop, "_selector", None)
        if not isinstance(loop, asyncio.SelectorEventLoop) or selector is None:
            return  # not the standard library's loop: the host does not poll
        original = selector.select
        poll = self.poll

        def select(timeout: float | None = None) -> Any:
            return poll.select(original, timeout)

        selector.select = select
        self._selector, self._select = selector, select

    def _uninstall(self) -> None:
        selector, select = self._selector, self._select
        self._selector = self._select = None
        if selector is not None and vars(selector).get("select") is select:
            del selector.select


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPoll] = weakref.WeakKeyDictionary()


def attach(window: float) -> LoopPoll | None:
    """Busy polling for the running loop, or None when `window` is 0 or there is one core.

    The first runtime on a loop sets the window; each `attach` needs its `detach`.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if window <= 0 or (cores or 1) < 2:
        return None
    loop = asyncio.get_running_loop()
    shared = _loops.get(loop)
    if shared is None:
        shared = _loops[loop] = LoopPoll(window, cores or 1)
        shared._install(loop)
    shared.users += 1
    return shared


def detach(shared: LoopPoll) -> None:
    """The runtime that attached is done with it; the last one puts the selector back."""
    shared.users -= 1
    if shared.users <= 0:
        shared._uninstall()
        for loop, value in list(_loops.items()):
            if value is shared:
                del _loops[loop]
