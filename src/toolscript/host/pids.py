"""Processes as the host finds them: a process's children (from /proc), and pidfds that say
when each has ended. Standard library only, and no asyncio (the head start uses it too)."""

from __future__ import annotations

import contextlib
import os


def children(pid: int) -> list[int]:
    """The pids of `pid`'s children; none when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as found:
            return [int(child) for child in found.read().split()]
    except (OSError, ValueError):
        return []


def pidfds(pids: list[int]) -> list[int]:
    """A pidfd for each of `pids` still there (the caller closes them)."""
    opened = []
    for pid in pids:
        with contextlib.suppress(OSError):
            opened.append(os.pidfd_open(pid))
    return opened
