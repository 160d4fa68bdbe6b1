"""What a tool is, independent of where it comes from.

A `ToolSpec` is the one description of a tool that every other part reads: the binding plan
that the kernel builds a function from, the stub in `Runtime.prompt()`, the validation of a
call's arguments, and the dispatch to its handler. Sources (Python callables, MCP servers)
produce specs; nothing downstream knows which source a spec came from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import asyncio


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

    def __post_init__(self) -> None:
        if self.title is not None and not isinstance(self.title, str):
            raise ValueError(f"ToolAnnotations: title must be a string or None, not {self.title!r}")
        for knob in ("read_only", "destructive", "idempotent", "open_world"):
            flag = getattr(self, knob)
            if flag is not None and not isinstance(flag, bool):
                raise ValueError(
                    f"ToolAnnotations: {knob} must be True, False or None, not {flag!r}"
                )


class ToolOutcome(NamedTuple):
    """A tool's answer, as the host passes it to the kernel.

    `value` is JSON-safe data. Content blocks that are not plain text (images, audio,
    resources) are dicts carrying the key `"$toolscript"` with the block's kind; the kernel
    turns them into small objects. `is_error` marks an error result (MCP `isError`), in which
    case `value` is the message text.
    """

    value: Any
    is_error: bool = False


class DataOutcome(ToolOutcome):
    """A `ToolOutcome` whose value is data exactly as the tool gave it (a Python tool's
    return value, an MCP tool's structured content): a dict in it that carries the key
    `"$toolscript"` is data too, not a content block the kernel makes an object of. Equal to
    the `ToolOutcome` of the same fields."""

    __slots__ = ()


def marks_content(value: Any) -> bool:
    """Whether the kernel would take part of `value` for a content block: a dict carrying
    `"$toolscript"`, alone or as an item of a list (the only places it looks)."""
    if type(value) is dict:
        return "$toolscript" in value
    if type(value) is list:
        return any(type(item) is dict and "$toolscript" in item for item in value)
    return False


Handler = Callable[[dict[str, Any]], Awaitable[ToolOutcome]]


@dataclass(frozen=True, slots=True)
class CallContext:
    """What the host knows of the call a handler is answering.

    A Python tool gets it by declaring a parameter of this type (`context: CallContext`),
    which is not part of its arguments. `idempotency_key` (the script's id and the call's
    number) is the same when the host dispatches a call again after a restart, which it does
    only for a tool that declares a repeat safe: a tool that deduplicates by it makes the
    repeat harmless. MCP servers get it in the request's `_meta` as `idempotencyKey`.
    """

    idempotency_key: str
    call_id: str
    script_id: str | None = None
    repeated: bool = False
    """The host dispatched this call before it restarted: it may have taken effect."""


CallIdentity = tuple[str, "str | None", bool]
"""A call as the dispatcher names it for its handler: its id, its script's id, and whether it
is a repeat after a restart (a tuple: made for every call, turned into a `CallContext` only
for the handlers that ask)."""

current_call: ContextVar[CallIdentity | None] = ContextVar("toolscript_call", default=None)
"""The call the handler running in this context answers (set by the host's dispatcher)."""

left_running: ContextVar[asyncio.Future[ToolOutcome] | None] = ContextVar(
    "toolscript_left_running", default=None
)
"""Set by a handler that was cancelled (at its timeout) while work it cannot stop ran on,
such as a synchronous tool's thread: that work's outcome, to come. The host journals it as
the call's late answer, since the call's effect is then no longer in doubt."""


def call_context() -> CallContext | None:
    """The `CallContext` of the call the running handler answers, or None outside one."""
    identity = current_call.get()
    if identity is None:
        return None
    call_id, script_id, repeated = identity
    number = call_id.rpartition(".")[2]
    key = f"{script_id}.{number}" if script_id is not None else call_id
    return CallContext(key, call_id, script_id, repeated)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: its identity, its contract, and how to call it.

    `name` is the tool's own name as its source knows it (an MCP tool name may be
    `get-sum`); `server` is the MCP server's name from the config, or `None` for tools
    defined in Python. `key` identifies the tool on the wire and in the journal.
    `timeout` is the host's bound on one call of the handler in seconds (`None`: the
    runtime's default `tool_timeout`).

    `handler` is an async function of the call's arguments (a dict, already checked against
    `input_schema`) that returns a `ToolOutcome`: `ToolOutcome(value)` for an answer (JSON-safe
    data), `ToolOutcome(message, is_error=True)` for the tool's own error, which the script
    gets as a `ToolError`:

        async def add(arguments: dict[str, Any]) -> ToolOutcome:
            return ToolOutcome(arguments["a"] + arguments["b"])

        ToolSpec("add", "Add two numbers.", schema, add)

    `Runtime(tools=[...])` refuses a spec no call could reach: an empty name, a handler that
    cannot be called, an input schema that is not of an object, a timeout that is not a
    positive number of seconds.
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
        """How the catalogue and the journal name it: `name`, or `server/name` for a tool
        of an MCP server."""
        return self.name if self.server is None else f"{self.server}/{self.name}"

    @property
    def repeat_is_safe(self) -> bool:
        """Whether the tool says a second call with the same arguments does no more harm than
        one (`idempotent`, or `read_only`): then a call in doubt after a restart is made again."""
        hints = self.annotations
        return hints.idempotent is True or hints.read_only is True


NEVER_RAN = "it never ran: "
"""How the late answer of a call that was given up before it began starts (a synchronous
tool's call that waited for a thread past its timeout): its effect will never come."""
