"""A head start for a one-script command: its interpreter starts while the host imports.

Goal: `toolscript exec` of `print(1)` costs little more than starting Python once.

What fails: starting the interpreter when the runtime opens. The interpreter's start (a
sandboxed Python importing the kernel, asyncio included) and the host's (Python, asyncio, the
runtime) then run one after the other, and each costs about as much as `import asyncio`
alone, so the command costs at least twice that, before it runs anything.

What we do: the command line, as soon as it has read its arguments, calls `begin()`, which
spawns the sandboxed template that would start the runtime's first interpreter, then goes on
importing the runtime while that Python starts on another core. Everything imported before
the spawn delays it, so the spawn uses the standard library's floor: `os.posix_spawn` and
`_socket`, not `subprocess` and `socket` (whose imports cost 12-15 ms here), and no event
loop. When the runtime opens, `claim()` hands the started template over if it was begun for
the same Python, environment, mounts and network, and the runtime's first interpreter forks
from it (`Template.adopt`).

When the command also knows the folder its script works in, `begin()` sends the template its
first kernel's fork request at once, with the default limits: the kernel is forked, put in
place and locked down as soon as the template is ready, while the host still imports, and the
runtime takes it (`Template.forked`) if it opens with that folder, those limits and no
preload; otherwise the whole head start is ended at `claim()`. Anything else (a runtime with
other settings, a sandbox whose check this machine has not passed before) starts the usual
way, so a head start changes when the interpreter starts, never what it is. One nobody claims
is ended when the process exits.
"""

from __future__ import annotations

import _socket
import atexit
import contextlib
import os
import select
import signal
import sys
from pathlib import Path
from typing import NamedTuple

from ..kernel.control import confined, fork_request, send
from .command import template_command
from .environment import interpreter_environment, resolve_limits
from .pids import kill_tree
from .sandbox import Mount, Sandbox, prepare_remembered
from .state import state_dir

__all__ = ["Asked", "HeadStart", "Spawned", "begin", "claim", "first_kernel"]


class Spawned:
    """The template's process, started with `os.posix_spawn`: its pid, its end, and the read
    end of its stderr (`stderr`, a descriptor). It is this process's child, reaped here."""

    def __init__(self, pid: int, stderr: int) -> None:
        self.pid = pid
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Its exit status (negative: the signal that ended it), or None while it runs."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = 255  # reaped elsewhere: its status is not ours to know
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        """Its exit status once it has ended, waiting at most `timeout` seconds."""
        if self.poll() is None:
            try:
                pidfd = os.pidfd_open(self.pid)
            except OSError:
                return self.poll()
            try:
                select.select([pidfd], [], [], timeout)  # readable once it has ended
            finally:
                os.close(pidfd)
        return self.poll()


class Asked(NamedTuple):
    """The fork request a head start sent its template before the runtime opened: what the
    kernel was asked for, and the host's ends of its channel and pipes (descriptors)."""

    number: int
    settings: tuple[object, ...]
    """(cwd, limits, preload) as `first` gives them to `claim`."""
    channel: int
    stdout: int
    stderr: int

    def close(self) -> None:
        for fd in (self.channel, self.stdout, self.stderr):
            with contextlib.suppress(OSError):
                os.close(fd)


class HeadStart(NamedTuple):
    """A sandboxed template started for a runtime that has not opened yet."""

    key: tuple[object, ...]
    shells_root: Path
    sandbox: Sandbox
    process: Spawned
    control: int
    """The host's end of its control socket (a descriptor: see `Template.adopt`)."""
    cgroup: str | None
    """The cgroup of its one kernel, which the template moves into as it starts."""
    asked: Asked | None
    """Its kernel's fork request, when it was sent at once."""

    def abandon(self) -> None:
        """End it and everything in its sandbox, and remove what was made for it."""
        for fd in (self.control, self.process.stderr):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.asked is not None:
            self.asked.close()
        # The sandbox's own processes are in a session of their own (bubblewrap's
        # --new-session) and end only after bubblewrap: held by pidfds, they are killed and
        # waited for too, so nothing is left running on return.
        inner = kill_tree(self.process.pid)
        self.process.wait(2.0)
        for pidfd in inner:
            select.select([pidfd], [], [], 2.0)  # readable once that process has ended
            os.close(pidfd)
        self.sandbox.close()
        _remove(self.shells_root)


_pending: HeadStart | None = None


def _key(
    python: str, env: dict[str, str], mounts: list[Mount], network: bool
) -> tuple[object, ...]:
    return (python, tuple(sorted(env.items())), tuple(mounts), network)


def first_kernel(
    cwd: Path | str | None, limits: dict[str, int | None], preload: tuple[str, ...]
) -> tuple[object, ...]:
    """What a runtime's first kernel is forked with: its folder, its limits (every one
    named), the modules it preloads."""
    return (str(cwd) if cwd is not None else None, tuple(sorted(limits.items())), preload)


def begin(
    *,
    env: dict[str, str],
    mounts: list[Mount],
    network: bool,
    state: Path | None = None,
    python: str = sys.executable,
    cwd: str | None = None,
) -> bool:
    """Start the template of a runtime that will open with these settings (`env` is
    `Runtime(env=...)`, `mounts` its sandbox mounts, the working folder included). With
    `cwd`, the folder its first script works in, its kernel is forked at once too, with the
    default limits and no preload. True if it started; False when it cannot have a head
    start (then nothing was started)."""
    global _pending
    if _pending is not None:
        return False
    try:
        shells_root = _private_folder()
    except OSError:
        return False  # the runtime makes its own folder, or says why it cannot
    interpreter_env = interpreter_environment(env, sandboxed=True)
    cache = (state or state_dir()) / "sandbox-checks"
    sandbox = prepare_remembered(python, interpreter_env, shells_root, mounts, network, cache)
    if sandbox is None:
        shells_root.rmdir()
        return False
    host_end, template_end = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    cgroup = sandbox.new_cgroup()
    command = template_command(
        python, (), sandbox, str(template_end.fileno()), kept=False, alone=True, cgroup=cgroup
    )
    stderr_read, stderr_write = os.pipe()
    try:
        pid = _spawn(command, interpreter_env, template_end.fileno(), stderr_write)
    except OSError:
        host_end.close()
        os.close(stderr_read)
        sandbox.close()
        _remove(shells_root)
        return False
    finally:
        template_end.close()
        os.close(stderr_write)
    asked = None
    if cwd is not None:
        asked = _ask_fork(host_end, cwd, interpreter_env, cgroup)
    _pending = HeadStart(
        _key(python, env, mounts, network),
        shells_root,
        sandbox,
        Spawned(pid, stderr_read),
        host_end.detach(),
        cgroup,
        asked,
    )
    atexit.register(_abandon)
    return True


def _ask_fork(
    control: _socket.socket, cwd: str, env: dict[str, str], cgroup: str | None
) -> Asked | None:
    """Send the template the fork request its runtime's first kernel would (`_fork` in
    `toolscript.host.process`), with the default limits; None if it could not be sent."""
    limits = resolve_limits({})
    request = fork_request(1, cwd, env, limits, confined(cgroup, limits, ()))
    host_end, kernel_end = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        send(control, request, [kernel_end.fileno(), out_write, err_write])
    except OSError:
        for fd in (out_read, err_read):
            os.close(fd)
        host_end.close()
        return None
    finally:
        kernel_end.close()
        os.close(out_write)
        os.close(err_write)
    return Asked(1, first_kernel(cwd, limits, ()), host_end.detach(), out_read, err_read)


def _private_folder() -> Path:
    """A new folder only this user can enter, as `tempfile.mkdtemp(prefix="toolscript-")`
    makes under `$TMPDIR` or /tmp (`tempfile` itself, with `shutil` and `random`, costs
    5-8 ms of imports before the spawn)."""
    base = os.environ.get("TMPDIR") or "/tmp"
    while True:
        folder = Path(base, f"toolscript-{os.urandom(6).hex()}")
        try:
            folder.mkdir(mode=0o700)
            return folder
        except FileExistsError:
            continue


_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)
"""What Python ignores for itself, which the child gets back at their defaults (as with
`Popen`'s `restore_signals`)."""


def _spawn(command: list[str], env: dict[str, str], control: int, stderr: int) -> int:
    """Start `command` as `subprocess.Popen` would with `stdin` and `stdout` on /dev/null,
    `stderr` on the descriptor `stderr`, `pass_fds=(control,)`, `close_fds`,
    `restore_signals` and `start_new_session`; its pid."""
    os.set_inheritable(control, True)
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, stderr, 2),
    ]
    # What this process inherited and left inheritable goes no further (`close_fds`).
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = []
    for name in names:
        fd = int(name)
        if fd <= 2 or fd in (control, stderr):
            continue
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            if os.get_inheritable(fd):
                actions.append((os.POSIX_SPAWN_CLOSE, fd))
    try:
        return os.posix_spawn(
            command[0],
            command,
            env,
            file_actions=actions,
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
        )
    finally:
        os.set_inheritable(control, False)


def claim(
    python: str,
    env: dict[str, str],
    mounts: list[Mount],
    network: bool,
    first: tuple[object, ...],
) -> HeadStart | None:
    """The head start begun for a runtime with these settings, now the caller's; None when
    there is none, or it was begun for other settings (then it is ended). `first` is what
    the runtime's first kernel would be forked with (`first_kernel`), which a kernel asked
    for at once must have been."""
    global _pending
    found, _pending = _pending, None
    if found is None:
        return None
    if (
        found.key != _key(python, env, mounts, network)
        or (found.asked is not None and found.asked.settings != first)
        or found.process.poll() is not None
    ):
        found.abandon()
        return None
    return found


def _abandon() -> None:
    global _pending
    found, _pending = _pending, None
    if found is not None:
        found.abandon()


def _remove(folder: Path) -> None:
    import shutil  # not before the template is spawned: only a head start that ends needs it

    shutil.rmtree(folder, ignore_errors=True)
