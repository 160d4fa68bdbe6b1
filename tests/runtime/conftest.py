"""Fixtures for the core runtime's behaviour tests: real runtimes running real kernels."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from tests.conftest import sandbox_knobs

from toolscript import Runtime

GRACE = 0.5
"""The grace period these tests use, so a kill comes quickly."""

MakeRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def make_runtime(tmp_path: Path) -> AsyncIterator[MakeRuntime]:
    """Start runtimes with the given knobs (small grace, in-memory journal); all closed after."""
    made: list[Runtime] = []

    async def make(**knobs: Any) -> Runtime:
        sandbox_knobs(knobs, tmp_path)
        knobs.setdefault("journal", ":memory:")
        knobs.setdefault("grace", GRACE)
        knobs.setdefault("default_time_limit", 10.0)
        runtime = Runtime(**knobs)
        made.append(runtime)
        return await runtime.start()

    yield make
    for runtime in made:
        await asyncio.wait_for(runtime.aclose(), 15)


@pytest.fixture
async def runtime(make_runtime: MakeRuntime) -> Runtime:
    """A started runtime with the default knobs, but a grace of half a second."""
    return await make_runtime()


async def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    """Wait, without holding the event loop, until a script creates `path`; fail at `timeout`."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout:g} s")
        await asyncio.sleep(0.005)


def wait_for_file_holding_the_loop(path: Path, timeout: float = 10.0) -> None:
    """Wait until `path` exists while holding the event loop, so the host reads no pipe."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout:g} s")
        time.sleep(0.002)


def kernel_pid(runtime: Runtime, shell: str = "default") -> int:
    """The pid of the kernel process behind a shell (it must have run a script)."""
    interpreter = runtime.shell(shell)._interpreter
    assert interpreter is not None
    pid = interpreter.kernel_pid()  # in a sandbox, not the pid the script sees
    assert pid is not None
    return pid


def is_gone(pid: int) -> bool:
    """True when no live process has `pid` (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
