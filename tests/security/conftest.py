"""Fixtures for the security tests: real runtimes running real kernels."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

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
