"""The init of a sandboxed interpreter: PID 1 of its own PID and mount namespaces.

Goal: "stopped" means nothing the script started still runs, and a shell sees its own folder
and nothing of another shell's. What fails: a process group (a script's `os.setsid()` leaves
it), `RLIMIT_NPROC` (not counted for root), and a kernel that is PID 1 itself (PID 1 ignores
every signal it has no handler for, `os.kill(os.getpid(), 9)` included, and it would have
to reap orphans whose status belongs to the script's own `subprocess` calls). What we do: the
template forks this init into a new PID namespace; the init makes a new mount namespace
(a private `/tmp`, the namespace's own `/proc`, the runtime's extra mounts), then forks the
kernel as PID 2, which locks itself down before it serves a script, and meanwhile moves it
into the process-count cgroup the host gave, if any. When the kernel dies, for whatever
reason, the init exits and the kernel (Linux) kills every process left in the namespace:
setsid and double forks included.
The kernel ends them itself after a stop (`kill(-1, SIGKILL)` spares only PID 1 and the
caller).

The init also:
- mounts the shell's folder when the kernel, asked by the host, asks it to (once: the pool
  starts interpreters before it knows their shell), then takes the staging folders (every
  shell's folder, the cgroup tree) out of the namespace and drops its own capabilities;
- forwards SIGINT (the host's stop) to the kernel;
- reaps orphans, and writes the kernel's exit status on `status_fd` before it exits, so the
  template can report how the kernel ended, not how the init did.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import signal
import socket
from typing import Any

from . import confine
from .staging import STAGING, TEMPLATE_CGROUP

__all__ = [
    "PROC_MASKED",
    "PROC_READ_ONLY",
    "STAGING",
    "TEMPLATE_CGROUP",
    "become_init",
    "join_cgroup",
    "set_process_limit",
]


# Goal: a script sees its own processes in /proc and can change nothing of the machine's
# through it. What fails: a fresh proc mount as it comes: its sysctls (`/proc/sys`) and
# `/proc/sysrq-trigger` check the writer's uid, not a capability, and when the host runs as
# root the script's uid is root's (the user namespace maps it to itself), so a script could
# set `kernel.core_pattern` (a command the kernel then runs as root, outside every
# namespace) or reboot the machine. What we do: what bubblewrap and container runtimes do
# for the /proc they mount: these parts of it are read-only binds over themselves, which
# the script cannot undo (no capability, and `mount`/`umount2` are refused by the seccomp
# filter).
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "pressure")
"""The parts of the sandbox's /proc a script can read but not write."""

PROC_MASKED = (
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "latency_stats",
    "kpageflags",
    "kpagecount",
    "kpagecgroup",
    "slabinfo",
    "vmallocinfo",
    "program_cpu",
)
"""Files of the sandbox's /proc about the whole machine that a script cannot open: the
machine's memory pages, kernel timers and slabs, the keys of every user, and (on some
kernels) the programs every process ran. Container runtimes mask these (and bubblewrap's
own /proc shows them); here /dev/null is bound over each, on a mount without devices."""


def become_init(
    config: dict[str, Any], request: dict[str, Any], status_fd: int, kernel_fds: list[int]
) -> socket.socket:
    """Set up the namespace and fork the kernel. In the kernel's process, return its end of
    the init's socket (the caller goes on to become the kernel); in the init, which closes
    `kernel_fds` (the kernel's channel and pipes), never return."""
    confine.unshare(confine.CLONE_NEWNS)
    confine.mount("none", "/", None, confine.MS_REC | confine.MS_PRIVATE)
    confine.mount("proc", "/proc", "proc", confine.MS_NOSUID | confine.MS_NODEV | confine.MS_NOEXEC)
    for name in PROC_READ_ONLY:
        if os.path.lexists(f"/proc/{name}"):
            confine.bind(f"/proc/{name}", f"/proc/{name}", writable=False)
    for name in PROC_MASKED:
        if os.path.isfile(f"/proc/{name}"):
            confine.bind("/dev/null", f"/proc/{name}", writable=False)
    confine.mount(
        "tmpfs", "/tmp", "tmpfs", confine.MS_NOSUID | confine.MS_NODEV, "mode=1777,size=50%"
    )
    for index, (target, writable) in enumerate(config.get("mounts", [])):
        # Mounts under /tmp: the private /tmp above covered the sandbox's own.
        source, target = f"{STAGING}/mounts/{index}", str(target)
        if os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
        confine.bind(source, target, writable=bool(writable))
    confine.private_namespaces(network=config.get("network") is True)
    cgroup = request.get("cgroup")
    path = f"{STAGING}/cgroup/{cgroup}" if isinstance(cgroup, str) and cgroup else None
    processes = request.get("processes")
    failure = None
    if path is not None and request.get("inherited"):
        # The template moved into it when it started, for this kernel alone
        # (`toolscript.kernel.template._Joining`): the init and the kernel are born in it,
        # and the limit counts the template and the init too.
        try:
            set_process_limit(path, processes + 2 if isinstance(processes, int) else None)
        except OSError as error:
            failure = f"the interpreter's process limit could not be set: {error}"
        path = None
    kernel_end, init_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        init_end.close()
        os.close(status_fd)
        return kernel_end
    kernel_end.close()
    for fd in kernel_fds:
        os.close(fd)
    # The kernel is moved into its cgroup while it locks itself down and greets the host:
    # a move waits for the OS kernel's RCU grace period (10-20 ms on the machines measured),
    # which, made before the fork, every interpreter's start waited for. It is safe here:
    # the kernel runs nothing of a script, and starts no process, before the init has
    # answered its setup, which the init does only after the move.
    if path is not None:
        try:
            join_cgroup(path, processes, pid)
        except OSError as error:
            failure = f"the interpreter could not be put in its cgroup: {error}"
    _serve(init_end, pid, status_fd, config, failure)
    os._exit(0)  # not reached


def set_process_limit(path: str, processes: object) -> None:
    """Make the cgroup at `path` if need be, with `processes` as its process limit if it is
    a positive number."""
    os.makedirs(path, exist_ok=True)
    if isinstance(processes, int) and processes > 0:
        with open(f"{path}/pids.max", "w") as limit:
            limit.write(str(processes))


def join_cgroup(path: str, processes: object = None, pid: int | None = None) -> None:
    """Move process `pid` (default: this one) into the cgroup at `path`, made if need be,
    with `processes` as its process limit if it is a positive number."""
    for attempt in range(3):
        try:
            set_process_limit(path, processes)
            with open(f"{path}/cgroup.procs", "w") as procs:
                procs.write(str(os.getpid() if pid is None else pid))
            return
        except FileNotFoundError:
            # Made, then removed before the process was in it: another runtime's host,
            # sweeping cgroups that no process is in (`toolscript.host.cgroups`).
            if attempt == 2:
                raise


def _serve(
    control: socket.socket, kernel: int, status_fd: int, config: dict[str, Any], failure: str | None
) -> None:
    """Answer the kernel's one setup request (with `failure`, when there is one, instead of
    doing it), then wait for the kernel's end and report its status."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.signal(signal.SIGINT, lambda signum, frame: _forward(kernel, signal.SIGINT))
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    sealed = False
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                try:
                    data = control.recv(65536)
                except OSError:
                    data = b""
                if not data or sealed:
                    selector.unregister(control)
                    control.close()
                    sealed = True
                    continue
                answer = _setup(data) if failure is None else {"error": failure}
                sealed = True
                _seal(config)
                try:
                    control.sendall(json.dumps(answer).encode())
                except OSError:
                    pass
            else:
                try:
                    os.read(wake_read, 4096)
                except BlockingIOError:
                    pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                os._exit(0)
            if pid == 0:
                break
            if pid == kernel:
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                try:
                    os.write(status_fd, str(code).encode())
                finally:
                    os._exit(0)  # the namespace goes with us


def _setup(data: bytes) -> dict[str, Any]:
    """Put the shell's folder in place: `{"folder": NAME, "cwd": PATH}` binds the staged
    folder NAME on PATH (made in the private /tmp if it is under it; elsewhere, on a small
    tmpfs of this namespace over PATH's folder, which the sandbox has as an empty mount
    point, so no other shell's folder shows beside it)."""
    try:
        request = json.loads(data)
        folder, cwd = request.get("folder"), request.get("cwd")
        if isinstance(folder, str) and isinstance(cwd, str):
            if "/" in folder or folder in ("", ".", ".."):
                return {"error": f"not a folder name: {folder!r}"}
            try:
                os.makedirs(cwd, exist_ok=True)
            except OSError as error:
                if error.errno != errno.EROFS:
                    raise
                flags = confine.MS_NOSUID | confine.MS_NODEV
                confine.mount("tmpfs", os.path.dirname(cwd), "tmpfs", flags, "mode=755,size=64k")
                os.mkdir(cwd)
            confine.bind(f"{STAGING}/shells/{folder}", cwd, writable=True)
        return {"error": None}
    except (OSError, ValueError, AttributeError) as error:
        return {"error": f"{type(error).__name__}: {error}"}


def _seal(config: dict[str, Any]) -> None:
    """Take every staging folder out of this namespace, then give up our capabilities."""
    for name in ("shells", "cgroup"):
        try:
            confine.umount(f"{STAGING}/{name}")
        except OSError:
            pass  # not mounted for this runtime
    for index in range(len(config.get("mounts", []))):
        try:
            confine.umount(f"{STAGING}/mounts/{index}")
        except OSError:
            pass
    try:
        confine.drop_capabilities()
        confine.no_new_privileges()
    except OSError:
        pass


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def ask_setup(init: socket.socket, folder: str | None, cwd: str | None) -> str | None:
    """From the kernel: have the init mount `folder` on `cwd` (or only seal the namespace);
    returns an error message, or None."""
    try:
        init.sendall(json.dumps({"folder": folder, "cwd": cwd}).encode())
        answer = json.loads(init.recv(65536) or b"{}")
    except (OSError, ValueError) as problem:
        return f"the sandbox's init did not answer ({problem})"
    finally:
        init.close()
    said = answer.get("error") if isinstance(answer, dict) else "a malformed answer"
    return str(said) if said else None
