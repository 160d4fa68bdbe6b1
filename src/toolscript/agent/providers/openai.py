"""OpenAI Chat Completions, streamed, through the official `openai` SDK.

Any compatible server (vLLM, llama.cpp, Ollama) is reached through `base_url`.

Goal: know whether the stream ended with its terminal event. What fails: the SDK (3.57) stops
iterating quietly when the body ends without a `finish_reason` (it consumes `[DONE]` itself,
and a body may end without it), and wraps a connection that breaks mid-body as
`APIConnectionError`. What we do: call the reply complete only once a choice carried its
`finish_reason`, and treat a connection error while iterating as a broken stream.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import openai

from ..conversation import (
    ActionTool,
    AssistantMessage,
    Message,
    ModelReply,
    StreamProgress,
    ToolCall,
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

LOCAL_SERVER_KEY = "not-needed"
"""Sent as the key to a `base_url` server when no key is configured (local servers ignore it)."""


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def wire_messages(system: str, history: Sequence[Message]) -> list[dict[str, Any]]:
    """The system prompt and history as Chat Completions `messages`."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in history:
        if isinstance(message, UserText):
            messages.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": call.raw_arguments if call.arguments is not None else "{}",
                        },
                    }
                    for call in message.tool_calls
                ]
            messages.append(entry)
        else:
            messages.extend(
                {"role": "tool", "tool_call_id": result.call_id, "content": result.text}
                for result in message.results
            )
            shown = _images_message(message)
            if shown is not None:
                messages.append(shown)
            if message.notes:
                messages.append({"role": "user", "content": "\n\n".join(message.notes)})
    return messages


def _images_message(message: ToolResults) -> dict[str, Any] | None:
    """The images the step's scripts showed, as a user message (a tool message holds text
    only), each after a line naming its call; None when there are none."""
    parts: list[dict[str, Any]] = []
    for result in message.results:
        if not result.images:
            continue
        parts.append({"type": "text", "text": f"The images shown by tool call {result.call_id}:"})
        for image in result.images:
            data = base64.b64encode(image.data).decode("ascii")
            url = f"data:{image.mime_type};base64,{data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": parts} if parts else None


def wire_tools(tools: Sequence[ActionTool]) -> list[dict[str, Any]]:
    """The action tools as Chat Completions `tools`."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.input_schema,
            },
        }
        for tool in tools
    ]


class OpenAIProvider:
    """Streams Chat Completions requests for one model."""

    name = "openai"

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
        if api_key is None and base_url is not None and not os.environ.get("OPENAI_API_KEY"):
            api_key = LOCAL_SERVER_KEY
        self._client = openai.AsyncOpenAI(
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
        """Send one request and read its chunks to the end (see `Provider.stream`)."""
        chunks = await send(
            self._client.chat.completions.create(
                model=self.model,
                messages=cast(Any, wire_messages(system, history)),
                tools=cast(Any, wire_tools(tools)),
                stream=True,
            ),
            _request_error,
        )
        reply = ModelReply()
        text: list[str] = []
        calls: dict[int, _PartialCall] = {}

        def take(chunk: Any) -> None:
            for choice in chunk.choices[:1]:
                _take(choice, reply, text, calls, progress)

        try:
            await read_to_end(chunks, take, _stream_error, reply)
        finally:
            await chunks.close()
        reply.text = "".join(text)
        reply.tool_calls = [
            ToolCall.from_json(call.id or f"call_{index}", call.name, "".join(call.arguments))
            for index, call in sorted(calls.items())
        ]
        if not reply.complete and reply.broken is None:
            reply.broken = "the stream ended without a finish_reason"
        return reply


def _request_error(err: Exception) -> ModelError:
    return _stream_error(err) or could_not_send(err, openai.APIConnectionError)


def _stream_error(err: Exception) -> ModelError | None:
    """An API error (an HTTP status, or an error object in the stream), else `None`: the SDK
    wraps a connection that breaks while reading as `APIConnectionError`."""
    if isinstance(err, openai.APIStatusError):
        return status_error(
            err.message,
            err.status_code,
            _error_type(err.body),
            err.response.headers.get("retry-after"),
        )
    if isinstance(err, openai.APIError) and not isinstance(err, openai.APIConnectionError):
        return ModelError(
            f"the model API sent an error in the stream: {err.message}",
            retryable=_error_type(err.body) in {"server_error", "rate_limit_error"},
        )
    return None


def _error_type(body: object) -> str | None:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("type"), str):
            return cast(str, inner["type"])
    return None


def _take(
    choice: Any,
    reply: ModelReply,
    text: list[str],
    calls: dict[int, _PartialCall],
    progress: StreamProgress,
) -> None:
    delta = choice.delta
    if delta is not None:
        if delta.content:
            text.append(delta.content)
            progress.add_text(delta.content)
        for piece in delta.tool_calls or ():
            call = calls.setdefault(piece.index, _PartialCall())
            if piece.id:
                call.id = piece.id
            function = piece.function
            if function is not None:
                if function.name and not call.name:
                    call.name = function.name
                    progress.add_tool_call(function.name)
                if function.arguments:
                    call.arguments.append(function.arguments)
    if choice.finish_reason is not None:
        reply.model_stop = choice.finish_reason
        reply.complete = True
