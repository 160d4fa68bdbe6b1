"""The Anthropic Messages API, streamed, through the official `anthropic` SDK.

Goal: know whether the stream ended with its terminal event. What fails: the SDK (2.14)
simply stops iterating when the body ends without `message_stop`, and when the connection
breaks mid-body it passes the transport's own exception through (not an `anthropic` error).
What we do: read the raw events ourselves, call the reply complete only on `message_stop`, and
treat any non-API exception while iterating as a broken stream.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anthropic

from ..conversation import (
    ActionTool,
    AssistantMessage,
    Message,
    ModelReply,
    StreamProgress,
    ToolCall,
    ToolResult,
    ToolResults,
    UserText,
)
from . import (
    SDK_TIMEOUT_MARGIN,
    ModelError,
    could_not_send,
    read_to_end,
    send,
    status_error,
)


@dataclass(slots=True)
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)


def wire_messages(history: Sequence[Message]) -> list[dict[str, Any]]:
    """The history as Messages API `messages`."""
    messages: list[dict[str, Any]] = []
    for message in history:
        if isinstance(message, UserText):
            messages.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            content: list[dict[str, Any]] = []
            if message.text:
                content.append({"type": "text", "text": message.text})
            for call in message.tool_calls:
                content.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": call.arguments if call.arguments is not None else {},
                    }
                )
            if not content:
                content.append({"type": "text", "text": "(no reply)"})
            messages.append({"role": "assistant", "content": content})
        else:
            messages.append({"role": "user", "content": _results_content(message)})
    return messages


def _results_content(message: ToolResults) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [
        {
            "type": "tool_result",
            "tool_use_id": result.call_id,
            "content": _result_blocks(result) if result.images else result.text,
            "is_error": result.is_error,
        }
        for result in message.results
    ]
    content.extend({"type": "text", "text": note} for note in message.notes)
    return content


def _result_blocks(result: ToolResult) -> list[dict[str, Any]]:
    """A result's text, then the images its script showed, as a tool result's blocks."""
    return [
        {"type": "text", "text": result.text},
        *(
            {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": image.mime_type,
                    "data": base64.b64encode(image.data).decode("ascii"),
                },
            }
            for image in result.images
        ),
    ]


def wire_tools(tools: Sequence[ActionTool]) -> list[dict[str, Any]]:
    """The action tools as Messages API `tools`."""
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
        for tool in tools
    ]


class AnthropicProvider:
    """Streams Messages API requests for one model."""

    name = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        request_timeout: float,
        max_tokens: int,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=request_timeout + SDK_TIMEOUT_MARGIN,
        )

    async def stream(
        self,
        system: str,
        history: Sequence[Message],
        tools: Sequence[ActionTool],
        progress: StreamProgress,
    ) -> ModelReply:
        """Send one request and read its events to the end (see `Provider.stream`)."""
        events = await send(
            self._client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=system,
                messages=cast(Any, wire_messages(history)),
                tools=cast(Any, wire_tools(tools)),
                stream=True,
            ),
            _request_error,
        )
        reply = ModelReply()
        blocks: dict[int, _Block] = {}
        try:
            await read_to_end(
                events, lambda event: _take(event, reply, blocks, progress), _stream_error, reply
            )
        finally:
            await events.close()
        reply.text = "".join("".join(b.parts) for b in blocks.values() if b.kind == "text")
        reply.tool_calls = [
            ToolCall.from_json(b.id, b.name, "".join(b.parts))
            for b in blocks.values()
            if b.kind == "tool_use"
        ]
        if not reply.complete and reply.broken is None:
            reply.broken = "the stream ended without message_stop"
        return reply


def _request_error(err: Exception) -> ModelError:
    return _stream_error(err) or could_not_send(err, anthropic.APIConnectionError)


def _stream_error(err: Exception) -> ModelError | None:
    """An API error (an HTTP status, or an `error` event in the stream), else `None`: the SDK
    lets transport errors while reading the body through as they are."""
    if isinstance(err, anthropic.APIStatusError):
        return status_error(
            err.api_message or str(err),
            err.status_code,
            err.type,
            err.response.headers.get("retry-after"),
        )
    return None


def _take(
    event: Any, reply: ModelReply, blocks: dict[int, _Block], progress: StreamProgress
) -> None:
    kind = getattr(event, "type", None)
    if kind == "content_block_start":
        block = event.content_block
        if block.type == "text":
            blocks[event.index] = _Block("text")
            if block.text:
                blocks[event.index].parts.append(block.text)
                progress.add_text(block.text)
        elif block.type == "tool_use":
            blocks[event.index] = _Block("tool_use", id=block.id, name=block.name)
            progress.add_tool_call(block.name)
    elif kind == "content_block_delta":
        found = blocks.get(event.index)
        delta = event.delta
        if found is None:
            return
        if delta.type == "text_delta" and found.kind == "text":
            found.parts.append(delta.text)
            progress.add_text(delta.text)
        elif delta.type == "input_json_delta" and found.kind == "tool_use":
            found.parts.append(delta.partial_json)
    elif kind == "message_delta":
        reply.model_stop = event.delta.stop_reason
    elif kind == "message_stop":
        reply.complete = True
