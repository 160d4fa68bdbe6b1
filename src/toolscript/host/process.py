"""A kernel's process, seen from the host: start it, signal it, see it end.

One concept, though over 500 lines: one kernel's process from the host's side: each way it
is started and every way it ends, which must agree.

A kernel is forked from the runtime's template when there is one that serves, forked from a
sandboxed template of its own when it must be confined and the runtime's cannot serve, and
spawned otherwise. A forked kernel is the template's child, not the host's: its end is seen
through a pidfd and its exit status comes from the template.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..kernel.control import confined
from .busypoll import LoopPoll
from .output import StreamCapture
from .pids import children, descendants, ended, pidfds
from .sandbox import Sandbox
from .template import Forked, Template, TemplateError, kernel_command

if TYPE_CHECKING:
    from .headstart import HeadStart
    from .keeper import Keeper

EXIT_STATUS_WAIT = 1.0
"""Seconds to wait for the template's word on how a forked kernel ended."""

PIPE_READ_SIZE = 64 * 1024
"""Bytes read from an output pipe at a time."""

SHUTDOWN_WAIT = 2.0
"""Seconds to wait for a kernel to exit after `shutdown` before it is killed."""


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
    max_images: int = 8
    image_limit: int = 5_000_000
    template: Template | Keeper | None = None
    """Where kernels are forked from: the runtime's template, or its keeper's."""
    preload: tuple[str, ...] = ()
    busy: LoopPoll | None = None
    sandbox: Sandbox | None = None
    """Start the kernel confined (from a sandboxed template: the runtime's, or one of its
    own when that one cannot serve)."""
    head_start: HeadStart | None = None
    """A template of its own that the command line already started (`headstart`)."""


class KernelProcess:
    """One kernel's process: its pid (and pidfd), its output pipes, its end.

    The pipes feed `stdout` and `stderr`; `on_exit(returncode)` is called once, when the
    process is seen to end.
    """

    def __init__(
        self,
        launch: Launch,
        stdout: StreamCapture,
        stderr: StreamCapture,
        on_exit: Callable[[int | None], None],
    ) -> None:
        self.launch = launch
        self.forked = False
        self.started = False
        self.closing = False
        """The host is ending this kernel on purpose: its end is no fault."""
        self.pid: int | None = None
        self.returncode: int | None = None
        self.exited = asyncio.Event()
        self.pipes_closed = asyncio.Event()
        self._stdout = stdout
        self._stderr = stderr
        self._on_exit = on_exit
        self._open_pipes = 2
        self._pidfd: int | None = None
        self._status: asyncio.Future[int] | None = None
        self._process: asyncio.SubprocessTransport | None = None
        self._own_template: Template | None = None
        self._cgroup: str | None = None
        self.held: int | None = None
        """Its number at the keeper, when a keeper holds it."""
        self._slot = 0
        self._noted = False  # the running script was told over the socket, not on the board

    async def start(self) -> socket.socket:
        """Start the kernel; the host's end of its channel. Raises `InterpreterStartError`."""
        host_end = None
        template = self.launch.template
        if template is not None and template.alive:
            with contextlib.suppress(TemplateError):
                host_end = await self._fork(template)
        if host_end is None and self.launch.sandbox is not None:
            host_end = await self._fork_alone(self.launch.sandbox)
        if host_end is None:
            host_end = await self._spawn()
        self.started = True
        return host_end

    def kernel_pid(self) -> int | None:
        """The kernel's pid as the host sees it. (A sandboxed kernel is its init's child.)"""
        if self.launch.sandbox is None or self.pid is None:
            return self.pid
        found = children(self.pid)
        return found[0] if found else None

    # Goal: after a stop, nothing the script started runs on (issue 12's "stop means
    # stopped"). What fails: the kernel's word alone: it ends every process of the sandbox
    # but its init and itself, but the script shares its process and can replace the code
    # that does it, then let the kernel say all was ended. What we do: the host looks for
    # itself, from outside the sandbox, and counts the processes still alive a moment later.
    async def strays(self, wait: float) -> int:
        """How many processes of the sandbox besides its init and kernel are still alive,
        `wait` seconds at most after this is asked (killed ones take a moment to end): after
        a stop, where the kernel has ended them all, any is one the script kept from it. 0
        without a sandbox, where they cannot be told from the host's."""
        if self.launch.sandbox is None or self.pid is None:
            return 0
        loop = asyncio.get_running_loop()
        kernel = self.kernel_pid()
        deadline = loop.time() + wait
        first: set[int] | None = None
        while True:
            # Looked for again once those found have ended: a process that forks and exits
            # over and over ends under every pidfd, while its newest child runs on; one that
            # does it fast enough has ended by the time its pidfd is looked at, every time.
            # Only a look that finds no process at all (not even one just ended, which its
            # parent or the init reaps at once) says none is left.
            listed = [pid for pid in descendants(self.pid) if pid != kernel]
            if first is None:
                first = set(listed)
            if not listed:
                return 0
            found = pidfds(listed)
            try:
                live = _still_running(found)  # a zombie has ended: its parent reaps it
                left = deadline - loop.time()
                if left <= 0:
                    # Processes that came after the stop are the newest of such a chain.
                    return len(live) or int(not first.issuperset(listed))
                if not live:
                    await asyncio.sleep(0.001)  # the ended ones are reaped, or a chain goes on
                    continue
                waits = [asyncio.ensure_future(ended(pidfd)) for pidfd in live]
                _, pending = await asyncio.wait(waits, timeout=left)
                for waiting in pending:
                    waiting.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                if pending:
                    return len(pending)
            finally:
                for pidfd in found:
                    os.close(pidfd)

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
            head = launch.head_start
            if head is not None:
                self._cgroup = head.cgroup
                asked = head.asked
                try:
                    self._own_template = await Template.adopt(
                        head.process,
                        head.control,
                        launch.start_timeout,
                        asked=asked.number if asked is not None else None,
                    )
                except TemplateError:
                    if asked is not None:
                        asked.close()
                    raise
                if asked is not None:  # its kernel was asked for at once, as `_fork` would
                    forked = await self._own_template.forked(
                        asked.number,
                        socket.socket(fileno=asked.channel),
                        asked.stdout,
                        asked.stderr,
                        launch.start_timeout,
                    )
                    channel = await self.attach(forked)
                    self.forked = False  # a fresh Python of its own, as a spawned one is
                    return channel
            else:
                self._cgroup = sandbox.new_cgroup()
                self._own_template = await Template.start(
                    launch.python,
                    (),
                    launch.env,
                    launch.start_timeout,
                    sandbox,
                    alone=True,
                    cgroup=self._cgroup,
                )
            channel = await self._fork(self._own_template, preload=launch.preload)
            self.forked = False  # a fresh Python of its own, as a spawned one is
            return channel
        except TemplateError as error:
            if self._own_template is not None:
                await self._own_template.close()
            raise InterpreterStartError(error.reason) from None

    async def _fork(
        self, template: Template | Keeper, preload: tuple[str, ...] = ()
    ) -> socket.socket:
        """A kernel forked from the template: pipes read here, its end seen through a pidfd
        (it is the template's child, not ours), its exit status reported by the template."""
        launch = self.launch
        extra: dict[str, Any] = {}
        if launch.sandbox is not None:
            # A template of its own (`_fork_alone`) was started in the kernel's cgroup.
            if self._cgroup is None:
                self._cgroup = launch.sandbox.new_cgroup()
            extra = confined(self._cgroup, launch.limits, preload)
        forked = await template.fork(
            launch.cwd, launch.env, launch.limits, launch.start_timeout, extra
        )
        return await self.attach(forked)

    async def attach(self, forked: Forked) -> socket.socket:
        """Take a forked kernel's descriptors: read its pipes, watch its end through its
        pidfd. The host's end of its channel is returned."""
        loop = asyncio.get_running_loop()
        self.forked = True
        self.started = True
        self.held = forked.held
        self._slot = forked.slot
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
        # Its end is watched first: a cancel while its pipes are wired leaves nothing open
        # once it has ended.
        if self._pidfd is None:
            loop.call_soon(self._forked_exited)
        else:
            loop.add_reader(self._pidfd, self._forked_exited)
        pipes = [forked.stdout, forked.stderr]
        try:
            for fd in (1, 2):
                pipe = os.fdopen(pipes.pop(0), "rb", buffering=0)
                pipe_transport, _ = await loop.connect_read_pipe(
                    lambda fd=fd: _PipeProtocol(self, fd),  # type: ignore[misc]
                    pipe,
                )
                _read_less(pipe_transport)
        except BaseException:
            for left in pipes:
                os.close(left)
            forked.channel.close()
            raise
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
            if not self.exited.is_set():
                self.ended(status.result() if status.done() and not status.cancelled() else None)

        if status.done():
            report()
        else:
            status.add_done_callback(report)
            loop.call_later(EXIT_STATUS_WAIT, report)  # the template may be gone: no status

    def signal(self, signum: int) -> None:
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

    async def kill(self) -> None:
        """SIGKILL to the kernel and everything in its process group, and wait for its end;
        bounded. `release` then frees what it held."""
        self.signal(signal.SIGKILL)
        if self.started:
            try:
                await asyncio.wait_for(self.exited.wait(), SHUTDOWN_WAIT)
            except TimeoutError:
                pass
        if self._process is not None:
            self._process.close()

    def _keeper(self) -> Keeper | None:
        """The keeper that holds this kernel, if one does. (Only a keeper gives a kernel a
        number, `held`; the keeper's module is imported only by runtimes that keep theirs.)"""
        return None if self.held is None else cast("Keeper", self.launch.template)

    def exit_words(self) -> str:
        """How it ended, in words (`describe_exit`), and with its keeper, if that exited."""
        words = describe_exit(self.returncode)
        if self.forked and getattr(self.launch.template, "lost", False) is True:
            return f"{words}, with the keeper that held it, which exited"
        if self.forked and getattr(self.launch.template, "died", False) is True:
            return f"{words}, with the template it was forked from, which died"
        return words

    def note(self, **meta: object) -> None:
        """Tell the keeper that holds this kernel, if one does, what it runs now."""
        keeper = self._keeper()
        if keeper is not None and self.held is not None:
            keeper.note(self.held, **meta)

    def script_began(
        self, script_id: str, marker: str, deadline: float, grace: float, limit: float
    ) -> None:
        """Tell the keeper that holds this kernel, if one does, that a script runs now, and
        until when (wall-clock time) its time limit holds."""
        keeper = self._keeper()
        if keeper is not None and self.held is not None:
            self._noted = not keeper.script_began(
                self._slot, script_id, marker, deadline, grace, limit
            )
            if self._noted:
                keeper.note(  # too long for its slot: said over the socket
                    self.held,
                    script=script_id,
                    marker=marker,
                    deadline=deadline,
                    grace=grace,
                    time_limit=limit,
                )

    def script_ended(self) -> None:
        """Tell the keeper that holds this kernel, if one does, that no script runs in it."""
        keeper = self._keeper()
        if keeper is not None and self.held is not None:
            keeper.script_ended(self._slot)
            if self._noted:
                keeper.note(self.held, script=None, deadline=None)

    async def release(self) -> None:
        """Close the template of its own, if it has one, and its cgroup once it has ended;
        a keeper that held it lets it go."""
        if self._own_template is not None:
            await self._own_template.close()
        keeper = self._keeper()
        if keeper is not None and self.held is not None:
            keeper.forget(self.held)
            self.held = None
        if self.launch.sandbox is not None and self.exited.is_set():
            self.launch.sandbox.drop_cgroup(self._cgroup)

    def ended(self, returncode: int | None) -> None:
        self.returncode = returncode
        self.exited.set()
        self._on_exit(returncode)

    def pipe_data(self, fd: int, data: bytes) -> None:
        (self._stdout if fd == 1 else self._stderr).feed(data)

    def pipe_closed(self, fd: int) -> None:
        (self._stdout if fd == 1 else self._stderr).close()
        self._open_pipes -= 1
        if self._open_pipes <= 0:
            self.pipes_closed.set()


def _still_running(pidfds: list[int]) -> list[int]:
    """Those of these pidfds whose processes have not ended (a pidfd turns readable when its
    process ends; a zombie has ended)."""
    poll = select.poll()
    for pidfd in pidfds:
        poll.register(pidfd, select.POLLIN)
    ended = {pidfd for pidfd, _ in poll.poll(0)}
    return [pidfd for pidfd in pidfds if pidfd not in ended]


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


def _read_less(transport: asyncio.BaseTransport | None) -> None:
    """Have an output pipe's transport read `PIPE_READ_SIZE` at a time, not asyncio's 256 KiB.

    The pipe transport allocates a new bytes object of its read size for each read, and at
    256 KiB the allocator maps and unmaps it every time; every script ends with a read of its
    end marker on both pipes. (Pipe transports take no `BufferedProtocol`; `max_size` is the
    attribute they read the size from.)
    """
    if transport is not None and hasattr(transport, "max_size"):
        transport.max_size = PIPE_READ_SIZE


class _PipeProtocol(asyncio.Protocol):
    def __init__(self, process: KernelProcess, fd: int) -> None:
        self._process = process
        self._fd = fd

    def data_received(self, data: bytes) -> None:
        self._process.pipe_data(self._fd, data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._process.pipe_closed(self._fd)


class _ProcessProtocol(asyncio.SubprocessProtocol):
    def __init__(self, process: KernelProcess) -> None:
        self._process = process

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self._process.pipe_data(fd, data if isinstance(data, bytes) else data.encode())

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._process.pipe_closed(fd)

    def process_exited(self) -> None:
        transport = self._transport
        self._process.ended(transport.get_returncode() if transport is not None else None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport: asyncio.SubprocessTransport | None = transport  # type: ignore[assignment]
