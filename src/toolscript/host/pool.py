"""Interpreters for shells: warm ones kept ready, and a cap on how many live at once.

A shell's first run should not pay for an interpreter's start. The pool keeps `size` started
interpreters (forked from the template when there is one, spawned otherwise), hands one out
when asked and refills in the background. Every interpreter a shell or a background script
holds counts against `cap`; a request over the cap waits in line for at most `queue_timeout`
seconds and is then refused with the reason, never left waiting forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from .interpreter import Interpreter, InterpreterStartError

_log = logging.getLogger(__name__)


CLOSED = "the runtime was closed before this script could have an interpreter"
"""Why a request for an interpreter made or waiting while the runtime closes is refused."""


class CapReached(Exception):
    """No interpreter could be had within the wait; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InterpreterPool:
    """Warm interpreters and the cap on live ones.

    `make()` builds an unstarted `Interpreter`; `acquire()` returns a started one and counts
    it as live until `release()`.
    """

    def __init__(
        self,
        make: Callable[[], Interpreter],
        size: int,
        cap: int,
        queue_timeout: float,
        before_fill: Awaitable[Any] | None = None,
    ) -> None:
        self._make = make
        self._before_fill = before_fill
        # More warm ones than may ever be live at once would only wait, each a process.
        self.size = min(size, cap)
        self.cap = cap
        self.queue_timeout = queue_timeout
        self._ready: deque[Interpreter] = deque()
        self._live = 0
        self._freed = asyncio.Condition()
        self._filler: asyncio.Task[None] | None = None
        self._closed = False
        self.last_failure: str | None = None

    @property
    def live(self) -> int:
        """Interpreters held by shells and background scripts now."""
        return self._live

    @property
    def warm(self) -> int:
        return len(self._ready)

    def fill(self) -> None:
        """Start refilling the warm interpreters in the background (if not already)."""
        if self._closed or self.size <= 0:
            return
        if self._filler is None or self._filler.done():
            self._filler = asyncio.get_running_loop().create_task(self._fill())

    async def _fill(self) -> None:
        if self._before_fill is not None:
            # Warm interpreters are worth making from the template: wait until it is ready.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._before_fill)
        while not self._closed and len(self._ready) < self.size:
            interpreter = self._make()
            try:
                await interpreter.start()
            except InterpreterStartError as error:
                self.last_failure = error.reason
                _log.warning("toolscript: a warm interpreter could not start: %s", error.reason)
                return  # a shell asking for one will see the reason itself
            if self._closed:
                await interpreter.close()
                return
            self._ready.append(interpreter)

    async def acquire(self) -> Interpreter:
        """A started interpreter, counted live. Raises `CapReached` or `InterpreterStartError`."""
        async with self._freed:
            if self._live >= self.cap and not self._closed:
                try:
                    await asyncio.wait_for(
                        self._freed.wait_for(lambda: self._live < self.cap or self._closed),
                        self.queue_timeout,
                    )
                except TimeoutError:
                    raise CapReached(
                        f"all {self.cap} interpreters this runtime allows are in use, and none "
                        f"was freed within {self.queue_timeout:g} s; try again later, or raise "
                        "max_interpreters"
                    ) from None
            if self._closed:
                raise CapReached(CLOSED)
            self._live += 1
        try:
            interpreter = self._take_warm()
            if interpreter is None:
                interpreter = self._make()
                try:
                    await interpreter.start()
                except InterpreterStartError:
                    if interpreter.launch.head_start is None:
                        raise
                    # The kernel the command line asked for ahead (`headstart`) died before
                    # this runtime took it (killed from outside, say): nothing of any run
                    # had reached it, so one is started anew (a real failure fails again).
                    interpreter = self._make()
                    await interpreter.start()
        except BaseException:
            await self.release()
            raise
        if self._closed:
            # Closed while it started: nobody would ever end it.
            try:
                await asyncio.shield(interpreter.close())
            finally:
                await self.release()
            raise CapReached(CLOSED)
        self.fill()
        return interpreter

    def _take_warm(self) -> Interpreter | None:
        while self._ready:
            interpreter = self._ready.popleft()
            if interpreter.alive:
                return interpreter
        return None

    def count_live(self) -> None:
        """An interpreter taken back from a keeper is live: it counts against the cap."""
        self._live += 1

    async def release(self) -> None:
        """One live interpreter is gone: let the next in line have its place."""
        async with self._freed:
            self._live = max(0, self._live - 1)
            self._freed.notify()

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Stop refilling and close the warm interpreters (bounded); a request waiting in
        line, or one made from now on, is refused."""
        self._closed = True
        async with self._freed:
            self._freed.notify_all()
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._filler
        ready, self._ready = list(self._ready), deque()
        await asyncio.gather(
            *(interpreter.close() for interpreter in ready), return_exceptions=True
        )

    async def discard_warm(self) -> None:
        """Close the warm interpreters (their tool bindings are stale) and refill."""
        ready, self._ready = list(self._ready), deque()
        await asyncio.gather(
            *(interpreter.close() for interpreter in ready), return_exceptions=True
        )
        self.fill()
