"""How far a turn may go: timeouts, the step cap, and the callback that may raise it.

`ExecutionControl` is checked when it is built, so a bad value never reaches a provider: the
`InvalidControl` error (a `ValueError`) names the field and says what would be accepted.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


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


def _seconds(field: str, value: object, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if not _is_number(value) or not math.isfinite(value) or value <= 0:  # type: ignore[arg-type, operator]
        wanted = "None or " if allow_none else ""
        raise InvalidControl(
            field, f"must be {wanted}a finite number of seconds greater than 0, not {value!r}"
        )


@dataclass(frozen=True, slots=True)
class ExecutionControl:
    """The bounds of one agent turn, validated when constructed.

    - `request_timeout`: seconds for each model request, from sending it to the end of its
      stream. Required, finite, greater than 0.
    - `lifetime_timeout`: seconds for the whole turn; `None` means no lifetime bound.
    - `tool_timeout`: the longest time limit a script may run under; `None` means scripts are
      bounded only by their own limits, which is refused together with
      `lifetime_timeout=None`, since nothing would then bound the turn.
    - `max_steps`: how many model requests the turn may make (a positive int).
    - `before_step`: called at each step boundary after the first step, once that step's
      results are settled, with a `StepState`; it may return a larger finite step cap. A
      callback that raises, returns anything else or runs past `before_step_timeout` declines,
      and the turn goes on under its current cap. It may be a plain or an `async` function; a
      plain one runs in a worker thread so that its timeout holds.
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
            or self.max_steps < 1
        ):
            raise InvalidControl(
                "max_steps", f"must be an int of at least 1, not {self.max_steps!r}"
            )
        if self.before_step is not None and not callable(self.before_step):
            raise InvalidControl(
                "before_step", f"must be None or a callable, not {self.before_step!r}"
            )
        _seconds("before_step_timeout", self.before_step_timeout, allow_none=False)
        _seconds("terminal_wait", self.terminal_wait, allow_none=False)

    def accepts_new_cap(self, offered: Any, current: int) -> bool:
        """Whether `offered`, returned by `before_step`, may replace the step cap `current`."""
        return isinstance(offered, int) and not isinstance(offered, bool) and offered > current
