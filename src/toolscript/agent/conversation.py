"""The conversation of a turn, independent of any provider's wire format.

The loop keeps the history as these messages; each provider turns them into its own request
shape, and turns its stream back into a `ModelReply`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from ..actions import ShownImage


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model made.

    `arguments` is the parsed input, or `None` when `raw_arguments` was not a JSON object.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str

    @classmethod
    def from_json(cls, id: str, name: str, raw_arguments: str) -> ToolCall:
        """A call whose input arrived as JSON text (empty text means no arguments)."""
        raw = raw_arguments or "{}"
        try:
            # NaN and Infinity are Python's, not JSON's: the next request could not carry
            # them back, nor could the transcript's JSON.
            parsed = json.loads(raw, parse_constant=_not_json)
        except ValueError:
            parsed = None
        arguments = cast("dict[str, Any]", parsed) if isinstance(parsed, dict) else None
        return cls(id=id, name=name, arguments=arguments, raw_arguments=raw)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for the transcript."""
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "raw_arguments": self.raw_arguments,
        }


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@dataclass(frozen=True, slots=True)
class UserText:
    """A message from the user's side: the task, or a word from the loop itself."""

    text: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for the transcript."""
        return {"role": "user", "text": self.text}


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """What the model said in one step: its text and its tool calls."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for the transcript."""
        return {
            "role": "assistant",
            "text": self.text,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
        }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The answer to one tool call, as the model will read it, with the images its script
    showed (each with `mime_type` and `data`), for a model that takes images."""

    call_id: str
    name: str
    text: str
    is_error: bool = False
    images: tuple[ShownImage, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for the transcript."""
        return {
            "call_id": self.call_id,
            "name": self.name,
            "text": self.text,
            "is_error": self.is_error,
            "images": [{"mime_type": i.mime_type, "size": len(i.data)} for i in self.images],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        """The result `to_dict` gave (without its images' bytes, which it does not keep)."""
        return cls(data["call_id"], data["name"], data["text"], bool(data["is_error"]))


@dataclass(frozen=True, slots=True)
class ToolResults:
    """The answers to one step's tool calls, and notes from the loop sent along with them
    (a background script that ended, a word about the step)."""

    results: tuple[ToolResult, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for the transcript."""
        return {
            "role": "tool_results",
            "results": [result.to_dict() for result in self.results],
            "notes": list(self.notes),
        }


Message = UserText | AssistantMessage | ToolResults


def message_from_dict(data: dict[str, Any]) -> Message:
    """The message whose `to_dict()` gave `data` (as a journaled turn keeps its history)."""
    role = data["role"]
    if role == "user":
        return UserText(data["text"])
    if role == "assistant":
        calls = tuple(
            ToolCall(call["id"], call["name"], call["arguments"], call["raw_arguments"])
            for call in data["tool_calls"]
        )
        return AssistantMessage(data["text"], calls)
    if role == "tool_results":
        results = tuple(ToolResult.from_dict(result) for result in data["results"])
        return ToolResults(results, tuple(data["notes"]))
    raise ValueError(f"not a message of the conversation: role {role!r}")


@dataclass(frozen=True, slots=True)
class ActionTool:
    """A tool the model can call: its name, description and JSON Schema input."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(slots=True)
class ModelReply:
    """What a provider made of one streamed response.

    `complete` is true only when the stream carried its terminal event (`message_stop`, a
    `finish_reason`); a reply that is not complete must not have its tool calls run.
    `model_stop` is the provider's own stop reason (`end_turn`, `tool_use`, `max_tokens`,
    `stop`, `tool_calls`, `length`, ...). `broken` says how the stream ended early, if it did.
    """

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    model_stop: str | None = None
    complete: bool = False
    broken: str | None = None


@dataclass(slots=True)
class StreamProgress:
    """What has streamed so far in one request, written by the provider as it reads.

    The loop reads it to decide whether a failed request may be retried (only before any
    content streamed) and to record what a cut-off stream had said. `listener(kind, detail)`
    hears each piece as it arrives: `("text", piece)` or `("tool_call", name)`.
    """

    listener: Callable[[str, str], None] | None = None
    content_started: bool = False
    text: list[str] = field(default_factory=list)
    tool_names: list[str] = field(default_factory=list)

    def add_text(self, piece: str) -> None:
        """Record a piece of the model's text."""
        self.content_started = True
        self.text.append(piece)
        if self.listener is not None:
            self.listener("text", piece)

    def add_tool_call(self, name: str) -> None:
        """Record the start of a tool call."""
        self.content_started = True
        self.tool_names.append(name)
        if self.listener is not None:
            self.listener("tool_call", name)
