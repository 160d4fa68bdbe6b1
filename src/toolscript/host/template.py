"""The host's side of the template (`toolscript.kernel.template`): start it, ask it to fork.

A fork from the template gives a kernel with the preloaded modules already imported in a few
milliseconds. The template is one child process of the host; the kernels it forks are its
children, so it reports their exit statuses here, and `fork()` returns a `Forked` whose
`status` future carries that status. The host learns *that* a forked kernel ended from a
pidfd (which works for any process), so a template that dies first costs only the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..kernel.control import decode, fork_request, receive, send
from .command import KERNEL_DIR, kernel_command, template_command
from .pids import ended, kill_tree

if TYPE_CHECKING:
    from .headstart import Spawned
    from .sandbox import Sandbox

__all__ = [
    "KERNEL_DIR",
    "Forked",
    "Template",
    "TemplateError",
    "fail_waiting",
    "kernel_command",
    "read_messages",
    "template_command",
    "unsafe_threads",
]

_MAX_MESSAGE = 1 << 16
"""The longest message the template sends."""


class TemplateError(Exception):
    """The template could not start, or could not fork; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Forked:
    """A kernel forked by the template: its pid (in the template's PID namespace), the host's
    end of its channel, its pipes, and a pidfd for it when the template could make one."""

    pid: int
    channel: socket.socket
    stdout: int
    stderr: int
    status: asyncio.Future[int] = field(repr=False)
    pidfd: int | None = None
    held: int | None = None
    """Its number at the keeper, when a keeper holds it (`toolscript.host.keeper`)."""
    slot: int = 0
    """Its slot on the keeper's board, when a keeper holds it."""


class Template:
    """One template process. `await Template.start(...)`, then `await fork(...)` per kernel."""

    def __init__(
        self, process: asyncio.subprocess.Process | Adopted, control: socket.socket
    ) -> None:
        self._process = process
        self._control = control
        self._requests = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._children: dict[int, asyncio.Future[int]] = {}
        self._early_exits: dict[int, int] = {}
        self._ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._closed = False
        self.died = False
        """The template process died without being closed (killed from outside): every
        kernel it forked died with it, and no exit status of theirs will come."""
        self.preloaded: list[str] = []
        self.preload_failures: list[tuple[str, str]] = []
        asyncio.get_running_loop().add_reader(control.fileno(), self._readable)

    @classmethod
    async def start(
        cls,
        python: str,
        preload: Sequence[str],
        env: dict[str, str],
        timeout: float,
        sandbox: Sandbox | None = None,
        *,
        alone: bool = False,
        cgroup: str | None = None,
    ) -> Template:
        """Start the template and wait (bounded) until it has imported `preload`; inside
        `sandbox` when given (then every kernel it forks is confined, see `kernel.init`).

        `alone`: it will fork a single kernel, whose start-up it is; errors say "the kernel".
        `cgroup`: that kernel's cgroup, which the template moves into as it starts.
        """
        name = "the kernel" if alone else "the template"
        host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host_end.setblocking(False)
        command = template_command(
            python,
            preload,
            sandbox,
            str(template_end.fileno()),
            kept=False,
            alone=alone,
            cgroup=cgroup,
        )
        # Not cancelled halfway: asyncio's own clean-up of a process cancelled while it is
        # made can wait for ever. A cancel waits for the process, then ends it.
        making = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(template_end.fileno(),),
                env=env,
                start_new_session=True,
            )
        )
        try:
            process = await asyncio.shield(making)
        except (OSError, ValueError) as error:
            host_end.close()
            raise TemplateError(f"the Python at {python!r} could not be started: {error}") from None
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                made = await making
                await asyncio.shield(cls(made, host_end).close())
            raise
        finally:
            template_end.close()
        return await cls(process, host_end)._started(name, timeout, alone)

    @classmethod
    async def adopt(
        cls, process: Spawned, control: int, timeout: float, *, asked: int | None = None
    ) -> Template:
        """A template for a single kernel that the command line started before the host's
        event loop existed (`headstart`): wait (bounded) until it is ready, as `start` does.
        `control` is the host's end of its control socket, a descriptor (the head start
        makes it without the `socket` module); `asked`, the number of a fork request the
        head start already sent, whose kernel `forked` then gives."""
        adopted = Adopted(process)
        control_socket = socket.socket(fileno=control)
        control_socket.setblocking(False)
        await adopted.connect()
        template = cls(adopted, control_socket)
        if asked is not None:
            # Waited for before any message is read: its answer may be the first one.
            template._waiting[asked] = asyncio.get_running_loop().create_future()
            template._requests = itertools.count(asked + 1)
        return await template._started("the kernel", timeout, alone=True)

    async def _started(self, name: str, timeout: float, alone: bool) -> Template:
        """Wait until the template has answered 'ready'; closed, with a `TemplateError` saying
        why, when it does not."""
        template, process = self, self._process
        try:
            ready = await asyncio.wait_for(asyncio.shield(template._ready), timeout)
        except (TimeoutError, TemplateError) as error:
            try:
                stderr = await template._stderr_tail()
                if isinstance(error, TemplateError):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(process.wait(), 1.0)
            finally:
                await asyncio.shield(template.close())
            if not isinstance(error, TemplateError):
                reason = f"{name} did not answer 'ready' within {timeout:g} s"
                if not alone:
                    reason = f"the template did not become ready within {timeout:g} s"
            elif process.returncode is not None and process.returncode >= 0:
                reason = f"{name} exited during start-up (exit code {process.returncode})"
            elif process.returncode is not None:
                reason = f"{name} exited during start-up (killed by signal {-process.returncode})"
            else:
                reason = f"{name} exited during start-up"
            raise TemplateError(f"{reason}{stderr}") from None
        except BaseException:  # cancelled while it started: nobody else would end it
            await asyncio.shield(template.close())
            raise
        unsafe = unsafe_threads(ready)
        if unsafe is not None:
            await template.close()
            raise TemplateError(unsafe)
        template.preloaded = [str(name) for name in ready.get("preloaded", [])]
        template.preload_failures = [
            (str(item[0]), str(item[1])) for item in ready.get("failures", [])
        ]
        return template

    @property
    def alive(self) -> bool:
        return not self._closed and self._process.returncode is None

    async def fork(
        self,
        cwd: Path | None,
        env: dict[str, str],
        limits: dict[str, int | None],
        timeout: float,
        extra: dict[str, Any] | None = None,
    ) -> Forked:
        """Fork one kernel. Raises `TemplateError` if the template cannot (then spawn instead).

        `extra` goes into the request as it is (a sandboxed kernel's cgroup and preload)."""
        if not self.alive:
            raise TemplateError("the template is not running")
        host_end, kernel_end = socket.socketpair()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        number = next(self._requests)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = waiter
        request = fork_request(number, str(cwd) if cwd else None, env, limits, extra)
        try:
            send(self._control, request, [kernel_end.fileno(), out_write, err_write])
        except OSError as error:
            self._waiting.pop(number, None)
            for fd in (out_read, err_read):
                os.close(fd)
            host_end.close()
            raise TemplateError(f"the template did not fork a kernel ({error!r})") from None
        finally:
            kernel_end.close()
            os.close(out_write)
            os.close(err_write)
        return await self.forked(number, host_end, out_read, err_read, timeout)

    async def forked(
        self, number: int, channel: socket.socket, stdout: int, stderr: int, timeout: float
    ) -> Forked:
        """The kernel of fork request `number`, once the template has forked it; `channel`,
        `stdout` and `stderr` are the host's ends of what the request passed (closed here
        when it fails). Raises `TemplateError`."""
        waiter = self._waiting.get(number)
        try:
            if waiter is None:
                raise TemplateError(f"no fork request {number} was sent")
            answer = await asyncio.wait_for(waiter, timeout)
        except (TemplateError, TimeoutError) as error:
            for fd in (stdout, stderr):
                os.close(fd)
            channel.close()
            raise TemplateError(f"the template did not fork a kernel ({error!r})") from None
        except asyncio.CancelledError:
            # A kernel forked all the same finds its channel closed, and ends.
            for fd in (stdout, stderr):
                os.close(fd)
            channel.close()
            raise
        finally:
            self._waiting.pop(number, None)
        pidfd = answer.pop("_fds", [None])[0]
        if "pid" not in answer:
            for fd in (stdout, stderr, *([pidfd] if pidfd is not None else [])):
                os.close(fd)
            channel.close()
            raise TemplateError(f"the template could not fork: {answer.get('error')}")
        pid = int(answer["pid"])
        status: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if pid in self._early_exits:
            status.set_result(self._early_exits.pop(pid))
        else:
            self._children[pid] = status
        return Forked(pid, channel, stdout, stderr, status, pidfd)

    async def close(self) -> None:
        """Stop the template (bounded). Kernels it forked live on until the host ends them,
        unless it runs in a sandbox: they are in it too, and end with it."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._control.fileno())
        self._control.close()
        # In a sandbox, the process we started is bubblewrap's monitor; the sandbox's own
        # PID 1 ends only after it, and everything in the sandbox only after that PID 1:
        # held by a pidfd, it is waited for too, so nothing is left running on return.
        inner = kill_tree(self._process.pid)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._process.wait(), 2.0)
        try:
            await asyncio.wait_for(_all_ended(inner), 2.0)
        except TimeoutError:
            pass
        finally:
            for pidfd in inner:
                os.close(pidfd)
        fail_waiting(self._waiting, "the template was closed")

    def _readable(self) -> None:
        read_messages(self._control, _MAX_MESSAGE, 1, self._handle, self._gone)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "ready" and not self._ready.done():
            self._ready.set_result(message)
        elif kind == "forked":
            # Left in `_waiting`: `forked` takes it out once it has the answer, which may
            # come before it is awaited (a fork the head start asked for).
            waiter = self._waiting.get(int(message.get("id", -1)))
            if waiter is not None and not waiter.done():
                waiter.set_result(message)
            else:
                for fd in message.get("_fds", []):
                    os.close(fd)
        elif kind == "exited":
            pid = int(message.get("pid", -1))
            code = int(message.get("returncode", 0))
            future = self._children.pop(pid, None)
            if future is None:
                self._early_exits[pid] = code
            elif not future.done():
                future.set_result(code)

    def _gone(self) -> None:
        if not self._closed:
            self._closed = True
            self.died = True
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._control.fileno())
            self._control.close()
        if not self._ready.done():
            self._ready.set_exception(TemplateError("the template exited during start-up"))
        fail_waiting(self._waiting, "the template exited")
        # No exit status of a kernel it forked will come now: those still waiting for one
        # are told at once, rather than after their channel's loss is taken for a fault.
        children, self._children = self._children, {}
        for status in children.values():
            status.cancel()

    async def _stderr_tail(self) -> str:
        stream = self._process.stderr
        if stream is None:
            return ""
        with contextlib.suppress(Exception):
            data = await asyncio.wait_for(stream.read(65536), 0.5)
            text = data.decode("utf-8", "replace").strip()
            if text:
                return f"; it said: {text[-800:]}"
        return ""


def unsafe_threads(ready: dict[str, Any]) -> str | None:
    """Why forking from a template is not safe, by its `ready` message; None when it is."""
    if not ready.get("threads"):
        return None
    return (
        "importing the preload modules started Python threads "
        f"({', '.join(map(str, ready['threads']))}), so forking from it is not safe"
    )


def fail_waiting(waiting: dict[Any, asyncio.Future[dict[str, Any]]], reason: str) -> None:
    """Answer each request still waiting for its answer with `{"error": reason}`."""
    for waiter in waiting.values():
        if not waiter.done():
            waiter.set_result({"error": reason})
    waiting.clear()


def read_messages(
    sock: socket.socket,
    size: int,
    most_fds: int,
    handle: Callable[[dict[str, Any]], None],
    gone: Callable[[], None],
) -> None:
    """Hand each control message waiting on `sock` to `handle`, with the descriptors passed
    along it in `"_fds"`; call `gone` instead, once, when the other end has gone or sent
    what is not a message (see `toolscript.kernel.control`)."""
    while True:
        try:
            data, fds = receive(sock, size, most_fds)
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        message = decode(data)
        if message is None:
            for fd in fds:
                os.close(fd)
            gone()
            return
        if fds:
            message["_fds"] = fds
        handle(message)


async def _all_ended(pidfds: list[int]) -> None:
    """Wait until every process the pidfds refer to has ended."""
    for pidfd in pidfds:
        await ended(pidfd)


class Adopted:
    """A template process started before the host's event loop existed (`headstart`), with
    the parts of asyncio's `Process` a `Template` uses: `pid`, `returncode`, `stderr` and
    `wait()`. Its end is seen through a pidfd, so no child watcher is needed."""

    def __init__(self, process: Spawned) -> None:
        self._popen = process
        self.pid = process.pid
        self.stderr: asyncio.StreamReader | None = None

    async def connect(self) -> None:
        """Read its stderr on the running loop."""
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        pipe = os.fdopen(self._popen.stderr, "rb", buffering=0)
        await asyncio.get_running_loop().connect_read_pipe(lambda: protocol, pipe)
        self.stderr = reader

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        """Its exit status, once it has ended."""
        code = self._popen.poll()
        if code is not None:
            return code
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:
            code = self._popen.wait(2.0)
            return 0 if code is None else code
        try:
            while (code := self._popen.poll()) is None:
                await ended(pidfd)
            return code
        finally:
            os.close(pidfd)
