"""The `pids` cgroups of a runtime's sandbox: made when the host is root, and swept when
the host that made them is gone.

Each runtime gets a cgroup under the machine's `pids` hierarchy, named for its host's pid
(`toolscript-<pid>-<random>`); each interpreter a child of it, which limits its processes
(`limits["processes"]`), and its template the child `template` (`toolscript.kernel.init`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

__all__ = ["make_cgroup", "sweep_cgroups"]

_PIDS_CGROUPS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")


def make_cgroup() -> Path | None:
    """A `pids` cgroup for this runtime, if the machine lets us make one."""
    for root in _PIDS_CGROUPS:
        base = Path(root)
        if root == "/sys/fs/cgroup":
            try:
                if "pids" not in (base / "cgroup.subtree_control").read_text().split():
                    continue
            except OSError:
                continue
        elif not (base / "pids.max").exists() and not (base / "cgroup.procs").exists():
            continue
        path = base / f"toolscript-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            path.mkdir()
            if root == "/sys/fs/cgroup":
                (path / "cgroup.subtree_control").write_text("+pids")
        except OSError:
            continue
        threading.Thread(target=sweep_cgroups, args=(base,), daemon=True).start()
        return path
    return None


# Goal: a host that was killed (SIGKILL, a crash, the machine's OOM killer) leaves no cgroup
# behind for good. What fails: removing them at its own close, which a killed host never
# reaches; removing every `toolscript-*` cgroup whose host is gone, which would take one a
# keeper still uses (the keeper's template was started in the sandbox of the host that
# started the keeper, and goes on using that host's cgroup after that host is gone). What
# we do: a sandboxed template is in a cgroup of its own under its runtime's (`template`), so
# the runtime's cgroup has a process in it for as long as its template lives, whoever's
# template it now is. Each new runtime's host sweeps, in a thread of its own, the cgroups of
# hosts that are gone, and removes only those in which no process is left (a cgroup with a
# child cannot be removed, nor one with a process in it).


def sweep_cgroups(root: Path, most: int = 64) -> int:
    """Remove, under `root`, the cgroups of toolscript hosts that are no longer running and in
    which no process is left (at most `most` of the hosts' cgroups); how many were removed."""
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        if removed >= most:
            break
        parts = entry.name.split("-")
        if len(parts) != 3 or parts[0] != "toolscript" or not parts[1].isdigit():
            continue
        if _running(int(parts[1])):
            continue
        with contextlib.suppress(OSError):
            for child in os.scandir(entry.path):
                if child.is_dir(follow_symlinks=False):
                    os.rmdir(child.path)  # refused while a process is in it
            os.rmdir(entry.path)
            removed += 1
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
