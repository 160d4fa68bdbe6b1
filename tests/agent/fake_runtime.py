"""A stand-in for `toolscript.Runtime` that implements only what the agent uses.

Scripts do not run: each code string maps to a behaviour the test registers (an async
function of the time limit that returns a `FakeResult`), and the default behaviour answers
`ok` at once. The fake honours time limits (a behaviour that outlasts its limit ends as
`time_limit`) and cancellation (a cancelled background script ends as `cancelled`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeCalls:
    """A call report with no calls."""

    by_fate: dict[str, int] = field(default_factory=dict)


@dataclass
class FakeResult:
    """A settled script result."""

    status: str
    text: str
    script_id: str = ""
    calls: FakeCalls = field(default_factory=FakeCalls)
    images: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "text": self.text, "script_id": self.script_id}


Behaviour = Callable[[float | None], Awaitable[FakeResult]]


class FakeHandle:
    """A background script of the fake shell."""

    def __init__(self, script_id: str, task: asyncio.Task[FakeResult]) -> None:
        self.id = script_id
        self._task = task
        self.done = asyncio.Event()
        task.add_done_callback(lambda _: self.done.set())

    def status(self) -> str:
        return self._task.result().status if self._task.done() else "running"

    def output(self, limit: int | None = None) -> str:
        return ""

    async def result(self) -> FakeResult:
        return await asyncio.shield(self._task)

    async def cancel(self, reason: str = "cancelled by the caller") -> FakeResult:
        self._task.cancel()
        return await self.result()


class FakeShell:
    """Runs registered behaviours instead of code."""

    def __init__(self) -> None:
        self.behaviours: dict[str, Behaviour] = {}
        self.runs: list[tuple[str, float | None, bool]] = []
        self.handles: list[FakeHandle] = []
        self._ids = itertools.count(1)

    def gate(self, code: str, gate: asyncio.Event, text: str = "gate opened") -> None:
        """Make `code` wait for `gate`, then end `ok` saying `text`."""

        async def behaviour(limit: float | None) -> FakeResult:
            await gate.wait()
            return FakeResult("ok", f"exit 0 · ok\n{text}")

        self.behaviours[code] = behaviour

    async def _outcome(self, script_id: str, code: str, limit: float | None) -> FakeResult:
        """Like `Shell.run`: a cancelled foreground run raises `CancelledError`."""
        behaviour = self.behaviours.get(code)
        try:
            if behaviour is None:
                result = FakeResult("ok", f"exit 0 · ok\nran {code!r}")
            else:
                async with asyncio.timeout(limit):
                    result = await behaviour(limit)
        except TimeoutError:
            result = FakeResult("time_limit", f"exit 1 · time_limit: stopped after {limit} s")
        result.script_id = script_id
        return result

    async def _background(self, script_id: str, code: str, limit: float | None) -> FakeResult:
        """A background script: cancelling it ends it as `cancelled`, with a result."""
        try:
            return await self._outcome(script_id, code, limit)
        except asyncio.CancelledError:
            return FakeResult("cancelled", "exit 1 · cancelled by the caller", script_id)

    def output(self, limit: int | None = None) -> str:
        return ""

    async def run(self, code: str, *, time_limit: float | None = None) -> FakeResult:
        self.runs.append((code, time_limit, False))
        return await self._outcome(f"s{next(self._ids)}", code, time_limit)

    async def start(
        self,
        code: str,
        *,
        time_limit: float | None = None,
        on_done: Callable[[Any], Any] | None = None,
    ) -> FakeHandle:
        self.runs.append((code, time_limit, True))
        script_id = f"s{next(self._ids)}"
        handle = FakeHandle(
            script_id, asyncio.create_task(self._background(script_id, code, time_limit))
        )
        self.handles.append(handle)
        return handle


class FakeRuntime:
    """One shell, one stub."""

    max_time_limit = 600.0
    catalogue = 'async def lookup(key: str) -> str:\n    """Look a key up."""'

    def __init__(self) -> None:
        self.the_shell = FakeShell()

    def prompt(self) -> str:
        return self.catalogue

    def shell(self, name: str | None = None) -> FakeShell:
        return self.the_shell
