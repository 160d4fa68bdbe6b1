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
import json
import os
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernel"

# Loads the kernel folder as a standalone package named `toolscript_kernel` and runs one of
# its modules' `main`: the chosen Python needs nothing of toolscript installed, and never
# imports the host's modules. `-I` ignores PYTHONPATH; the interpreter's environment is
# already scrubbed, so a PYTHONPATH there was set by the caller (`Runtime(env=...)`) on
# purpose, and is honoured.
BOOTSTRAP = (
    "import sys, os, importlib, importlib.util as u\n"
    "sys.path[:0] = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]\n"
    "s = u.spec_from_file_location('toolscript_kernel', sys.argv[1] + '/__init__.py',"
    " submodule_search_locations=[sys.argv[1]])\n"
    "m = u.module_from_spec(s); sys.modules['toolscript_kernel'] = m; s.loader.exec_module(m)\n"
    "importlib.import_module('toolscript_kernel.' + sys.argv[2]).main(sys.argv[3:])\n"
)


def kernel_command(python: str, entry: str, *args: str) -> list[str]:
    """The command line that runs `toolscript_kernel.<entry>.main(args)` under `python`."""
    return [python, "-I", "-c", BOOTSTRAP, str(KERNEL_DIR), entry, *args]


class TemplateError(Exception):
    """The template could not start, or could not fork; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Forked:
    """A kernel forked by the template: its pid, the host's end of its channel, its pipes."""

    pid: int
    channel: socket.socket
    stdout: int
    stderr: int
    status: asyncio.Future[int] = field(repr=False)


class Template:
    """One template process. `await Template.start(...)`, then `await fork(...)` per kernel."""

    def __init__(self, process: asyncio.subprocess.Process, control: socket.socket) -> None:
        self._process = process
        self._control = control
        self._requests = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._children: dict[int, asyncio.Future[int]] = {}
        self._early_exits: dict[int, int] = {}
        self._ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._closed = False
        self.preloaded: list[str] = []
        self.preload_failures: list[tuple[str, str]] = []
        asyncio.get_running_loop().add_reader(control.fileno(), self._readable)

    @classmethod
    async def start(
        cls, python: str, preload: Sequence[str], env: dict[str, str], timeout: float
    ) -> Template:
        """Start the template and wait (bounded) until it has imported `preload`."""
        host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host_end.setblocking(False)
        config = json.dumps({"preload": list(preload)})
        try:
            process = await asyncio.create_subprocess_exec(
                *kernel_command(python, "template", str(template_end.fileno()), config),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(template_end.fileno(),),
                env=env,
                start_new_session=True,
            )
        except (OSError, ValueError) as error:
            host_end.close()
            raise TemplateError(f"the Python at {python!r} could not be started: {error}") from None
        finally:
            template_end.close()
        template = cls(process, host_end)
        try:
            ready = await asyncio.wait_for(asyncio.shield(template._ready), timeout)
        except (TimeoutError, TemplateError) as error:
            try:
                stderr = await template._stderr_tail()
            finally:
                await asyncio.shield(template.close())
            reason = (
                error.reason
                if isinstance(error, TemplateError)
                else f"the template did not become ready within {timeout:g} s"
            )
            raise TemplateError(f"{reason}{stderr}") from None
        except BaseException:  # cancelled while it started: nobody else would end it
            await asyncio.shield(template.close())
            raise
        if ready.get("threads"):
            await template.close()
            raise TemplateError(
                "importing the preload modules started Python threads "
                f"({', '.join(map(str, ready['threads']))}), so forking from it is not safe"
            )
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
    ) -> Forked:
        """Fork one kernel. Raises `TemplateError` if the template cannot (then spawn instead)."""
        if not self.alive:
            raise TemplateError("the template is not running")
        host_end, kernel_end = socket.socketpair()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        number = next(self._requests)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = waiter
        request = {"id": number, "cwd": str(cwd) if cwd else None, "env": env, "limits": limits}
        try:
            self._control.sendmsg(
                [json.dumps(request).encode("ascii")],
                [
                    (
                        socket.SOL_SOCKET,
                        socket.SCM_RIGHTS,
                        _fd_bytes([kernel_end.fileno(), out_write, err_write]),
                    )
                ],
            )
            answer = await asyncio.wait_for(waiter, timeout)
        except (OSError, TimeoutError) as error:
            self._waiting.pop(number, None)
            for fd in (out_read, err_read):
                os.close(fd)
            host_end.close()
            raise TemplateError(f"the template did not fork a kernel ({error!r})") from None
        finally:
            kernel_end.close()
            os.close(out_write)
            os.close(err_write)
        if "pid" not in answer:
            for fd in (out_read, err_read):
                os.close(fd)
            host_end.close()
            raise TemplateError(f"the template could not fork: {answer.get('error')}")
        pid = int(answer["pid"])
        status: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if pid in self._early_exits:
            status.set_result(self._early_exits.pop(pid))
        else:
            self._children[pid] = status
        return Forked(pid, host_end, out_read, err_read, status)

    async def close(self) -> None:
        """Stop the template (bounded). Kernels it forked live on until the host ends them."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._control.fileno())
        self._control.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._process.wait(), 2.0)
        self._fail_waiters("the template was closed")

    def _readable(self) -> None:
        while True:
            try:
                data = self._control.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._gone()
                return
            try:
                message = json.loads(data)
            except ValueError:
                self._gone()
                return
            self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "ready" and not self._ready.done():
            self._ready.set_result(message)
        elif kind == "forked":
            waiter = self._waiting.pop(int(message.get("id", -1)), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(message)
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
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._control.fileno())
            self._control.close()
        if not self._ready.done():
            self._ready.set_exception(TemplateError("the template exited during start-up"))
        self._fail_waiters("the template exited")

    def _fail_waiters(self, reason: str) -> None:
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_result({"error": reason})
        self._waiting.clear()

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


def _fd_bytes(fds: list[int]) -> bytes:
    import array

    return array.array("i", fds).tobytes()
