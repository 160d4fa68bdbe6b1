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

`TurnCheckpoint` holds where a turn stands, makes these writes and takes the turn up again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .control import TurnBudget
from .conversation import ToolCall, ToolResult, message_from_dict
from .runtime_protocol import (
    BackgroundScript,
    JournaledRuntime,
    KeepingRuntime,
    SavedTurn,
    ScriptRuntime,
    TurnJournal,
)
from .scripts import TurnScripts, refuse
from .terminal import Ledger, Owed
from .transcript import Transcript
from .turn import Stop

ResumeRefusal = Literal["unknown", "ended", "held", "no_journal"]


class ResumeError(ValueError):
    """A turn that cannot be resumed; `reason` says why (`unknown`: no turn has that id;
    `ended`: it already ended; `held`: a process that is still alive is running it;
    `no_journal`: the runtime keeps no journal)."""

    def __init__(self, turn_id: str, reason: ResumeRefusal, message: str) -> None:
        super().__init__(message)
        self.turn_id = turn_id
        self.reason = reason


DRIVEN: set[str] = set()
"""The turns an `Agent` of this process is running now (`Agent.run`, `Agent.resume`): the
journal names their holder as this process, alive, so it cannot tell them from a turn whose
loop here has ended without ending the turn (an error out of it), which may be resumed."""


def take_saved(runtime: ScriptRuntime, turn_id: str) -> SavedTurn:
    """The turn `turn_id` as its process last saved it, now this process's to go on with."""
    if turn_id in DRIVEN:
        raise ResumeError(
            turn_id,
            "held",
            f"turn {turn_id} is still running in this process: it cannot be "
            "resumed while its agent runs it",
        )
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


_NAMED = 10
"""Calls a lost script left in flight that its words name; the rest are counted."""


def left_in_flight(runtime: ScriptRuntime, script_id: str) -> str:
    """The calls script `script_id` left in flight when its process died, named for the
    model (which cannot look them up): their effects may have happened, or may still."""
    if not isinstance(runtime, JournaledRuntime):
        return "Calls it left in flight are uncertain: their effects may have happened."
    calls = runtime.journal.calls(script_id=script_id, uncertain=True)
    if not calls:
        return "It left no tool call in flight."
    named = ", ".join(f"{call.tool}({call.args_brief})" for call in calls[:_NAMED])
    more = f" and {len(calls) - _NAMED} more" if len(calls) > _NAMED else ""
    return (
        f"It left {len(calls)} tool call(s) in flight, never answered, so their effects may "
        f"have happened or may still come: {named}{more}."
    )


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
    if script.status in (None, "host_gone"):  # a later runtime ends it `host_gone`
        return (
            f"the agent's process died while its script ({script.script_id}) ran, and its "
            + (
                "interpreter was not taken back"
                if background
                else "interpreter was not kept (keep_interpreters keeps it)"
            )
            + ": its output is lost, and whether it finished is unknown. "
            + left_in_flight(runtime, script.script_id)
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


class TurnCheckpoint:
    """Where one turn stands, written to its journal at every change that matters, and taken
    up from there when its process died.

    `phase` is `start` (no request yet), `request` (one in flight), `acting` (on the reply
    `acting`, with the `results` so far and the run_python call whose script may have started
    `in_flight`) or `between` (the step's results wait in `outbox`). `continuation` asks the
    model to go on after a reply that was cut or paused; `lost` are notes for the model of
    background scripts lost with the process that died.
    """

    def __init__(
        self,
        runtime: ScriptRuntime,
        turn_id: str,
        shell: str,
        budget: TurnBudget,
        transcript: Transcript,
        ledger: Ledger,
        scripts: TurnScripts,
    ) -> None:
        self.runtime = runtime
        self.shell = shell
        self.log = TurnLog.of(runtime, turn_id)
        self.budget = budget
        self.transcript = transcript
        self.ledger = ledger
        self.scripts = scripts
        self.phase = "start"
        self.acting: list[ToolCall] | None = None
        self.results: dict[str, ToolResult] = {}
        self.in_flight: dict[str, Any] | None = None
        self.outbox: list[ToolResult] | None = None
        self.continuation: str | None = None
        self.lost: list[str] = []

    def begin(self, task: str, model: str) -> None:
        """Record the turn's start, with where it stands."""
        self.log.begin(task, model, self.shell, self.record())

    def save(self) -> None:
        """Record where the turn stands."""
        self.log.save(self.record())

    def end(self, stop_reason: str) -> None:
        """Record the turn's end: from now on it cannot be resumed."""
        self.log.end(stop_reason, self.record())

    def record(self) -> TurnRecord:
        """What a save of the turn writes now."""
        ledger = self.ledger
        return TurnRecord(
            steps=self.budget.steps,
            step_cap=self.budget.cap,
            elapsed=self.budget.elapsed(),
            messages=[message.to_dict() for message in self.transcript.history],
            state={
                "phase": self.phase,
                "entries": self.transcript.entries,
                "owed": [{"label": o.label, "standing": o.standing} for o in ledger.owed],
                "background": [b.script_id for b in ledger.background.values() if not b.reported],
                "scripts": self.scripts.count,
                "outbox": None if self.outbox is None else [r.to_dict() for r in self.outbox],
                "continuation": self.continuation,
                "acting": None if self.acting is None else [c.to_dict() for c in self.acting],
                "results": {key: result.to_dict() for key, result in self.results.items()},
                "in_flight": self.in_flight,
                "lost": self.lost,
            },
        )

    def restore(self, saved: SavedTurn) -> None:
        """Take up the turn where its process last saved it."""
        state = saved.state
        self.budget.carry_over(saved.steps, saved.step_cap, saved.elapsed)
        self.transcript.history = [message_from_dict(m) for m in saved.messages]
        self.transcript.entries = list(state["entries"])
        self.ledger.owed = [Owed(o["label"], o["standing"]) for o in state["owed"]]
        for owed in self.ledger.owed:
            if owed.standing in ("running", "ended"):
                owed.standing = "returned"  # the note below tells the model
        runtime = self.runtime
        kept = runtime.background if isinstance(runtime, KeepingRuntime) else []
        taken = {str(handle.id): handle for handle in kept}
        self.lost = list(state["lost"])
        for script_id in state["background"]:
            handle = taken.get(script_id)
            if handle is not None:  # its interpreter was kept: it goes on, and is owed
                self.scripts.adopt(handle)
                continue
            self.lost.append(
                f"Background script {script_id} was lost: the agent's process died while it "
                "ran, and its interpreter was not taken back (keep_interpreters keeps it). What it "
                f"did is unknown. {left_in_flight(runtime, script_id)}"
            )
        self.scripts.count = state["scripts"]
        outbox = state["outbox"]
        self.outbox = None if outbox is None else [ToolResult.from_dict(r) for r in outbox]
        self.continuation = state["continuation"]
        acting = state["acting"]
        self.acting = None if acting is None else [ToolCall(**call) for call in acting]
        self.results = {k: ToolResult.from_dict(r) for k, r in state["results"].items()}
        self.in_flight = state["in_flight"]
        self.phase = state["phase"]
        self.transcript.record_loop(
            "resumed", phase=self.phase, step=self.budget.steps, elapsed=saved.elapsed
        )

    async def take_back(self, call: ToolCall, since: float) -> tuple[ToolResult, Stop | None]:
        """The answer to a run_python call whose script ran when the turn's process died:
        its result, if the shell was taken back with it, else what the journal knows."""
        background = (call.arguments or {}).get("background") is True
        if not background:  # a kept shell has only its foreground script
            taken = await self.scripts.take_back(call)
            if taken is not None:
                return taken
        else:
            handle = self._taken_back_since(since)
            if handle is not None:
                script_id = str(handle.id)
                self.scripts.adopt(handle)
                self.transcript.record_loop(
                    "script_taken_back", call_id=call.id, script_id=script_id
                )
                self.ledger.returned(f"the answer to run_python call {call.id}")
                return ToolResult(
                    call.id,
                    call.name,
                    f"Started background script {script_id}. The agent's process restarted "
                    "as it started; its interpreter was kept, and it runs on. You will be "
                    "told when it ends.",
                ), None
        why = lost_script_words(self.runtime, self.shell, since, background=background)
        self.transcript.record_loop("script_lost", call_id=call.id, why=why)
        return refuse(self.ledger, call, f"run_python: {why}"), None

    def _taken_back_since(self, since: float) -> BackgroundScript | None:
        """The background script of this turn's shell, started at `since` or later, that
        the runtime took back from its keeper after the turn's process died, if any."""
        runtime = self.runtime
        if not isinstance(runtime, KeepingRuntime) or not isinstance(runtime, JournaledRuntime):
            return None
        taken = {str(handle.id): handle for handle in runtime.background}
        for script in runtime.journal.scripts(shell=self.shell, limit=5):
            if script.started_at >= since and script.script_id in taken:
                return taken[script.script_id]
        return None
