"""Shared pieces for the background, pool and many-shells tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import sandbox_knobs

from toolscript import Runtime

MakeRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def make_runtime(tmp_path: Path) -> AsyncIterator[MakeRuntime]:
    """Start runtimes with the given knobs (in-memory journal, small grace); closed after."""
    made: list[Runtime] = []

    async def make(*tools: Any, **knobs: Any) -> Runtime:
        sandbox_knobs(knobs, tmp_path)
        knobs.setdefault("journal", ":memory:")
        knobs.setdefault("grace", 0.5)
        knobs.setdefault("state_dir", tmp_path / "state")
        runtime = Runtime(list(tools), **knobs)
        made.append(runtime)
        return await runtime.start()

    yield make
    for runtime in made:
        await asyncio.wait_for(runtime.aclose(), 20)


async def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    """Wait, without holding the event loop, until `path` exists; fail at `timeout`."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        await asyncio.sleep(0.01)
