"""The kernel's event loop: asyncio's, with a selector that says when it is idle and polls
before it sleeps, and a shorter road to `call_soon`."""

from __future__ import annotations

import asyncio
import contextvars
import select
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

from .busypoll import BusyPoll
from .calls import ScriptTask
from .descriptors import OwnDescriptors

SELECTOR = "the event loop's selector"


class WatchedSelector(selectors.DefaultSelector):
    """The loop's selector, which says whether the main thread is idle in it, and polls for a
    moment before sleeping while a reply from the host is due (see `busypoll`)."""

    idle = False

    def __init__(self) -> None:
        super().__init__()
        self.busy = BusyPoll()

    def select(self, timeout: float | None = None) -> Any:
        self.idle = True
        try:
            return self.busy.select(super().select, timeout)
        finally:
            self.idle = False

    def move(self, own: OwnDescriptors) -> None:
        """Move the selector's own descriptor (an epoll, a kqueue), if it has one, to the top
        of the table; `watch` then checks it."""
        poller: Any = getattr(self, "_selector", None)
        fromfd = getattr(type(poller), "fromfd", None)
        if poller is None or fromfd is None:
            return
        fd = own.place(poller.fileno(), SELECTOR)
        if fd != poller.fileno():
            poller.close()
            self._selector = fromfd(fd)

    def watch(self, own: OwnDescriptors, wakeup: int) -> None:
        """Have `own` check that the selector is still the loop's: every epoll has the same
        inode, so an epoll put in its place would pass for it, but would not hold `wakeup`
        (changing its registration to what it is raises then)."""
        poller: Any = getattr(self, "_selector", None)
        epoll: Any = getattr(select, "epoll", None)
        if epoll is not None and isinstance(poller, epoll):
            own.hold(
                poller.fileno(), SELECTOR, lambda: self._selector.modify(wakeup, select.EPOLLIN)
            )


class KernelLoop(asyncio.SelectorEventLoop):
    """The kernel's event loop: asyncio's, with a shorter road to `call_soon`.

    Goal: a tool call costs the kernel little beyond what asyncio itself must do. What
    fails: each call schedules three callbacks (its task's first step, its wake-up, the
    gather's or awaiter's done callback), and asyncio's `call_soon` takes five Python calls
    to make each one, two of them to ask whether the loop is closed or in debug mode. What
    we do: make the same `Handle` here, in one call, and leave debug mode and a closed loop
    to asyncio's own code, with all its checks.
    """

    def call_soon(  # type: ignore[override]
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        loop: Any = self  # the private state of asyncio's loop, which this reads and fills
        if loop._debug or loop._closed:
            return super().call_soon(callback, *args, context=context)
        handle: Any = _new_handle(asyncio.Handle)
        handle._context = contextvars.copy_context() if context is None else context
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        loop._ready.append(handle)
        return handle  # type: ignore[no-any-return]

    def move_wakeup(self, own: OwnDescriptors) -> int:
        """Move the loop's wake-up socket pair to the top of the table; its reading end."""
        loop: Any = self  # asyncio's private state: the pair and its reader
        loop._remove_reader(loop._ssock.fileno())
        loop._ssock = moved_socket(loop._ssock, own, "the event loop's wake-up socket")
        loop._csock = moved_socket(loop._csock, own, "the event loop's wake-up socket")
        loop._add_reader(loop._ssock.fileno(), loop._read_from_self)
        return int(loop._ssock.fileno())


_new_handle: Any = object.__new__


def moved_socket(sock: socket.socket, own: OwnDescriptors, what: str) -> socket.socket:
    """`sock`, moved to the top of the descriptor table and held by `own` as `what`."""
    fd = own.place(sock.fileno(), what)
    if fd == sock.fileno():
        return sock
    blocking = sock.getblocking()
    sock.close()
    moved = socket.socket(fileno=fd)
    moved.setblocking(blocking)
    return moved


def task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    """Every task on the kernel's loop is a `ScriptTask` (see `calls`)."""
    return ScriptTask(coro, loop=loop, **kwargs)


def forbid_asyncio_run() -> None:
    """Make `asyncio.run` on the main thread, where the kernel's loop runs, an error that
    says what to write instead; on other threads it works as ever."""
    original = asyncio.run

    def run(main: Any, *, debug: bool | None = None) -> Any:
        if threading.get_ident() == _MAIN:
            if asyncio.iscoroutine(main):
                main.close()
            raise RuntimeError(
                "asyncio.run() cannot be used here: the script already runs inside an "
                "event loop. Use top-level `await main()` instead."
            )
        return original(main, debug=debug)

    asyncio.run = run


_MAIN = threading.main_thread().ident or 0
