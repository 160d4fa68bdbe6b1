"""The kernel: runs scripts as cells in one persistent namespace, and answers the host.

The main thread runs one asyncio event loop for the kernel's whole life, so tasks a script
leaves running keep running between scripts. The loop reads the host's channel itself: a
tool call's answer wakes the thread that waits for it directly, with no hop between threads
(on two cores each hop costs a cross-CPU wake-up).

How a stop reaches the script, and what ends with it, is told in `stop`.

One cost of reading on the loop: an answer for a call made from another thread's event loop
waits while the script's main code blocks the main thread (`time.sleep`, `thread.join()`), and
so does the answer to a host that takes this kernel back (`held`), which that host therefore
does not wait for (see `toolscript.host.interpreter`, `reattach`).

One concept, though a little over 500 lines: the kernel's main loop and what it answers, one
frame kind after another; the parts that stand alone (cells, calls, stop, streams, names,
show) are modules of their own.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import os
import selectors
import signal
import socket
import sys
import threading
import time
import types
from typing import TYPE_CHECKING, Any, NoReturn

from . import cells
from .busypoll import MAX_WINDOW
from .calls import CallTable, ToolError, ToolTimeout
from .cells import VALUE_NAME, Cell, compile_cell, ending, format_compile_error, run_cell
from .descriptors import BROKEN_EXIT, OwnDescriptors
from .loop import KernelLoop, WatchedSelector, forbid_asyncio_run, moved_socket, task_factory
from .names import NameTeller
from .show import make_show
from .stop import (
    AUDIT_HOOK_CODE,
    end_what_it_started,
    forbid_audit_hooks,
    in_internal_code,
    in_script_code,
    nothing_left_running,
    os_threads,
    reset_hooks,
)
from .streams import ScriptOutput
from .wire import BATCH, ChannelReader, FrameError, FrameReader, encode

_LONGEST_SELECT = 24 * 3600.0
"""The longest a wait in the selector lasts, as asyncio's own (`MAXIMUM_SELECT_TIMEOUT`)."""

if TYPE_CHECKING:
    from .wire import BoundFrame, DoneFrame, ExecFrame, HoldingFrame, ReadyFrame, SetupFrame


class _Script:
    __slots__ = (
        "finished",
        "grace",
        "id",
        "marker",
        "stop_reason",
        "task",
        "threads_before",
        "value",
    )

    def __init__(self, script_id: str, marker: str, grace: float = 1.0) -> None:
        self.id = script_id
        self.marker = marker
        self.grace = grace
        self.task: asyncio.Task[Any] | None = None
        self.stop_reason: str | None = None
        self.finished = False
        self.value: Any = None
        self.threads_before = os_threads()
        """The OS's threads when it began: those it leaves after a stop are its own."""


class Kernel:
    """One interpreter's whole service: the loop, the namespace, the channel to the host."""

    def __init__(self, channel: socket.socket, init: socket.socket | None = None) -> None:
        # Out of a script's way, and checked (see `descriptors`).
        self._own = OwnDescriptors()
        self._channel = moved_socket(channel, self._own, "the channel to the host")
        self._init = init
        """The sandbox's init, until it has set up this interpreter's folder (or None): it is
        closed before any script runs."""
        self.sandboxed = init is not None
        """Whether this kernel is PID 2 of a PID namespace of its own (see `init`)."""
        self._transport: asyncio.Transport | None = None
        self._reader = FrameReader()
        self._stop_next_exec = False
        """An interrupt came while the next script's `exec` waited unread: that script is
        stopped before it begins (see `_on_interrupt`)."""
        self._batch: list[Any] = []
        self._batch_at = 0
        """The frames being handled, and which of them now."""
        self._selector = WatchedSelector()
        self._selector.move(self._own)
        self.loop = KernelLoop(self._selector)
        self._selector.watch(self._own, self.loop.move_wakeup(self._own))
        self._giving_up = False
        asyncio.set_event_loop(self.loop)
        self.loop.set_task_factory(task_factory)
        self._outbox: list[bytes] = []
        self._from_threads: collections.deque[bytes] = collections.deque()
        self._wrote_alone = False
        self._quiet = False  # no start marker is needed for the next script
        self._script: _Script | None = None
        self._last_done: DoneFrame | None = None
        self.kept = False
        """Whether a keeper holds this kernel (`toolscript.kernel.keeper`)."""
        self.namespace: dict[str, Any] = {
            "__name__": "__main__",
            "__builtins__": builtins,
            "ToolError": ToolError,
            "ToolTimeout": ToolTimeout,
        }
        self.calls = CallTable(
            self.loop,
            self.post,
            self._current_script_id,
            self.wait_here,
            stopping=self._stop_reached,
            write_now=self._flush,
        )
        self.namespace["show"] = make_show(self.post, self._current_script_id)
        self._bound: dict[str, Any] = {}
        self._names = NameTeller()
        self._tools_module = types.ModuleType("tools", "The tools bound into this interpreter.")
        self._tools_module.ToolError = ToolError  # type: ignore[attr-defined]
        self._tools_module.ToolTimeout = ToolTimeout  # type: ignore[attr-defined]
        sys.modules["tools"] = self._tools_module
        self.namespace["tools"] = self._tools_module
        self._output = ScriptOutput(self._own)
        self.preload_failures: list[list[str]] = []
        """Modules of `preload` this kernel could not import (started afresh, not forked)."""
        forbid_asyncio_run()
        forbid_audit_hooks()
        # As in an interactive interpreter: the kernel's own command line (its source folder,
        # its descriptor, its settings) is none of a script's business, and a script that
        # parses `sys.argv` (argparse) would take it for arguments meant for it.
        sys.argv = [""]
        self._pid = os.getpid()
        os.register_at_fork(after_in_child=self._in_forked_child)

    def _in_forked_child(self) -> None:
        """A script called `os.fork()` (not `subprocess`, which execs at once): the child is
        a copy of this kernel, sharing its channel to the host. Nothing the copy says may
        reach the host as this kernel's word: its channel becomes /dev/null, and it ends
        where its copy of the script's cell would hand back to the kernel."""
        if os.getpid() == self._pid:
            return
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, self._channel.fileno())
            os.close(null)

    # -- sending -----------------------------------------------------------------------------

    def post(self, frame: bytes, reply: str | None = "") -> None:
        """Send a frame; safe from any thread. `reply` is the kind of reply the host will
        send at once (a tool's key for a call, "" for the others), None for none: the loop
        polls for it before it sleeps (see `busypoll`).

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
        if reply is not None:
            self._selector.busy.expect(reply)
        self._post_here(frame)

    def _post_from_threads(self) -> None:
        waiting = self._from_threads
        expect = self._selector.busy.expect
        while waiting:
            expect()
            self._post_here(waiting.popleft())

    def _post_here(self, frame: bytes) -> None:
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

    # Goal: a script that awaits one call at a time pays for its answer's trip, not for the
    # event loop's. What fails: `await future` hands the task back to the loop, which then
    # takes two passes for the answer (the channel's read, then the task's wake-up), each
    # computing timeouts and walking its queues in Python, on caches the sleep left cold:
    # up to a quarter of the kernel's CPU per sequential call here (bench/README.md). What we
    # do: when nothing else could run before the answer comes (no callback ready, no timer
    # due, no frame waiting to go out, no other call in flight: `CallTable.invoke` checks that),
    # the call waits in the loop's own selector itself, through the same busy polling, with
    # the main thread marked idle as the loop marks it, and reads the channel itself as the
    # loop's reader would. Anything else the selector reports (a stop's wake-up, a thread's
    # callback, another descriptor, room to write the rest of a large frame, a timer's time)
    # ends the wait, and the call awaits its future as before: the selector is
    # level-triggered, so the loop sees the same event.
    def wait_here(self, future: asyncio.Future[Any]) -> None:
        """Wait for `future` (a call's answer) without a pass of the loop, while that cannot
        delay anything else; it may still be pending on return."""
        loop: Any = self.loop  # asyncio's private state: its queues, as `_run_once` reads them
        transport = self._transport
        if transport is None or self._outbox or self._from_threads or loop._debug:
            return
        if transport.get_write_buffer_size():
            return  # a frame too large for one write: the loop writes the rest as room comes
        channel = self._channel.fileno()
        select = self._selector.select
        while not future.done():
            if loop._ready or loop._stopping:
                return
            timeout = None
            if loop._scheduled:
                timeout = loop._scheduled[0]._when - loop.time()
                if timeout <= 0:
                    return
                # As the loop bounds its own select: a timer days away (a call's long
                # `timeout=`, a script's `call_later`) overflows the selector's.
                timeout = min(timeout, _LONGEST_SELECT)
            try:
                events = select(timeout)
            except (OSError, ValueError):
                return  # a selector broken under the loop: the loop finds it too, and says so
            if len(events) != 1:
                return
            key, mask = events[0]
            reader = key.data[0] if key.fd == channel and mask == selectors.EVENT_READ else None
            if reader is None or reader._cancelled:
                return
            reader._run()  # the transport's read, in its own context, as the loop runs it

    def received(self, data: memoryview) -> None:
        self._wrote_alone = False
        try:
            messages = self._reader.feed(data)
        except FrameError:
            os._exit(70)  # the host itself is broken: nothing sensible is left to do
        message: Any  # the host's frames: trusted, each of the type its kind names
        self._batch = messages
        for at, message in enumerate(messages):
            self._batch_at = at
            kind = message.get("t")
            if self._stop_next_exec and kind != "exec":
                self._stop_next_exec = False  # the interrupt was not for a script to come
            if kind == "answer":
                self.calls.deliver(message["n"], message)
            elif kind == "exec":
                self._start_script(message)
            elif kind == "check":
                self._answer_check(message.get("token"))
            elif kind == "bind":
                self._bind(message.get("plans", []), message.get("down", {}))
            elif kind == "setup":
                self._setup(message)
            elif kind == "held":
                self.calls.flush_acks()  # what code took so far, before what it still awaits
                seen, acks = self.calls.recalled()
                holding: HoldingFrame = {
                    "t": "holding",
                    "calls": self.calls.holding(),
                    "seen": seen,
                    "acks": acks,
                    "running": self._current_script_id(),
                    "done": self._last_done,
                    "token": message.get("token"),
                }
                self.post(encode(holding))
                self._flush()
            elif kind == "shutdown":
                self._flush()
                os._exit(0)

    # -- scripts -----------------------------------------------------------------------------

    def _current_script_id(self) -> str | None:
        script = self._script
        return None if script is None or script.finished else script.id

    def _answer_check(self, token: object) -> str | None:
        """Tell the host whether a script's code is still running, answering its `token`;
        returns the id of that script, or None. (The host asks after a `done`, which the
        script may have forged: see `toolscript.host.channel`.)"""
        script = self._script
        running = script.id if script is not None and not script.finished else None
        self.post(encode({"t": "checked", "token": token, "running": running}))
        # Out now, not at the end of this pass of the loop: a script about to run may hold
        # the loop for as long as it likes, and the host waits for this answer.
        self._flush()
        return running

    def _start_script(self, message: ExecFrame) -> None:
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
        self._output.install()
        # The host says whether it waits for a start marker: it decides from the last `done`
        # it read, and a host that took this kernel back from a keeper read none.
        marked = message.get("start_marker")
        if marked is True or (marked is None and not self._quiet):
            self._output.mark(b"\x00>" + script.marker.encode("ascii") + b"\x00")
        try:
            cell = compile_cell(str(message["code"]), f"<script {script.id}>")
        except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as error:
            self._finish(script, {"status": "error", "error": format_compile_error(error)})
            return
        if self._stop_next_exec or script.stop_reason is not None:
            # Stopped before it began (the interrupt came before its `exec` was handled, or
            # while it was): nothing of it runs, and a stop's clean-up follows.
            self._stop_next_exec = False
            script.stop_reason = script.stop_reason or "stopped"
            reset_hooks(self.loop, task_factory)
            self.loop.create_task(self._settle_stop(script, ending(None, None, "stopped")))
            return
        if not cell.awaits:
            self._run_at_once(script, cell)
            return
        script.task = self.loop.create_task(run_cell(cell, self.namespace))
        script.task.add_done_callback(lambda task: self._on_cell_done(script, task))

    def _run_at_once(self, script: _Script, cell: Cell) -> None:
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
                value = namespace.pop(VALUE_NAME, None)
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

    def _on_cell_done(self, script: _Script, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._cell_ended(script, None, asyncio.CancelledError())
            return
        error = task.exception()
        self._cell_ended(script, None if error is not None else task.result(), error)

    def _cell_ended(self, script: _Script, value: Any, error: BaseException | None) -> None:
        if os.getpid() != self._pid:
            # A forked child's copy of the script ran to its end: the script is the parent's,
            # which tells its own end. The copy leaves without a word or a marker.
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(BaseException):
                    stream.flush()
            os._exit(0 if error is None else 1)
        report = ending(value, error, script.stop_reason)
        if script.stop_reason is not None and report["status"] != "stopped":
            # The stop came while the value was being written (a slow `__repr__`): it ended
            # the script as surely as one that came while its code ran.
            report = ending(None, None, script.stop_reason)
        if script.stop_reason is not None:
            reset_hooks(self.loop, task_factory)  # before the stop's own task is made
            self.loop.create_task(self._settle_stop(script, report))
            return
        if error is None:
            script.value = value
        self._finish(script, report)

    async def _settle_stop(self, script: _Script, report: DoneFrame) -> None:
        # Stop means stopped: what the script started ends with it (see `stop`).
        own = frozenset((self._channel.fileno(),))
        left = await end_what_it_started(
            self.loop,
            self.calls,
            self.sandboxed,
            script.grace,
            own,
            script.threads_before,
            task_factory,
        )
        if left.closed:
            report["connections_closed"] = left.closed
        if left.threads:
            report["threads_left"] = left.threads
        if left.timers:
            report["timers_left"] = left.timers
        self._finish(script, report)

    def _cancel_script(self) -> None:
        self.calls.stop_reaches_script()
        script = self._script
        if script is not None and script.task is not None and not script.task.done():
            script.task.cancel()

    def _finish(self, script: _Script, report: DoneFrame) -> None:
        script.finished = True
        report["never_awaited"] = self.calls.take_never_awaited(self.namespace, (script.value,))
        script.value = None
        self._names.tell(self.namespace, self._bound, report)
        report["t"] = "done"
        report["script"] = script.id
        self.calls.flush_acks()
        self._quiet = report["quiet"] = nothing_left_running(self.loop)
        self._output.flush()
        if self._quiet and self._output.drained():
            # Everything the script wrote has been read by the host already, and nothing
            # is left that could write more: its output ends here, no marker needed.
            report["drained"] = True
        else:
            self._output.mark(b"\x00" + script.marker.encode("ascii") + b"\x00")
        damage = self._own.damage()
        if damage:
            self._give_up(damage, report)
        self._last_done = report  # said again to a host that takes this kernel back
        self.post(_encode_report(report))
        self._flush()

    def _give_up(self, damage: dict[int, str], report: DoneFrame | None = None) -> NoReturn:
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

    def _stop_reached(self) -> bool:
        """Whether a stop has reached the script running now."""
        script = self._script
        return script is not None and not script.finished and script.stop_reason is not None

    def _on_interrupt(self, signum: int, frame: types.FrameType | None) -> None:
        if frame is not None and frame.f_code is AUDIT_HOOK_CODE:
            frame = frame.f_back  # the script's `time.sleep`, say: the hook runs first
        if self._giving_up:
            return
        damage = self._own.damage()
        if damage:
            # The loop may be sleeping on an epoll that holds nothing of its own: no wake-up
            # would reach it, and the host would kill it as a script that did not stop.
            self._give_up(damage)
        script = self._script
        if script is None or script.finished:
            if self.kept and self._last_done is not None:
                # A keeper stops only a script its board says runs: the host that ran it read
                # its `done` and died before it could say so. Said again, for the keeper to
                # see in the channel and for the next host to read.
                self.loop.call_soon_threadsafe(self._say_done_again)
            if self._exec_waiting():
                # The host sent a script and stopped it at once (a time limit of a
                # microsecond, a cancel right after the run began): its interrupt arrived
                # before the script's `exec` was handled. Ignored, the script would run
                # unstopped. (The host sends no `exec` before it has read the last `done`,
                # and no interrupt after: one that comes late for the last script comes
                # before the next script's `exec` is sent.)
                self._stop_next_exec = True
            return  # a stray interrupt: no script is running
        if script.stop_reason is None:
            script.stop_reason = "stopped"
        if self._selector.idle:
            self.loop.call_soon_threadsafe(self._cancel_script)  # wakes the selector
            return
        task = script.task
        if task is not None and asyncio.current_task(self.loop) is not task:
            self.loop.call_soon(self._cancel_script)  # interrupted elsewhere: it still ends
        if in_internal_code(frame) or not in_script_code(frame):
            self.loop.call_soon(self._cancel_script)
            return
        self.calls.stop_reaches_script()
        raise KeyboardInterrupt

    def _exec_waiting(self) -> bool:
        """Whether an `exec` waits to be handled, or is being handled and its script is not
        yet the running one: among the frames being handled now (from the one at hand), at
        the start of a frame read in part, or first on the channel, unread."""
        if any(message.get("t") == "exec" for message in self._batch[self._batch_at :]):
            return True
        held = self._reader.held()
        if not held:
            try:
                held = self._channel.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except OSError:
                return False
        return held[4:].startswith((b'{"t":"exec"', b'{"t": "exec"'))

    def _say_done_again(self) -> None:
        if self._last_done is not None:
            self.post(_encode_report({**self._last_done, "again": True}))
            self._flush()

    # -- tools -------------------------------------------------------------------------------

    def _bind(self, plans: list[dict[str, Any]], down: dict[str, str]) -> None:
        from .binding import bind

        bound = bind(plans, self.calls.invoke, down)
        for name in self._bound.keys() - bound.top_level.keys():
            # A tool the catalogue no longer has: its name goes, unless the script reused it.
            if getattr(self._tools_module, name, None) is self.namespace.get(name):
                self.namespace.pop(name, None)
            with contextlib.suppress(AttributeError):
                delattr(self._tools_module, name)
        self._bound = dict(bound.top_level)
        for name, value in bound.top_level.items():
            self.namespace[name] = value
            setattr(self._tools_module, name, value)
        self.calls.tool_qualnames = frozenset(bound.qualnames)
        cells.renamed_servers = dict(bound.renamed)
        failures = [[key, why] for key, why in bound.failures]
        frame: BoundFrame = {"t": "bound", "failures": failures}
        self._names.tell(self.namespace, self._bound, frame)
        self.post(encode(frame))

    def _setup(self, message: SetupFrame) -> None:
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

    # -- life --------------------------------------------------------------------------------

    def serve(self) -> None:
        signal.signal(signal.SIGINT, self._on_interrupt)
        self._transport, _ = self.loop.run_until_complete(
            self.loop.connect_accepted_socket(lambda: _Channel(self), sock=self._channel)
        )
        ready: ReadyFrame = {
            "t": "ready",
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "executable": sys.executable,
        }
        if self.preload_failures:
            ready["preload_failures"] = self.preload_failures
        self.post(encode(ready))
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


def _encode_report(report: DoneFrame) -> bytes:
    try:
        return encode(report)
    except (TypeError, ValueError, RecursionError):
        trimmed = report.copy()
        trimmed.pop("exit", None)  # the one field of the script's own making
        return encode(trimmed)


_MAIN = threading.main_thread().ident or 0

LAST_WORD_WAIT = 5.0
"""Seconds a kernel that found its descriptors broken waits, after its `done`, to be ended."""
