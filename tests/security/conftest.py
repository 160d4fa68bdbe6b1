"""Fixtures for the attack tests: real runtimes with the sandbox required, and scripts that
forge the kernel's frames."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import FIND_CHANNEL, MakeRuntime
from toolscript import Runtime


@pytest.fixture
def make_runtime(make_runtime: MakeRuntime) -> MakeRuntime:
    """The root `make_runtime`, with the sandbox required whatever the suite's setting."""

    async def make(**knobs: Any) -> Runtime:
        knobs.setdefault("sandbox", "required")
        return await make_runtime(**knobs)

    return make


def forging(code: str) -> str:
    """A script that can write frames of its own to its kernel's channel: `code` runs after a
    prelude that defines `kernel` (the kernel's object in this process) and `forge(message)`
    (which writes `message` as one frame to the channel, as the kernel would)."""
    return (
        FIND_CHANNEL + "import gc, json, struct, time\n"
        "def forge(message):\n"
        "    body = json.dumps(message).encode()\n"
        "    os.write(channel(), struct.pack('>I', len(body)) + body)\n"
        "kernel = next(o for o in gc.get_objects() if type(o).__name__ == 'Kernel')\n" + code
    )
