"""Fixtures for the call-fate conformance suite: real runtimes, real kernels, real handlers.

The handlers here never guess at timing. `Desk` holds tools whose handlers say when they are
entered and answer only when the test (or the script, through `release`) opens their gate, so
a test knows exactly which calls had an answer when a script's result was settled.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import CallRecord, Runtime, tool
from toolscript.tools.spec import ToolFailure

WAIT = 10.0
"""The bound on any wait for a handler's signal."""


class Desk:
    """Tools with gated handlers, and the signals that say where each call is.

    - `fast(x)` answers at once with `"fast-<x>"`.
    - `slow(x)` sets `entered[x]`, waits until `opened[x]` is set, sets `answered[x]` and
      answers `"slow-answer-<x>"`. Its answer is recorded by the host in the same step as
      `answered[x]` is set, so a test awaiting `answered[x]` knows the host has the answer.
      For a negative `x` the answer is an error, `"slow-failure-<x>"`.
    - `release(x)` opens `slow(x)`'s gate and answers once `slow(x)` has answered, so a
      script that awaits it knows the host answered `slow(x)` first.
    - `fails(x)` answers at once with an error (the script gets `ToolError`).
    - `stamp(path)` writes a file at `path`, then answers at once with `"stamped"`: the
      file's existence tells a script that the host has its answer.
    - `stubborn(x)` is `slow(x)` in a handler that finishes its work even when the host
      cancels it (as a tool that ignores cancellation would), answering `"stubborn-<x>"`.
    """

    def __init__(self) -> None:
        self.entered: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self.opened: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self.answered: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self.tools = self._make_tools()

    def _make_tools(self) -> list[Any]:
        desk = self

        @tool
        async def fast(x: int) -> str:
            """Answer at once."""
            return f"fast-{x}"

        @tool
        async def slow(x: int) -> str:
            """Answer when the gate opens."""
            desk.entered[x].set()
            await desk.opened[x].wait()
            desk.answered[x].set()
            if x < 0:
                raise ToolFailure(f"slow-failure-{x}")
            return f"slow-answer-{x}"

        @tool
        async def release(x: int) -> str:
            """Open slow(x)'s gate and answer after slow(x) has answered."""
            desk.opened[x].set()
            await desk.answered[x].wait()
            return f"released-{x}"

        @tool
        async def fails(x: int) -> str:
            """Answer at once with an error."""
            raise ToolFailure(f"fails-{x} refused the work")

        @tool
        async def stubborn(x: int) -> str:
            """Answer when the gate opens, even if the host cancelled the handler."""
            desk.entered[x].set()
            try:
                await desk.opened[x].wait()
            except asyncio.CancelledError:
                await desk.opened[x].wait()
            desk.answered[x].set()
            return f"stubborn-{x}"

        @tool
        async def stamp(path: str, after: str | None = None) -> str:
            """Write a file at `path`, then answer at once; first, if `after` is given, wait
            (bounded) until a file exists there."""
            if after is not None:
                give_up = time.monotonic() + WAIT
                while not Path(after).exists() and time.monotonic() < give_up:
                    await asyncio.sleep(0.002)
            Path(path).write_text("answered")
            return "stamped"

        return [fast, slow, release, fails, stubborn, stamp]

    async def wait_entered(self, x: int) -> None:
        """Wait (bounded) until the handler of call `x` has started."""
        await asyncio.wait_for(self.entered[x].wait(), WAIT)

    async def open_and_wait_answered(self, x: int) -> None:
        """Let call `x` answer, and wait (bounded) until the host has recorded its answer."""
        self.opened[x].set()
        await asyncio.wait_for(self.answered[x].wait(), WAIT)

    def open_all(self) -> None:
        """Open every gate, so no handler is left waiting when the test ends."""
        for x in list(self.entered):
            self.opened[x].set()


@pytest.fixture
async def desk() -> AsyncIterator[Desk]:
    """The gated tools; every gate is opened when the test ends."""
    made = Desk()
    yield made
    made.open_all()


@pytest.fixture
async def make_runtime(make_runtime: MakeRuntime, desk: Desk) -> AsyncIterator[MakeRuntime]:
    """The root `make_runtime`, with the desk's tools unless the test gives others; every
    gate is opened before the runtimes close, so no handler holds a close up."""

    async def make(**knobs: Any) -> Runtime:
        knobs.setdefault("tools", desk.tools)
        return await make_runtime(**knobs)

    yield make
    desk.open_all()


def hold_the_loop_source(flag: Path, then: float) -> str:
    """Script source defining `hold_the_loop()`, which blocks the script's event loop.

    It says it is holding by creating `holding_file(flag)` (pass that as `stamp`'s `after`,
    so the host answers only once the loop is held), then blocks with `time.sleep` until
    `flag` exists (the `stamp` tool's handler wrote it, so the host has answered), then
    `then` seconds more, so the answer reaches the kernel while no callback can run. It
    gives up after `WAIT` seconds if the flag never comes.
    """
    return (
        "import os as _os, time as _time\n"
        "def hold_the_loop():\n"
        f"    open({holding_file(flag)!r}, 'w').close()\n"
        f"    give_up = _time.monotonic() + {WAIT}\n"
        f"    while not _os.path.exists({str(flag)!r}) and _time.monotonic() < give_up:\n"
        "        _time.sleep(0.002)\n"
        f"    _time.sleep({then})\n"
    )


def holding_file(flag: Path) -> str:
    """The file `hold_the_loop()` creates when it starts holding the loop."""
    return f"{flag}.holding"


def only_record(records: tuple[CallRecord, ...], tool: str, args_brief: str) -> CallRecord:
    """The one record of a call to `tool` with that argument brief; fails if not exactly one."""
    found = [r for r in records if r.tool == tool and r.args_brief == args_brief]
    assert len(found) == 1, f"expected one call {tool}({args_brief}) in {records}"
    return found[0]


def call_line(text: str, tool: str, args_brief: str) -> str:
    """The line of `ScriptResult.text` that names the call `tool(args_brief)`."""
    lines = [line for line in text.splitlines() if line.startswith(f"- {tool}({args_brief})")]
    assert len(lines) == 1, f"expected one line naming {tool}({args_brief}) in:\n{text}"
    return lines[0]
