"""The MCP event store of one client session, kept in the journal: resumable streams.

Every message the server sends on a session's streams (a request's progress and answer, the
standalone stream's notifications) is stored before it is sent, under an event id the client
sees. A client that reconnects with `Last-Event-ID` gets the events of that stream that
follow, even from a server that was killed and started again on the same state directory.

One store per session: request ids repeat from one session to the next, so a stream is named
by its session and its request id, and a client is never replayed another session's events.

Goal: a resumed stream ends, as every request gets one answer. What fails: a request that
was running when the server died has no stored answer, and the SDK, having replayed what
there is, keeps the stream open for an answer that will never come. What we do: when the
stream holds no answer and no event of it was stored by this server, its server is gone, so
the replay ends it with an error saying so, which is stored too.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio.to_thread
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp_types import (
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)

from ..runtime import Runtime

__all__ = ["RESTARTED_MID_REQUEST", "SessionEvents"]

RESTARTED_MID_REQUEST = (
    "toolscript serve restarted while this request ran, so it has no answer. A script it "
    "ran was stopped with its interpreter; tool calls the script made may have taken "
    "effect: `toolscript calls --uncertain` lists those whose effect is unknown."
)
"""The error that ends a resumed stream whose server died before answering."""

_log = logging.getLogger(__name__)


class SessionEvents(EventStore):
    """The events of one session's streams, stored in the runtime's journal."""

    def __init__(self, runtime: Runtime, session_id: str) -> None:
        self.runtime = runtime
        self.session_id = session_id

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Store an event (committed before it is sent) and give its id.

        An event that cannot be stored (the journal's disk is full, say) is sent all the
        same, without an id: the client gets it, but cannot resume after it.
        """
        text = (
            None if message is None else message.model_dump_json(by_alias=True, exclude_unset=True)
        )
        is_answer = isinstance(message, JSONRPCResponse | JSONRPCError)
        try:
            journal = self.runtime.journal
            event_id = await anyio.to_thread.run_sync(
                journal.store_event, self.session_id, stream_id, text, is_answer
            )
        except Exception as error:
            _log.warning("toolscript serve: a stream event was not stored: %s", error)
            return ""
        return str(event_id)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send the events of the stream of `last_event_id` that follow it; its stream id.

        `None` for an id this session's streams do not hold (unknown, pruned, or another
        session's): nothing is sent.
        """
        if not last_event_id.isdigit():
            return None
        journal = self.runtime.journal
        found = await anyio.to_thread.run_sync(
            journal.events_after, self.session_id, int(last_event_id)
        )
        if found is None:
            return None
        for event in found.events:
            if event.message is not None:
                message = jsonrpc_message_adapter.validate_json(event.message, by_name=False)
                await send_callback(EventMessage(message, str(event.event_id)))
        if not found.answered and not found.by_this_host and found.stream != GET_STREAM_KEY:
            taken_back = await self._taken_back_result()
            ended: JSONRPCMessage
            if taken_back is not None:
                # Kept through the restart (`--keep-interpreters`): the script went on, and
                # its own result answers the request.
                ended = JSONRPCResponse(
                    jsonrpc="2.0", id=_request_id(found.stream), result=taken_back
                )
            else:
                ended = JSONRPCError(
                    jsonrpc="2.0",
                    id=_request_id(found.stream),
                    error=ErrorData(code=INTERNAL_ERROR, message=RESTARTED_MID_REQUEST),
                )
            await send_callback(EventMessage(ended, await self.store_event(found.stream, ended)))
        return found.stream

    async def _taken_back_result(self) -> dict[str, Any] | None:
        """The result, as `run_python` answers, of the script this session's shell was
        running when the server before this one died, if the runtime took it back from its
        keeper (once it ends); `None` if it took none back."""
        journal = self.runtime.journal
        kept = await anyio.to_thread.run_sync(journal.serve_session, self.session_id)
        if kept is None:
            return None
        outcome = await self.runtime.shell(kept.shell).recovered()
        if outcome is None:
            return None
        from ..actions import Answer
        from .server import _content

        content = _content(Answer.of(outcome))
        result: dict[str, Any] = content.model_dump(by_alias=True, exclude_none=True)
        return result


def _request_id(stream_id: str) -> str | int:
    # The SDK names a request's stream `str(request.id)`; the official clients number their
    # requests, and map a resumed answer to the request they resume whatever its id.
    return int(stream_id) if stream_id.isdigit() else stream_id
