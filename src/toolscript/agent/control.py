"""How far a turn may go: timeouts, the step cap, and the callback that may raise it.

`ExecutionControl` is checked when it is built, so a bad value never reaches a provider: the
`InvalidControl` error (a `ValueError`) names the field and says what would be accepted.
`TurnBudget` keeps one turn to it: the lifetime's clock, the bounds of each request and each
script, and the step cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .turn import Stop


class InvalidControl(ValueError):
    """An `ExecutionControl` field, or a combination of fields, that cannot bound a turn.

    `field` is the name of the offending field; the message starts with it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class StepState:
    """What `before_step` is told at a step boundary, once the last step's results are settled.

    `steps` is the number of model requests made so far, `max_steps` the current cap,
    `elapsed` the seconds since the turn began, `scripts` the scripts run in the turn so far and
    `background_running` the background scripts not yet ended.
    """

    steps: int
    max_steps: int
    elapsed: float
    scripts: int
    background_running: int


BeforeStep = Callable[[StepState], "int | Awaitable[int | None] | None"]
"""`before_step(state)` returns a new step cap, or `None` to keep the current one."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _said(value: object) -> str:
    """`value` as a message shows it: an int of 400 digits is not said whole."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 100 else text[:100] + "…"


def _finite(value: object) -> bool:
    try:
        return math.isfinite(value)  # type: ignore[arg-type]
    except OverflowError:  # an int past any float
        return False


MAX_STEPS = 1_000_000_000
"""The largest step cap (a turn's steps are saved in the journal, as SQLite integers)."""


def _seconds(field: str, value: object, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if not _is_number(value) or not _finite(value) or value <= 0:  # type: ignore[operator]
        wanted = "None or " if allow_none else ""
        raise InvalidControl(
            field,
            f"must be {wanted}a finite number of seconds greater than 0, not {_said(value)}",
        )


@dataclass(frozen=True, slots=True)
class ExecutionControl:
    """The bounds of one agent turn, validated when constructed.

    - `request_timeout`: seconds for each model request, from sending it to the end of its
      stream. Required, finite, greater than 0.
    - `lifetime_timeout`: seconds for the whole turn; `None` means no lifetime bound. A
      script runs under at most what is left of it and is stopped at its end; one that
      ignores the interrupt is killed after the runtime's `grace`, by which the turn can
      run past its lifetime.
    - `tool_timeout`: the longest time limit a script may run under; `None` means scripts are
      bounded only by their own limits, which is refused together with
      `lifetime_timeout=None`, since nothing would then bound the turn.
    - `max_steps`: how many model requests the turn may make (an int from 1 to
      1,000,000,000; so is any cap `before_step` raises it to).
    - `before_step`: called at each step boundary after the first step, once that step's
      results are settled, with a `StepState`; it may return a larger finite step cap. A
      callback that raises, returns anything else or runs past `before_step_timeout` declines,
      and the turn goes on under its current cap. It may be a plain or an `async` function; a
      plain one runs in a daemon thread of its own so that its timeout holds (one that never
      returns does not keep the process from exiting).
    - `before_step_timeout`: seconds the callback may take.
    - `terminal_wait`: seconds that `finish` or `block` waits for background scripts of the
      turn that are still running before it is refused.

    Raises `InvalidControl` (a `ValueError`) naming the field.
    """

    request_timeout: float
    lifetime_timeout: float | None = None
    tool_timeout: float | None = 60.0
    max_steps: int = 50
    before_step: BeforeStep | None = None
    before_step_timeout: float = 5.0
    terminal_wait: float = 10.0

    def __post_init__(self) -> None:
        _seconds("request_timeout", self.request_timeout, allow_none=False)
        _seconds("lifetime_timeout", self.lifetime_timeout, allow_none=True)
        _seconds("tool_timeout", self.tool_timeout, allow_none=True)
        if self.tool_timeout is None and self.lifetime_timeout is None:
            raise InvalidControl(
                "tool_timeout",
                "None (unbounded scripts) needs a lifetime_timeout; with both None nothing "
                "would bound the turn",
            )
        if (
            not isinstance(self.max_steps, int)
            or isinstance(self.max_steps, bool)
            or not 1 <= self.max_steps <= MAX_STEPS
        ):
            raise InvalidControl(
                "max_steps",
                f"must be an int from 1 to {MAX_STEPS:,}, not {_said(self.max_steps)}",
            )
        if self.before_step is not None and not callable(self.before_step):
            raise InvalidControl(
                "before_step", f"must be None or a callable, not {self.before_step!r}"
            )
        _seconds("before_step_timeout", self.before_step_timeout, allow_none=False)
        _seconds("terminal_wait", self.terminal_wait, allow_none=False)

    def accepts_new_cap(self, offered: Any, current: int) -> bool:
        """Whether `offered`, returned by `before_step`, may replace the step cap `current`."""
        return (
            isinstance(offered, int)
            and not isinstance(offered, bool)
            and current < offered <= MAX_STEPS
        )


class TurnBudget:
    """One turn's clocks and step cap under an `ExecutionControl`.

    The lifetime runs from construction. `steps` counts the model requests made so far and
    `cap` is the step cap, which `before_step` may raise.
    """

    def __init__(self, control: ExecutionControl) -> None:
        self.control = control
        self.started = time.monotonic()
        lifetime = control.lifetime_timeout
        self.deadline = None if lifetime is None else self.started + lifetime
        self.cap = control.max_steps
        self.steps = 0

    def carry_over(self, steps: int, cap: int, elapsed: float) -> None:
        """Go on with the clocks of a turn as they were counted when its process died:
        `steps` made, the step `cap`, `elapsed` seconds of the lifetime used."""
        self.steps = steps
        self.cap = cap
        self.started = time.monotonic() - elapsed
        lifetime = self.control.lifetime_timeout
        self.deadline = None if lifetime is None else self.started + lifetime

    def elapsed(self) -> float:
        """Seconds since the turn began."""
        return time.monotonic() - self.started

    def remaining(self) -> float | None:
        """Seconds left of the lifetime, never below 0; `None` when it is unbounded."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        """Whether the lifetime has passed."""
        remaining = self.remaining()
        return remaining is not None and remaining <= 0

    def within(self, timeout: float) -> float:
        """`timeout`, cut to what is left of the lifetime."""
        remaining = self.remaining()
        return timeout if remaining is None else min(timeout, remaining)

    def lifetime_stop(self, during: str) -> Stop:
        """The ending for a lifetime that passed `during` something."""
        return Stop(
            "time_limit",
            f"the turn's lifetime_timeout ({self.control.lifetime_timeout} s) passed {during}",
        )

    def script_limit(
        self, requested: float | None, most: float | None = None
    ) -> tuple[float | None, str | None]:
        """The time limit a script runs under, and a note when `requested` had to be cut (to
        the `tool_timeout`, to `most`, the runtime's `max_time_limit`, or to what is left
        of the lifetime)."""
        tool_timeout = self.control.tool_timeout
        limit = requested if requested is not None else tool_timeout
        note = None
        if tool_timeout is not None and limit is not None and limit > tool_timeout:
            limit = tool_timeout
            note = f"time_limit_s {requested} was cut to the tool_timeout, {tool_timeout} s"
        if most is not None and limit is not None and limit > most:
            # A tool_timeout over the runtime's maximum is the default the model never
            # asked for: scripts run at the maximum, not refused one by one.
            limit = most
            note = f"the time limit was cut to the runtime's max_time_limit, {most:g} s"
        remaining = self.remaining()
        if remaining is not None and (limit is None or limit > remaining):
            limit = remaining
            note = (
                f"the time limit was cut to what is left of the turn's lifetime, {remaining:.1f} s"
            )
        return limit, note

    async def ask_before_step(self, *, scripts: int, background_running: int) -> str | None:
        """Offer `before_step` the chance to raise the cap; what came of it, in words, or
        `None` when there is no callback. The callback's failures are declines, never raised."""
        callback = self.control.before_step
        if callback is None:
            return None
        state = StepState(
            steps=self.steps,
            max_steps=self.cap,
            elapsed=self.elapsed(),
            scripts=scripts,
            background_running=background_running,
        )
        bound = self.within(self.control.before_step_timeout)
        limit = asyncio.timeout(bound)
        try:
            async with limit:
                if inspect.iscoroutinefunction(callback):
                    offered = await callback(state)
                else:
                    offered = await _in_own_thread(callback, state)
                    if inspect.isawaitable(offered):
                        offered = await offered
        except TimeoutError as err:
            if limit.expired():
                return f"declined: before_step did not answer within {bound:.3g} s"
            return f"declined: before_step raised TimeoutError: {err}"
        except asyncio.CancelledError as err:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the caller's cancel of the turn
            # The callback's own (it awaited something cancelled elsewhere): a decline, as
            # any exception of it is, not an abort nobody asked for.
            return f"declined: before_step raised CancelledError: {err}"
        except Exception as err:
            return f"declined: before_step raised {type(err).__name__}: {err}"
        if self.control.accepts_new_cap(offered, self.cap):
            outcome = f"the step cap was raised from {self.cap} to {offered}"
            self.cap = offered
            return outcome
        if offered is None:
            return "kept the step cap"
        return (
            f"declined: before_step offered {offered!r}, which is not an int larger "
            f"than the cap ({self.cap})"
        )


def _in_own_thread(function: Callable[[StepState], Any], state: StepState) -> Awaitable[Any]:
    """`function(state)` in a daemon thread of its own: `asyncio.to_thread`'s executor is
    waited for when `asyncio.run` ends, so a callback that never returns would keep the
    process from exiting after its turn had long declined it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # the turn stopped waiting (its timeout)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(function, state)
        except BaseException as raised:  # handed to the awaiting task, as to_thread does
            error = raised
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name="toolscript-before-step", daemon=True).start()
    return future
