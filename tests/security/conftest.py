"""Fixtures for the security tests: real runtimes running real kernels, as in `tests/runtime`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psutil
import pytest

from toolscript import Runtime

GRACE = 0.5
"""The grace period these tests use, so a kill comes quickly."""

MakeRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def make_runtime() -> AsyncIterator[MakeRuntime]:
    """Start runtimes with the given knobs (small grace, in-memory journal); all closed after."""
    made: list[Runtime] = []

    async def make(**knobs: Any) -> Runtime:
        knobs.setdefault("journal", ":memory:")
        knobs.setdefault("grace", GRACE)
        knobs.setdefault("default_time_limit", 10.0)
        runtime = Runtime(**knobs)
        made.append(runtime)
        return await runtime.start()

    yield make
    for runtime in made:
        await asyncio.wait_for(runtime.aclose(), 15)


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
