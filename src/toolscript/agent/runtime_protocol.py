"""The part of `toolscript.Runtime` the agent uses, as a Protocol.

The agent depends on nothing of the runtime beyond these names (docs/api/runtime.md), so a test can
drive the loop with a stand-in, and the real `Runtime` satisfies this structurally.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable


class CallCounts(Protocol):
    """A script's call report, as far as the agent reads it."""

    @property
    def by_fate(self) -> Mapping[str, int]:
        """A count per call fate (`seen`, `unread`, `late`, `pending`, `refused`)."""
        ...


class ScriptOutcome(Protocol):
    """A settled script result (the runtime's `ScriptResult`)."""

    @property
    def status(self) -> str:
        """`ok`, `error`, `time_limit`, `cancelled`, `crashed` or `refused`."""
        ...

    @property
    def text(self) -> str:
        """What the model reads."""
        ...

    @property
    def script_id(self) -> Any:
        """The script's id in the journal."""
        ...

    @property
    def calls(self) -> CallCounts:
        """The script's call report."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """The result, structured and JSON-safe."""
        ...


class BackgroundScript(Protocol):
    """A script started with `Shell.start`."""

    @property
    def id(self) -> Any:
        """The script's id."""
        ...

    def status(self) -> str:
        """`running` until the script ends, then its result's status."""
        ...

    async def result(self) -> ScriptOutcome:
        """Wait for the script to end and return its result."""
        ...

    async def cancel(self) -> ScriptOutcome:
        """Stop the script and return its result."""
        ...


class ScriptShell(Protocol):
    """A shell: a persistent namespace that runs one foreground script at a time."""

    async def run(self, code: str, *, time_limit: float | None = None) -> ScriptOutcome:
        """Run `code` and return its settled result."""
        ...


@runtime_checkable
class BackgroundShell(ScriptShell, Protocol):
    """A shell that can also start scripts in the background."""

    async def start(
        self,
        code: str,
        *,
        time_limit: float | None = None,
        on_done: Callable[[Any], Any] | None = None,
    ) -> BackgroundScript:
        """Start `code` in the background and return at once."""
        ...


class ScriptRuntime(Protocol):
    """The runtime: a tool catalogue for the prompt, and shells to run scripts in."""

    def prompt(self) -> str:
        """The tool catalogue as Python stubs."""
        ...

    def shell(self, name: str | None = None) -> ScriptShell:
        """The shell called `name` (the default shell without one)."""
        ...
