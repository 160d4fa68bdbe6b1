"""A pytest plugin that runs async tests on uvloop: `pytest -p tests.uvloop_plugin ...`.

CI runs the runtime's suites once more under it, since users run toolscript inside
uvloop-based servers too, and a host on uvloop differs (its subprocesses get sockets for
stdout and stderr, and it leaks descriptors into them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], Any]]:
    return {"uvloop": uvloop.new_event_loop}
