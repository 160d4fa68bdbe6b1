"""A turn saved as it goes, and taken up again after its process died.

Goal: a turn whose process dies (a crash, a deploy, a SIGKILL) goes on in another process, as
if only a delay had happened, and says nothing untrue about what happened meanwhile. What
fails: saving only at the end loses the turn; saving the model's reply only after its tool
calls ran lets a resumed turn run them again; running again a script that was in flight runs
its effects twice. What we do: the turn is written to the runtime's journal at every change
that matters (a request sent, a reply read, a tool call begun, its answer), each write done
before the loop acts on it. A resumed turn starts from the last write:

- a model request that was in flight is sent again, as the same step: the model's answer is
  not a side effect, and the step was counted once;
- a tool call that had an answer keeps it; one not begun is made now;
- a `run_python` call whose script was running is not run again: with kept interpreters the
  shell was taken back with its script (`Shell.recovered()`), whose result is the answer,
  with its true status; without, the journal says whether the script started and how it
  ended, and the answer says what is known and that its output was lost;
- a background script still running, or ended unseen, goes on with kept interpreters: the
  runtime took it back (`Runtime.background`), and the turn owes the model its result as
  before; without, it is reported lost;
- the clocks are those counted: the steps made, the step cap, the lifetime used (the time the
  turn had no process is not counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .runtime_protocol import JournaledRuntime, SavedTurn, ScriptRuntime, TurnJournal

ResumeRefusal = Literal["unknown", "ended", "held", "no_journal"]


class ResumeError(ValueError):
    """A turn that cannot be resumed; `reason` says why (`unknown`: no turn has that id;
    `ended`: it already ended; `held`: a process that is still alive is running it;
    `no_journal`: the runtime keeps no journal)."""

    def __init__(self, turn_id: str, reason: ResumeRefusal, message: str) -> None:
        super().__init__(message)
        self.turn_id = turn_id
        self.reason = reason


def take_saved(runtime: ScriptRuntime, turn_id: str) -> SavedTurn:
    """The turn `turn_id` as its process last saved it, now this process's to go on with."""
    if not isinstance(runtime, JournaledRuntime):
        raise ResumeError(
            turn_id,
            "no_journal",
            f"turn {turn_id} cannot be resumed: this runtime keeps no journal",
        )
    saved = runtime.journal.turns.take(turn_id)
    if saved is None:
        raise ResumeError(
            turn_id, "unknown", f"no turn {turn_id!r} in the journal; check the id and the journal"
        )
    if saved.ended_at is not None:
        raise ResumeError(
            turn_id,
            "ended",
            f"turn {turn_id} already ended ({saved.stop_reason}); only a turn whose process "
            "died before it ended can be resumed",
        )
    if saved.held_elsewhere:
        raise ResumeError(
            turn_id, "held", f"turn {turn_id} is still running in another process that is alive"
        )
    return saved


def lost_script_words(
    runtime: ScriptRuntime, shell: str, since: float, *, background: bool = False
) -> str:
    """What the journal knows of the script a run_python call began at `since` (seconds
    since the epoch) in `shell`, when its process died and no kept shell had it
    (`background`: it was started in the background, and the runtime did not take it back)."""
    found = []
    if isinstance(runtime, JournaledRuntime):
        scripts = runtime.journal.scripts(shell=shell, limit=5)
        found = [script for script in scripts if script.started_at >= since]
    if not found:
        return (
            "the agent's process died before its script started, so nothing of it ran. "
            "Run it again if it is still wanted."
        )
    script = found[-1]
    if script.status is None:
        return (
            f"the agent's process died while its script ({script.script_id}) ran, and its "
            + (
                "interpreter was not taken back"
                if background
                else "interpreter was not kept (keep_interpreters keeps it)"
            )
            + ": its output is lost, and whether it finished is unknown. Calls it left in "
            "flight are uncertain; `toolscript calls --uncertain` lists them."
        )
    return (
        f"its script ({script.script_id}) ended {script.status} as the agent's process died; "
        "its status is all that is known, its output was lost."
    )


@dataclass(slots=True)
class TurnLog:
    """Writes one turn to the runtime's journal; does nothing for a runtime without one."""

    turn_id: str
    journal: TurnJournal | None

    @classmethod
    def of(cls, runtime: ScriptRuntime, turn_id: str) -> TurnLog:
        """The log of `turn_id` in `runtime`'s journal, if it keeps one."""
        journal = runtime.journal.turns if isinstance(runtime, JournaledRuntime) else None
        return cls(turn_id, journal)

    def begin(self, task: str, model: str, shell: str, record: TurnRecord) -> None:
        """Record the turn's start."""
        if self.journal is not None:
            self.journal.begin(self.turn_id, task=task, model=model, shell=shell, **record.fields())

    def save(self, record: TurnRecord) -> None:
        """Record where the turn stands."""
        if self.journal is not None:
            self.journal.save(self.turn_id, **record.fields())

    def end(self, stop_reason: str, record: TurnRecord) -> None:
        """Record the turn's end: from now on it cannot be resumed."""
        if self.journal is not None:
            self.journal.end(self.turn_id, stop_reason, **record.fields())


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """What a save writes: the clocks, the messages as sent to the model, the rest."""

    steps: int
    step_cap: int
    elapsed: float
    messages: list[dict[str, Any]]
    state: dict[str, Any]

    def fields(self) -> dict[str, Any]:
        """The record as the journal's keyword arguments."""
        return {
            "steps": self.steps,
            "step_cap": self.step_cap,
            "elapsed": self.elapsed,
            "messages": self.messages,
            "state": self.state,
        }
