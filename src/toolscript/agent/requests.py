"""One step's model request: its deadline, its retries, and what a cut-off stream had said.

Goal: try a failed request again when that is safe, and end the turn truthfully when it is
not. What fails: retrying once some of the reply has streamed gives the step a second,
different reply after listeners (`on_event`) already heard part of the first. What we do:
retry, at most `MAX_RETRIES` times and backing off, only while nothing of the reply has
streamed; after that a failure ends the turn (`error`, `truncated`, `time_limit`) and what had
streamed is kept in the transcript. Each attempt is bounded by `request_timeout` and by what
is left of the turn's lifetime.
"""

from __future__ import annotations

import asyncio

from .control import TurnBudget
from .conversation import ModelReply, StreamProgress
from .providers import ModelError, Provider
from .tools import ACTION_TOOLS
from .transcript import Transcript
from .turn import Emit, Stop

MAX_RETRIES = 2
"""Retries of one request, only while nothing of its reply has streamed."""
RETRY_DELAY = 0.5
"""Seconds before the first retry; doubled for each next one, unless the server says."""
MAX_RETRY_DELAY = 8.0


class ModelRequests:
    """Sends a turn's model requests; `progress` is the stream of the one in flight, if any."""

    def __init__(
        self, provider: Provider, budget: TurnBudget, transcript: Transcript, emit: Emit
    ) -> None:
        self.provider = provider
        self.budget = budget
        self.transcript = transcript
        self.emit = emit
        self.progress: StreamProgress | None = None

    async def ask(self, prompt: str) -> ModelReply | Stop:
        """The model's complete reply to the history so far, or the ending of the turn."""
        attempt = 0
        while True:
            self.progress = StreamProgress(listener=self._hear)
            request_timeout = self.budget.control.request_timeout
            remaining = self.budget.remaining()
            bound = request_timeout if remaining is None else min(request_timeout, remaining)
            deadline = asyncio.timeout(bound)
            try:
                async with deadline:
                    reply = await self.provider.stream(
                        prompt, list(self.transcript.history), ACTION_TOOLS, self.progress
                    )
            except TimeoutError:
                if not deadline.expired():
                    raise
                self._record_partial("time_limit")
                if remaining is not None and remaining < request_timeout:
                    return self.budget.lifetime_stop("while the model was answering")
                return Stop(
                    "time_limit",
                    f"the model request ran past its request_timeout ({request_timeout} s)",
                )
            except ModelError as err:
                if err.retryable and not self.progress.content_started and attempt < MAX_RETRIES:
                    self.progress = None
                    delay = await self._wait_to_retry(attempt, err.retry_after, str(err))
                    if delay is None:
                        return Stop("error", f"{err}; no time was left to retry")
                    attempt += 1
                    continue
                self._record_partial("error")
                return Stop("error", str(err))
            if not reply.complete and not self.progress.content_started and attempt < MAX_RETRIES:
                self.progress = None
                if await self._wait_to_retry(attempt, None, str(reply.broken)) is None:
                    return Stop("truncated", _truncated_text(reply))
                attempt += 1
                continue
            if reply.complete and (shared := _shared_id(reply)) is not None:
                # Each call's result goes back under its id: two calls under one id would
                # get one result, or the first's twice. Not a reply any call of can be run.
                self._record_partial("error")
                names = ", ".join(call.name for call in reply.tool_calls)
                return Stop(
                    "error",
                    f"the model's reply gave the id {shared[:100]!r} to more than one tool call, "
                    f"so none of its {len(reply.tool_calls)} tool calls was run: {names}",
                )
            self.progress = None
            if not reply.complete:
                self.transcript.record_truncated(reply)
                return Stop("truncated", _truncated_text(reply))
            return reply

    def abandon(self) -> str | None:
        """At a cancel of the turn: what became of the request in flight, if one was; what
        had streamed of it is recorded."""
        progress = self.progress
        if progress is None:
            return None
        self._record_partial("aborted")
        if progress.content_started:
            return "the caller cancelled the turn while the model's reply was streaming"
        return "the caller cancelled the turn while it waited for the model's reply"

    def _record_partial(self, ended: str) -> None:
        """Record what had streamed of the request in flight, which ended as `ended`."""
        progress = self.progress
        if progress is None:
            return
        self.progress = None
        self.transcript.record_partial(progress, ended)

    async def _wait_to_retry(
        self, attempt: int, retry_after: float | None, why: str
    ) -> float | None:
        delay = RETRY_DELAY * 2**attempt if retry_after is None else retry_after
        delay = min(delay, MAX_RETRY_DELAY)
        remaining = self.budget.remaining()
        if remaining is not None and delay >= remaining:
            return None
        self.transcript.record_loop("retry", attempt=attempt + 1, why=why)
        self.emit("retry", attempt=attempt + 1, why=why, delay=delay)
        await asyncio.sleep(delay)
        return delay

    def _hear(self, kind: str, detail: str) -> None:
        self.emit(kind, value=detail)


def _shared_id(reply: ModelReply) -> str | None:
    """An id the reply gives to more than one tool call, if it does."""
    seen: set[str] = set()
    for call in reply.tool_calls:
        if call.id in seen:
            return call.id
        seen.add(call.id)
    return None


def _truncated_text(reply: ModelReply) -> str:
    calls = reply.tool_calls
    text = f"the model's stream ended before its terminal event: {reply.broken}"
    if calls:
        names = ", ".join(f"{call.name} ({call.id})" for call in calls)
        text += f"; its {len(calls)} tool call(s) were not run: {names}"
    return text
