"""What a turn gives back: an `AgentEvent` for each thing that happens, and the `Turn` at its end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

StopReason = Literal["end_turn", "aborted", "time_limit", "step_cap", "truncated", "error"]
"""Why a turn ended, and always the truth:

- `end_turn`: the model ended the turn (a reply without tool calls, or an accepted `finish`
  or `block`);
- `aborted`: the caller cancelled the task running `Agent.run`;
- `time_limit`: the lifetime passed, or a request ran past `request_timeout`;
- `step_cap`: the next step would pass `max_steps`;
- `truncated`: a stream ended without its terminal event; its tool calls were not run;
- `error`: the model API refused or failed for good, or the runtime failed to answer.
"""


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """Something that happened in a turn, for live progress.

    `kind` is one of `turn_started` (with the `turn_id`, and whether it was `resumed`),
    `step` (a request is going out), `retry`, `text` and `tool_call` (as the
    reply streams), `reply` (the stream ended), `script_started`, `script_ended`,
    `background_ended`, `terminal_refused`, `before_step` and `turn_ended`; `detail` holds its
    data.
    """

    kind: str
    step: int
    elapsed: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Turn:
    """How a turn ended, and all that was said in it.

    `stop_reason` is the truth about the ending (see `StopReason`); `steps` the model requests
    made (retries of one request count once); `error` says what stopped the turn when it was
    not the model (`None` on `end_turn`); `summary` and `blocked` hold the argument of an
    accepted `finish` or `block`; `transcript` is every message, script result and loop
    decision, JSON-safe, in order; `turn_id` names the turn in the runtime's journal
    (`Agent.resume` takes it).
    """

    stop_reason: StopReason
    steps: int
    error: str | None
    transcript: list[dict[str, Any]]
    summary: str | None = None
    blocked: str | None = None
    scripts: int = 0
    elapsed: float = 0.0
    turn_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The turn as JSON-safe data."""
        return {
            "turn_id": self.turn_id,
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "error": self.error,
            "summary": self.summary,
            "blocked": self.blocked,
            "scripts": self.scripts,
            "elapsed": round(self.elapsed, 3),
            "transcript": self.transcript,
        }


@dataclass(frozen=True, slots=True)
class Stop:
    """A decision that the turn ends, with what stopped it when it was not the model."""

    reason: StopReason
    error: str | None = None


class Emit(Protocol):
    """Tells the agent's listener that `kind` happened, with `detail`; never raises."""

    def __call__(self, kind: str, /, **detail: Any) -> None: ...
