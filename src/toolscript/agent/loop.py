"""The agent loop: a model whose only action is running scripts, with a true ending.

A turn is a series of steps. Each step sends one model request (its retries included), reads
the stream, runs the scripts the model asked for and keeps their results for the next request.
The turn ends with a `stop_reason` that is true:

- `end_turn`: the model ended the turn (a reply without tool calls, or an accepted `finish`
  or `block`);
- `aborted`: the caller cancelled the task running `Agent.run`;
- `time_limit`: the lifetime passed, or a request ran past `request_timeout`;
- `step_cap`: the next step would pass `max_steps`;
- `truncated`: a stream ended without its terminal event; its tool calls were not run;
- `error`: the model API refused or failed for good, or the runtime failed to answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..actions import Actions, Answer, RunRequest, no_such_tool
from .control import ExecutionControl, StepState
from .conversation import (
    AssistantMessage,
    Message,
    ModelReply,
    StreamProgress,
    ToolCall,
    ToolResult,
    ToolResults,
    UserText,
)
from .providers import ModelError, Provider, make_provider
from .runtime_protocol import ScriptOutcome, ScriptRuntime
from .terminal import TERMINAL_TOOLS, Background, Ledger, Owed
from .tools import ACTION_TOOLS, system_prompt

StopReason = Literal["end_turn", "aborted", "time_limit", "step_cap", "truncated", "error"]

MAX_RETRIES = 2
"""Retries of one request, only while nothing of its reply has streamed."""
RETRY_DELAY = 0.5
"""Seconds before the first retry; doubled for each next one, unless the server says."""
MAX_RETRY_DELAY = 8.0
SETTLE_BOUND = 30.0
"""Seconds past a script's own time limit the runtime has to answer (its interrupt, grace and
kill all fit in this)."""
CLEANUP_BOUND = 15.0
"""Seconds to stop each background script still running when the turn ends."""
CONTINUE_AFTER = frozenset({"max_tokens", "length", "pause_turn"})
"""Model stops that end a reply, not the turn: the loop asks the model to go on."""
CUT_REPLY = (
    "Your reply was cut at the output token limit before it ended, so any tool call in it "
    "could not be complete. Go on, in shorter pieces."
)


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """Something that happened in a turn, for live progress.

    `kind` is one of `step` (a request is going out), `retry`, `text` and `tool_call` (as the
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

    `stop_reason` is the truth about the ending (see the module's docstring); `steps` the
    model requests made (retries of one request count once); `error` says what stopped the
    turn when it was not the model (`None` on `end_turn`); `summary` and `blocked` hold the
    argument of an accepted `finish` or `block`; `transcript` is every message, script result
    and loop decision, JSON-safe, in order.
    """

    stop_reason: StopReason
    steps: int
    error: str | None
    transcript: list[dict[str, Any]]
    summary: str | None = None
    blocked: str | None = None
    scripts: int = 0
    elapsed: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The turn as JSON-safe data."""
        return {
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
class _Stop:
    reason: StopReason
    error: str | None = None


class Agent:
    """A model that acts by running scripts in a `Runtime`.

    `model` is `"anthropic:MODEL"` or `"openai:MODEL"`; `base_url` reaches another server of
    that API (any OpenAI-compatible one); `api_key` defaults to the SDK's environment
    variable. `control` bounds every turn; `instructions` are added to the system prompt;
    `max_tokens` bounds each Anthropic reply; `on_event` hears an `AgentEvent` for each thing
    that happens (its exceptions are ignored). The provider is built here, so a bad `model`
    raises a `ValueError` naming it before any request.
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
        on_event: Callable[[AgentEvent], None] | None = None,
    ) -> None:
        if not isinstance(control, ExecutionControl):
            raise TypeError(f"control: expected an ExecutionControl, not {control!r}")
        self.model = model
        self.runtime = runtime
        self.control = control
        self.instructions = instructions
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
        unless the turn had already ended, in which case its own ending stands.
        """
        turn = _TurnRun(self, task)
        inner = asyncio.create_task(turn.run())
        while True:
            try:
                return await asyncio.shield(inner)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    current.uncancel()
                if inner.cancelled():
                    return turn.ending(_Stop("aborted", "the caller cancelled the turn"))
                if inner.done():
                    return inner.result()
                if turn.stop is None:
                    turn.abort_requested = True
                    inner.cancel()


class _TurnRun:
    """One turn's state: the history, the ledger, the clocks."""

    def __init__(self, agent: Agent, task: str) -> None:
        self.agent = agent
        self.control = agent.control
        self.provider = agent.provider
        self.task = task
        self.started = time.monotonic()
        lifetime = self.control.lifetime_timeout
        self.deadline = None if lifetime is None else self.started + lifetime
        self.cap = self.control.max_steps
        self.steps = 0
        self.scripts = 0
        self.history: list[Message] = []
        self.transcript: list[dict[str, Any]] = []
        self.ledger = Ledger()
        self.outbox: list[ToolResult] | None = None
        self.continuation: str | None = None
        self.progress: StreamProgress | None = None
        self.stop: _Stop | None = None
        self.abort_requested = False
        self.summary: str | None = None
        self.blocked: str | None = None
        self.actions: Actions | None = None
        self.script_running: str | None = None

    # -- the clocks ------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0

    def lifetime_stop(self, during: str) -> _Stop:
        return _Stop(
            "time_limit",
            f"the turn's lifetime_timeout ({self.control.lifetime_timeout} s) passed {during}",
        )

    def emit(self, kind: str, **detail: Any) -> None:
        listener = self.agent.on_event
        if listener is None:
            return
        with contextlib.suppress(Exception):
            listener(AgentEvent(kind, self.steps, self.elapsed(), detail))

    def record(self, entry: dict[str, Any]) -> None:
        self.transcript.append(entry)

    def say(self, message: Message) -> None:
        self.history.append(message)
        self.transcript.append(message.to_dict())

    # -- the turn --------------------------------------------------------------------------

    async def run(self) -> Turn:
        self.say(UserText(self.task))
        try:
            runtime = self.agent.runtime
            self.actions = Actions(runtime.shell(), max_time_limit=runtime.max_time_limit)
            prompt = system_prompt(self.agent.runtime.prompt(), self.agent.instructions)
            self.stop = await self.steps_until_stop(prompt)
        except asyncio.CancelledError:
            self.stop = _Stop("aborted", self.abort_text())
        except Exception as err:
            self.stop = _Stop("error", f"the loop failed: {type(err).__name__}: {err}")
        await self.clean_up()
        return self.ending(self.stop)

    def ending(self, stop: _Stop) -> Turn:
        """The `Turn` for `stop`, with the last words of the transcript written."""
        self.stop = stop
        if self.outbox is not None:
            self.record(ToolResults(tuple(self.outbox)).to_dict() | {"sent": False})
            self.outbox = None
        self.record({"role": "stop", "stop_reason": stop.reason, "error": stop.error})
        self.emit("turn_ended", stop_reason=stop.reason, error=stop.error)
        return Turn(
            stop_reason=stop.reason,
            steps=self.steps,
            error=stop.error,
            transcript=self.transcript,
            summary=self.summary,
            blocked=self.blocked,
            scripts=self.scripts,
            elapsed=self.elapsed(),
        )

    def check_abort(self) -> None:
        """Raise `CancelledError` if an abort was asked for and something swallowed it."""
        if self.abort_requested:
            raise asyncio.CancelledError

    def abort_text(self) -> str:
        if self.script_running is not None:
            self.record(
                {"role": "loop", "event": "script_abandoned", "call_id": self.script_running}
            )
            return (
                f"the caller cancelled the turn while the script of run_python call "
                f"{self.script_running} ran; it was cancelled with the turn and its result "
                "was not collected"
            )
        progress = self.progress
        if progress is not None:
            self.record_partial("aborted")
            if progress.content_started:
                return "the caller cancelled the turn while the model's reply was streaming"
            return "the caller cancelled the turn while it waited for the model's reply"
        return "the caller cancelled the turn"

    async def steps_until_stop(self, prompt: str) -> _Stop:
        while True:
            if self.steps > 0:
                await self.renew_cap()
            if self.expired():
                return self.lifetime_stop("between steps")
            if self.steps >= self.cap:
                return _Stop(
                    "step_cap",
                    f"the step cap ({self.cap}) was reached; the last step's results were not "
                    "sent to the model",
                )
            self.check_abort()
            self.send_outbox()
            self.steps += 1
            self.ledger.model_looked()
            self.emit("step", cap=self.cap)
            asked = await self.ask(prompt)
            if isinstance(asked, _Stop):
                return asked
            reply = asked
            ends_turn = not reply.tool_calls and reply.model_stop not in CONTINUE_AFTER
            if ends_turn:
                self.stop = _Stop("end_turn")
            self.say(AssistantMessage(reply.text, tuple(reply.tool_calls)))
            self.emit("reply", model_stop=reply.model_stop, tool_calls=len(reply.tool_calls))
            if self.stop is not None:
                return self.stop
            if not reply.tool_calls:
                self.continuation = CUT_REPLY if reply.model_stop != "pause_turn" else ""
                continue
            stop = await self.act(reply.tool_calls)
            if stop is not None:
                return stop

    def send_outbox(self) -> None:
        notes = self.collect_background()
        if self.outbox is not None:
            self.say(ToolResults(tuple(self.outbox), tuple(notes)))
        elif self.continuation is not None or notes:
            text = [self.continuation] if self.continuation else []
            self.say(UserText("\n\n".join(text + notes)))
        self.outbox = None
        self.continuation = None

    # -- one request -----------------------------------------------------------------------

    async def ask(self, prompt: str) -> ModelReply | _Stop:
        attempt = 0
        while True:
            self.progress = StreamProgress(listener=self.hear)
            request_timeout = self.control.request_timeout
            remaining = self.remaining()
            bound = request_timeout if remaining is None else min(request_timeout, remaining)
            deadline = asyncio.timeout(bound)
            try:
                async with deadline:
                    reply = await self.provider.stream(
                        prompt, list(self.history), ACTION_TOOLS, self.progress
                    )
            except TimeoutError:
                if not deadline.expired():
                    raise
                self.record_partial("time_limit")
                if remaining is not None and remaining < request_timeout:
                    return self.lifetime_stop("while the model was answering")
                return _Stop(
                    "time_limit",
                    f"the model request ran past its request_timeout ({request_timeout} s)",
                )
            except ModelError as err:
                if err.retryable and not self.progress.content_started and attempt < MAX_RETRIES:
                    self.progress = None
                    delay = await self.wait_to_retry(attempt, err.retry_after, str(err))
                    if delay is None:
                        return _Stop("error", f"{err}; no time was left to retry")
                    attempt += 1
                    continue
                self.record_partial("error")
                return _Stop("error", str(err))
            if not reply.complete and not self.progress.content_started and attempt < MAX_RETRIES:
                self.progress = None
                if await self.wait_to_retry(attempt, None, str(reply.broken)) is None:
                    return _Stop("truncated", self.truncated_text(reply))
                attempt += 1
                continue
            self.progress = None
            if not reply.complete:
                self.record(
                    {
                        "role": "assistant_partial",
                        "text": reply.text,
                        "tool_calls": [call.to_dict() for call in reply.tool_calls],
                        "ended": "truncated",
                    }
                )
                return _Stop("truncated", self.truncated_text(reply))
            return reply

    async def wait_to_retry(
        self, attempt: int, retry_after: float | None, why: str
    ) -> float | None:
        delay = RETRY_DELAY * 2**attempt if retry_after is None else retry_after
        delay = min(delay, MAX_RETRY_DELAY)
        remaining = self.remaining()
        if remaining is not None and delay >= remaining:
            return None
        self.record({"role": "loop", "event": "retry", "attempt": attempt + 1, "why": why})
        self.emit("retry", attempt=attempt + 1, why=why, delay=delay)
        await asyncio.sleep(delay)
        return delay

    def truncated_text(self, reply: ModelReply) -> str:
        calls = reply.tool_calls
        text = f"the model's stream ended before its terminal event: {reply.broken}"
        if calls:
            names = ", ".join(f"{call.name} ({call.id})" for call in calls)
            text += f"; its {len(calls)} tool call(s) were not run: {names}"
        return text

    def hear(self, kind: str, detail: str) -> None:
        self.emit(kind, value=detail)

    def record_partial(self, ended: str) -> None:
        progress = self.progress
        if progress is None:
            return
        self.progress = None
        if progress.content_started:
            self.record(
                {
                    "role": "assistant_partial",
                    "text": "".join(progress.text),
                    "tool_calls": [{"name": name} for name in progress.tool_names],
                    "ended": ended,
                }
            )

    # -- acting on a reply -----------------------------------------------------------------

    async def act(self, calls: list[ToolCall]) -> _Stop | None:
        results: dict[str, ToolResult] = {}
        stop: _Stop | None = None
        for call in calls:
            if call.name in TERMINAL_TOOLS:
                continue
            if stop is not None or self.expired():
                stop = stop or self.lifetime_stop("while the model's tool calls were run")
                results[call.id] = self.not_run(call, "the turn's lifetime passed before it")
                continue
            results[call.id], stop = await self.call_tool(call)
            self.check_abort()
        terminal = [call for call in calls if call.name in TERMINAL_TOOLS]
        for index, call in enumerate(terminal):
            if stop is not None:
                results[call.id] = self.not_run(call, "the turn ended before it")
            elif index > 0:
                results[call.id] = self.refuse(
                    call, "only one finish or block is considered per reply; this one was not."
                )
            else:
                results[call.id], stop = await self.end_turn(call)
        self.outbox = [results[call.id] for call in calls]
        return stop

    def not_run(self, call: ToolCall, why: str) -> ToolResult:
        return self.refuse(call, f"{call.name} was not run: {why}.")

    def refuse(self, call: ToolCall, text: str) -> ToolResult:
        self.ledger.returned(f"the answer to {call.name} call {call.id}")
        return ToolResult(call.id, call.name, text, is_error=True)

    async def call_tool(self, call: ToolCall) -> tuple[ToolResult, _Stop | None]:
        args = call.arguments
        if args is None:
            return self.refuse(
                call,
                f"{call.name} was not run: its arguments were not a JSON object "
                f"({call.raw_arguments[:200]!r}).",
            ), None
        if call.name == "run_python":
            return await self.run_python(call, args)
        if call.name in ("script_status", "cancel_script"):
            return await self.look_at_script(call, args)
        names = [tool.name for tool in ACTION_TOOLS]
        return self.refuse(call, no_such_tool(call.name, names).text), None

    def time_limit(self, requested: float | None) -> tuple[float | None, str | None]:
        tool_timeout = self.control.tool_timeout
        limit = requested if requested is not None else tool_timeout
        note = None
        if tool_timeout is not None and limit is not None and limit > tool_timeout:
            limit = tool_timeout
            note = f"time_limit_s {requested} was cut to the tool_timeout, {tool_timeout} s"
        remaining = self.remaining()
        if remaining is not None and (limit is None or limit > remaining):
            limit = remaining
            note = (
                f"the time limit was cut to what is left of the turn's lifetime, {remaining:.1f} s"
            )
        return limit, note

    async def run_python(
        self, call: ToolCall, args: dict[str, Any]
    ) -> tuple[ToolResult, _Stop | None]:
        actions = self.actions
        assert actions is not None
        request = actions.check_run(args)
        if isinstance(request, Answer):
            return self.refuse(call, request.text), None
        limit, note = self.time_limit(request.time_limit)
        self.scripts += 1
        self.emit(
            "script_started", call_id=call.id, background=request.background, time_limit=limit
        )
        request = RunRequest(request.code, limit, request.background)
        if request.background:
            return await self.start_background(call, actions, request, note), None
        bound = None if limit is None else limit + SETTLE_BOUND
        self.script_running = call.id
        try:
            async with asyncio.timeout(bound):
                answer = await actions.run(request)
        except TimeoutError:
            self.script_running = None
            return self.refuse(call, "run_python: the runtime did not answer."), _Stop(
                "error",
                f"the runtime did not answer a script within {SETTLE_BOUND} s of its time "
                f"limit ({limit} s)",
            )
        self.script_running = None
        return self.script_ended(call, answer, note, background=False), None

    def script_ended(
        self, call: ToolCall, answer: Answer, note: str | None, *, background: bool
    ) -> ToolResult:
        """The answer to a run_python call whose script ended: recorded, owed, said."""
        outcome = answer.result
        assert outcome is not None
        script_id = str(outcome.script_id)
        self.record_script(call.id, script_id, outcome, background=background)
        self.emit(
            "script_ended",
            call_id=call.id,
            script_id=script_id,
            status=outcome.status,
            calls=dict(outcome.calls.by_fate),
        )
        self.ledger.returned(f"the result of run_python call {call.id} (script {script_id})")
        text = answer.text if note is None else f"({note})\n{answer.text}"
        return ToolResult(call.id, call.name, text, is_error=answer.is_error)

    async def start_background(
        self, call: ToolCall, actions: Actions, request: RunRequest, note: str | None
    ) -> ToolResult:
        async with asyncio.timeout(SETTLE_BOUND):
            answer = await actions.start(request)
        handle = answer.handle
        if handle is None:  # refused at once: it ended before it began
            return self.script_ended(call, answer, note, background=True)
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
        text = answer.text if note is None else f"({note})\n{answer.text}"
        return ToolResult(call.id, call.name, text)

    async def look_at_script(
        self, call: ToolCall, args: dict[str, Any]
    ) -> tuple[ToolResult, _Stop | None]:
        actions = self.actions
        assert actions is not None
        if call.name == "cancel_script":
            try:
                async with asyncio.timeout(SETTLE_BOUND):
                    answer = await actions.cancel_script(args)
            except TimeoutError:
                return self.refuse(call, "cancel_script: the runtime did not answer."), _Stop(
                    "error", f"the runtime did not answer a cancel within {SETTLE_BOUND} s"
                )
        else:
            answer = await actions.script_status(args)
        found = self.ledger.background.get(answer.script_id or "")
        if found is not None and answer.result is not None:
            await asyncio.wait([found.watcher], timeout=SETTLE_BOUND)
            if found.outcome is None:
                found.outcome = answer.result
            self.take_background(found)
        self.ledger.returned(f"the answer to {call.name} call {call.id}")
        return ToolResult(call.id, call.name, answer.text, is_error=answer.is_error), None

    def take_background(self, found: Background) -> str:
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
                self.record_script(None, found.script_id, found.outcome, background=True)
        if found.outcome is None:
            return f"Background script {found.script_id} ended, but {found.failure}."
        return f"Background script {found.script_id} ended.\n{found.outcome.text}"

    def collect_background(self) -> list[str]:
        return [
            self.take_background(found)
            for found in self.ledger.background.values()
            if not found.running and not found.reported
        ]

    def record_script(
        self, call_id: str | None, script_id: str, outcome: ScriptOutcome, *, background: bool
    ) -> None:
        self.record(
            {
                "role": "script",
                "call_id": call_id,
                "script_id": script_id,
                "background": background,
                "status": outcome.status,
                "result": outcome.to_dict(),
            }
        )

    # -- the terminal tools ----------------------------------------------------------------

    async def end_turn(self, call: ToolCall) -> tuple[ToolResult, _Stop | None]:
        args = call.arguments
        key = "summary" if call.name == "finish" else "reason"
        value = None if args is None else args.get(key)
        if not isinstance(value, str):
            return self.refuse(call, f"{call.name} needs `{key}`, a string."), None
        if self.ledger.running():
            remaining = self.remaining()
            wait = self.control.terminal_wait
            await self.ledger.settle(wait if remaining is None else min(wait, remaining))
        refusal = self.ledger.refusal(call.name)
        if refusal is not None:
            self.emit("terminal_refused", tool=call.name, why=refusal)
            self.record({"role": "loop", "event": "terminal_refused", "tool": call.name})
            stop = self.lifetime_stop("while finish waited") if self.expired() else None
            return self.refuse(call, refusal), stop
        if call.name == "finish":
            self.summary = value
        else:
            self.blocked = value
        self.stop = _Stop("end_turn")
        return ToolResult(call.id, call.name, "Accepted; the turn ends."), self.stop

    # -- step boundaries -------------------------------------------------------------------

    async def renew_cap(self) -> None:
        callback = self.control.before_step
        if callback is None:
            return
        state = StepState(
            steps=self.steps,
            max_steps=self.cap,
            elapsed=self.elapsed(),
            scripts=self.scripts,
            background_running=len(self.ledger.running()),
        )
        timeout = self.control.before_step_timeout
        remaining = self.remaining()
        bound = timeout if remaining is None else min(timeout, remaining)
        outcome: str
        try:
            async with asyncio.timeout(bound):
                if inspect.iscoroutinefunction(callback):
                    offered = await callback(state)
                else:
                    offered = await asyncio.to_thread(callback, state)
                    if inspect.isawaitable(offered):
                        offered = await offered
        except TimeoutError:
            outcome = f"declined: before_step did not answer within {bound:.3g} s"
        except Exception as err:
            outcome = f"declined: before_step raised {type(err).__name__}: {err}"
        else:
            if self.control.accepts_new_cap(offered, self.cap):
                outcome = f"the step cap was raised from {self.cap} to {offered}"
                self.cap = offered
            elif offered is None:
                outcome = "kept the step cap"
            else:
                outcome = (
                    f"declined: before_step offered {offered!r}, which is not an int larger "
                    f"than the cap ({self.cap})"
                )
        self.record({"role": "loop", "event": "before_step", "outcome": outcome, "cap": self.cap})
        self.emit("before_step", outcome=outcome, cap=self.cap)

    # -- the end ---------------------------------------------------------------------------

    async def clean_up(self) -> None:
        for found in self.ledger.running():
            try:
                async with asyncio.timeout(CLEANUP_BOUND):
                    outcome = await found.handle.cancel()
            except Exception as err:
                self.record(
                    {
                        "role": "loop",
                        "event": "background_left_running",
                        "script_id": found.script_id,
                        "why": f"{type(err).__name__}: {err}",
                    }
                )
                continue
            found.outcome = outcome
            found.reported = True
            self.record(
                {
                    "role": "loop",
                    "event": "background_cancelled_at_turn_end",
                    "script_id": found.script_id,
                    "result": outcome.to_dict(),
                }
            )
        for found in self.ledger.background.values():
            if not found.running and not found.reported:
                self.take_background(found)
                self.record({"role": "loop", "event": "never_sent", "script_id": found.script_id})
            found.watcher.cancel()
