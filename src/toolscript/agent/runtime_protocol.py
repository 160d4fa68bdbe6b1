"""The part of `toolscript.Runtime` the agent uses, as a Protocol.

The agent depends on nothing of the runtime beyond these names (docs/api/runtime.md), so a test can
drive the loop with a stand-in, and the real `Runtime` satisfies this structurally. The shell,
script and result protocols are those of `toolscript.actions`, which runs the model's actions.
"""

from __future__ import annotations

from typing import Protocol

from ..actions import BackgroundScript, BackgroundShell, CallCounts, ScriptOutcome, ScriptShell

__all__ = [
    "BackgroundScript",
    "BackgroundShell",
    "CallCounts",
    "ScriptOutcome",
    "ScriptRuntime",
    "ScriptShell",
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
