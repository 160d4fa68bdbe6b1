"""The agent loop: a model whose only action is running scripts, with a true ending.

A turn is a series of steps. Each step sends one model request (its retries included), reads
the stream, runs the scripts the model asked for and keeps their results for the next request.
The turn ends with a `stop_reason` that is true (see `StopReason`). A runtime with a journal
keeps the turn as it goes, so `Agent.resume` can take up a turn whose process died
(`checkpoint`).

`Agent` is the public face; one `_TurnRun` drives a turn's steps and acts on the model's tool
calls, with its parts beside it: the clocks and the step cap (`control.TurnBudget`), the
requests and their retries (`requests.ModelRequests`), the scripts (`scripts.TurnScripts`),
the record (`transcript.Transcript`), what the turn owes the model (`terminal.Ledger`) and
where it stands, saved as it goes (`checkpoint.TurnCheckpoint`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..actions import Actions, no_such_tool
from .checkpoint import DRIVEN, TurnCheckpoint, take_saved
from .control import ExecutionControl, TurnBudget
from .conversation import (
    AssistantMessage,
    ModelReply,
    ToolCall,
    ToolResult,
    ToolResults,
    UserText,
)
from .providers import Provider, make_provider
from .requests import ModelRequests
from .runtime_protocol import SavedTurn, ScriptRuntime
from .scripts import TurnScripts, not_run, refuse
from .terminal import TERMINAL_TOOLS, Ledger, PendingCall
from .tools import ACTION_TOOLS, system_prompt
from .transcript import Transcript
from .turn import AgentEvent, Stop, StopReason, Turn

__all__ = ["Agent", "AgentEvent", "StopReason", "Turn"]

MOST_TOKENS = 2**31 - 1
"""The largest `max_tokens` taken: what a provider's API reads as a number (a model's own
bound is lower, and its provider says so)."""

CONTINUE_AFTER = frozenset({"max_tokens", "length", "pause_turn"})
"""Model stops that end a reply, not the turn: the loop asks the model to go on."""
CUT_REPLY = (
    "Your reply was cut at the output token limit before it ended, so any tool call in it "
    "could not be complete. Go on, in shorter pieces."
)


class Agent:
    """A model that acts by running scripts in a `Runtime`.

    `model` is `"anthropic:MODEL"` or `"openai:MODEL"`; `base_url` reaches another server of
    that API (any OpenAI-compatible one); `api_key` defaults to the SDK's environment
    variable. `control` bounds every turn; `instructions` are added to the system prompt;
    `max_tokens` bounds each Anthropic reply; `images` sends the images scripts show to the
    model (False for a model that takes no images: the result's text still lists them);
    `on_event` hears an `AgentEvent` for each thing that happens (its exceptions are
    ignored). The provider is built here, so a bad `model` raises a `ValueError` naming it
    before any request.
    """

    def __init__(
        self,
        model: str,
        runtime: ScriptRuntime,
        *,
        control: ExecutionControl,
        base_url: str | None = None,
        api_key: str | None = None,
        instructions: str | None = None,
        max_tokens: int = 8192,
        images: bool = True,
        on_event: Callable[[AgentEvent], None] | None = None,
    ) -> None:
        if not isinstance(control, ExecutionControl):
            raise TypeError(f"control: expected an ExecutionControl, not {control!r}")
        missing = [
            part
            for part in ("max_time_limit", "prompt", "shell")
            if not hasattr(type(runtime), part) and not hasattr(runtime, part)
        ]
        if missing:
            raise TypeError(
                f"runtime: expected a toolscript Runtime, not {runtime!r} (it has no "
                f"{', '.join(missing)})"
            )
        if type(max_tokens) is not int or not 1 <= max_tokens <= MOST_TOKENS:
            said = (
                "a larger number"
                if type(max_tokens) is int and max_tokens > MOST_TOKENS
                else repr(max_tokens)[:200]
            )
            raise ValueError(
                f"max_tokens must be a whole number of tokens from 1 to {MOST_TOKENS:,}, not {said}"
            )
        if api_key is not None and not isinstance(api_key, str):
            raise TypeError(f"api_key: expected a string, not {type(api_key).__name__}")
        if api_key is not None and (not api_key or not api_key.isprintable() or " " in api_key):
            # Said now, not by the provider's SDK at the first request: a key read from a
            # file with its line break, or pasted with a space.
            raise ValueError(
                "api_key: empty, or holds a space, a line break or another character no key "
                "has; give the key alone, or None to read it from the environment"
            )
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions: expected a string, not {instructions!r}")
        if not isinstance(images, bool):
            raise TypeError(f"images: expected True or False, not {images!r}")
        if on_event is not None and not callable(on_event):
            raise TypeError(f"on_event: expected a function of one event, not {on_event!r}")
        self.model = model
        self.runtime = runtime
        self.control = control
        self.instructions = instructions
        self.images = images
        self.on_event = on_event
        self.provider: Provider = make_provider(
            model,
            base_url=base_url,
            api_key=api_key,
            request_timeout=control.request_timeout,
            max_tokens=max_tokens,
        )

    async def run(self, task: str) -> Turn:
        """Run one turn on `task` and return how it ended.

        Cancelling the task that awaits this ends the turn with `stop_reason="aborted"` and
        returns the `Turn` instead of raising `CancelledError` (the cancellation is absorbed),
        unless the turn had already ended, in which case its own ending stands. (A task
        cancelled before it first ran never entered this, so nothing began, and it raises
        `CancelledError` as any task does.) A script
        running in the foreground is stopped with it; its result (its status, and each
        call's fate: a call never answered may still take effect) is in `Turn.error` and in
        the transcript's `script_abandoned` entry. With a
        runtime that keeps a journal, the turn is saved there as it goes, under `turn_id`
        (the `turn_started` event and `Turn.turn_id` give it).
        """
        if not isinstance(task, str):
            raise TypeError(f"task: expected a string, not {task!r}")
        return await self._drive(_TurnRun(self, task, secrets.token_hex(6)))

    async def resume(self, turn_id: str) -> Turn:
        """Go on with the journaled turn `turn_id`, whose process died before it ended.

        The turn goes on from where it was last saved, with its clocks as they were counted
        (steps made, the step cap, the lifetime used), in the shell it had: a model request
        that was in flight is sent again as the same step; a script that was running is not
        run again, and with kept interpreters its result is taken when it ends (the design
        page says what a resumed turn is told of the rest). Each step appears once in the
        transcript. The agent's own `control` gives the other bounds.

        Raises `ResumeError` (a `ValueError`) when the turn is unknown, has ended, is still
        run by a live process, or the runtime keeps no journal. Cancelling behaves as `run`.
        """
        saved = take_saved(self.runtime, turn_id)
        return await self._drive(_TurnRun(self, saved.task, turn_id, saved))

    async def _drive(self, turn: _TurnRun) -> Turn:
        # Goal: a cancel of the caller ends the turn as `aborted` and still returns its `Turn`.
        # What fails: run in the caller's task, the turn is unwound wherever the cancel lands,
        # and the caller gets `CancelledError` instead of the record of what was done.
        # What we do: the turn runs in a task of its own, awaited shielded; the caller's cancel
        # is absorbed and passed on as a cancel of that task, which says what it was doing,
        # stops its background scripts and returns. `abort_requested` makes the turn stop at
        # its next step even if some code in it swallowed the cancel.
        inner = asyncio.create_task(turn.run())
        DRIVEN.add(turn.turn_id)
        inner.add_done_callback(lambda _: DRIVEN.discard(turn.turn_id))
        while True:
            try:
                return await asyncio.shield(inner)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    current.uncancel()
                if inner.cancelled():
                    return turn.ending(Stop("aborted", "the caller cancelled the turn"))
                if inner.done():
                    return inner.result()
                if turn.stop is None:
                    turn.abort_requested = True
                    inner.cancel()


class _TurnRun:
    """One turn: its steps, and what it does with the model's tool calls."""

    def __init__(
        self, agent: Agent, task: str, turn_id: str, saved: SavedTurn | None = None
    ) -> None:
        self.agent = agent
        self.task = task
        self.turn_id = turn_id
        self.saved = saved
        self.shell_name = f"turn-{turn_id}" if saved is None else saved.shell
        self.budget = TurnBudget(agent.control)
        self.transcript = Transcript()
        self.ledger = Ledger()
        self.requests = ModelRequests(agent.provider, self.budget, self.transcript, self.emit)
        self.scripts = TurnScripts(self.ledger, self.budget, self.transcript, self.emit)
        self.checkpoint = TurnCheckpoint(
            agent.runtime,
            turn_id,
            self.shell_name,
            self.budget,
            self.transcript,
            self.ledger,
            self.scripts,
        )
        self.stop: Stop | None = None
        self.abort_requested = False
        self.summary: str | None = None
        self.blocked: str | None = None

    def emit(self, kind: str, /, **detail: Any) -> None:
        listener = self.agent.on_event
        if listener is None:
            return
        # Its exceptions are ignored, `CancelledError` too: only the caller cancels a turn.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            listener(AgentEvent(kind, self.budget.steps, self.budget.elapsed(), detail))

    # -- the turn --------------------------------------------------------------------------

    async def run(self) -> Turn:
        try:
            runtime = self.agent.runtime
            shell = runtime.shell(self.shell_name)
            self.scripts.actions = Actions(shell, max_time_limit=runtime.max_time_limit)
            if self.saved is None:
                self.transcript.say(UserText(self.task))
                self.checkpoint.begin(self.task, self.agent.model)
            else:
                self.checkpoint.restore(self.saved)
            self.emit("turn_started", turn_id=self.turn_id, resumed=self.saved is not None)
            prompt = system_prompt(self.agent.runtime.prompt(), self.agent.instructions)
            self.stop = await self.steps_until_stop(prompt)
        except asyncio.CancelledError:
            why = self.scripts.abandon() or self.requests.abandon()
            self.stop = Stop("aborted", why or "the caller cancelled the turn")
        except Exception as err:
            self.stop = Stop("error", f"the loop failed: {type(err).__name__}: {err}")
        await self.scripts.clean_up()
        return self.ending(self.stop)

    def ending(self, stop: Stop) -> Turn:
        """The `Turn` for `stop`, with the last words of the transcript written."""
        self.stop = stop
        checkpoint = self.checkpoint
        if checkpoint.outbox is not None:
            self.transcript.record_unsent(checkpoint.outbox)
            checkpoint.outbox = None
        self.transcript.record_stop(stop)
        with contextlib.suppress(Exception):  # the turn's end is told even if the journal fails
            checkpoint.end(stop.reason)
        self.emit("turn_ended", stop_reason=stop.reason, error=stop.error)
        return Turn(
            stop_reason=stop.reason,
            steps=self.budget.steps,
            error=stop.error,
            transcript=self.transcript.entries,
            summary=self.summary,
            blocked=self.blocked,
            scripts=self.scripts.count,
            elapsed=self.budget.elapsed(),
            turn_id=self.turn_id,
        )

    def check_abort(self) -> None:
        """Raise `CancelledError` if an abort was asked for and something swallowed it."""
        if self.abort_requested:
            raise asyncio.CancelledError

    async def steps_until_stop(self, prompt: str) -> Stop:
        checkpoint = self.checkpoint
        if checkpoint.phase == "acting" and checkpoint.acting is not None:
            stop = await self.act(checkpoint.acting)
            if stop is not None:
                return stop
        resend = checkpoint.phase == "request"
        while True:
            if resend:
                # The request in flight when the process died is sent again, as the same
                # step: it was counted once, and the model's answer is no side effect.
                resend = False
                self.emit("step", cap=self.budget.cap)
                asked = await self.requests.ask(prompt)
            else:
                asked = await self.next_request(prompt)
            if isinstance(asked, Stop):
                return asked
            reply = asked
            ends_turn = not reply.tool_calls and reply.model_stop not in CONTINUE_AFTER
            if ends_turn:
                self.stop = Stop("end_turn")
            self.transcript.say(AssistantMessage(reply.text, tuple(reply.tool_calls)))
            self.emit("reply", model_stop=reply.model_stop, tool_calls=len(reply.tool_calls))
            if self.stop is not None:
                return self.stop
            if not reply.tool_calls:
                checkpoint.continuation = CUT_REPLY if reply.model_stop != "pause_turn" else ""
                checkpoint.phase = "between"
                checkpoint.save()
                continue
            stop = await self.act(reply.tool_calls)
            if stop is not None:
                return stop

    async def next_request(self, prompt: str) -> ModelReply | Stop:
        """The next step: its checks, then its request."""
        budget = self.budget
        if budget.steps > 0:
            await self.renew_cap()
        if budget.expired():
            return budget.lifetime_stop("between steps")
        if budget.steps >= budget.cap:
            return Stop(
                "step_cap",
                f"the step cap ({budget.cap}) was reached; the last step's results were "
                "not sent to the model",
            )
        self.check_abort()
        self.send_outbox()
        budget.steps += 1
        self.ledger.model_looked()
        self.checkpoint.phase = "request"
        self.checkpoint.save()
        self.emit("step", cap=budget.cap)
        return await self.requests.ask(prompt)

    def send_outbox(self) -> None:
        checkpoint = self.checkpoint
        notes = checkpoint.lost + self.scripts.collect_background()
        checkpoint.lost = []
        if checkpoint.outbox is not None:
            self.transcript.say(ToolResults(tuple(checkpoint.outbox), tuple(notes)))
        elif checkpoint.continuation is not None or notes:
            text = [checkpoint.continuation] if checkpoint.continuation else []
            self.transcript.say(UserText("\n\n".join(text + notes)))
        checkpoint.outbox = None
        checkpoint.continuation = None

    async def renew_cap(self) -> None:
        outcome = await self.budget.ask_before_step(
            scripts=self.scripts.count, background_running=len(self.ledger.running())
        )
        if outcome is None:
            return
        self.transcript.record_loop("before_step", outcome=outcome, cap=self.budget.cap)
        self.emit("before_step", outcome=outcome, cap=self.budget.cap)

    # -- acting on a reply -----------------------------------------------------------------

    async def act(self, calls: list[ToolCall]) -> Stop | None:
        """Act on a reply's tool calls; those answered before a restart keep their answer."""
        checkpoint = self.checkpoint
        if checkpoint.acting is not calls:
            checkpoint.acting, checkpoint.results, checkpoint.phase = calls, {}, "acting"
            checkpoint.save()
        results = checkpoint.results
        stop: Stop | None = None
        running: ToolCall | None = None
        try:
            for call in calls:
                if call.name in TERMINAL_TOOLS or call.id in results:
                    continue
                if stop is not None or self.budget.expired():
                    stop = stop or self.budget.lifetime_stop(
                        "while the model's tool calls were run"
                    )
                    results[call.id] = not_run(
                        self.ledger, call, "the turn's lifetime passed before it"
                    )
                    continue
                running = call
                results[call.id], stop = await self.call_tool(call)
                running = None
                if stop is None and self.budget.expired():
                    # Passed while this call ran (a script is cut to what is left of the
                    # lifetime, then stopped; one that ignores the interrupt is killed after
                    # the runtime's grace): said so, not "between steps".
                    stop = self.budget.lifetime_stop(
                        f"while the model's {call.name} call ran (what it ran was stopped)"
                    )
                checkpoint.in_flight = None
                checkpoint.save()
                self.check_abort()
        except asyncio.CancelledError:
            # Aborted: the call that ran is told by `scripts.abandon`; those after it, and
            # a `finish` or `block`, were not run, and the record says so, as it does for a
            # lifetime's stop.
            for call in calls:
                if call.id not in results and call is not running:
                    results[call.id] = not_run(
                        self.ledger, call, "the caller cancelled the turn before it"
                    )
            checkpoint.outbox = [results[call.id] for call in calls if call.id in results]
            raise
        terminal = [call for call in calls if call.name in TERMINAL_TOOLS]
        for index, call in enumerate(terminal):
            if stop is not None:
                results[call.id] = not_run(self.ledger, call, "the turn ended before it")
            elif index > 0:
                results[call.id] = refuse(
                    self.ledger,
                    call,
                    "only one finish or block is considered per reply; this one was not.",
                )
            else:
                results[call.id], stop = await self.end_turn(call)
        outbox = [results[call.id] for call in calls]
        if not self.agent.images:
            outbox = [replace(result, images=()) for result in outbox]
        checkpoint.outbox = outbox
        checkpoint.acting, checkpoint.results, checkpoint.phase = None, {}, "between"
        if stop is None:
            checkpoint.save()
        return stop

    async def call_tool(self, call: ToolCall) -> tuple[ToolResult, Stop | None]:
        args = call.arguments
        if args is None:
            return refuse(
                self.ledger,
                call,
                f"{call.name} was not run: its arguments were not a JSON object "
                f"({call.raw_arguments[:200]!r}).",
            ), None
        if call.name == "run_python":
            checkpoint = self.checkpoint
            in_flight = checkpoint.in_flight
            if in_flight is not None and in_flight["call_id"] == call.id:
                return await checkpoint.take_back(call, in_flight["since"])
            checkpoint.in_flight = {"call_id": call.id, "since": time.time()}
            checkpoint.save()
            return await self.scripts.run_python(call, args)
        if call.name in ("script_status", "cancel_script"):
            return await self.scripts.look_at_script(call, args)
        names = [tool.name for tool in ACTION_TOOLS]
        return refuse(self.ledger, call, no_such_tool(call.name, names).text), None

    def _answered(self, pending: Sequence[PendingCall]) -> dict[str, str]:
        """Which of these pending calls have answered since, as the runtime's journal says
        (a runtime without one cannot say: they stay pending)."""
        journal = getattr(self.agent.runtime, "journal", None)
        calls = getattr(journal, "calls", None)
        if calls is None:
            return {}
        wanted = {call.call_id for call in pending}
        found: dict[str, str] = {}
        for script_id in {call.script_id for call in pending}:
            for record in calls(script_id=script_id):
                if record.call_id in wanted and record.answered_at is not None:
                    said = record.answer_brief or ""
                    found[record.call_id] = f"error: {said}" if record.is_error else said
        return found

    async def end_turn(self, call: ToolCall) -> tuple[ToolResult, Stop | None]:
        """`finish` or `block`: accepted only once the model has seen every result of the turn."""
        args = call.arguments
        key = "summary" if call.name == "finish" else "reason"
        value = None if args is None else args.get(key)
        if not isinstance(value, str):
            return refuse(self.ledger, call, f"{call.name} needs `{key}`, a string."), None
        if self.ledger.running() or self.ledger.pending:
            await self.ledger.settle(
                self.budget.within(self.agent.control.terminal_wait), self._answered
            )
        refusal = self.ledger.refusal(call.name)
        if refusal is not None:
            self.emit("terminal_refused", tool=call.name, why=refusal)
            self.transcript.record_loop("terminal_refused", tool=call.name)
            expired = self.budget.expired()
            stop = self.budget.lifetime_stop("while finish waited") if expired else None
            return refuse(self.ledger, call, refusal), stop
        if call.name == "finish":
            self.summary = value
        else:
            self.blocked = value
        self.stop = Stop("end_turn")
        return ToolResult(call.id, call.name, "Accepted; the turn ends."), self.stop
