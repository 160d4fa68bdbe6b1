"""How a stop reaches the script, and what ends with it.

Goal: interrupt blocking C calls like `time.sleep`, pure-Python loops and awaits alike, with
an exception the script can clean up after; then end everything the script started.

- The host sends SIGINT. A frame could not do it: while the script blocks the main thread,
  nothing reads the channel. A stray SIGINT (no script running, or the script already ended,
  its `done` still on the way) is ignored; the host signals only before it has read `done`,
  so the signal is always handled before the next script's `exec` can arrive.
- If the main thread is idle in the selector (the script is awaiting), raising there would
  tear the loop down, so the handler wakes the loop to cancel the script's task: the script
  sees `CancelledError` at its `await`.
- If the main thread is anywhere else (script code, or a C call it made), the handler raises
  `KeyboardInterrupt` there. A handler that runs inside the kernel's own or asyncio's code
  (`in_internal_code`) cancels the task instead, so the kernel's state is never torn.
- A script that ignores both is killed by the host after the grace period.
- Once the script has ended, `end_what_it_started` ends what else could run its code: it
  disarms the interval timers and faulthandler's watchdog, cancels the tasks and timers it
  left on the loop, takes the loop's readers, writers and signal handlers that are not the
  kernel's (closing the transports they belong to), kills the processes it started (in the
  sandbox), and counts what it cannot end from here: threads (those with no Python frame,
  and native ones the script made, too) and POSIX timers. The host replaces an interpreter
  that says any are left.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import faulthandler
import functools
import gc
import os
import selectors
import signal
import sys
import threading
import time
import types
from typing import TYPE_CHECKING, Any, NamedTuple

from .cells import KERNEL_DIR

if TYPE_CHECKING:
    from .calls import CallTable

_INTERNAL = (
    KERNEL_DIR,
    os.path.dirname(os.path.abspath(asyncio.__file__)),
    os.path.abspath(selectors.__file__),
)


def in_internal_code(frame: types.FrameType | None) -> bool:
    """Whether a signal handler interrupted the kernel's own or asyncio's code."""
    filename = frame.f_code.co_filename if frame is not None else ""
    return filename.startswith(_INTERNAL)


def in_script_code(frame: types.FrameType | None) -> bool:
    """Whether a signal handler interrupted the script's code, or code the script called:
    a script's frame is on the stack. Elsewhere (the kernel handling a frame in `json`'s
    code, say, or a script not begun yet) `KeyboardInterrupt` would tear the kernel's work."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<script "):
            return True
        frame = frame.f_back
    return False


class Left(NamedTuple):
    """What a stop could not end (the interpreter must go with it), and the connections it
    closed."""

    threads: int
    timers: int
    closed: int = 0


def is_internal(callback: object) -> bool:
    """Whether `callback` runs the kernel's or asyncio's own code (or C code): told by its
    code's file, not by what it is bound to (the script binds its own functions to the
    loop, or to the kernel's objects, with `types.MethodType`)."""
    for _ in range(10):  # partials of partials
        if isinstance(callback, functools.partial):
            callback = callback.func
        elif hasattr(callback, "__func__"):
            callback = callback.__func__
        else:
            break
    code = getattr(callback, "__code__", None)
    if code is None:
        if hasattr(callback, "__self__") or isinstance(callback, type):
            return True  # a builtin or a C method: a task's step, say
        call = getattr(type(callback), "__call__", None)  # noqa: B004 (the method)
        code = getattr(call, "__code__", None)
        if code is None:
            return True
    filename: str = code.co_filename
    return filename.startswith(_INTERNAL)


def reset_hooks(loop: asyncio.AbstractEventLoop, task_factory: object) -> None:
    """Take back what runs the script's code whenever the kernel runs Python, or when it
    makes a task: the profile and trace functions, `gc`'s callbacks and thresholds, the
    loop's task factory and exception handler. Called as a stop begins (the stop's own
    task must not be made by the script's factory) and again after the script's clean-up."""
    sys.setprofile(None)
    sys.settrace(None)
    threading.setprofile(None)
    threading.settrace(None)
    gc.callbacks.clear()  # the kernel keeps none
    gc.set_threshold(*_GC_THRESHOLDS)
    if loop.get_task_factory() is not task_factory:
        loop.set_task_factory(task_factory)  # type: ignore[arg-type]
    loop.set_exception_handler(None)


_GC_THRESHOLDS = gc.get_threshold()


class _Inert(asyncio.Protocol):
    """The protocol of a transport a stop closes: it hears of the close, and does nothing."""


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event == "sys.addaudithook":
        raise RuntimeError("sys.addaudithook is not allowed in a toolscript interpreter")


AUDIT_HOOK_CODE = _audit.__code__
"""The kernel's audit hook runs on behalf of whatever raised the event (the script's `open`,
its `time.sleep`): an interrupt that lands in it is taken where the event came from."""


def forbid_audit_hooks() -> None:
    """Refuse `sys.addaudithook` from here on: a hook cannot be removed, and runs whenever
    the kernel does what is audited (opens a file, starts a thread), a stop's clean-up too."""
    sys.addaudithook(_audit)


def os_threads() -> frozenset[str] | None:
    """The ids of this process's threads as the OS lists them (`None` where it cannot)."""
    try:
        return frozenset(os.listdir("/proc/self/task"))
    except OSError:
        return None


async def end_what_it_started(
    loop: asyncio.AbstractEventLoop,
    calls: CallTable,
    sandboxed: bool,
    grace: float,
    own_fds: frozenset[int] = frozenset(),
    threads_before: frozenset[str] | None = None,
    task_factory: object = None,
) -> Left:
    """After a stop: end what the script started; what still runs that cannot be ended.

    Tasks are cancelled and given a moment to run their cleanup and tell which calls they
    stopped waiting for. In the sandbox, every process but its init and this kernel is
    killed. Threads cannot be stopped from outside: they are waited for `grace / 2` seconds
    (a second at most), and the host replaces an interpreter that says some still run, or
    that POSIX timers are left. `own_fds` are the kernel's own descriptors on the loop;
    `threads_before` the OS's threads when the script began (see `os_threads`).
    """
    # Timers first: a signal handler they fire runs the script's code in the main thread,
    # whenever it likes, and may queue tool calls for the next script (`call_soon`).
    _disarm_timers()
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks(loop) if task is not current]
    calls.stop_reaches_script()
    for task in others:
        task.cancel()
    calls.cancel_waiting()
    if others:
        await asyncio.wait(others, timeout=1.0)
    _cancel_timers(loop, calls)
    if sandboxed:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)  # spares PID 1 (the init) and the caller
        _reap_killed_children(time.monotonic() + 0.5)
    executor = getattr(loop, "_default_executor", None)
    if executor is not None:
        executor.shutdown(wait=False)  # its idle workers end; busy ones count below
    deadline = time.monotonic() + max(0.0, min(grace / 2, 1.0))
    left = 0
    for thread in threading.enumerate():
        if thread is threading.main_thread():
            continue
        with contextlib.suppress(Exception):  # a `join` of the script's own may raise
            thread.join(max(0.0, deadline - time.monotonic()))
        left += bool(_alive(thread))
    # The task's cleanup above ran the script's code: what it may have armed again ends here.
    reset_hooks(loop, task_factory)
    _disarm_timers()
    closed = _end_loop_leftovers(loop, own_fds)
    # What `threading` says is the script's word: a thread made with `_thread` is not
    # listed, and a `Thread` of its own may say it ended. The interpreter's own list of the
    # threads that run Python lists only those with a frame (a loop all in C, `deque(map(
    # ...))` say, has none), and `_thread`'s count only those it started: the OS's list
    # also has the native threads the script made (through `ctypes`, a POSIX timer's or
    # faulthandler's) that can call back into Python. A library's idle workers in C
    # (OpenBLAS's, say) are in it too when the script started them: a stop of such a script
    # replaces the interpreter. A thread whose `join` returned may take a moment to leave.
    while (running := _threads_left(threads_before)) > 0:
        if time.monotonic() >= deadline:
            break
        time.sleep(0.001)
    return Left(max(left, running), _timers_left(), closed)


def _threads_left(before: frozenset[str] | None) -> int:
    """Threads still running besides the main one, by the largest of the three counts."""
    counts = [python_threads() - 1, _thread._count()]
    now = os_threads()
    if now is not None and before is not None:
        counts.append(len(now - before))
    return max(counts)


def _disarm_timers() -> None:
    """Disarm what fires without the loop: the interval timers (`signal.setitimer`,
    `signal.alarm`) and faulthandler's repeating dump (`dump_traceback_later`)."""
    for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
        with contextlib.suppress(OSError):
            signal.setitimer(which, 0)
    faulthandler.cancel_dump_traceback_later()


def _timers_left() -> int:
    """POSIX timers (`timer_create`, through `ctypes`) that still exist, and interval timers
    armed again since they were disarmed: they fire signals, or start threads, of their own."""
    armed = sum(
        signal.getitimer(which) != (0.0, 0.0)
        for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
    )
    try:
        with open("/proc/self/timers") as listed:
            posix = sum(line.startswith("ID:") for line in listed)
    except OSError:
        posix = 0
    return armed + posix


def _end_loop_leftovers(loop: asyncio.AbstractEventLoop, own_fds: frozenset[int]) -> int:
    """Take off the loop what would run the script's code when a descriptor or a signal is
    ready, or at its next pass: readers and writers on descriptors not the kernel's (a
    transport's closed with its connection, a server's with the server), signal handlers
    (the kernel has none on its loop), and callbacks of the script's waiting to run. Looked
    over again until nothing is left (closing a transport runs the script's protocol, which
    may add more). How many connections and servers it closed."""
    state: Any = loop  # asyncio's private state: its selector, handlers and ready queue
    selector = getattr(state, "_selector", None)
    closed = 0
    for _ in range(20):
        found = False
        for key in [] if selector is None else list(selector.get_map().values()):
            if key.fd in own_fds:
                continue
            removers = (state._remove_reader, state._remove_writer)
            for handle, remove in zip(key.data, removers, strict=False):
                if handle is None or handle.cancelled():
                    continue
                callback = handle._callback
                owner = getattr(callback, "__self__", None)
                if owner is loop and getattr(callback, "__name__", "") == "_read_from_self":
                    continue  # the loop's own wake-up socket
                found = True
                if isinstance(owner, asyncio.BaseTransport):
                    closed += 1
                    if is_internal(getattr(type(owner), "abort", None)):
                        # asyncio's own transport: closed without a word to its protocol,
                        # whose `connection_lost` is the script's code. (A transport class
                        # of the script's own is only taken off the loop: its `abort` is
                        # the script's code too.)
                        with contextlib.suppress(Exception):
                            owner.set_protocol(_Inert())
                            owner.abort()  # type: ignore[attr-defined]
                elif owner is loop and getattr(callback, "__name__", "") == "_accept_connection":
                    closed += 1  # a server the script started: it takes no more connections
                    server: Any = handle._args[3] if len(handle._args) > 3 else None
                    with contextlib.suppress(Exception):
                        server.close()
                with contextlib.suppress(Exception):
                    remove(key.fd)
        for number in list(getattr(state, "_signal_handlers", {})):
            found = True
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(number)
        for handle in list(getattr(state, "_ready", ())):
            if not handle.cancelled() and not is_internal(handle._callback):
                found = True
                handle.cancel()
        if not found:
            break
    return closed


def _alive(thread: threading.Thread) -> bool:
    try:
        return bool(thread.is_alive())
    except Exception:
        return True  # a thread that cannot say is taken for one that runs


def python_threads() -> int:
    """How many threads of this process run Python (the main one included), however they
    were started: the interpreter's own list, not `threading`'s."""
    return len(sys._current_frames())


def _cancel_timers(loop: asyncio.AbstractEventLoop, calls: CallTable) -> None:
    """Cancel the timers the script left on the loop (`call_later`, `call_at`): after a
    stop, nothing it scheduled may run. The call table's own (a call's timeout, the
    acknowledgements' flush) are the kernel's, and stay."""
    for handle in list(getattr(loop, "_scheduled", ())):
        callback = handle._callback
        if getattr(callback, "__self__", None) is not calls or not is_internal(callback):
            handle.cancel()


def nothing_left_running(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether nothing the script started can run before the next script: no task, no
    timer, no thread, no child process.

    Then nothing can write to fd 1 or 2 between the two scripts, and the next script needs
    no start marker: the host attributes what follows this script's end marker to the next
    script at once (it learns this from `done`). A start marker costs two pipe writes and
    two wake-ups of the host. (A daemon the script double-forked could still write at any
    time, during a script as well as between.)
    """
    current = asyncio.current_task(loop)
    if any(task is not current and not task.done() for task in asyncio.all_tasks(loop)):
        return False
    if any(not handle.cancelled() for handle in loop._scheduled):  # type: ignore[attr-defined]
        return False
    if threading.active_count() > 1 or python_threads() > 1:
        return False
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True  # no child at all
    except OSError:
        return False
    return False


def _reap_killed_children(deadline: float) -> None:
    """Reap the children just killed (they take a moment to die), until none is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
