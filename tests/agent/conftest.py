"""Fixtures for the agent's tests: a stand-in model server per provider, and a fake runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .fake_runtime import FakeRuntime
from .standins import Provider, StandIn


@pytest.fixture(params=["anthropic", "openai"])
def provider(request: pytest.FixtureRequest) -> Provider:
    """Each test that asks for it runs once per provider."""
    value: Provider = request.param
    return value


@pytest.fixture
async def standin(provider: Provider) -> AsyncIterator[StandIn]:
    """A stand-in model server for the provider, on 127.0.0.1."""
    async with StandIn(provider) as server:
        yield server


@pytest.fixture
def fake() -> FakeRuntime:
    """A runtime whose scripts are behaviours the test registers."""
    return FakeRuntime()
