"""The part of `toolscript.Runtime` the agent uses, as a Protocol.

The agent depends on nothing of the runtime beyond these names (docs/api/runtime.md), so a test can
drive the loop with a stand-in, and the real `Runtime` satisfies this structurally. The shell,
script and result protocols are those of `toolscript.actions`, which runs the model's actions.
A runtime with a journal (`JournaledRuntime`) also keeps the agent's turns, so they can be
resumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..actions import BackgroundScript, BackgroundShell, CallCounts, ScriptOutcome, ScriptShell

__all__ = [
    "BackgroundScript",
    "BackgroundShell",
    "CallCounts",
    "JournaledRuntime",
    "JournaledScript",
    "KeepingRuntime",
    "RecoveringShell",
    "RuntimeJournal",
    "SavedTurn",
    "ScriptOutcome",
    "ScriptRuntime",
    "ScriptShell",
    "TurnJournal",
]


class ScriptRuntime(Protocol):
    """The runtime: a tool catalogue for the prompt, shells to run scripts in, and the longest
    time limit a script may ask for."""

    @property
    def max_time_limit(self) -> float:
        """Seconds: the most a script's `time_limit_s` may be."""
        ...

    def prompt(self) -> str:
        """The tool catalogue as Python stubs."""
        ...

    def shell(self, name: str | None = None) -> ScriptShell:
        """The shell called `name` (the default shell without one)."""
        ...


class SavedTurn(Protocol):
    """A turn as the journal kept it (the runtime's `JournalTurn`)."""

    @property
    def turn_id(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def shell(self) -> str: ...
    @property
    def ended_at(self) -> float | None: ...
    @property
    def stop_reason(self) -> str | None: ...
    @property
    def steps(self) -> int: ...
    @property
    def step_cap(self) -> int: ...
    @property
    def elapsed(self) -> float: ...
    @property
    def messages(self) -> list[dict[str, Any]]: ...
    @property
    def state(self) -> dict[str, Any]: ...
    @property
    def held_elsewhere(self) -> bool: ...


class TurnJournal(Protocol):
    """Where turns are saved as they go (`rt.journal.turns`)."""

    def begin(
        self,
        turn_id: str,
        *,
        task: str,
        model: str,
        shell: str,
        steps: int,
        step_cap: int,
        elapsed: float,
        messages: list[dict[str, Any]],
        state: dict[str, Any],
    ) -> None:
        """Record a new turn."""
        ...

    def save(
        self,
        turn_id: str,
        *,
        steps: int,
        step_cap: int,
        elapsed: float,
        messages: list[dict[str, Any]],
        state: dict[str, Any],
    ) -> None:
        """Record where the turn stands now."""
        ...

    def end(
        self,
        turn_id: str,
        stop_reason: str,
        *,
        steps: int,
        step_cap: int,
        elapsed: float,
        messages: list[dict[str, Any]],
        state: dict[str, Any],
    ) -> None:
        """Record how the turn ended."""
        ...

    def take(self, turn_id: str) -> SavedTurn | None:
        """The turn as last saved (taken over by this process when it may be), or `None`."""
        ...


class JournaledScript(Protocol):
    """A script as the journal knows it (the runtime's `JournalScript`)."""

    @property
    def script_id(self) -> str: ...
    @property
    def started_at(self) -> float: ...
    @property
    def status(self) -> str | None: ...


class RuntimeJournal(Protocol):
    """The runtime's journal, as far as the agent reads and writes it."""

    @property
    def turns(self) -> TurnJournal:
        """The agent's turns."""
        ...

    def scripts(self, shell: str | None = None, limit: int | None = None) -> Sequence[Any]:
        """Scripts in the order they started (`JournaledScript`s)."""
        ...

    def calls(
        self, script_id: str | None = None, uncertain: bool = False, limit: int | None = None
    ) -> Sequence[Any]:
        """Calls in the order they were journaled (`JournalCall`s: `tool`, `args_brief`)."""
        ...


@runtime_checkable
class JournaledRuntime(Protocol):
    """A runtime with a journal, where the agent saves each turn as it goes."""

    @property
    def journal(self) -> RuntimeJournal:
        """The runtime's journal."""
        ...


@runtime_checkable
class KeepingRuntime(Protocol):
    """A runtime that keeps interpreters through its host's death: it holds again the
    background scripts a process that is gone had started."""

    @property
    def background(self) -> Sequence[BackgroundScript]:
        """The background scripts still running, those taken back included."""
        ...


@runtime_checkable
class RecoveringShell(Protocol):
    """A shell that a restarted host took back from the keeper, with the script it ran."""

    async def recovered(self) -> ScriptOutcome | None:
        """The result of the script a host that is gone had started in it, once it ends;
        `None` if there was none."""
        ...
