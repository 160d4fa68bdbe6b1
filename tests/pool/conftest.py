"""Shared pieces for the background, pool and many-shells tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime


@pytest.fixture
def make_runtime(make_runtime: MakeRuntime, tmp_path: Path) -> MakeRuntime:
    """The root `make_runtime`, taking tools as arguments, with a state folder under
    `tmp_path`, a warm pool and the `Runtime`'s own default time limit."""

    async def make(*tools: Any, **knobs: Any) -> Runtime:
        knobs.setdefault("state_dir", tmp_path / "state")
        knobs.setdefault("pool_size", 2)
        knobs.setdefault("default_time_limit", 30.0)
        return await make_runtime(tools=list(tools), **knobs)

    return make
