"""Fixtures for the attack tests: real runtimes with the sandbox required, and helpers that
look at the host's processes from outside."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psutil
import pytest

from toolscript import Runtime

MakeRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def make_runtime() -> AsyncIterator[MakeRuntime]:
    """Start runtimes with the sandbox required (small grace, in-memory journal)."""
    made: list[Runtime] = []

    async def make(**knobs: Any) -> Runtime:
        knobs.setdefault("journal", ":memory:")
        knobs.setdefault("grace", 0.5)
        knobs.setdefault("default_time_limit", 10.0)
        knobs.setdefault("sandbox", "required")
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
