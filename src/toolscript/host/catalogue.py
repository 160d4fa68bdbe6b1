"""The tools a runtime offers: their specs, binding plans, validators, and how one is called.

Built once from the sources' specs; every interpreter binds from the same plans, and every
call is validated and dispatched here.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any

from ..tools.binding import plans_for
from ..tools.prompt import render_prompt
from ..tools.spec import SourceGone, ToolFailure, ToolOutcome, ToolSpec
from ..tools.validation import ArgumentValidator


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, once per call
class Answer:
    """What the host tells the kernel about one call, and what the ledger records.

    `kind` is `value`, `error` (the tool's own error), `refused` (never dispatched),
    `tool_timeout` (the host gave up on the handler) or `source_gone` (the tool's server died
    with the call in flight).
    """

    kind: str
    value: Any = None
    message: str = ""

    def to_frame(self, n: int) -> dict[str, Any]:
        if self.kind == "value":
            return {"t": "answer", "n": n, "ok": True, "value": self.value}
        error = "ToolTimeout" if self.kind == "tool_timeout" else "ToolError"
        return {"t": "answer", "n": n, "ok": False, "error": error, "message": self.message}


class ToolCatalogue:
    """Specs by key, with their validators and binding plans."""

    def __init__(self, specs: Iterable[ToolSpec], default_timeout: float | None) -> None:
        every = list(specs)
        self._specs: dict[str, ToolSpec] = {}
        for spec in every:
            self._specs.setdefault(spec.key, spec)  # a repeated key: the planner names it
        self.default_timeout = default_timeout
        self.plans: list[dict[str, Any]] = plans_for(every)
        plans = {str(plan.get("key")): plan for plan in self.plans}
        self._validators = {
            key: ArgumentValidator(spec.input_schema, plans.get(key))
            for key, spec in self._specs.items()
        }

    @property
    def specs(self) -> list[ToolSpec]:
        return list(self._specs.values())

    def prompt(self) -> str:
        return render_prompt(self.plans)

    def check(self, key: str, args: dict[str, Any]) -> str | None:
        """Why a call may not be dispatched, or None when it may."""
        validator = self._validators.get(key)
        if validator is None:
            return f"there is no tool {key!r}"
        problem = validator.validate(args, decoded=True)
        return None if problem is None else f"{key}: {problem}"

    async def call(self, key: str, args: dict[str, Any]) -> Answer:
        """Run one call's handler under the tool's timeout. Never raises but for cancellation."""
        spec = self._specs[key]
        timeout = spec.timeout if spec.timeout is not None else self.default_timeout
        try:
            # The handler's first step runs here, in this task, before any timer: a handler
            # that answers without waiting (most Python tools) needs none, and the timer and
            # its bookkeeping cost more than such a handler. (Synchronous code cannot be timed
            # out anyway.) One that waits finishes under the timeout.
            steps = spec.handler(args).__await__()
            try:
                waiting = steps.send(None)
            except StopIteration as stop:
                outcome = stop.value
            else:
                async with asyncio.timeout(timeout):
                    outcome = await _resume(steps, waiting)
        except TimeoutError:
            return Answer(
                "tool_timeout",
                message=(
                    f"{key} did not answer within its timeout of {timeout:g} s, so the host "
                    "stopped waiting. The call was sent and may still take effect: check "
                    "before you repeat it."
                ),
            )
        except SourceGone as error:
            return Answer(
                "source_gone",
                message=(
                    f"{key}: the server behind this tool stopped while the call was in flight "
                    f"({error}). The call may have taken effect: check before you repeat it."
                ),
            )
        except ToolFailure as error:
            return Answer("error", str(error), str(error))
        except Exception as error:
            message = f"{key} failed in the host: {type(error).__name__}: {error}"
            return Answer("error", message, message)
        if not isinstance(outcome, ToolOutcome):
            message = f"{key}'s handler returned {type(outcome).__name__}, not a ToolOutcome"
            return Answer("error", message, message)
        if outcome.is_error:
            return Answer("error", outcome.value, str(outcome.value))
        return Answer("value", outcome.value)


@types.coroutine
def _resume(steps: Generator[Any, None, Any], waiting: Any) -> Generator[Any, None, Any]:
    """Go on awaiting an awaitable (its `__await__()` steps) that was stepped once by hand and
    now waits on `waiting`.

    The task running this sees `waiting` as if the handler had yielded it to the task itself,
    and what the task throws in (a cancellation, the timeout's) goes on to the handler.
    asyncio resumes an awaitable by sending None, so `yield from` can take over from there.
    """
    while True:
        try:
            yield waiting
        except BaseException as error:
            try:
                waiting = steps.throw(error)
            except StopIteration as stop:
                return stop.value
            continue
        return (yield from steps)
