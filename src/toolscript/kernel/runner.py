"""The kernel: runs scripts as cells in one persistent namespace, and answers the host.

The main thread runs one asyncio event loop for the kernel's whole life, so tasks a script
leaves running keep running between scripts. The loop reads the host's channel itself: a
tool call's answer wakes the thread that waits for it directly, with no hop between threads
(on two cores each hop costs a cross-CPU wake-up, tens of microseconds).

How a stop reaches the script (goal: interrupt blocking C calls like `time.sleep`, pure-Python
loops and awaits alike, with an exception the script can clean up after):

- The host sends SIGINT. A frame could not do it: while the script blocks the main thread,
  nothing reads the channel. A stray SIGINT (no script running, or the script already ended,
  its `done` still on the way) is ignored; the host signals only before it has read `done`,
  so the signal is always handled before the next script's `exec` can arrive.
- If the main thread is idle in the selector (the script is awaiting), raising there would
  tear the loop down, so the handler wakes the loop to cancel the script's task: the script
  sees `CancelledError` at its `await`.
- If the main thread is anywhere else (script code, or a C call it made), the handler raises
  `KeyboardInterrupt` there. A handler that runs inside the kernel's own or asyncio's code
  cancels the task instead, so the kernel's state is never torn.
- A script that ignores both is killed by the host after the grace period.

One cost of reading on the loop: an answer for a call made from another thread's event loop
waits while the script's main code blocks the main thread (`time.sleep`, `thread.join()`).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import collections
import contextlib
import contextvars
import fcntl
import inspect
import io
import linecache
import os
import select
import selectors
import signal
import socket
import stat
import sys
import termios
import threading
import time
import traceback
import types
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

from .busypoll import MAX_WINDOW, BusyPoll
from .calls import CallTable, ScriptTask, ToolError, ToolTimeout
from .descriptors import BROKEN_EXIT, OwnDescriptors
from .wire import BATCH, ChannelReader, FrameError, FrameReader, encode

_KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
_ASYNCIO_DIR = os.path.dirname(os.path.abspath(asyncio.__file__))
_INTERNAL = (_KERNEL_DIR, _ASYNCIO_DIR, os.path.abspath(selectors.__file__))
_VALUE_NAME = "__toolscript_value__"


class _WatchedSelector(selectors.DefaultSelector):
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
        fd = own.place(poller.fileno(), _SELECTOR)
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
                poller.fileno(), _SELECTOR, lambda: self._selector.modify(wakeup, select.EPOLLIN)
            )


class _KernelLoop(asyncio.SelectorEventLoop):
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
        loop._ssock = _moved_socket(loop._ssock, own, "the event loop's wake-up socket")
        loop._csock = _moved_socket(loop._csock, own, "the event loop's wake-up socket")
        loop._add_reader(loop._ssock.fileno(), loop._read_from_self)
        return int(loop._ssock.fileno())


_new_handle: Any = object.__new__
_SELECTOR = "the event loop's selector"


def _moved_socket(sock: socket.socket, own: OwnDescriptors, what: str) -> socket.socket:
    fd = own.place(sock.fileno(), what)
    if fd == sock.fileno():
        return sock
    blocking = sock.getblocking()
    sock.close()
    moved = socket.socket(fileno=fd)
    moved.setblocking(blocking)
    return moved


class _Script:
    __slots__ = ("finished", "grace", "id", "marker", "stop_reason", "task", "value")

    def __init__(self, script_id: str, marker: str, grace: float = 1.0) -> None:
        self.id = script_id
        self.marker = marker
        self.grace = grace
        self.task: asyncio.Task[Any] | None = None
        self.stop_reason: str | None = None
        self.finished = False
        self.value: Any = None


class Kernel:
    """One interpreter's whole service: the loop, the namespace, the channel to the host."""

    def __init__(self, channel: socket.socket, init: socket.socket | None = None) -> None:
        # Out of a script's way, and checked (see `descriptors`).
        self._own = OwnDescriptors()
        self._channel = _moved_socket(channel, self._own, "the channel to the host")
        self._init = init
        """The sandbox's init, until it has set up this interpreter's folder (or None): it is
        closed before any script runs."""
        self.sandboxed = init is not None
        """Whether this kernel is PID 2 of a PID namespace of its own (see `init`)."""
        self._transport: asyncio.Transport | None = None
        self._reader = FrameReader()
        self._selector = _WatchedSelector()
        self._selector.move(self._own)
        self.loop = _KernelLoop(self._selector)
        self._selector.watch(self._own, self.loop.move_wakeup(self._own))
        self._giving_up = False
        asyncio.set_event_loop(self.loop)
        self.loop.set_task_factory(_task_factory)
        self._outbox: list[bytes] = []
        self._from_threads: collections.deque[bytes] = collections.deque()
        self._wrote_alone = False
        self._quiet = False  # no start marker is needed for the next script
        self._pipes = _is_pipe(1) and _is_pipe(2)  # so `_unread` can tell what is unread
        self._script: _Script | None = None
        self.namespace: dict[str, Any] = {
            "__name__": "__main__",
            "__builtins__": builtins,
            "ToolError": ToolError,
            "ToolTimeout": ToolTimeout,
        }
        self.calls = CallTable(self.loop, self.post, self._current_script_id, self._stopping)
        self._bound_names: set[str] = set()
        self._tools_module = types.ModuleType("tools", "The tools bound into this interpreter.")
        self._tools_module.ToolError = ToolError  # type: ignore[attr-defined]
        self._tools_module.ToolTimeout = ToolTimeout  # type: ignore[attr-defined]
        sys.modules["tools"] = self._tools_module
        self.namespace["tools"] = self._tools_module
        self._stdout = _text_stream(1)
        self._stderr = _text_stream(2)
        sys.stdout = self._stdout
        sys.stderr = self._stderr
        self._patch_asyncio_run()

    # -- sending -----------------------------------------------------------------------------

    def post(self, frame: bytes) -> None:
        """Send a frame; safe from any thread.

        The first frame since the host last spoke goes at once (a lone call should not wait
        a pass of the event loop); frames that follow in the same pass (the calls of a
        `gather`) go together in one write at the end of it.
        """
        if threading.get_ident() != _MAIN:
            # In order with the main thread's frames: a call made on another thread takes
            # its number and its place here together (see `CallTable.invoke`), and the main
            # thread sends what waits here before anything of its own.
            self._from_threads.append(frame)
            self.loop.call_soon_threadsafe(self._post_from_threads)
            return
        if self._from_threads:
            self._post_from_threads()
        self._post_here(frame)

    def _post_from_threads(self) -> None:
        waiting = self._from_threads
        while waiting:
            self._post_here(waiting.popleft())

    def _post_here(self, frame: bytes) -> None:
        self._selector.busy.expect()  # the host answers calls and scripts at once
        if self._outbox:
            self._outbox.append(frame)
            if len(self._outbox) >= BATCH:
                self._flush_batch()
        elif not self._wrote_alone and self._transport is not None:
            self._transport.write(frame)
            self._wrote_alone = True
        else:
            self._outbox.append(frame)
            self.loop.call_soon(self._flush)

    def _flush_batch(self) -> None:
        # A long burst goes out in pieces, so the host starts on the first calls while the
        # rest are still being made: the two processes work at once, on both cores.
        if self._transport is not None:
            frames, self._outbox = self._outbox, []
            self._transport.write(b"".join(frames))
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        if self._outbox and self._transport is not None:
            frames, self._outbox = self._outbox, []
            self._transport.write(b"".join(frames))
        self._wrote_alone = False

    # -- receiving ---------------------------------------------------------------------------

    def received(self, data: memoryview) -> None:
        self._wrote_alone = False
        try:
            messages = self._reader.feed(data)
        except FrameError:
            os._exit(70)  # the host itself is broken: nothing sensible is left to do
        for message in messages:
            kind = message.get("t")
            if kind == "answer":
                self.calls.deliver(message["n"], message)
            elif kind == "exec":
                self._start_script(message)
            elif kind == "check":
                self._answer_check(message.get("token"))
            elif kind == "bind":
                self._bind(message.get("plans", []))
            elif kind == "setup":
                self._setup(message)
            elif kind == "shutdown":
                self._flush()
                os._exit(0)

    # -- scripts -----------------------------------------------------------------------------

    def _current_script_id(self) -> str | None:
        script = self._script
        return None if script is None or script.finished else script.id

    def _stopping(self) -> bool:
        script = self._script
        return script is not None and script.stop_reason is not None

    def _answer_check(self, token: object) -> str | None:
        """Tell the host whether a script's code is still running, answering its `token`;
        returns the id of that script, or None. (The host asks after a `done`, which the
        script may have forged: see `toolscript.host.interpreter`.)"""
        script = self._script
        running = script.id if script is not None and not script.finished else None
        self.post(encode({"t": "checked", "token": token, "running": running}))
        # Out now, not at the end of this pass of the loop: a script about to run may hold
        # the loop for as long as it likes, and the host waits for this answer.
        self._flush()
        return running

    def _start_script(self, message: dict[str, Any]) -> None:
        previous = self._script
        if previous is not None and not previous.finished:
            # The host sends a script only after the last one's `done`, which the script
            # itself must have forged: the host is told, and nothing more runs over it.
            self._answer_check(message.get("check"))
            return
        if "check" in message:
            self._answer_check(message["check"])
        if self._init is not None:
            self._seal(None, None)  # no setup came: this interpreter gets no shell folder
        grace = message.get("grace", 1.0)
        script = _Script(
            str(message["script"]),
            str(message["marker"]),
            float(grace) if type(grace) in (int, float) else 1.0,
        )
        self._script = script
        if not self._quiet:
            # Something the last script left running (a task, a thread) may have broken the
            # kernel's descriptors since: this script must not start on a broken loop.
            damage = self._own.damage()
            if damage:
                error = "The script did not run: the interpreter's own descriptors were broken."
                self._give_up(damage, {"status": "error", "error": error})
        window = message.get("busy_poll", 0.0)
        self._selector.busy.window = (
            window if type(window) is float and window < MAX_WINDOW else 0.0
        )
        sys.stdout = self._stdout
        sys.stderr = self._stderr
        if not self._quiet:
            self._mark_output(b"\x00>" + script.marker.encode("ascii") + b"\x00")
        try:
            cell = _compile_cell(str(message["code"]), f"<script {script.id}>")
        except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as error:
            self._finish(script, {"status": "error", "error": _format_compile_error(error)})
            return
        if not cell.awaits:
            self._run_at_once(script, cell)
            return
        script.task = self.loop.create_task(self._run_cell(cell))
        script.task.add_done_callback(lambda task: self._on_cell_done(script, task))

    def _run_at_once(self, script: _Script, cell: _Cell) -> None:
        """Run a script with no top-level `await` here and now: it cannot wait, so it needs no
        task, and no pass of the loop to start it or to see it end.

        A stop reaches it as it would in a task: SIGINT raises KeyboardInterrupt in the
        script's code; one that came while it was being compiled stops it before it starts.
        (`asyncio.current_task()` is None in such a script.)
        """
        if script.stop_reason is not None:
            self._cell_ended(script, None, KeyboardInterrupt())
            return
        namespace = self.namespace
        failed: BaseException | None = None
        try:
            if cell.statements is not None:
                eval(cell.statements, namespace)
            if cell.value is None:
                value = namespace.pop(_VALUE_NAME, None)
            else:
                value = eval(cell.value, namespace)
        except BaseException as error:
            value, failed = None, error
        if self.loop._ready:  # type: ignore[attr-defined]
            # The script scheduled something (a task it created, about to take its first
            # step): that runs first, as it would before a script's task was seen to end, so
            # the calls such a task makes at once still count in this script's report.
            self.loop.call_soon(self._cell_ended, script, value, failed)
        else:
            self._cell_ended(script, value, failed)

    async def _run_cell(self, cell: _Cell) -> Any:
        namespace = self.namespace
        if cell.statements is not None:
            result = eval(cell.statements, namespace)
            if type(result) is types.CoroutineType:
                await result
        if cell.value is None:
            return namespace.pop(_VALUE_NAME, None)
        value = eval(cell.value, namespace)
        if cell.value.co_flags & inspect.CO_COROUTINE:
            value = await value  # the expression itself awaits something
        return value

    def _on_cell_done(self, script: _Script, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._cell_ended(script, None, asyncio.CancelledError())
            return
        error = task.exception()
        self._cell_ended(script, None if error is not None else task.result(), error)

    def _cell_ended(self, script: _Script, value: Any, error: BaseException | None) -> None:
        report: dict[str, Any]
        if script.stop_reason is not None:
            report = {"status": "stopped", "reason": script.stop_reason}
            if error is not None and not isinstance(
                error, (KeyboardInterrupt, asyncio.CancelledError)
            ):
                report["error"] = _format_exception(error)
        elif isinstance(error, asyncio.CancelledError):
            report = {"status": "error", "error": "The script's own task was cancelled."}
        elif error is None:
            script.value = value
            report = {"status": "ok", "value": _safe_repr(value)}
        elif isinstance(error, SystemExit):
            code = error.code
            if code is None or code == 0:
                report = {"status": "ok", "exit": 0}
            else:
                report = {
                    "status": "error",
                    "exit": code if isinstance(code, int) else 1,
                    "error": f"The script called sys.exit({code!r}).",
                }
        else:
            report = {"status": "error", "error": _format_exception(error)}
            if isinstance(error, MemoryError):
                report["memory"] = True
        if script.stop_reason is not None:
            self.loop.create_task(self._settle_stop(script, report))
        else:
            self._finish(script, report)

    async def _settle_stop(self, script: _Script, report: dict[str, Any]) -> None:
        # Stop means stopped: tasks the script started end with it. Give them a moment to
        # run their cleanup and tell which calls they stopped waiting for.
        current = asyncio.current_task()
        others = [task for task in asyncio.all_tasks(self.loop) if task is not current]
        for task in others:
            task.cancel()
        self.calls.cancel_waiting()
        if others:
            await asyncio.wait(others, timeout=1.0)
        threads = self._end_what_the_script_started(script.grace / 2)
        if threads:
            report["threads_left"] = threads
        self._finish(script, report)

    def _cancel_script(self) -> None:
        script = self._script
        if script is not None and script.task is not None and not script.task.done():
            script.task.cancel()

    def _finish(self, script: _Script, report: dict[str, Any]) -> None:
        script.finished = True
        report["never_awaited"] = self.calls.take_never_awaited(self.namespace, (script.value,))
        script.value = None
        report["t"] = "done"
        report["script"] = script.id
        self.calls.flush_acks()
        self._quiet = report["quiet"] = self._nothing_left_running()
        self._flush_streams()
        if self._quiet and self._pipes and not _unread(1) and not _unread(2):
            # Everything the script wrote has been read by the host already, and nothing
            # is left that could write more: its output ends here, no marker needed.
            report["drained"] = True
        else:
            self._mark_output(b"\x00" + script.marker.encode("ascii") + b"\x00")
        damage = self._own.damage()
        if damage:
            self._give_up(damage, report)
        self.post(_encode_report(report))
        self._flush()

    def _give_up(self, damage: dict[int, str], report: dict[str, Any] | None = None) -> NoReturn:
        """The kernel's own descriptors are broken (see `descriptors`): say so in the running
        script's `done` (`report`, or one made here) if the channel still works, wait for
        the host to end this process, and exit.

        Frames go straight to the socket: the loop that would send them cannot be trusted.
        When the transport still holds bytes the host has not read, a frame sent past them
        would break their order, so then nothing is sent: the exit code says it alone.
        """
        self._giving_up = True
        script = self._script
        words = "; ".join(damage.values())
        if report is None and script is not None and not script.finished:
            # Its code did not end: the loop it ran on broke under it.
            error = f"The interpreter's own descriptors were broken under the script: {words}."
            report = {"status": "error", "error": error}
        if report is not None and script is not None:
            script.finished = True
            report["t"] = "done"
            report["script"] = script.id
            report["broken"] = words
        transport = self._transport
        channel = self._channel
        if (
            report is not None
            and channel.fileno() not in damage
            and (transport is None or transport.get_write_buffer_size() == 0)
        ):
            frames, self._outbox = self._outbox, []
            frames.append(_encode_report(report))
            deadline = time.monotonic() + LAST_WORD_WAIT
            try:
                channel.settimeout(LAST_WORD_WAIT)
                channel.sendall(b"".join(frames))
                # The host ends an interpreter that says this at once; its end is the sign
                # that `done` was read (exiting first could let the exit be seen first).
                while (left := deadline - time.monotonic()) > 0:
                    channel.settimeout(left)
                    if not channel.recv(1 << 16):
                        break
            except (OSError, ValueError):
                pass
        os._exit(BROKEN_EXIT)

    def channel_lost(self) -> NoReturn:
        """The channel closed: the host ended it (or died), or the script broke it."""
        damage = self._own.damage()
        if damage:
            self._give_up(damage)
        os._exit(0)  # the host closed the channel or died: end with it

    def _nothing_left_running(self) -> bool:
        """Whether nothing the script started can run before the next script: no task, no
        timer, no thread, no child process.

        Then nothing can write to fd 1 or 2 between the two scripts, and the next script needs
        no start marker: the host attributes what follows this script's end marker to the
        next script at once (it learns this from `done`). A start marker costs two pipe
        writes and two wake-ups of the host, a third of a trivial run. (A daemon the script
        double-forked could still write at any time, during a script as well as between.)
        """
        current = asyncio.current_task(self.loop)
        if any(task is not current and not task.done() for task in asyncio.all_tasks(self.loop)):
            return False
        if any(not handle.cancelled() for handle in self.loop._scheduled):  # type: ignore[attr-defined]
            return False
        if threading.active_count() > 1:
            return False
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # no child at all
        except OSError:
            return False
        return False

    def _flush_streams(self) -> None:
        for stream in (self._stdout, self._stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass

    def _mark_output(self, marker: bytes) -> None:
        """Flush what Python holds for fd 1 and 2, then write `marker` to both (see the host's
        `toolscript.host.output`: the markers say which bytes are the script's)."""
        self._flush_streams()
        for fd in (1, 2):
            try:
                os.write(fd, marker)
            except OSError:
                pass

    def _on_interrupt(self, signum: int, frame: types.FrameType | None) -> None:
        if self._giving_up:
            return
        damage = self._own.damage()
        if damage:
            # The loop may be sleeping on an epoll that holds nothing of its own: no wake-up
            # would reach it, and the host would kill it as a script that did not stop.
            self._give_up(damage)
        script = self._script
        if script is None or script.finished:
            return  # a stray interrupt: no script is running
        if script.stop_reason is None:
            script.stop_reason = "stopped"
        if self._selector.idle:
            self.loop.call_soon_threadsafe(self._cancel_script)  # wakes the selector
            return
        task = script.task
        if task is not None and asyncio.current_task(self.loop) is not task:
            self.loop.call_soon(self._cancel_script)  # interrupted elsewhere: it still ends
        filename = frame.f_code.co_filename if frame is not None else ""
        if filename.startswith(_INTERNAL):
            self.loop.call_soon(self._cancel_script)
            return
        raise KeyboardInterrupt

    # -- tools -------------------------------------------------------------------------------

    def _bind(self, plans: list[dict[str, Any]]) -> None:
        from .binding import bind

        bound = bind(plans, self.calls.invoke)
        for name in self._bound_names - bound.top_level.keys():
            # A tool the catalogue no longer has: its name goes, unless the script reused it.
            if getattr(self._tools_module, name, None) is self.namespace.get(name):
                self.namespace.pop(name, None)
            with contextlib.suppress(AttributeError):
                delattr(self._tools_module, name)
        self._bound_names = set(bound.top_level)
        for name, value in bound.top_level.items():
            self.namespace[name] = value
            setattr(self._tools_module, name, value)
        self.calls.tool_qualnames = frozenset(bound.qualnames)
        failures = [[key, why] for key, why in bound.failures]
        self.post(encode({"t": "bound", "failures": failures}))

    def _setup(self, message: dict[str, Any]) -> None:
        error = None
        cwd = message.get("cwd")
        if self._init is not None:
            folder = message.get("folder")
            error = self._seal(folder if isinstance(folder, str) else None, cwd)
        if isinstance(cwd, str) and error is None:
            try:
                os.chdir(cwd)
            except OSError as problem:
                error = f"{type(problem).__name__}: {problem}"
        self.post(encode({"t": "set", "error": error}))

    def _seal(self, folder: str | None, cwd: object) -> str | None:
        """Have the sandbox's init mount the shell's folder and take every other out of view:
        once, before the first script (see `toolscript.kernel.init`)."""
        from .init import ask_setup

        init, self._init = self._init, None
        if init is None:
            return None
        return ask_setup(init, folder, cwd if isinstance(cwd, str) else None)

    def _end_what_the_script_started(self, wait: float) -> int:
        """After a stop: kill every process of this sandbox but its init and this kernel, and
        say how many threads the script started still run after `wait` seconds (the host
        then replaces this interpreter: a thread cannot be stopped from outside)."""
        if self.sandboxed:
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)  # spares PID 1 (the init) and the caller
            _reap_killed_children(time.monotonic() + 0.5)
        executor = getattr(self.loop, "_default_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)  # its idle workers end; busy ones count below
        deadline = time.monotonic() + max(0.0, min(wait, 1.0))
        left = 0
        for thread in threading.enumerate():
            if thread is threading.main_thread():
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            left += thread.is_alive()
        return left

    def _patch_asyncio_run(self) -> None:
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

    # -- life --------------------------------------------------------------------------------

    def serve(self) -> None:
        signal.signal(signal.SIGINT, self._on_interrupt)
        self._transport, _ = self.loop.run_until_complete(
            self.loop.connect_accepted_socket(lambda: _Channel(self), sock=self._channel)
        )
        self.post(
            encode(
                {
                    "t": "ready",
                    "pid": os.getpid(),
                    "python": sys.version.split()[0],
                    "executable": sys.executable,
                }
            )
        )
        while True:
            try:
                self.loop.run_forever()
            except BaseException:
                # A script's exception that reached the loop, or the loop's own failure (its
                # selector closed under it): in that case it would fail again on every pass.
                if not self._giving_up:
                    damage = self._own.damage()
                    if damage:
                        self._give_up(damage)
                continue


class _Channel(asyncio.BufferedProtocol):
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._buffer = ChannelReader()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._kernel.received(self._buffer.received(nbytes))

    def connection_lost(self, exc: Exception | None) -> None:
        self._kernel.channel_lost()


def _encode_report(report: dict[str, Any]) -> bytes:
    try:
        return encode(report)
    except (TypeError, ValueError, RecursionError):
        return encode({k: v for k, v in report.items() if k != "exit"})


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


def _task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    return ScriptTask(coro, loop=loop, **kwargs)


def _text_stream(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        open(fd, "wb", buffering=1 << 16, closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


class _Cell(NamedTuple):
    """A script compiled: its statements, then (when it ends with one) its last expression,
    whose value is the script's. With `value` None, the value is left under `_VALUE_NAME`."""

    statements: types.CodeType | None
    value: types.CodeType | None

    @property
    def awaits(self) -> bool:
        """Whether the script has a top-level `await` (so it must run in a task)."""
        return any(
            code is not None and code.co_flags & inspect.CO_COROUTINE
            for code in (self.statements, self.value)
        )


def _compile_cell(source: str, filename: str) -> _Cell:
    """Compile a script so that running it gives the value of its last expression.

    Goal: a short script compiles in a few microseconds. What fails: turning the last
    expression into an assignment in the syntax tree and compiling the tree, since Python
    then converts the tree's objects back to its own (compiling "1" that way took 30 µs
    against 7 from the text). What we do: the tree only says where the last statement
    starts; the lines before it and the expression itself are compiled from the source text,
    the expression padded with newlines so line numbers stay the script's own. An expression
    that shares its line with another statement (`x = 1; x`) goes through the tree.
    """
    tree = ast.parse(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    body = tree.body
    if not body or not isinstance(body[-1], ast.Expr):
        return _Cell(compile(source, filename, "exec", flags=flags), None)
    last = body[-1]
    if last.col_offset == 0 and (len(body) == 1 or (body[-2].end_lineno or 0) < last.lineno):
        lines = source.splitlines(keepends=True)
        start = last.lineno - 1
        head = "".join(lines[:start])
        try:
            return _Cell(
                compile(head, filename, "exec", flags=flags) if head.strip() else None,
                compile("\n" * start + "".join(lines[start:]), filename, "eval", flags=flags),
            )
        except SyntaxError:
            pass  # the expression's line holds more than it (`1;`): the tree can say
    # Only the two new nodes need a location: no walk over the whole tree for it.
    target = ast.copy_location(ast.Name(_VALUE_NAME, ast.Store()), last)
    body[-1] = ast.copy_location(ast.Assign(targets=[target], value=last.value), last)
    return _Cell(compile(tree, filename, "exec", flags=flags), None)


def _safe_repr(value: Any) -> str | None:
    if value is None:
        return None
    try:
        text = repr(value)
    except BaseException as error:
        return f"<the value's repr failed: {type(error).__name__}: {error}>"
    if not isinstance(text, str):
        return f"<the value's repr returned {type(text).__name__}, not str>"
    return text


def _format_exception(error: BaseException) -> str:
    tb = error.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<script"):
        tb = tb.tb_next
    try:
        summary = traceback.TracebackException(type(error), error, tb)
        _drop_internal_frames(summary)
        return "".join(summary.format())
    except BaseException:
        return f"{type(error).__name__} (its traceback could not be formatted)"


def _drop_internal_frames(summary: traceback.TracebackException) -> None:
    # A tool's error is raised inside the kernel's call machinery; the script's reader only
    # needs the script's own frames, so the kernel's and the bound tools' are left out.
    seen: set[int] = set()
    while summary is not None and id(summary) not in seen:
        seen.add(id(summary))
        frames = [
            frame
            for frame in summary.stack
            if not frame.filename.startswith((_KERNEL_DIR, "<tool "))
        ]
        summary.stack = traceback.StackSummary.from_list(frames)
        summary = summary.__cause__ or summary.__context__  # type: ignore[assignment]


def _format_compile_error(error: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(error), error))


_MAIN = threading.main_thread().ident or 0

LAST_WORD_WAIT = 5.0
"""Seconds a kernel that found its descriptors broken waits, after its `done`, to be ended."""
