"""What a tool is, independent of where it comes from.

A `ToolSpec` is the one description of a tool that every other part reads: the binding plan
that the kernel builds a function from, the stub in `Runtime.prompt()`, the validation of a
call's arguments, and the dispatch to its handler. Sources (Python callables, MCP servers)
produce specs; nothing downstream knows which source a spec came from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


class ToolFailure(Exception):
    """Raised by a handler when the tool itself reports an error.

    The message is what the script's `ToolError` will say. Handlers may also return a
    `ToolOutcome` with `is_error=True`; both mean the same thing.
    """


class SourceGone(Exception):
    """Raised by a handler when the thing behind the tool died while the call was in flight.

    The call was sent, so its effect is unknown: the host reports it `pending` with cause
    `source_gone`, never as an answer.
    """


@dataclass(frozen=True, slots=True)
class ToolAnnotations:
    """MCP-style hints about a tool's behaviour. `None` means the tool did not say."""

    title: str | None = None
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's answer, as the host passes it to the kernel.

    `value` is JSON-safe data. Content blocks that are not plain text (images, audio,
    resources) are dicts carrying the key `"$toolscript"` with the block's kind; the kernel
    turns them into small objects. `is_error` marks an error result (MCP `isError`), in which
    case `value` is the message text.
    """

    value: Any
    is_error: bool = False


Handler = Callable[[dict[str, Any]], Awaitable[ToolOutcome]]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: its identity, its contract, and how to call it.

    `name` is the tool's own name as its source knows it (an MCP tool name may be
    `get-sum`); `server` is the MCP server's name from the config, or `None` for tools
    defined in Python. `key` identifies the tool on the wire and in the journal.
    `timeout` is the host's bound on one call of the handler in seconds (`None`: the
    runtime's default `tool_timeout`).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    server: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: ToolAnnotations = field(default_factory=ToolAnnotations)
    timeout: float | None = None

    @property
    def key(self) -> str:
        return self.name if self.server is None else f"{self.server}/{self.name}"
