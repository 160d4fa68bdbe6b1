"""A head start for a one-script command: its interpreter starts while the host imports.

Goal: `toolscript exec` of `print(1)` costs little more than starting Python once.

What fails: starting the interpreter when the runtime opens. The interpreter's start (a
sandboxed Python importing the kernel, asyncio included) and the host's (Python, asyncio, the
runtime) then run one after the other, and each costs about as much as `import asyncio`
alone, so the command costs at least twice that, before it runs anything.

What we do: the command line, as soon as it has read its arguments, calls `begin()`, which
spawns the sandboxed template that would start the runtime's first interpreter (standard
library only: `subprocess`, no event loop), then goes on importing the runtime while that
Python starts on another core. When the runtime opens, `claim()` hands the started template
over if it was begun for the same Python, environment, mounts and network, and the runtime's
first interpreter forks from it (`Template.adopt`). Anything else (a runtime with other
settings, a sandbox whose check this machine has not passed before) starts the usual way, so
a head start changes when the interpreter starts, never what it is. One nobody claims is
ended when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from .command import template_command
from .environment import interpreter_environment
from .pids import kill_tree
from .sandbox import Mount, Sandbox, prepare_remembered
from .state import state_dir

__all__ = ["HeadStart", "begin", "claim"]


class HeadStart(NamedTuple):
    """A sandboxed template started for a runtime that has not opened yet."""

    key: tuple[object, ...]
    shells_root: Path
    sandbox: Sandbox
    process: subprocess.Popen[bytes]
    control: socket.socket
    cgroup: str | None
    """The cgroup of its one kernel, which the template moves into as it starts."""

    def abandon(self) -> None:
        """End it and everything in its sandbox, and remove what was made for it."""
        with contextlib.suppress(OSError):
            self.control.close()
        # The sandbox's own processes are in a session of their own (bubblewrap's
        # --new-session) and end only after bubblewrap: held by pidfds, they are killed and
        # waited for too, so nothing is left running on return.
        inner = kill_tree(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
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


def begin(
    *,
    env: dict[str, str],
    mounts: list[Mount],
    network: bool,
    state: Path | None = None,
    python: str = sys.executable,
) -> bool:
    """Start the template of a runtime that will open with these settings (`env` is
    `Runtime(env=...)`, `mounts` its sandbox mounts, the working folder included). True if
    it started; False when it cannot have a head start (then nothing was started)."""
    global _pending
    if _pending is not None:
        return False
    shells_root = Path(tempfile.mkdtemp(prefix="toolscript-"))
    interpreter_env = interpreter_environment(env, sandboxed=True)
    cache = (state or state_dir()) / "sandbox-checks"
    sandbox = prepare_remembered(python, interpreter_env, shells_root, mounts, network, cache)
    if sandbox is None:
        shells_root.rmdir()
        return False
    host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    cgroup = sandbox.new_cgroup()
    command = template_command(
        python, (), sandbox, str(template_end.fileno()), kept=False, alone=True, cgroup=cgroup
    )
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(template_end.fileno(),),
            env=interpreter_env,
            start_new_session=True,
        )
    except OSError:
        host_end.close()
        sandbox.close()
        _remove(shells_root)
        return False
    finally:
        template_end.close()
    _pending = HeadStart(
        _key(python, env, mounts, network), shells_root, sandbox, process, host_end, cgroup
    )
    atexit.register(_abandon)
    return True


def claim(python: str, env: dict[str, str], mounts: list[Mount], network: bool) -> HeadStart | None:
    """The head start begun for a runtime with these settings, now the caller's; None when
    there is none, or it was begun for other settings (then it is ended)."""
    global _pending
    found, _pending = _pending, None
    if found is None:
        return None
    if found.key != _key(python, env, mounts, network) or found.process.poll() is not None:
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
