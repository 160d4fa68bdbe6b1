"""One kernel process, seen from the host: start it, feed it scripts, stop it, settle it.

Everything the kernel sends is untrusted. A frame that is malformed, oversized or unexpected
makes the host kill that interpreter and report why; it never raises in the host. Every wait
has a bound: start-up, a script (its time limit, then the grace period after the interrupt),
the output's end marker, shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import random
import secrets
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..kernel import wire
from ..kernel.descriptors import BROKEN_EXIT
from . import codec
from .busypoll import LoopPoll
from .calls import CallLedger, CallReport, ProtocolViolation
from .catalogue import Answer, ToolCatalogue, Waiting
from .journal import Journal, JournalClosedError
from .output import Captured, StreamCapture
from .sandbox import Sandbox
from .template import Template, TemplateError, kernel_command

OUTPUT_END_WAIT = 2.0
"""Seconds to wait, after a script ends, for its output's end marker on both pipes."""

EXIT_STATUS_WAIT = 1.0
"""Seconds to wait for the template's word on how a forked kernel ended."""

CHANNEL_LOST_WAIT = 1.0
"""Seconds a kernel whose channel closed has to exit before that counts as a fault."""

_EAGER = sys.version_info >= (3, 12)
"""Whether tasks can run their first step at once (`eager_start`, Python 3.12)."""
_EAGER_START: dict[str, Any] = {"eager_start": True}

_HOST_CAUSES = ("tool_timeout", "source_gone")
"""The answers that are the host's own word that it gave up, not the handler's."""

PIPE_READ_SIZE = 64 * 1024
"""Bytes read from an output pipe at a time."""

SHUTDOWN_WAIT = 2.0
"""Seconds to wait for a kernel to exit after `shutdown` before it is killed."""

CHECK_DELAY = 0.05
"""Seconds after a script's `done` before the host asks the kernel whether its code really
ended, unless the next script (which asks too) comes first."""

CHECK_WAIT = 1.0
"""The least time, after a `done`, that the kernel has to confirm the script's end."""


class InterpreterStartError(Exception):
    """The kernel could not be started or did not become ready; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start a kernel: spawned under `python`, or forked from `template` when given
    (a template that cannot fork falls back to spawning)."""

    python: str = sys.executable
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    limits: dict[str, int | None] = field(default_factory=dict)
    start_timeout: float = 20.0
    output_limit: int = 1_000_000
    template: Template | None = None
    preload: tuple[str, ...] = ()
    busy: LoopPoll | None = None
    sandbox: Sandbox | None = None
    """Start the kernel confined (from a sandboxed template: the runtime's, or one of its
    own when that one cannot serve)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one script ended, as the interpreter saw it, before it becomes a `ScriptResult`.

    `ending` is the kernel's status (`ok`, `error`, `stopped`) or the host's own word:
    `killed` (stopped by a kill after the grace period), `crashed` (the process died),
    `fault` (it broke the protocol and was killed), `broken` (its own descriptors were closed
    or replaced, said in `report["broken"]`, and it was ended).
    """

    ending: str
    report: dict[str, Any]
    stdout: Captured
    stderr: Captured
    calls: CallReport
    stop_reason: str | None = None
    exit_description: str | None = None
    fault: str | None = None
    unattributed_bytes: int = 0
    never_started: bool = False
    """The interpreter was gone before the script began (it died between two scripts)."""


class Interpreter:
    """A kernel process with its channel, output pipes and call ledger."""

    def __init__(
        self,
        launch: Launch,
        catalogue: ToolCatalogue,
        journal: Journal,
        shell: str = "",
        generation: int = 0,
    ) -> None:
        self.launch = launch
        self.generation = generation
        self.shell = shell
        self.catalogue = catalogue
        self._journal = journal
        self.ledger = CallLedger(f"{secrets.token_hex(4)}-{generation}", shell, journal)
        self.forked = False
        self._started = False
        self._pidfd: int | None = None
        self._status: asyncio.Future[int] | None = None
        self.pid: int | None = None
        self.bind_failures: list[tuple[str, str]] = []
        self.python_version: str | None = None
        self._process: asyncio.SubprocessTransport | None = None
        self._channel: asyncio.Transport | None = None
        self._reader = codec.reader()
        self._stdout = StreamCapture(launch.output_limit)
        self._stderr = StreamCapture(launch.output_limit)
        self._outbox: list[bytes] = []
        # The loop it is made and run on, kept: asyncio.get_running_loop(), and current_task()
        # without a loop, call getpid() each time (a system call), on every tool call.
        self._loop = asyncio.get_running_loop()
        self._wrote_alone = False  # a frame went out alone since the kernel last spoke
        self._waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._done: asyncio.Future[dict[str, Any]] | None = None
        self._script: str | None = None
        self._last_script: str | None = None  # the script that ran last, or runs now
        self._deadline = 0.0  # when the running script's time limit and grace end
        self._watch: _EndWatch | None = None
        self._tokens = random.Random(secrets.randbits(128))
        self._tasks: set[asyncio.Task[Any]] = set()
        self._exited = asyncio.Event()
        self._pipes_closed = asyncio.Event()
        self._open_pipes = 2
        self.returncode: int | None = None
        self.fault: str | None = None
        self.broken: str | None = None
        """What became of the kernel's own descriptors, when it found them closed or replaced
        (it is ended then: see `toolscript.kernel.descriptors`)."""
        self.closing = False
        self.last_outcome: Outcome | None = None
        self.runs = 0
        """Scripts sent to this interpreter so far."""
        self._quiet = False
        self._stop_reason: str | None = None
        self.told_unconfined = False
        """Whether a result has said that this interpreter runs without a sandbox."""
        self._own_template: Template | None = None
        self._cgroup: str | None = None

    # -- life --------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._started and not self._exited.is_set() and self.fault is None

    async def adopt(self, shell: str, generation: int, cwd: Path | None) -> None:
        """Give a started (pooled) interpreter to a shell: its name, generation and folder.

        Raises `InterpreterStartError` if the kernel cannot change to `cwd`.
        """
        self.shell = shell
        self.generation = generation
        self.ledger = CallLedger(f"{secrets.token_hex(4)}-{generation}", shell, self._journal)
        if cwd is not None:
            setup: dict[str, Any] = {"t": "setup", "cwd": str(cwd)}
            sandbox = self.launch.sandbox
            if sandbox is not None and cwd.parent == sandbox.shells_root:
                setup["folder"] = cwd.name  # the sandbox's init mounts it (`kernel.init`)
            answer = await self._expect("set", self.launch.start_timeout, setup)
            if answer.get("error"):
                raise InterpreterStartError(f"the kernel could not enter {cwd}: {answer['error']}")

    async def rebind(self, catalogue: ToolCatalogue) -> None:
        """Bind a changed catalogue (an MCP server's tool list changed) before the next run."""
        bound = await self._expect(
            "bound", self.launch.start_timeout, {"t": "bind", "plans": catalogue.plans}
        )
        self.catalogue = catalogue
        self.bind_failures = [(str(item[0]), str(item[1])) for item in bound.get("failures", [])]

    @property
    def busy(self) -> bool:
        return self._script is not None

    def kernel_pid(self) -> int | None:
        """The kernel's pid as the host sees it. (A sandboxed kernel is its init's child.)"""
        if self.launch.sandbox is None or self.pid is None:
            return self.pid
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/children") as children:
                found = children.read().split()
        except OSError:
            return None
        return int(found[0]) if found else None

    async def start(self) -> None:
        """Start the kernel, wait for `ready`, bind the tools. Raises `InterpreterStartError`."""
        loop = self._loop
        # Start-up output is the kernel's, not a script's: kept to explain a failed start.
        self._stdout.begin(secrets.token_hex(8), at_start_marker=False)
        self._stderr.begin(secrets.token_hex(8), at_start_marker=False)
        host_end = None
        template = self.launch.template
        if template is not None and template.alive:
            with contextlib.suppress(TemplateError):
                host_end = await self._fork(template)
        if host_end is None and self.launch.sandbox is not None:
            host_end = await self._fork_alone(self.launch.sandbox)
        if host_end is None:
            host_end = await self._spawn()
        self._started = True
        # `ready` comes unasked, maybe before the channel's connection has even returned:
        # its waiter is in place first.
        self._waiters["ready"] = loop.create_future()
        try:
            self._channel, _ = await loop.connect_accepted_socket(
                lambda: _ChannelProtocol(self), sock=host_end
            )
            ready = await self._expect("ready", self.launch.start_timeout)
            self.python_version = str(ready.get("python"))
            if self.catalogue.plans:
                bound = await self._expect(
                    "bound", self.launch.start_timeout, {"t": "bind", "plans": self.catalogue.plans}
                )
                self.bind_failures = [
                    (str(item[0]), str(item[1])) for item in bound.get("failures", [])
                ]
        except InterpreterStartError as error:
            await self.kill()
            stderr = self._stderr.take().text.strip()
            detail = f"; it said: {stderr[-800:]}" if stderr else ""
            raise InterpreterStartError(f"{error.reason}{detail}") from None
        except asyncio.CancelledError:
            # Nobody holds this interpreter yet, so nobody else would ever stop it.
            await asyncio.shield(self.kill())
            raise

    async def _spawn(self) -> socket.socket:
        loop = asyncio.get_running_loop()
        host_end, kernel_end = socket.socketpair()
        config = json.dumps({"limits": self.launch.limits, "preload": list(self.launch.preload)})
        command = kernel_command(self.launch.python, "__main__", str(kernel_end.fileno()), config)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: _ProcessProtocol(self),
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(kernel_end.fileno(),),
                env=self.launch.env,
                cwd=self.launch.cwd,
                start_new_session=True,
            )
        except (OSError, ValueError) as error:
            host_end.close()
            raise InterpreterStartError(
                f"the Python at {self.launch.python!r} could not be started: {error}"
            ) from None
        finally:
            kernel_end.close()
        self._process = transport
        self.pid = transport.get_pid()
        for fd in (1, 2):
            _read_less(transport.get_pipe_transport(fd))
        return host_end

    async def _fork_alone(self, sandbox: Sandbox) -> socket.socket:
        """A sandboxed kernel that cannot come from the runtime's template (there is none, or
        it cannot serve): from a template of its own, which ends with it."""
        launch = self.launch
        try:
            self._own_template = await Template.start(
                launch.python, (), launch.env, launch.start_timeout, sandbox, alone=True
            )
            channel = await self._fork(self._own_template, preload=launch.preload)
            self.forked = False  # a fresh Python of its own, as a spawned one is
            return channel
        except TemplateError as error:
            if self._own_template is not None:
                await self._own_template.close()
            raise InterpreterStartError(error.reason) from None

    async def _fork(self, template: Template, preload: tuple[str, ...] = ()) -> socket.socket:
        """A kernel forked from the template: pipes read here, its end seen through a pidfd
        (it is the template's child, not ours), its exit status reported by the template."""
        loop = asyncio.get_running_loop()
        launch = self.launch
        extra: dict[str, Any] = {}
        if launch.sandbox is not None:
            self._cgroup = launch.sandbox.new_cgroup()
            processes = launch.limits.get("processes")
            extra = {
                "cgroup": self._cgroup,
                # The init counts too: the script gets the number it was given.
                "processes": processes + 1 if processes is not None else None,
                "preload": list(preload),
            }
        forked = await template.fork(
            launch.cwd, launch.env, launch.limits, launch.start_timeout, extra
        )
        self.forked = True
        self._status = forked.status
        if forked.pidfd is not None:
            self._pidfd = forked.pidfd
            self.pid = _pid_of(forked.pidfd)
        else:
            self.pid = forked.pid
            try:
                self._pidfd = os.pidfd_open(forked.pid)
            except OSError:
                self._pidfd = None  # it is gone already; the status will say how
        for fd, pipe in ((1, forked.stdout), (2, forked.stderr)):
            pipe_transport, _ = await loop.connect_read_pipe(
                lambda fd=fd: _PipeProtocol(self, fd),  # type: ignore[misc]
                os.fdopen(pipe, "rb", buffering=0),
            )
            _read_less(pipe_transport)
        if self._pidfd is None:
            loop.call_soon(self._forked_exited)
        else:
            loop.add_reader(self._pidfd, self._forked_exited)
        return forked.channel

    def _forked_exited(self) -> None:
        loop = asyncio.get_running_loop()
        if self._pidfd is not None:
            loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        status = self._status
        assert status is not None

        def report(_: object = None) -> None:
            if not self._exited.is_set():
                self.exited(status.result() if status.done() and not status.cancelled() else None)

        if status.done():
            report()
        else:
            status.add_done_callback(report)
            loop.call_later(EXIT_STATUS_WAIT, report)  # the template may be gone: no status

    async def _expect(
        self, kind: str, timeout: float, request: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        waiter = self._waiters.get(kind)
        if waiter is None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[kind] = waiter
        if request is not None:
            self.send(request)
        exited: asyncio.Future[Any] = asyncio.ensure_future(self._exited.wait())
        try:
            finished, _ = await asyncio.wait(
                (waiter, exited), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            exited.cancel()
            self._waiters.pop(kind, None)
        if waiter in finished:
            return waiter.result()
        if self.fault is not None:
            raise InterpreterStartError(f"the kernel broke the protocol: {self.fault}")
        if self._exited.is_set():
            raise InterpreterStartError(
                f"the kernel exited during start-up ({describe_exit(self.returncode)})"
            )
        raise InterpreterStartError(f"the kernel did not answer {kind!r} within {timeout:g} s")

    async def close(self, *, abandon_calls: bool = True) -> None:
        """Ask the kernel to exit; kill its whole process group if it does not in time.

        With `abandon_calls`, handlers still running for its calls are cancelled too (the
        runtime is closing); otherwise they finish under their own timeouts, so the journal
        learns their answers.
        """
        self.closing = True
        if self.alive:
            self.send({"t": "shutdown"})
            try:
                await asyncio.wait_for(self._exited.wait(), SHUTDOWN_WAIT)
            except TimeoutError:
                pass
        await self.kill()
        if abandon_calls:
            for task in list(self._tasks):
                task.cancel()

    async def kill(self) -> None:
        """Kill the kernel and everything in its process group; bounded."""
        self._signal(signal.SIGKILL)
        if self._started:
            try:
                await asyncio.wait_for(self._exited.wait(), SHUTDOWN_WAIT)
            except TimeoutError:
                pass
        if self._process is not None:
            self._process.close()
        if self._channel is not None:
            self._channel.close()
        if self._own_template is not None:
            await self._own_template.close()
        if self.launch.sandbox is not None and self._exited.is_set():
            self.launch.sandbox.drop_cgroup(self._cgroup)
        # Handlers of its calls still in flight are left to finish under their own timeouts:
        # their answers tell the journal what happened. `close()` abandons them.

    def _signal(self, signum: int) -> None:
        """SIGINT to the kernel, or SIGKILL to it and all it started.

        A sandboxed kernel is reached through its init, by pidfd (no pid can be reused under
        us): the init forwards SIGINT, and its death ends its whole PID namespace. Otherwise
        the kernel leads a process group, which SIGKILL ends with it.
        """
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if self.launch.sandbox is not None and self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signum)
            elif self.pid is not None and signum == signal.SIGKILL:
                os.killpg(self.pid, signum)
            elif self.pid is not None:
                os.kill(self.pid, signum)

    # -- scripts -----------------------------------------------------------------------------

    async def execute(self, script_id: str, code: str, time_limit: float, grace: float) -> Outcome:
        """Run one script to its end, whatever that end is. Cancelling this stops the script.

        The caller must not run two scripts at once on one interpreter.
        """
        loop = asyncio.get_running_loop()
        marker = secrets.token_hex(8)
        # The kernel writes a start marker unless it said, when the last script ended, that
        # nothing was left that could write before this one (see the kernel's runner).
        self._stdout.begin(marker, at_start_marker=not self._quiet)
        self._stderr.begin(marker, at_start_marker=not self._quiet)
        self._done = loop.create_future()
        self._script = self._last_script = script_id
        self._deadline = loop.time() + time_limit + grace
        self.ledger.begin_script(script_id)
        busy = self.launch.busy
        exec_frame: dict[str, Any] = {
            "t": "exec",
            "script": script_id,
            "code": code,
            "marker": marker,
            "grace": grace,
        }
        watch = self._watch
        if watch is not None:
            exec_frame["check"] = watch.token  # the kernel checks before it starts this one
            watch.asked = True
        if busy is not None:
            exec_frame["busy_poll"] = busy.script_started()
        stop_reason: str | None = None
        cancelled = False
        self.runs += 1
        try:
            self.send(exec_frame)
            try:
                async with asyncio.timeout(time_limit):  # no task of its own, unlike wait_for
                    report = await asyncio.shield(self._done)
            except TimeoutError:
                stop_reason = "time_limit"
                report = await self._stop(script_id, stop_reason, grace)
            except asyncio.CancelledError:
                cancelled = True
                stop_reason = "cancelled"
                report = await asyncio.shield(self._stop(script_id, stop_reason, grace))
        finally:
            if busy is not None:
                busy.script_ended()
        outcome = await self._conclude(report, stop_reason)
        if cancelled:
            self.last_outcome = outcome
            raise asyncio.CancelledError
        return outcome

    async def stop(self, reason: str, grace: float) -> None:
        """Stop the running script (used by a handle's cancel); `execute` then concludes,
        giving `reason` as the stop's reason."""
        if self._script is not None and self._done is not None and not self._done.done():
            self._stop_reason = reason
            await self._stop(self._script, reason, grace)

    async def _stop(self, script_id: str, reason: str, grace: float) -> dict[str, Any]:
        assert self._done is not None
        if not self._done.done() and self.alive and self.pid is not None:
            self._signal(signal.SIGINT)  # the kernel's handler turns it into a stop
            try:
                return await asyncio.wait_for(asyncio.shield(self._done), grace)
            except TimeoutError:
                pass
        if not self._done.done():
            # Said before the kill: the kernel's exit, reported while `kill` waits for it,
            # would otherwise settle the script as a crash.
            self._done.set_result({"status": "killed"})
            await self.kill()
        return self._done.result()

    async def _conclude(self, report: dict[str, Any], stop_reason: str | None) -> Outcome:
        status = str(report.get("status"))
        said = report.get("broken")
        if isinstance(said, str) and status in ("ok", "error", "stopped"):
            self.broken = said[:1000]
        if self.broken is not None and status not in ("killed", "fault"):
            # Whatever the script's code did, the interpreter cannot go on: it is ended here.
            status = "broken"
            report = {**report, "broken": self.broken}
        gone = status in ("killed", "crashed", "fault", "broken")
        self._quiet = report.get("quiet") is True
        if status == "stopped" and report.get("threads_left"):
            # A thread cannot be stopped from outside: the interpreter goes with it.
            self.closing = True
            gone = True
        if gone:
            await self.kill()
            try:
                await asyncio.wait_for(self._pipes_closed.wait(), OUTPUT_END_WAIT)
            except TimeoutError:
                pass
        elif report.get("drained") is True and self._quiet:
            # The kernel found both pipes read to the end, so the script's output has all
            # been fed to the captures already: it ends here, with no marker to wait for.
            self._stdout.end_here()
            self._stderr.end_here()
        else:
            await self._stdout.wait_ended(OUTPUT_END_WAIT)
            await self._stderr.wait_ended(OUTPUT_END_WAIT)
        if self.fault is not None and not gone:
            # Found broken while its output was awaited (its `done` was forged, say): the
            # result says so, rather than what the frame claimed.
            status, gone = "fault", True
            await self.kill()
        never_started = gone and not self._stdout.started and not self._stderr.started
        stdout = self._stdout.take()
        stderr = self._stderr.take()
        calls = self.ledger.settle(interpreter_gone=gone)
        self._script = None
        self._done = None
        if stop_reason is None:
            stop_reason = self._stop_reason
        self._stop_reason = None
        if status == "stopped" and stop_reason is None:
            stop_reason = str(report.get("reason", "stopped"))
        return Outcome(
            ending=status,
            report=report,
            stdout=stdout,
            stderr=stderr,
            calls=calls,
            stop_reason=stop_reason,
            exit_description=describe_exit(self.returncode) if gone else None,
            fault=self.fault,
            unattributed_bytes=self._stdout.unattributed_bytes + self._stderr.unattributed_bytes,
            never_started=never_started,
        )

    # -- the wire ----------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        """Send a frame now, or with the others of this loop iteration when some are waiting.

        A frame alone goes at once: waiting a loop iteration to batch it costs a lone call's
        round trip another pass of the event loop on each side. Frames that come while one is
        waiting to go (the answers of a `gather`) go together, in one write.
        """
        channel = self._channel
        if channel is None or channel.is_closing():
            return
        self._send_frame(channel, codec.encode(message))

    def _send_frame(self, channel: asyncio.Transport, frame: bytes) -> None:
        if self._outbox:
            self._outbox.append(frame)
            if len(self._outbox) >= wire.BATCH:
                # A long burst goes out in pieces, so the kernel starts on the first
                # answers while the rest are still being made.
                frames, self._outbox = self._outbox, []
                channel.write(b"".join(frames))
                self._loop.call_soon(self._flush)
        elif not self._wrote_alone:
            channel.write(frame)
            self._wrote_alone = True
            if self._done is not None and self.launch.busy is not None:
                self.launch.busy.expect()  # the running script's kernel answers at once
        else:
            self._outbox.append(frame)
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        if not self._outbox:
            return
        if self._channel is not None and not self._channel.is_closing():
            frames, self._outbox = self._outbox, []
            self._channel.write(b"".join(frames))
            if self._done is not None and self.launch.busy is not None:
                self.launch.busy.expect()
        self._outbox = []
        self._wrote_alone = False

    def received(self, data: bytes | memoryview) -> None:
        self._wrote_alone = False
        try:
            messages = self._reader.feed(data)
            self._handle(messages)
        except ProtocolViolation as error:
            self._broke(str(error), error.script)
        except (wire.FrameError, ValueError, KeyError, TypeError) as error:
            self._broke(str(error))
        except Exception as error:
            # Any other failure on an untrusted frame (an ack too short to index, ...) is
            # the kernel's fault too; let through, it would close the channel from inside
            # asyncio and be misreported as a channel the kernel closed.
            self._broke(f"a frame the host could not handle ({type(error).__name__}: {error})")

    def _handle(self, messages: list[dict[str, Any]]) -> None:
        calls: list[dict[str, Any]] = []
        for message in messages:
            kind = message.get("t")
            if kind == "call":
                if "acks" in message or "seen" in message:
                    # The kernel's word on earlier calls, carried along: those calls may be
                    # in this very batch, so they are registered first.
                    if calls:
                        self._dispatch(calls)
                        calls = []
                    self.ledger.acknowledged(message.get("acks", ()), message.get("seen", ()))
                calls.append(message)
                continue
            if calls:
                self._dispatch(calls)
                calls = []
            if kind == "ack":
                self.ledger.acknowledged(message.get("acks", ()), message.get("seen", ()))
            elif kind == "done":
                if self._done is None or message.get("script") != self._script:
                    self._stray_done(message.get("script"))
                if not self._done.done():
                    self._done.set_result(message)
                    self._watch_end(str(message["script"]))
            elif kind == "checked":
                self._checked(message)
            elif kind in self._waiters:
                waiter = self._waiters[kind]
                if not waiter.done():
                    waiter.set_result(message)
            else:
                raise ValueError(f"an unexpected frame of kind {str(kind)[:40]!r}")
        if calls:
            self._dispatch(calls)

    def _dispatch(self, frames: list[dict[str, Any]]) -> None:
        todo: list[tuple[int, str, dict[str, Any]]] = []
        for n, call, args in self.ledger.made(frames):
            key = call.tool
            problem = self.catalogue.check(key, args)
            if problem is not None:
                self.ledger.refuse(n, problem)
                self.send(Answer("refused", message=problem).to_frame(n))
                continue
            todo.append((n, key, args))
        if todo:
            # Its first step runs now where tasks can start eagerly (3.12): handlers that
            # need no wait answer before this returns, without a pass of the event loop.
            self._answer_soon(todo, 0, eager=_EAGER)

    def _answer_soon(
        self, todo: list[tuple[int, str, dict[str, Any]]], start: int, eager: bool
    ) -> None:
        if eager:
            task = asyncio.Task(self._answer(todo, start), loop=self._loop, **_EAGER_START)
            if not task.done():
                self._tasks.add(task)
        else:
            self._tasks.add(self._loop.create_task(self._answer(todo, start)))

    async def _answer(self, todo: list[tuple[int, str, dict[str, Any]]], start: int) -> None:
        """Answer the calls `todo[start:]`, as many as can be in this one task.

        Goal: a call costs what its handler costs, and most handlers (Python tools) answer
        without waiting. What fails: a task per call, which costs more than such a handler
        (its creation, a pass of the loop, its bookkeeping), 15% of the host's time through
        a `gather`. What we do: run the calls' handlers one after another in one task, each
        in its own copy of the context, as a task of its own would. A handler that has to
        wait keeps this task, which waits for it: whatever it tied to the current task in
        its first step (a timeout, a cancel scope) is tied to the task that goes on running
        it. The calls after it go on in a new task, at once.
        """
        answered: list[tuple[int, Answer]] = []  # journaled and sent together
        begin = self.catalogue.begin
        try:
            for i in range(start, len(todo)):
                n, key, args = todo[i]
                context = contextvars.copy_context()
                try:
                    begun = context.run(begin, key, args)
                except asyncio.CancelledError:
                    # Nothing cancelled this task mid-step: the handler raised it itself.
                    answered.append((n, _cancelled_itself(key)))
                    continue
                if type(begun) is Answer:
                    answered.append((n, begun))
                    continue
                assert isinstance(begun, Waiting)
                if i + 1 < len(todo):
                    self._answer_soon(todo, i + 1, eager=False)
                done, answered = answered, []
                self._answered_all(done)
                try:
                    answer = await self.catalogue.finish(begun, context)
                except asyncio.CancelledError:
                    task = asyncio.current_task(self._loop)
                    if task is None or task.cancelling():
                        raise  # the runtime is closing: the call stays unanswered, pending
                    answer = _cancelled_itself(key)
                self._answered(n, answer)
                return
        finally:
            if answered:
                self._answered_all(answered)
            # Not a done callback: that would cost every call another pass of the loop.
            self._tasks.discard(asyncio.current_task(self._loop))

    def _answered_all(self, answers: list[tuple[int, Answer]]) -> None:
        """Journal handlers' answers, then send them.

        An answer the channel cannot carry (over `wire.MAX_FRAME`, or not JSON) becomes an
        error answer saying so: the script gets a `ToolError`, the interpreter stays.
        """
        encode = codec.encode
        frames: list[bytes] = []
        for i, (n, answer) in enumerate(answers):
            try:
                frame = encode(answer.to_frame(n))
            except (TypeError, ValueError, RecursionError, MemoryError) as error:
                problem = f"could not be sent as JSON ({type(error).__name__}: {error})"
            else:
                if len(frame) <= wire.LONGEST_FRAME:
                    frames.append(frame)
                    continue
                problem = (
                    f"was {len(frame) / 1e6:,.0f} MB as JSON, over the {wire.MAX_FRAME >> 20} "
                    "MiB limit of the interpreter's channel, so it was not sent"
                )
            message = (
                f"the answer of {self.ledger.tool_of(n)} {problem}. The tool ran, so its effect "
                "happened: ask it for less at a time."
            )
            answer = Answer("error", message, message)
            answers[i] = (n, answer)
            frames.append(encode(answer.to_frame(n)))
        self.ledger.answered_all(
            (n, answer.kind != "value", answer.value)
            for n, answer in answers
            if answer.kind not in _HOST_CAUSES
        )
        for n, answer in answers:
            if answer.kind in _HOST_CAUSES:
                self.ledger.answered(n, True, None, host_cause=answer.kind)
        channel = self._channel
        if channel is not None and not channel.is_closing():
            for frame in frames:
                self._send_frame(channel, frame)

    def _answered(self, n: int, answer: Answer) -> None:
        self._answered_all([(n, answer)])

    # -- what the kernel claims --------------------------------------------------------------

    # Goal: a script's `done` cannot buy its code time. What fails: believing the frame. The
    # script shares the kernel's process and can write a `done` of its own, with the right
    # script id, and go on running: the host would report the script ended, and its code
    # would run on past its time limit, unseen. Waiting for the kernel's own `done` (a
    # second one) fails too: a loop that never yields never sends it. What we do: after a
    # `done`, the host asks the kernel whether the script's code still runs, with a token
    # the script cannot know before the host sends it (in the next `exec`, or alone after
    # `CHECK_DELAY`). The kernel answers from its event loop, which code still running in
    # the script's cell keeps busy, or finds the cell not finished and says so. An answer
    # that the code still runs, or no answer by the end of the script's time limit and
    # grace (and at least `CHECK_WAIT` after the `done`), is a protocol violation: the
    # interpreter is killed, and the script's journal row says why. The result of the run
    # may have gone out already; the next run then starts a fresh interpreter and says so.
    # The honest kernel's cost is one small frame per script, answered at once. (A script
    # that reads the channel itself and answers for the kernel is the kernel; no frame can
    # tell it apart. The sandbox is what bounds that one.)

    def _watch_end(self, script_id: str) -> None:
        loop = self._loop
        deadline = max(self._deadline, loop.time() + CHECK_WAIT)
        watch = _EndWatch(script_id, f"{self._tokens.getrandbits(64):016x}", deadline)
        if self._watch is not None and self._watch.timer is not None:
            self._watch.timer.cancel()
        self._watch = watch
        watch.timer = loop.call_later(CHECK_DELAY, self._watch_check)

    def _watch_check(self) -> None:
        watch = self._watch
        if watch is None or not self.alive or self.closing:
            return
        if self._loop.time() >= watch.deadline:
            self._watch = None
            self._broke(
                f"script {watch.script} said it was done, but the interpreter did not confirm "
                "that its code had stopped before its time limit and grace were over (the "
                "script forged its 'done' and ran on, or left code that holds the interpreter)",
                culprit=watch.script,
            )
            return
        if not watch.asked:
            watch.asked = True
            self.send({"t": "check", "token": watch.token})
        watch.timer = self._loop.call_at(watch.deadline, self._watch_check)

    def _checked(self, message: dict[str, Any]) -> None:
        watch = self._watch
        running = message.get("running")
        if running is not None:
            culprit = watch.script if watch is not None else self._last_script
            raise ProtocolViolation(
                f"script {culprit} said it was done while its code was still running (the "
                "interpreter found it running when the host asked): the script forged its "
                "'done'",
                culprit,
            )
        if watch is not None and message.get("token") == watch.token:
            self._watch = None
            if watch.timer is not None:
                watch.timer.cancel()
        if self._done is not None and self.launch.busy is not None:
            self.launch.busy.expect()  # the answer to an exec: the script's own frames follow

    def _stray_done(self, script: object) -> NoReturn:
        named = str(script)[:80]
        ended = self._watch.script if self._watch is not None else self._last_script
        if script == ended and ended != self._script:
            raise ProtocolViolation(
                f"a second 'done' came for script {named}: the script forged the first", ended
            )
        if self._script is None:
            raise ProtocolViolation(f"a 'done' came for script {named}, but no script was running")
        raise ProtocolViolation(
            f"a 'done' came for script {named}, but script {self._script} was running"
        )

    def _broke(self, reason: str, culprit: str | None = None) -> None:
        if self.fault is not None:
            return
        self.fault = reason
        self._drop_watch()
        culprit = culprit or self._script or self._last_script
        if culprit is not None:
            with contextlib.suppress(JournalClosedError):
                self._journal.record_violation(culprit, reason)
        if self._started:
            self._signal(signal.SIGKILL)
        if self._done is not None and not self._done.done():
            self._done.set_result({"status": "fault"})

    def channel_lost(self) -> None:
        # A kernel that dies closes its channel too, often a moment before the exit is
        # reported: only a channel closed by a kernel that goes on living is a fault.
        if not self._exited.is_set() and not self.closing:
            asyncio.get_running_loop().call_later(CHANNEL_LOST_WAIT, self._channel_lost_check)

    def _channel_lost_check(self) -> None:
        if not self._exited.is_set() and not self.closing:
            self._broke("it closed its channel to the host")

    def _drop_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None and watch.timer is not None:
            watch.timer.cancel()

    def exited(self, returncode: int | None) -> None:
        self.returncode = returncode
        if returncode == BROKEN_EXIT and self.broken is None:
            self.broken = f"the kernel could not say which: it exited with code {returncode}"
        self._exited.set()
        self._drop_watch()
        if self._done is not None and not self._done.done():
            self._done.set_result({"status": "crashed"})

    def pipe_data(self, fd: int, data: bytes) -> None:
        (self._stdout if fd == 1 else self._stderr).feed(data)

    def pipe_closed(self, fd: int) -> None:
        (self._stdout if fd == 1 else self._stderr).close()
        self._open_pipes -= 1
        if self._open_pipes <= 0:
            self._pipes_closed.set()


def _pid_of(pidfd: int) -> int | None:
    """The pid, as this process sees it, of the process a pidfd refers to."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as info:
            for line in info:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError):
        pass
    return None


class _EndWatch:
    """A script whose `done` came, and whose end the kernel has yet to confirm."""

    __slots__ = ("asked", "deadline", "script", "timer", "token")

    def __init__(self, script: str, token: str, deadline: float) -> None:
        self.script = script
        self.token = token
        self.deadline = deadline
        self.asked = False
        self.timer: asyncio.TimerHandle | None = None


def describe_exit(returncode: int | None) -> str:
    """An exit status in words: `exit code 3`, `signal 9 (SIGKILL)`."""
    if returncode is None:
        return "exit status unknown"
    if returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {number} ({name})"
    return f"exit code {returncode}"


def _read_less(transport: asyncio.BaseTransport | None) -> None:
    """Have an output pipe's transport read 64 KiB at a time rather than asyncio's 256 KiB.

    The pipe transport allocates a new bytes object of its read size for each read; at
    256 KiB the allocator maps and unmaps it every time (about 16 µs warm), and every script
    ends with a read of its end marker on both pipes. (Pipe transports take no
    `BufferedProtocol`; `max_size` is the attribute they read the size from.)
    """
    if transport is not None and hasattr(transport, "max_size"):
        transport.max_size = PIPE_READ_SIZE


class _ChannelProtocol(asyncio.BufferedProtocol):
    def __init__(self, interpreter: Interpreter) -> None:
        self._interpreter = interpreter
        self._buffer = wire.ChannelReader()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._interpreter.received(self._buffer.received(nbytes))

    def eof_received(self) -> bool:
        self._interpreter.channel_lost()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._interpreter.channel_lost()


class _PipeProtocol(asyncio.Protocol):
    def __init__(self, interpreter: Interpreter, fd: int) -> None:
        self._interpreter = interpreter
        self._fd = fd

    def data_received(self, data: bytes) -> None:
        self._interpreter.pipe_data(self._fd, data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._interpreter.pipe_closed(self._fd)


class _ProcessProtocol(asyncio.SubprocessProtocol):
    def __init__(self, interpreter: Interpreter) -> None:
        self._interpreter = interpreter

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self._interpreter.pipe_data(fd, data if isinstance(data, bytes) else data.encode())

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._interpreter.pipe_closed(fd)

    def process_exited(self) -> None:
        transport = self._transport
        self._interpreter.exited(transport.get_returncode() if transport is not None else None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport: asyncio.SubprocessTransport | None = transport  # type: ignore[assignment]


def _cancelled_itself(key: str) -> Answer:
    """The answer to a call whose handler raised `CancelledError` when nothing cancelled it
    (it awaited a task that someone cancelled, say): an error the script can see, rather than
    a call that never answers."""
    message = (
        f"{key}: the tool's handler was cancelled (it raised CancelledError). It may have "
        "taken effect in part: check before you repeat it."
    )
    return Answer("error", message, message)
