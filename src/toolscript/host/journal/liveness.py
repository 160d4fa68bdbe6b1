"""Is a host still alive? Who this process is, and the sweep of hosts that died.

Goal: mark a host's in-flight calls as uncertain once its process is gone, and never while it
lives (two runtimes may share a journal). What fails: "is the pid alive" alone, because pids
are reused: after a restart (a container's host is often pid 1 every time) the new process
has the dead host's pid; and a host in a sibling PID namespace (another container of the
same pod: same hostname, same boot) has a pid that means nothing here. What we do: a host
holds a lock on its first intent file for its life (`flock`, let go by the OS kernel however
the process ends, and seen across PID namespaces on a shared file system); a host whose lock
is held lives. Where there is no lock to ask (no file yet, no journal file, a file system
without locks, a host of an older toolscript), record the boot id and the process's start
time (Linux /proc, cheap); a pid that is alive but started at another time, or on another
boot, is another process. A zombie is gone. A host on another machine is left alone: we
cannot tell. Where the OS does not say (no /proc), only the pid's existence is checked.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import NamedTuple

from .intents import _holds_its_lock, _replay_intents
from .schema import _END_HOST, _IN_FLIGHT, _LAST_CALL

_NOT_IN_DOUBT = "coalesce(uncertain_reason, '') != 'in_doubt'"
"""A call told to its script as in doubt stays so: a host's end does not make it `host_gone`."""


class _ProcessIdentity(NamedTuple):
    pid: int
    machine: str
    boot_id: str | None
    process_start: str | None


def _this_process() -> _ProcessIdentity:
    pid = os.getpid()
    stat = _proc_stat(pid)
    return _ProcessIdentity(
        pid, socket.gethostname(), _boot_id(), stat[1] if stat is not None else None
    )


def _is_gone(host: _ProcessIdentity, me: _ProcessIdentity) -> bool:
    if host.machine != me.machine:
        return False
    if host.boot_id is not None and me.boot_id is not None and host.boot_id != me.boot_id:
        return True
    try:
        os.kill(host.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    stat = _proc_stat(host.pid)
    if stat is None:
        return False
    state, started = stat
    if state == "Z":
        return True
    return host.process_start is not None and started != host.process_start


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """The process's state letter and start time (clock ticks after boot), from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces and ")".
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _register_host(db: sqlite3.Connection, me: _ProcessIdentity) -> int:
    """Insert this process's `hosts` row and return its host id. In a transaction."""
    cursor = db.execute(
        "INSERT INTO hosts (pid, machine, boot_id, process_start, started_at, "
        f"calls_after) VALUES (?, ?, ?, ?, ?, ({_LAST_CALL}))",
        (me.pid, me.machine, me.boot_id, me.process_start, time.time()),
    )
    host_id = cursor.lastrowid
    assert host_id is not None
    return host_id


def _end_host(db: sqlite3.Connection, host_id: int, rows: list[int]) -> None:
    """Leave a host's calls in flight at `rows` uncertain and mark it ended. In a transaction."""
    db.executemany(
        f"UPDATE calls SET uncertain_reason = 'host_gone' WHERE id = ? AND {_IN_FLIGHT} "
        f"AND {_NOT_IN_DOUBT}",
        [(row,) for row in rows],
    )
    db.execute(_END_HOST, (time.time(), host_id))


def _sweep_gone_hosts(
    db: sqlite3.Connection, host_id: int, me: _ProcessIdentity, path: Path | None
) -> list[int]:
    """Replay the intents and mark the in-flight calls of every host but `host_id` whose
    process is gone. In a transaction; returns their ids, whose intent files go once it
    commits."""
    hosts = db.execute(
        "SELECT host_id, calls_after, pid, machine, boot_id, process_start FROM hosts "
        "WHERE ended_at IS NULL AND host_id != ?",
        (host_id,),
    ).fetchall()
    now = time.time()
    gone = []
    for other, calls_after, pid, machine, boot_id, process_start in hosts:
        if path is not None and _holds_its_lock(path, other):
            continue
        if _is_gone(_ProcessIdentity(pid, machine, boot_id, process_start), me):
            if path is not None:
                _replay_intents(db, path, other, calls_after)
            db.execute(
                "UPDATE calls SET uncertain_reason = 'host_gone' "
                f"WHERE id > ? AND host_id = ? AND {_IN_FLIGHT} AND {_NOT_IN_DOUBT}",
                (calls_after, other),
            )
            db.execute(_END_HOST, (now, other))
            gone.append(other)
    return gone
