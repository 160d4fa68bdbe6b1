"""The template: a warm interpreter that forks new kernels in a few milliseconds.

Starting a kernel costs a Python start-up and `import asyncio` (~95 ms on two cores), and
every module a user wants preloaded (pandas: seconds) on top. The template pays that once:
it imports the kernel and the caller's `preload` modules, then waits for requests on its
control socket. Each request brings, as passed file descriptors, the new kernel's channel
and the write ends of its stdout and stderr pipes; the template forks, and the child becomes
a kernel with those as its channel and its fd 1 and 2.

Fork safety. Goal: a forked child must not inherit a lock that another thread held at the
fork. What fails: forking a process with Python threads (a thread may hold the import lock,
a logging lock, a buffered stream's lock). What we do: the template runs no threads of its
own once it is ready (the one that moves it into a cgroup during its start, `_Joining`, has
ended by then) and no event loop, holds no wire or journal state, and after the preload
checks that no Python thread was started; if one was, it says so in `ready` and the host does
not use it.
Native threads started by libraries at import (OpenBLAS's pool) register their own fork
handlers and are not counted.

The template reaps its children and reports each exit status to the host, which is how the
host learns how a forked kernel ended. The control socket is a SOCK_SEQPACKET pair: one
message is one request (with its file descriptors) or one report, so no framing is needed.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
from typing import Any

from .__main__ import apply_limits, close_inherited, import_preload
from .control import decode, receive, send

_MAX_MESSAGE = 1 << 16
_CLONE_NEWPID = 0x20000000

_sandbox: dict[str, Any] | None = None
"""The sandbox's layout (see `toolscript.kernel.init`) when the template runs in one."""
_own_pid_namespace = -1
_kept = False
"""Whether a keeper started this template (`toolscript.kernel.keeper`): then each kernel it
forks unconfined dies with it, as a sandboxed one does with its PID namespace."""
_selector_fd = -1
_status_pipes: dict[int, int] = {}
"""Per child in a sandbox, the read end of the pipe its init writes the kernel's status to."""


def main(argv: list[str]) -> None:
    global _sandbox, _own_pid_namespace, _selector_fd, _kept
    close_inherited({int(argv[0])})
    control = socket.socket(fileno=int(argv[0]))
    config: dict[str, Any] = json.loads(argv[1]) if len(argv) > 1 else {}
    _kept = config.get("kept") is True
    joining: _Joining | None = None

    if isinstance(config.get("sandbox"), dict):
        # Before the kernel's own modules: a move into a cgroup (`_Joining`) runs while
        # they are imported.
        from . import confine, init  # noqa: F401 - loaded once, for every child

        _sandbox = config["sandbox"]
        _own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY)
        cgroup = config.get("cgroup")
        if isinstance(cgroup, str) and cgroup and os.path.isdir(f"{init.STAGING}/cgroup"):
            joining = _Joining(cgroup)
        if _kept and os.path.isdir(f"{init.STAGING}/cgroup"):
            # A keeper's template outlives the host that made it, and forks into the
            # runtime's cgroup after that host is gone: in a cgroup of its own under the
            # runtime's, it keeps the runtime's from being swept as empty (`sweep_cgroups` in
            # `toolscript.host.cgroups`). Any other template ends with its host, whose
            # cgroups are never swept while it lives, so it is not moved: a move into a
            # cgroup waits for the kernel's RCU grace period (10-20 ms here), and a template
            # that is not ready yet is what a one-script command waits for.
            init.join_cgroup(f"{init.STAGING}/cgroup/{init.TEMPLATE_CGROUP}")

    from . import runner  # noqa: F401 - imported now so every child has it loaded

    preloaded: list[str] = []
    failures: list[list[str]] = []
    for name in config.get("preload", []):
        try:
            importlib.import_module(str(name))
            preloaded.append(str(name))
        except BaseException as error:  # a preload failure is reported, not fatal
            failures.append([str(name), f"{type(error).__name__}: {error}"])
    if joining is not None:
        joining.finish()
    # Objects made so far move to a generation the collector never visits: a forked child's
    # collections would otherwise write to every inherited object and copy its pages, undoing
    # the sharing that makes a forked interpreter cheap. The garbage is collected first,
    # unless a single kernel will be forked (4 ms here, on the way to that kernel's script):
    # then there are no children to share pages between, as in a spawned kernel.
    if config.get("alone") is not True:
        gc.collect()
    gc.freeze()
    threads = [
        thread.name for thread in threading.enumerate() if thread is not threading.main_thread()
    ]
    _send(
        control,
        {
            "t": "ready",
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "preloaded": preloaded,
            "failures": failures,
            "threads": threads,
        },
    )
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    selector = selectors.DefaultSelector()
    _selector_fd = selector.fileno()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                request, fds = _receive(control)
                if request is None:
                    os._exit(0)  # the host is gone: so are we (children live on alone)
                _fork(control, request, fds, (wake_read, wake_write))
            else:
                try:
                    os.read(wake_read, 4096)
                except BlockingIOError:
                    pass
        _reap(control)


def _receive(control: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    data, fds = receive(control, _MAX_MESSAGE, 3)
    if not data:
        return None, []
    request = decode(data)
    if request is None:
        for fd in fds:
            os.close(fd)
        os._exit(70)  # the host is broken
    return request, fds


def _fork(
    control: socket.socket, request: dict[str, Any], fds: list[int], wake: tuple[int, int]
) -> None:
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        _send(control, {"t": "forked", "id": request.get("id"), "error": "expected 3 fds"})
        return
    status_read, status_write = os.pipe() if _sandbox is not None else (-1, -1)
    try:
        if _sandbox is not None:
            from .confine import unshare

            unshare(_CLONE_NEWPID)  # our next child is PID 1 of a namespace of its own
        pid = os.fork()
    except OSError as error:
        _restore_pid_namespace()
        for fd in (*fds, status_read, status_write):
            if fd >= 0:
                os.close(fd)
        _send(control, {"t": "forked", "id": request.get("id"), "error": str(error)})
        return
    if pid == 0:
        try:
            if _sandbox is not None:
                os.close(status_read)
                _become_sandboxed_kernel(control, request, fds, wake, status_write, _sandbox)
            else:
                _become_kernel(control, request, fds, wake)
        finally:
            os._exit(70)
    _restore_pid_namespace()
    for fd in fds:
        os.close(fd)
    if status_write >= 0:
        os.close(status_write)
        _status_pipes[pid] = status_read
    # The host learns of the child's end through this pidfd: it may not see our PID
    # namespace (in a sandbox), so a pid number of ours would mean nothing to it.
    try:
        pidfd = [os.pidfd_open(pid)]
    except (OSError, AttributeError):
        pidfd = []
    _send(control, {"t": "forked", "id": request.get("id"), "pid": pid}, pidfd)
    for fd in pidfd:
        os.close(fd)


_joined_cgroup: str | None = None
"""The cgroup of the one kernel a template started for it alone is in, from its start."""


class _Joining:
    """A template started for one kernel moves into that kernel's cgroup while it imports.

    Goal: a sandboxed kernel is in its process-count cgroup before it runs a script, and a
    one-script command does not wait for the move. What fails: moving the kernel when it is
    forked. A move into a cgroup waits for the OS kernel's RCU grace period, 10-20 ms on the
    machines measured, all of it on the way to the script's first line. What we do: a
    template that will fork a single kernel (`alone`) is told that kernel's cgroup, and moves
    into it on a thread of its own while its main thread imports the kernel (60 ms and
    more); the init and the kernel it forks are then born in it, and the init only sets the
    limit. The thread has ended before the template says it is ready, so it forks with no
    thread but its own, as ever. If the move fails, the init moves the kernel as usual.
    """

    def __init__(self, cgroup: str) -> None:
        self.cgroup = cgroup
        self.done = False
        self.thread = threading.Thread(target=self._join, name="toolscript-cgroup", daemon=True)
        self.thread.start()

    def _join(self) -> None:
        from .init import STAGING, join_cgroup

        try:
            join_cgroup(f"{STAGING}/cgroup/{self.cgroup}")
            self.done = True
        except OSError:
            pass

    def finish(self) -> None:
        global _joined_cgroup
        self.thread.join()
        if self.done:
            _joined_cgroup = self.cgroup


def _restore_pid_namespace() -> None:
    if _sandbox is not None:
        from .confine import setns

        setns(_own_pid_namespace, _CLONE_NEWPID)


def _become_sandboxed_kernel(
    control: socket.socket,
    request: dict[str, Any],
    kernel_fds: list[int],
    wake: tuple[int, int],
    status: int,
    sandbox: dict[str, Any],
) -> None:
    """PID 1 of a new PID namespace: become its init, and in the init's child, a kernel that
    locks itself down before it serves (see `toolscript.kernel.init`). `kernel_fds`: the
    kernel's channel, stdout and stderr."""
    from . import confine, init

    channel, out, err = kernel_fds
    # The status pipes are of the template's other children.
    _leave_template(control, (*wake, _own_pid_namespace, _selector_fd, *_status_pipes.values()))
    if _joined_cgroup is not None and request.get("cgroup") == _joined_cgroup:
        request = {**request, "inherited": True}
    init_socket = init.become_init(sandbox, request, status, kernel_fds)
    os.setsid()  # the kernel leads its own session, as an unconfined one does
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _take_output_and_environment(out, err, request)
    confine.lock_down()
    apply_limits(request.get("limits", {}))
    os.chdir("/tmp")
    from .runner import Kernel

    kernel = Kernel(socket.socket(fileno=channel), init=init_socket)
    kernel.kept = _kept
    kernel.preload_failures = import_preload(request.get("preload", []))
    kernel.serve()


def _leave_template(control: socket.socket, fds: tuple[int, ...]) -> None:
    """In a forked child: lead a session of its own, and let go of what was the template's:
    its wake-up descriptor and SIGCHLD handler, its control socket, and `fds`."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    control.close()
    for fd in fds:
        os.close(fd)


def _take_output_and_environment(out: int, err: int, request: dict[str, Any]) -> None:
    """Make `out` and `err` the kernel's fd 1 and 2, and the request's environment its own."""
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    env = request.get("env")
    if isinstance(env, dict):
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})


def _become_kernel(
    control: socket.socket,
    request: dict[str, Any],
    kernel_fds: list[int],
    wake: tuple[int, int],
) -> None:
    channel, out, err = kernel_fds
    _leave_template(control, (*wake, _selector_fd))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if _kept:
        from .keeper import die_with_parent

        die_with_parent()
    _take_output_and_environment(out, err, request)
    cwd = request.get("cwd")
    if cwd:
        os.chdir(cwd)
    apply_limits(request.get("limits", {}))
    from .runner import Kernel

    kernel = Kernel(socket.socket(fileno=channel))
    kernel.kept = _kept
    kernel.serve()


def _reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        status_pipe = _status_pipes.pop(pid, -1)
        if status_pipe >= 0:
            # In a sandbox the child is the kernel's init: how the kernel ended is what counts.
            try:
                os.set_blocking(status_pipe, False)
                said = os.read(status_pipe, 64)
                if said:
                    code = int(said)
            except (OSError, ValueError):
                pass
            finally:
                os.close(status_pipe)
        _send(control, {"t": "exited", "pid": pid, "returncode": code})


def _send(control: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    try:
        send(control, message, fds or ())
    except OSError:
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
