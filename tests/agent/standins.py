"""Stand-in model servers for the agent's tests.

`StandIn` listens on 127.0.0.1 (a port the OS picks) and answers each request with the next
`Reply` a test queued, written in the real streaming wire format of one provider: Anthropic
Messages events, or OpenAI Chat Completions chunks, as server-sent events over HTTP/1.1 with
chunked transfer encoding. The official SDKs reach it through `base_url`.

A reply can be cut before its terminal event (`cut="abrupt"` drops the connection mid-body,
`cut="clean"` ends the body properly but without the terminal event), can hold after its first
content chunk until an event is set (`hold`), or can be an HTTP error. The stand-in counts
requests and signals, with asyncio events, when it got a request and when it sent a reply's
first content chunk, so tests coordinate without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Provider = Literal["anthropic", "openai"]


@dataclass
class Reply:
    """One scripted response.

    `text` and `calls` (pairs of tool name and input) make the message; `stop` overrides the
    provider's stop reason (default: a tool stop when there are calls, else the end of turn).
    `cut` ends the stream before its terminal event; `hold` is awaited after the first content
    chunk is sent; `status` other than 200 answers with that HTTP error instead (`retry_after`
    sets the header); `error_type` sends an in-stream error event after the first chunk.
    `garbled` sends an event whose data is not JSON after the first content chunk. `ids`
    gives the calls' ids (default: one of each's own); `late_calls` are streamed after
    the terminal event (Anthropic) or the finish chunk (OpenAI), as a broken server would.
    """

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    stop: str | None = None
    cut: Literal["abrupt", "clean"] | None = None
    hold: asyncio.Event | None = None
    status: int = 200
    retry_after: str | None = None
    error_type: str | None = None
    garbled: bool = False
    ids: list[str] | None = None
    late_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


ReplySource = Reply | Callable[[dict[str, Any]], Reply | Awaitable[Reply]]


class StandIn:
    """A scripted model server for one provider; use as `async with StandIn("openai") as s:`."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.requests: list[dict[str, Any]] = []
        self.replies: list[ReplySource] = []
        self.first_content_sent = asyncio.Event()
        self.reply_finished = asyncio.Event()
        self.got_request = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._holds: list[asyncio.Event] = []
        self.failures: list[BaseException] = []

    @property
    def base_url(self) -> str:
        """The URL to give the SDK."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        suffix = "/v1" if self.provider == "openai" else ""
        return f"http://127.0.0.1:{port}{suffix}"

    @property
    def model(self) -> str:
        """The `Agent` model string for this stand-in."""
        return f"{self.provider}:stand-in-model"

    def queue(self, *replies: ReplySource) -> None:
        """Add replies for the next requests, in order. A reply may be a function of the
        request's body; an exception it raises is answered with HTTP 400 and raised again
        when the stand-in closes, so the test fails with it."""
        for reply in replies:
            if isinstance(reply, Reply) and reply.hold is not None:
                self._holds.append(reply.hold)
        self.replies.extend(replies)

    async def __aenter__(self) -> StandIn:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for hold in self._holds:
            hold.set()
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        if self.failures:
            raise self.failures[0]

    # -- serving -------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        body = json.loads(await reader.readexactly(length))
        self.requests.append(body)
        self.got_request.set()
        if not self.replies:
            await _http_error(writer, 500, "the stand-in has no reply queued for this request")
            return
        source = self.replies.pop(0)
        try:
            reply = source if isinstance(source, Reply) else source(body)
            if not isinstance(reply, Reply):
                reply = await reply
        except Exception as failure:
            self.failures.append(failure)
            await _http_error(writer, 400, f"the test's reply failed: {failure!r}")
            return
        if reply.status != 200:
            await _http_error(writer, reply.status, "scripted error", reply.retry_after)
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        content, first, terminal = (
            _anthropic_events(reply) if self.provider == "anthropic" else _openai_events(reply)
        )
        for index, event in enumerate(content):
            _chunk(writer, event)
            await writer.drain()
            if index == first:
                self.first_content_sent.set()
                if reply.garbled:
                    head = "event: content_block_delta\n" if self.provider == "anthropic" else ""
                    _chunk(writer, f"{head}data: {{not json\n\n")
                if reply.error_type is not None:
                    _chunk(writer, self._error_event(reply.error_type))
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return
                if reply.hold is not None:
                    await reply.hold.wait()
        if reply.cut == "abrupt":
            writer.transport.abort()
            return
        if reply.cut is None:
            for event in terminal:
                _chunk(writer, event)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.reply_finished.set()

    def _error_event(self, error_type: str) -> str:
        if self.provider == "anthropic":
            return _sse(
                "error", {"type": "error", "error": {"type": error_type, "message": "scripted"}}
            )
        return _sse(None, {"error": {"type": error_type, "message": "scripted"}})


def _chunk(writer: asyncio.StreamWriter, text: str) -> None:
    data = text.encode()
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def _sse(event: str | None, data: Any) -> str:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n"


async def _http_error(
    writer: asyncio.StreamWriter, status: int, message: str, retry_after: str | None = None
) -> None:
    body = json.dumps(
        {"type": "error", "error": {"type": "api_error", "message": message}}
    ).encode()
    extra = f"retry-after: {retry_after}\r\n" if retry_after is not None else ""
    writer.write(
        f"HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{extra}connection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def _anthropic_events(reply: Reply) -> tuple[list[str], int, list[str]]:
    """The events of a Messages stream before its terminal ones, the index of the first that
    carries content, and the terminal events."""
    events = [
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_standin",
                    "type": "message",
                    "role": "assistant",
                    "model": "stand-in-model",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        ),
        _sse("ping", {"type": "ping"}),
    ]
    index = 0
    if reply.text or not reply.calls:
        events.append(
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        events.extend(
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                },
            )
            for piece in _halves(reply.text or "Done.")
        )
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for number, (name, arguments) in enumerate(reply.calls):
        call_id = reply.ids[number] if reply.ids else f"toolu_{number}_{name}"
        events.extend(_anthropic_call(index, call_id, name, arguments))
        index += 1
    stop = reply.stop or ("tool_use" if reply.calls else "end_turn")
    terminal = [
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]
    for number, (name, arguments) in enumerate(reply.late_calls):
        terminal.extend(_anthropic_call(index + number, f"toolu_late_{number}", name, arguments))
    first = 3 if reply.text or not reply.calls else 2
    return events, first, terminal


def _anthropic_call(index: int, call_id: str, name: str, arguments: dict[str, Any]) -> list[str]:
    return [
        _sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            },
        ),
        *(
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
            )
            for piece in _halves(json.dumps(arguments))
        ),
        _sse("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _openai_chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return _sse(
        None,
        {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "stand-in-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        },
    )


def _openai_events(reply: Reply) -> tuple[list[str], int, list[str]]:
    """The chunks of a completion stream before its terminal ones, the index of the first
    that carries content, and the terminal chunks."""
    events = [_openai_chunk({"role": "assistant", "content": ""})]
    text = reply.text or ("" if reply.calls else "Done.")
    events.extend(_openai_chunk({"content": piece}) for piece in _halves(text))
    for number, (name, arguments) in enumerate(reply.calls):
        call_id = reply.ids[number] if reply.ids else f"call_{number}_{name}"
        events.extend(_openai_call(number, call_id, name, arguments))
    stop = reply.stop or ("tool_calls" if reply.calls else "stop")
    terminal = [_openai_chunk({}, stop)]
    for number, (name, arguments) in enumerate(reply.late_calls, len(reply.calls)):
        terminal.extend(_openai_call(number, f"call_late_{number}", name, arguments))
    terminal.append("data: [DONE]\n\n")
    return events, 1, terminal


def _openai_call(number: int, call_id: str, name: str, arguments: dict[str, Any]) -> list[str]:
    return [
        _openai_chunk(
            {
                "tool_calls": [
                    {
                        "index": number,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        ),
        *(
            _openai_chunk({"tool_calls": [{"index": number, "function": {"arguments": piece}}]})
            for piece in _halves(json.dumps(arguments))
        ),
    ]
