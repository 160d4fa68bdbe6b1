"""Processes as the host finds them: a process's children (from /proc), pidfds that say when
each has ended, and the end of a process tree. Standard library only, and asyncio only once
an event loop runs (the head start uses this module before one exists)."""

from __future__ import annotations

import contextlib
import os
import signal


def children(pid: int) -> list[int]:
    """The pids of `pid`'s children; none when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as found:
            return [int(child) for child in found.read().split()]
    except (OSError, ValueError):
        return []


def descendants(pid: int, most: int = 10_000) -> list[int]:
    """The pids of `pid`'s children, theirs, and so on (up to `most`), found through every
    thread's `children` (a child is listed under the thread that made it)."""
    found: list[int] = []
    seen = {pid}
    waiting = [pid]
    while waiting and len(found) < most:
        parent = waiting.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children") as listed:
                    kids = [int(kid) for kid in listed.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in seen:
                    seen.add(kid)
                    found.append(kid)
                    waiting.append(kid)
    return found[:most]


def pidfds(pids: list[int]) -> list[int]:
    """A pidfd for each of `pids` still there (the caller closes them)."""
    opened = []
    for pid in pids:
        with contextlib.suppress(OSError):
            opened.append(os.pidfd_open(pid))
    return opened


def kill_tree(pid: int) -> list[int]:
    """SIGKILL the process group `pid` leads and each of `pid`'s children, even those in a
    session of their own (a sandbox's PID 1 under bubblewrap); a pidfd for each child, to
    wait for its end (the caller closes them)."""
    inner = pidfds(children(pid))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for pidfd in inner:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    return inner


async def ended(pidfd: int) -> None:
    """Wait until the process `pidfd` refers to has ended (its pidfd turns readable)."""
    import asyncio  # here, not above: the head start imports this module before asyncio

    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await done
    finally:
        loop.remove_reader(pidfd)
