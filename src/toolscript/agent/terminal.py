"""When `finish` and `block` may end a turn.

Goal: the agent decides to stop with every result of its turn in view. What fails: accepting
`finish` as soon as the model calls it lets it end the turn while a background script is still
running (its effects still to come) or while a result it never read says something went wrong.
What we do: keep a ledger of everything the turn owes the model (each call's result, each
background script's end), with where it stands (`running`, `returned`, `seen`). A terminal call
waits, for a bounded time, for what is still running, then is accepted only if everything the
turn owes has been seen by the model, that is, was sent to it in an earlier request. Otherwise
it is refused with a retryable error that names what is unread or still running.
"""

from __future__ import annotations

import asyncio
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
class Ledger:
    """Everything the turn owes the model, and the background scripts it started."""

    owed: list[Owed] = field(default_factory=list)
    background: dict[str, Background] = field(default_factory=dict)

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

    async def settle(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the running background scripts to end."""
        watchers = [b.watcher for b in self.running()]
        if watchers and timeout > 0:
            await asyncio.wait(watchers, timeout=timeout)

    def refusal(self, tool: str) -> str | None:
        """Why `tool` (`finish` or `block`) cannot end the turn now, or `None` if it can."""
        unseen = self.unseen()
        if not unseen:
            return None
        still = [item.label for item in unseen if item.standing == "running"]
        unread = [item.label for item in unseen if item.standing != "running"]
        lines = [f"{tool} was refused: not every result of this turn has been read yet."]
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
        lines.append(f"Read these, then call {tool} again if it still stands.")
        return "\n".join(lines)
