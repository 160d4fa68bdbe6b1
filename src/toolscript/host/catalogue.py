"""The tools a runtime offers: their specs, binding plans, validators, and how one is called.

Built once from the sources' specs; every interpreter binds from the same plans, and every
call is validated and dispatched here.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import time
import types
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..kernel import wire
from ..tools.binding import down_server_spellings, plans_for
from ..tools.prompt import matching_plans, render_prompt
from ..tools.spec import (
    NEVER_RAN,
    DataOutcome,
    SourceGone,
    ToolFailure,
    ToolOutcome,
    ToolSpec,
    marks_content,
)
from ..tools.validation import ArgumentValidator


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, once per call
class Answer:
    """What the host tells the kernel about one call, and what the ledger records.

    `kind` is `value`, `error` (the tool's own error), `refused` (never dispatched),
    `tool_timeout` (the host gave up on the handler), `source_gone` (the tool's server died
    with the call in flight) or `in_doubt` (the host restarted while it was in flight, and the
    tool does not say a repeat is safe).
    """

    kind: str
    value: Any = None
    message: str = ""
    plain: bool = False
    """A value to be taken as it is: what looks like a content block in it is data."""

    def to_frame(self, n: int) -> wire.AnswerFrame:
        if self.kind == "value":
            if self.plain:
                return {"t": "answer", "n": n, "ok": True, "value": self.value, "plain": True}
            return {"t": "answer", "n": n, "ok": True, "value": self.value}
        error = "ToolTimeout" if self.kind == "tool_timeout" else "ToolError"
        frame: wire.AnswerFrame = {
            "t": "answer",
            "n": n,
            "ok": False,
            "error": error,
            "message": self.message,
        }
        if self.kind == "in_doubt":
            frame["cause"] = "in_doubt"
        return frame


_clock = time.perf_counter


class ToolCatalogue:
    """Specs by key, with their validators and binding plans, and the servers that are down.

    `down` maps each MCP server that did not start (or whose tools could not be listed) to
    the reason. Such a server has no plans; inside the script its name is still bound, to an
    object whose every tool raises `ToolError` with the reason (`down_messages`, sent with the
    plans), and a run whose code names it says so in its note (`down_notes`).
    """

    def __init__(
        self,
        specs: Iterable[ToolSpec],
        default_timeout: float | None,
        down: Mapping[str, str] | None = None,
    ) -> None:
        every = list(specs)
        self._specs: dict[str, ToolSpec] = {}
        for spec in every:
            self._specs.setdefault(spec.key, spec)  # a repeated key: the planner names it
        self.default_timeout = default_timeout
        self.first_steps = 0.0
        """Seconds the handlers' first steps took, all told (`begin`): the host's own tools'
        time, which a kernel's read is not charged with (see `Channel.received`)."""
        self._sent_as_json = {key for key, spec in self._specs.items() if spec.server is not None}
        """The MCP tools: their arguments leave the host as JSON, where NaN has no spelling."""
        self.plans: list[dict[str, Any]] = plans_for(every)
        plans = {str(plan.get("key")): plan for plan in self.plans}
        self._validators = {
            key: ArgumentValidator(spec.input_schema, plans.get(key))
            for key, spec in self._specs.items()
        }
        down = dict(down or {})
        self._down_reasons = down
        spellings = down_server_spellings(self.plans, down)
        self._down = {
            spellings[name]: (name, why) for name, why in down.items() if name in spellings
        }
        self.down_messages: dict[str, str] = {
            spelling: f"server {name!r} did not start, so it has no tools: {why}"
            for spelling, (name, why) in self._down.items()
        }
        """What a script's use of each down server raises, by the server's spelling."""
        self._down_names = (
            re.compile(r"\b(" + "|".join(map(re.escape, self._down)) + r")\b")
            if self._down
            else None
        )

    @property
    def specs(self) -> list[ToolSpec]:
        return list(self._specs.values())

    def repeat_is_safe(self, key: str) -> bool:
        """Whether the tool says calling it again does no more harm than once."""
        spec = self._specs.get(key)
        return spec is not None and spec.repeat_is_safe

    def prompt(self, matching: str | None = None) -> str:
        """The stubs (of the tools `matching` finds, when given), then a comment line for
        each server that is down."""
        plans = self.plans if matching is None else matching_plans(self.plans, matching)
        text = render_prompt(plans)
        for spelling, (_, why) in self._down.items():
            line = " ".join(part.strip() for part in why.splitlines() if part.strip())
            line = line if len(line) <= 300 else line[:299] + "…"
            text += f"# `{spelling}` has no tools: {line}\n"
        return text

    def down_notes(self, code: str) -> list[str]:
        """A note for each down server that `code` names."""
        if self._down_names is None:
            return []
        named = dict.fromkeys(self._down_names.findall(code))
        return [
            f"The MCP server {self._down[spelling][0]!r} did not start, so `{spelling}` has "
            f"no tools: {self._down[spelling][1]}"
            for spelling in named
        ]

    def check(self, key: str, args: dict[str, Any]) -> str | None:
        """Why a call may not be dispatched, or None when it may."""
        validator = self._validators.get(key)
        if validator is None:
            server, slash, _ = key.partition("/")
            why = self._down_reasons.get(server) if slash else None
            if why is not None:
                return f"there is no tool {key!r}: server {server!r} did not start: {why}"
            return f"there is no tool {key!r}"
        problem = validator.validate(args, decoded=True)
        if problem is None and key in self._sent_as_json:
            problem = _not_json(args)
        return None if problem is None else f"{key}: {problem}"

    async def call(self, key: str, args: dict[str, Any]) -> Answer:
        """Run one call's handler under the tool's timeout. Never raises but for cancellation."""
        begun = self.begin(key, args)
        if type(begun) is Answer:
            return begun
        assert isinstance(begun, Waiting)
        return await self.finish(begun)

    def begin(self, key: str, args: dict[str, Any]) -> Answer | Waiting:
        """Run a call's handler up to its first wait: its `Answer` if it needed none (most
        Python tools), else where it waits, for `finish` to go on from in the same task.

        The first step runs before any timer: a handler that answers without waiting needs
        none, and the timer and its bookkeeping cost more than such a handler. (Synchronous
        code cannot be timed out anyway.) Raises only `CancelledError`, when the handler
        raises it.
        """
        spec = self._specs[key]
        timeout = spec.timeout if spec.timeout is not None else self.default_timeout
        started = _clock()
        try:
            steps = spec.handler(args).__await__()
            waiting = steps.send(None)
        except StopIteration as stop:
            self.first_steps += _clock() - started
            return answer_of(key, stop.value)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # a handler's KeyboardInterrupt: its failure, not ours
            self.first_steps += _clock() - started
            return _answer_to(key, error, timeout)
        self.first_steps += _clock() - started
        return Waiting(key, steps, waiting, timeout)

    async def finish(self, begun: Waiting, context: contextvars.Context | None = None) -> Answer:
        """Go on with a handler `begin` left waiting, under the tool's timeout, each step in
        `context` when given. Never raises but for cancellation."""
        try:
            async with asyncio.timeout(begun.timeout):
                outcome = await _resume(begun.steps, begun.waiting, context)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            return _answer_to(begun.key, error, begun.timeout)
        return answer_of(begun.key, outcome)


@dataclass(slots=True)
class Waiting:
    """A handler stepped once by `ToolCatalogue.begin`, now waiting on `waiting`."""

    key: str
    steps: Generator[Any, None, Any]
    waiting: Any
    timeout: float | None


def answer_of(key: str, outcome: object) -> Answer:
    """The answer a handler's return value makes."""
    if type(outcome) is not ToolOutcome and not isinstance(outcome, ToolOutcome):
        message = f"{key}'s handler returned {type(outcome).__name__}, not a ToolOutcome"
        return Answer("error", message, message)
    if outcome.is_error:
        return Answer("error", outcome.value, str(outcome.value))
    if type(outcome) is DataOutcome and marks_content(outcome.value):
        # Data that looks like a content block (a tool's own `"$toolscript"` key): the
        # kernel is told to take it as data, not to make an image or a link of it.
        return Answer("value", outcome.value, plain=True)
    return Answer("value", outcome.value)


def _answer_to(key: str, error: BaseException, timeout: float | None) -> Answer:
    """The answer a handler's exception makes (or the host's giving up on it)."""
    if isinstance(error, TimeoutError):
        return Answer(
            "tool_timeout",
            message=(
                f"{key} did not answer within its timeout of {timeout:g} s, so the host "
                "stopped waiting. The call was sent and may still take effect: check "
                "before you repeat it."
            ),
        )
    if isinstance(error, SourceGone):
        return Answer(
            "source_gone",
            message=(
                f"{key}: the server behind this tool stopped while the call was in flight "
                f"({_said(error)}). The call may have taken effect: check before you repeat it."
            ),
        )
    if isinstance(error, ToolFailure):
        return Answer("error", str(error), str(error))
    message = f"{key} failed in the host: {type(error).__name__}: {_said(error)}"
    return Answer("error", message, message)


def never_began(late: asyncio.Future[ToolOutcome]) -> bool:
    """Whether the work a handler left running at its timeout (`left_running`) says it never
    began: a synchronous tool's call still waiting for a free tool thread is dropped then."""
    if not late.done() or late.cancelled():
        return False
    outcome = late.result()
    return outcome.is_error and str(outcome.value).startswith(NEVER_RAN)


def gave_up_before_it_began(key: str, timeout: float | None) -> Answer:
    """The host's word to the script on a call it gave up on before the call began: unlike
    any other `tool_timeout`, this one is known never to take effect."""
    within = "" if timeout is None else f" within its timeout of {timeout:g} s"
    return Answer(
        "tool_timeout",
        message=(
            f"{key} did not begin{within}: every tool thread was busy, so the host gave up "
            "on it before it began. It never ran, so it did not happen."
        ),
    )


def _said(error: BaseException) -> str:
    """An exception's message, or a word that it had none that could be read: its `__str__`
    is the tool's code, and may raise anything."""
    try:
        return str(error)
    except BaseException:
        return "(its message could not be read)"


# Goal: an MCP server gets the arguments the script passed, or the call is refused.
# What fails: the kernel's frames carry NaN, the infinities and lone surrogates (a Python
# tool takes them as they are), but the request to an MCP server is JSON written by pydantic:
# NaN and the infinities became `null` without a word, and a lone surrogate failed the write
# after the call was counted as dispatched ("failed in the host", fate `seen`).
# What we do: such arguments to an MCP tool are refused before dispatch, naming the problem.
def _not_json(value: Any, depth: int = 0) -> str | None:
    """Why `value` cannot be sent as JSON to an MCP server unchanged, or None."""
    kind = type(value)
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            return (
                f"an argument holds {value!r}, which JSON cannot carry (the server would "
                "get null): the call was not sent"
            )
    elif kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return (
                "an argument holds a lone surrogate, which cannot be sent as UTF-8: the call "
                "was not sent"
            )
    elif depth < 100 and (kind is dict or kind is list):
        items = value.items() if kind is dict else enumerate(value)
        for name, item in items:
            problem = (type(name) is str and _not_json(name, depth + 1)) or _not_json(
                item, depth + 1
            )
            if problem:
                return problem
    return None


CLEANUP_WAIT = 1.0
"""Seconds a handler that caught its cancellation (the tool's timeout, or the runtime's
close) may go on, to clean up, before it is left where it waits."""


# Goal: a call ends at its tool's timeout, whatever its handler does. What fails: waiting for
# the handler once it is cancelled: one that catches the cancellation and goes on holds the
# call, and its script, for as long as it likes. What we do: a handler that catches it may go
# on for `CLEANUP_WAIT` seconds (to close what it opened, say), then is cancelled again; one
# that catches that too is left where it waits, never resumed, and the call ends as it would
# have (a timeout answer, or the runtime's close).
@types.coroutine
def _resume(
    steps: Generator[Any, None, Any], waiting: Any, context: contextvars.Context | None
) -> Generator[Any, None, Any]:
    """Go on awaiting an awaitable (its `__await__()` steps) that was stepped once by hand and
    now waits on `waiting`, each step in `context` when given.

    The task running this sees `waiting` as if the handler had yielded it to the task itself,
    and what the task throws in (a cancellation, the timeout's) goes on to the handler.
    """
    run = _call if context is None else context.run
    again: asyncio.TimerHandle | None = None
    fired: list[bool] = []
    task = asyncio.current_task()

    def cancel_again() -> None:
        fired.append(True)
        if task is not None:
            task.cancel()

    try:
        while True:
            try:
                sent = yield waiting
            except BaseException as error:
                try:
                    waiting = run(steps.throw, error)
                except StopIteration as stop:
                    return stop.value
                if isinstance(error, asyncio.CancelledError):
                    if fired:
                        raise error from None  # it caught the second one too: left there
                    if again is None:
                        again = asyncio.get_running_loop().call_later(CLEANUP_WAIT, cancel_again)
            else:
                try:
                    waiting = run(steps.send, sent)
                except StopIteration as stop:
                    return stop.value
    except asyncio.CancelledError:
        if fired and task is not None:
            task.uncancel()  # the second cancel was this one's own, not the task's
        raise
    finally:
        if again is not None:
            again.cancel()


def _call(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)
