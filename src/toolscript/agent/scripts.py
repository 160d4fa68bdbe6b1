"""The scripts a turn runs for the model: `run_python`, `script_status` and `cancel_script`.

A script in the foreground is awaited within its time limit plus `SETTLE_BOUND`; one in the
background is watched, and its result is owed to the model (in the turn's `Ledger`) until a
message has carried it. When the turn ends, background scripts still running are cancelled.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .control import TurnBudget
from .conversation import ToolCall, ToolResult
from .runtime_protocol import BackgroundShell, ScriptShell
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


class TurnScripts:
    """The scripts of one turn, run in the turn's `shell`.

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
        self.shell: ScriptShell | None = None
        self.count = 0
        self.waiting_on: str | None = None

    async def run_python(
        self, call: ToolCall, args: dict[str, Any]
    ) -> tuple[ToolResult, Stop | None]:
        """Run the call's script, in the foreground or the background, and say what it did."""
        code = args.get("code")
        requested = args.get("time_limit_s")
        background = args.get("background", False)
        if not isinstance(code, str):
            return refuse(
                self.ledger, call, "run_python was not run: `code` must be a string."
            ), None
        if requested is not None and (
            not isinstance(requested, int | float) or isinstance(requested, bool) or requested <= 0
        ):
            return refuse(
                self.ledger,
                call,
                "run_python was not run: `time_limit_s` must be a number above 0.",
            ), None
        if not isinstance(background, bool):
            return refuse(
                self.ledger, call, "run_python was not run: `background` must be true or false."
            ), None
        limit, note = self.budget.script_limit(None if requested is None else float(requested))
        shell = self.shell
        assert shell is not None
        if background and not isinstance(shell, BackgroundShell):
            return refuse(
                self.ledger,
                call,
                "run_python was not run: this runtime cannot run scripts in the background; "
                "run it without background=true.",
            ), None
        self.count += 1
        self.emit("script_started", call_id=call.id, background=background, time_limit=limit)
        if isinstance(shell, BackgroundShell) and background:
            return await self._start_background(call, shell, code, limit, note), None
        bound = None if limit is None else limit + SETTLE_BOUND
        self.waiting_on = call.id
        try:
            async with asyncio.timeout(bound):
                outcome = await shell.run(code, time_limit=limit)
        except TimeoutError:
            self.waiting_on = None
            return refuse(self.ledger, call, "run_python: the runtime did not answer."), Stop(
                "error",
                f"the runtime did not answer a script within {SETTLE_BOUND} s of its time "
                f"limit ({limit} s)",
            )
        self.waiting_on = None
        script_id = str(outcome.script_id)
        self.transcript.record_script(call.id, script_id, outcome, background=False)
        self.emit(
            "script_ended",
            call_id=call.id,
            script_id=script_id,
            status=outcome.status,
            calls=dict(outcome.calls.by_fate),
        )
        self.ledger.returned(f"the result of run_python call {call.id} (script {script_id})")
        text = outcome.text if note is None else f"({note})\n{outcome.text}"
        return ToolResult(call.id, call.name, text, is_error=outcome.status != "ok"), None

    async def look_at_script(
        self, call: ToolCall, args: dict[str, Any]
    ) -> tuple[ToolResult, Stop | None]:
        """`script_status` or `cancel_script` of a background script of this turn."""
        script_id = str(args.get("script_id"))
        found = self.ledger.background.get(script_id)
        if found is None:
            known = ", ".join(self.ledger.background) or "none"
            return refuse(
                self.ledger,
                call,
                f"There is no background script {script_id!r} in this turn (known: {known}).",
            ), None
        if call.name == "cancel_script" and found.running:
            try:
                async with asyncio.timeout(SETTLE_BOUND):
                    outcome = await found.handle.cancel()
            except TimeoutError:
                return refuse(
                    self.ledger, call, "cancel_script: the runtime did not answer."
                ), Stop("error", f"the runtime did not answer a cancel within {SETTLE_BOUND} s")
            await asyncio.wait([found.watcher], timeout=SETTLE_BOUND)
            found.outcome = outcome
        self.ledger.returned(f"the answer to {call.name} call {call.id}")
        if found.running:
            return ToolResult(
                call.id, call.name, f"Background script {script_id} is still running."
            ), None
        text = self._take(found)
        return ToolResult(
            call.id, call.name, text, is_error=found.outcome is None or found.outcome.status != "ok"
        ), None

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
        self,
        call: ToolCall,
        shell: BackgroundShell,
        code: str,
        limit: float | None,
        note: str | None,
    ) -> ToolResult:
        async with asyncio.timeout(SETTLE_BOUND):
            handle = await shell.start(code, time_limit=limit)
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
        self.ledger.returned(f"the answer to run_python call {call.id}")
        text = (
            f"Started background script {script_id}"
            + (f" ({note})" if note else "")
            + ". Its result will arrive as a message when it ends; "
            f"script_status({script_id!r}) shows where it is, cancel_script({script_id!r}) "
            "stops it."
        )
        return ToolResult(call.id, call.name, text)

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
