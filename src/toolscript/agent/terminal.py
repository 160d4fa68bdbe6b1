"""When `finish` and `block` may end a turn.

Goal: the agent decides to stop with every result of its turn in view. What fails: accepting
`finish` as soon as the model calls it lets it end the turn while a background script is still
running (its effects still to come) or while a result it never read says something went wrong.
What we do: keep a ledger of everything the turn owes the model (each call's result, each
background script's end), with where it stands (`running`, `returned`, `seen`). A terminal call
waits, for a bounded time, for what is still running, then is accepted only if everything the
turn owes has been seen by the model, that is, was sent to it in an earlier request. Otherwise
it is refused with a retryable error that names what is unread or still running.

A tool call a script left pending (no answer when the script ended: its effect may still come)
is owed too. The terminal call waits for its answer, as for a background script; one that
answers meanwhile is named in the refusal with its answer. One still pending is named once:
no one can stop it, so once the model has been told it is still pending, it decides with that
in view.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .runtime_protocol import BackgroundScript, ScriptOutcome

TERMINAL_TOOLS = ("finish", "block")

Standing = Literal["running", "ended", "returned", "seen"]


@dataclass(slots=True)
class Owed:
    """One thing the turn owes the model: a call's result, or a background script's end.

    `running`: a background script not ended yet; `ended`: it ended, but its result is not in
    the history yet; `returned`: in the history, but no request has carried it to the model
    yet; `seen`: a request carried it.
    """

    label: str
    standing: Standing = "returned"


@dataclass(slots=True)
class Background:
    """A background script the model started, and what became of it."""

    script_id: str
    handle: BackgroundScript
    owed: Owed
    watcher: asyncio.Task[ScriptOutcome]
    outcome: ScriptOutcome | None = None
    failure: str | None = None
    reported: bool = False

    @property
    def running(self) -> bool:
        """Whether the script has not ended yet, as far as the turn knows."""
        return not self.watcher.done()


@dataclass(slots=True)
class PendingCall:
    """A tool call a script of the turn left pending: its effect may still come."""

    call_id: str
    script_id: str
    label: str
    told: bool = False
    """A refusal named it still pending: the model decides with that in view."""


Answered = Callable[[Sequence[PendingCall]], Mapping[str, str]]
"""The answers, by call id, of those pending calls that have one now (a brief of each)."""

PENDING_POLL = 0.05
"""Seconds between two looks at whether a pending call has answered, while a terminal call
waits."""


@dataclass(slots=True)
class Ledger:
    """Everything the turn owes the model, and the background scripts it started."""

    owed: list[Owed] = field(default_factory=list)
    background: dict[str, Background] = field(default_factory=dict)
    pending: dict[str, PendingCall] = field(default_factory=dict)

    def left_pending(self, call_id: str, script_id: str, label: str) -> None:
        """A script of the turn ended with this call of its pending."""
        self.pending[call_id] = PendingCall(call_id, script_id, label)

    def returned(self, label: str) -> Owed:
        """Record a result that is going into the history now."""
        item = Owed(label)
        self.owed.append(item)
        return item

    def model_looked(self) -> None:
        """A request is going out: everything in the history is now seen by the model."""
        for item in self.owed:
            if item.standing == "returned":
                item.standing = "seen"

    def running(self) -> list[Background]:
        """Background scripts not yet ended."""
        return [b for b in self.background.values() if b.running]

    def unseen(self) -> list[Owed]:
        """What the model has not seen: results not yet sent, scripts still running."""
        for b in self.background.values():
            if not b.running and b.owed.standing == "running":
                b.owed.standing = "ended"
        return [item for item in self.owed if item.standing != "seen"]

    async def settle(self, timeout: float, answered: Answered | None = None) -> None:
        """Wait up to `timeout` seconds for the running background scripts to end and, with
        `answered`, for the pending calls to answer (an answer found becomes owed)."""
        deadline = time.monotonic() + max(timeout, 0.0)
        watchers = [b.watcher for b in self.running()]
        if watchers and timeout > 0:
            await asyncio.wait(watchers, timeout=timeout)
        if answered is None:
            return
        while self.pending:
            for call_id, brief in answered(list(self.pending.values())).items():
                found = self.pending.pop(call_id, None)
                if found is not None:
                    self.owed.append(Owed(f"{found.label}, which has answered since: {brief}"))
            left = deadline - time.monotonic()
            if not self.pending or left <= 0:
                return
            await asyncio.sleep(min(PENDING_POLL, left))

    def refusal(self, tool: str) -> str | None:
        """Why `tool` (`finish` or `block`) cannot end the turn now, or `None` if it can."""
        unseen = self.unseen()
        untold = [call for call in self.pending.values() if not call.told]
        if not unseen and not untold:
            return None
        for call in untold:
            call.told = True
        still = [item.label for item in unseen if item.standing == "running"]
        unread = [item.label for item in unseen if item.standing != "running"]
        lines = [
            f"{tool} was refused: not every result of this turn has been read yet."
            if unseen
            else f"{tool} was refused: tool calls of this turn never answered, so their "
            "effects may still come."
        ]
        if unread:
            lines.append(
                "Returned since you last looked (they are in this message or the next): "
                + "; ".join(unread)
                + "."
            )
        if still:
            lines.append(
                "Still running, so their effects may still come: "
                + "; ".join(still)
                + ". Wait for them (their results arrive as messages) or cancel them with "
                "cancel_script."
            )
        if untold:
            lines.append(
                "Never answered, so their effects may still come: "
                + "; ".join(call.label for call in untold)
                + ". Nothing can cancel a tool call; an answer that comes later is told to "
                "you as a message."
            )
        lines.append(f"Read these, then call {tool} again if it still stands.")
        return "\n".join(lines)
