"""Finding processes by their command line: for the suites, and for `bench/chaos.py`, which
runs without pytest (the `bench` extra does not install it)."""

from __future__ import annotations

import psutil


def processes_with(token: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose command line holds `token`."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(token in part for part in process.info["cmdline"] or ()):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
