"""The scripts a turn runs for the model: `run_python`, `script_status` and `cancel_script`.

A script in the foreground is awaited within its time limit plus `SETTLE_BOUND`; one in the
background is watched, and its result is owed to the model (in the turn's `Ledger`) until a
message has carried it. When the turn ends, background scripts still running are cancelled.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..actions import Actions, Answer, RunRequest
from .control import TurnBudget
from .conversation import ToolCall, ToolResult
from .runtime_protocol import BackgroundScript, RecoveringShell, ScriptOutcome
from .terminal import Background, Ledger, Owed
from .transcript import Transcript
from .turn import Emit, Stop

SETTLE_BOUND = 30.0
"""Seconds past a script's own time limit the runtime has to answer (its interrupt, grace and
kill all fit in this)."""
CLEANUP_BOUND = 15.0
"""Seconds to stop each background script still running when the turn ends."""


def refuse(ledger: Ledger, call: ToolCall, text: str) -> ToolResult:
    """The error result for a call that was not carried out; the model is owed it."""
    ledger.returned(f"the answer to {call.name} call {call.id}")
    return ToolResult(call.id, call.name, text, is_error=True)


def not_run(ledger: Ledger, call: ToolCall, why: str) -> ToolResult:
    """The error result for a call the turn did not make, and `why`; the model is owed it."""
    return refuse(ledger, call, f"{call.name} was not run: {why}.")


class TurnScripts:
    """The scripts of one turn, run through the turn's `actions` (in its shell).

    `count` is how many scripts were started; `waiting_on` is the run_python call whose
    script is being awaited, if one is.
    """

    def __init__(
        self, ledger: Ledger, budget: TurnBudget, transcript: Transcript, emit: Emit
    ) -> None:
        self.ledger = ledger
        self.budget = budget
        self.transcript = transcript
        self.emit = emit
        self.actions: Actions | None = None
        self.count = 0
        self.waiting_on: str | None = None
        self._abandoned: ScriptOutcome | None = None
        """The result of the foreground script the turn's cancel stopped, once it has one."""

    async def run_python(
        self, call: ToolCall, args: dict[str, Any]
    ) -> tuple[ToolResult, Stop | None]:
        """Run the call's script, in the foreground or the background, and say what it did.

        The arguments' rules and the words are `toolscript.actions`' (the MCP server's too);
        the turn adds its clocks: a time limit cut to `tool_timeout` or to what is left of
        the turn, and a bound on how long the runtime may take past it.
        """
        actions = self.actions
        assert actions is not None
        request = actions.check_run(args)
        if isinstance(request, Answer):
            return refuse(self.ledger, call, request.text), None
        limit, note = self.budget.script_limit(request.time_limit, actions.max_time_limit)
        self.count += 1
        self.emit(
            "script_started", call_id=call.id, background=request.background, time_limit=limit
        )
        request = RunRequest(request.code, limit, request.background)
        if request.background:
            return await self._start_background(call, actions, request, note), None
        bound = None if limit is None else limit + SETTLE_BOUND
        self.waiting_on = call.id
        before = getattr(actions.shell, "last_result", None)
        try:
            async with asyncio.timeout(bound):
                answer = await actions.run(request)
        except asyncio.CancelledError:
            # The turn is cancelled: the shell stopped the script and kept its result,
            # which `abandon` tells (what its calls did matters most now).
            after = getattr(actions.shell, "last_result", None)
            if after is not before:
                self._abandoned = after
            raise
        except TimeoutError:
            self.waiting_on = None
            return refuse(self.ledger, call, "run_python: the runtime did not answer."), Stop(
                "error",
                f"the runtime did not answer a script within {SETTLE_BOUND} s of its time "
                f"limit ({limit} s)",
            )
        self.waiting_on = None
        return self._script_ended(call, answer, note, background=False), None

    async def take_back(self, call: ToolCall) -> tuple[ToolResult, Stop | None] | None:
        """The answer to a run_python call whose script a restarted runtime took back, kept
        running, with its shell (`Shell.recovered()`), once it ends; `None` if there is none.

        The result is the script's own, with its true status; it is not run again.
        """
        actions = self.actions
        assert actions is not None
        shell = actions.shell
        if not isinstance(shell, RecoveringShell):
            return None
        limit, _ = self.budget.script_limit(None)
        self.waiting_on = call.id
        try:
            async with asyncio.timeout(None if limit is None else limit + SETTLE_BOUND):
                outcome = await shell.recovered()
        except TimeoutError:
            return refuse(self.ledger, call, "run_python: the runtime did not answer."), Stop(
                "error", "the runtime did not answer for the script it took back"
            )
        finally:
            self.waiting_on = None
        if outcome is None:
            return None
        self.count += 1
        note = "the agent's process restarted while this script ran; it went on, and this is its result"
        return self._script_ended(call, Answer.of(outcome), note, background=False), None

    def abandon(self) -> str | None:
        """At a cancel of the turn: what became of the script being awaited, if one was."""
        waiting_on = self.waiting_on
        if waiting_on is None:
            return None
        outcome = self._abandoned
        said = f"the caller cancelled the turn while the script of run_python call {waiting_on} ran"
        if outcome is None:
            self.transcript.record_loop("script_abandoned", call_id=waiting_on)
            return f"{said}; it was cancelled with the turn and its result was not collected"
        self.transcript.record_loop(
            "script_abandoned",
            call_id=waiting_on,
            script_id=str(outcome.script_id),
            result=outcome.to_dict(),
        )
        fates = ", ".join(f"{count} {fate}" for fate, count in outcome.calls.by_fate.items())
        said += (
            f"; script {outcome.script_id} ended {outcome.status} "
            f"({f'its tool calls: {fates}' if fates else 'no tool calls'})"
        )
        unsure = [
            f"{record.tool}({record.args_brief})"
            for record in getattr(outcome.calls, "records", ())
            if getattr(record, "fate", None) == "pending" and record.answered_at is None
        ]
        if unsure:
            said += f"; never answered, so their effect may still come: {', '.join(unsure[:5])}" + (
                f" and {len(unsure) - 5} more" if len(unsure) > 5 else ""
            )
        return said

    def _script_ended(
        self, call: ToolCall, answer: Answer, note: str | None, *, background: bool
    ) -> ToolResult:
        """The answer to a run_python call whose script ended: recorded, owed, said."""
        outcome = answer.result
        assert outcome is not None
        script_id = str(outcome.script_id)
        self.transcript.record_script(call.id, script_id, outcome, background=background)
        self.emit(
            "script_ended",
            call_id=call.id,
            script_id=script_id,
            status=outcome.status,
            calls=dict(outcome.calls.by_fate),
        )
        self.ledger.returned(f"the result of run_python call {call.id} (script {script_id})")
        for record in getattr(outcome.calls, "records", ()):
            if getattr(record, "fate", None) == "pending" and record.answered_at is None:
                self.ledger.left_pending(
                    str(record.id),
                    script_id,
                    f"the call {record.tool}({record.args_brief}) of script {script_id}, "
                    "pending when the script ended",
                )
        text = answer.text if note is None else f"({note})\n{answer.text}"
        return ToolResult(call.id, call.name, text, is_error=answer.is_error, images=answer.images)

    async def look_at_script(
        self, call: ToolCall, args: dict[str, Any]
    ) -> tuple[ToolResult, Stop | None]:
        """`script_status` or `cancel_script` of a background script of this turn."""
        actions = self.actions
        assert actions is not None
        if call.name == "cancel_script":
            try:
                async with asyncio.timeout(SETTLE_BOUND):
                    answer = await actions.cancel_script(args)
            except TimeoutError:
                return refuse(
                    self.ledger, call, "cancel_script: the runtime did not answer."
                ), Stop("error", f"the runtime did not answer a cancel within {SETTLE_BOUND} s")
        else:
            answer = await actions.script_status(args)
        found = self.ledger.background.get(answer.script_id or "")
        if found is not None and answer.result is not None:
            await asyncio.wait([found.watcher], timeout=SETTLE_BOUND)
            if found.outcome is None:
                found.outcome = answer.result
            self._take(found)
        self.ledger.returned(f"the answer to {call.name} call {call.id}")
        result = ToolResult(
            call.id, call.name, answer.text, is_error=answer.is_error, images=answer.images
        )
        return result, None

    def collect_background(self) -> list[str]:
        """The results of background scripts that ended since the last look, as notes."""
        return [
            self._take(found)
            for found in self.ledger.background.values()
            if not found.running and not found.reported
        ]

    async def clean_up(self) -> None:
        """Cancel the background scripts still running; record what was never sent."""
        for found in self.ledger.running():
            try:
                async with asyncio.timeout(CLEANUP_BOUND):
                    outcome = await found.handle.cancel()
            except Exception as err:
                self.transcript.record_loop(
                    "background_left_running",
                    script_id=found.script_id,
                    why=f"{type(err).__name__}: {err}",
                )
                continue
            found.outcome = outcome
            found.reported = True
            self.transcript.record_loop(
                "background_cancelled_at_turn_end",
                script_id=found.script_id,
                result=outcome.to_dict(),
            )
        for found in self.ledger.background.values():
            if not found.running and not found.reported:
                self._take(found)
                self.transcript.record_loop("never_sent", script_id=found.script_id)
            found.watcher.cancel()

    async def _start_background(
        self, call: ToolCall, actions: Actions, request: RunRequest, note: str | None
    ) -> ToolResult:
        async with asyncio.timeout(SETTLE_BOUND):
            answer = await actions.start(request)
        handle = answer.handle
        if handle is None:  # refused at once: it ended before it began
            return self._script_ended(call, answer, note, background=True)
        self._watch(handle)
        self.ledger.returned(f"the answer to run_python call {call.id}")
        text = answer.text if note is None else f"({note})\n{answer.text}"
        return ToolResult(call.id, call.name, text)

    def adopt(self, handle: BackgroundScript) -> None:
        """Follow a background script of this turn that a restarted runtime took back, as
        one the turn started: `script_status` and `cancel_script` answer for it, and its
        result is owed to the model."""
        assert self.actions is not None
        if str(handle.id) in self.ledger.background:
            return
        self.actions.track(handle)
        self._watch(handle)

    def _watch(self, handle: BackgroundScript) -> None:
        script_id = str(handle.id)
        watcher = asyncio.create_task(handle.result())
        owed = Owed(f"background script {script_id}", standing="running")
        self.ledger.owed.append(owed)
        self.ledger.background[script_id] = Background(script_id, handle, owed, watcher)
        watcher.add_done_callback(
            lambda done: (
                None if done.cancelled() else self.emit("background_ended", script_id=script_id)
            )
        )

    def _take(self, found: Background) -> str:
        """The ended script's result text; from now on the model is owed nothing more for it."""
        if found.outcome is None:
            if found.watcher.cancelled():
                found.failure = "its result was never collected"
            elif (err := found.watcher.exception()) is not None:
                found.failure = f"the runtime failed to report it: {type(err).__name__}: {err}"
            else:
                found.outcome = found.watcher.result()
        if not found.reported:
            found.reported = True
            found.owed.standing = "returned"
            if found.outcome is not None:
                self.transcript.record_script(None, found.script_id, found.outcome, background=True)
        if found.outcome is None:
            return f"Background script {found.script_id} ended, but {found.failure}."
        return f"Background script {found.script_id} ended.\n{found.outcome.text}"
