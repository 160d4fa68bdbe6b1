"""Fixtures for the attack tests: real runtimes with the sandbox required, and helpers that
look at the host's processes from outside."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from toolscript import Runtime

GRACE = 0.5
"""The grace period these tests use, so a kill comes quickly."""

MakeRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def make_runtime(tmp_path: Path) -> AsyncIterator[MakeRuntime]:
    """Start runtimes with the sandbox required (small grace, in-memory journal), showing
    the test's `tmp_path` to scripts unless `mounts` says otherwise."""
    made: list[Runtime] = []

    async def make(**knobs: Any) -> Runtime:
        knobs.setdefault("journal", ":memory:")
        knobs.setdefault("grace", GRACE)
        knobs.setdefault("default_time_limit", 10.0)
        knobs.setdefault("sandbox", "required")
        knobs.setdefault("mounts", {tmp_path: "rw"})
        runtime = Runtime(**knobs)
        made.append(runtime)
        return await runtime.start()

    yield make
    for runtime in made:
        await asyncio.wait_for(runtime.aclose(), 15)


async def eventually(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait, without holding the event loop, until `predicate()`; fail at `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:g} s")
        await asyncio.sleep(0.01)


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


def is_gone(pid: int) -> bool:
    """True when no live process has `pid` (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def forging(code: str) -> str:
    """A script that can write frames of its own to its kernel's channel: `code` runs after a
    prelude that defines `kernel` (the kernel's object in this process) and `forge(message)`
    (which writes `message` as one frame to the channel, as the kernel would)."""
    return (
        "import asyncio, gc, json, os, struct, time\n"
        "def _channel():\n"
        # The event loop's own wake-up socketpair is skipped, and so are fds 0-2: the other
        # socket is the channel (the kernel closes every other descriptor it inherits).
        "    loop = asyncio.get_running_loop()\n"
        "    own = {loop._ssock.fileno(), loop._csock.fileno()}\n"
        "    for name in os.listdir('/proc/self/fd'):\n"
        "        try:\n"
        "            link = os.readlink(f'/proc/self/fd/{name}')\n"
        "        except OSError:\n"
        "            continue\n"
        "        if link.startswith('socket:') and int(name) > 2 and int(name) not in own:\n"
        "            return int(name)\n"
        "    raise RuntimeError('no channel found')\n"
        "def forge(message):\n"
        "    body = json.dumps(message).encode()\n"
        "    os.write(_channel(), struct.pack('>I', len(body)) + body)\n"
        "kernel = next(o for o in gc.get_objects() if type(o).__name__ == 'Kernel')\n" + code
    )
