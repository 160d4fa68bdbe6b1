"""Streamable HTTP sessions that outlive the server process: a restarted server takes back
the sessions its clients had, with their streams' events.

Goal: a client whose server was killed and started again on the same state directory goes
on with its session: the same `Mcp-Session-Id`, the same shell, its streams resumable.
What fails: the SDK's session manager knows only the sessions it opened itself, and answers
any other id with 404, which makes the client start over (a new session, a new shell, its
background scripts out of reach). Nor does it give a session an event store of its own: one
store serves every session, though request ids (which name the streams) repeat from one
session to the next.
What we do: `RevivingSessions` is the SDK's manager, with two changes. Each session's
transport gets `SessionEvents`, its own streams in the journal. And a request naming a
session that the journal keeps but that this process has not opened brings the session
back: a transport with that id, and a connection that already holds the client's
`initialize` parameters and protocol version, as the handshake left them, so the client
need not repeat it. The server keeps a session in the journal at its first tool call
(`ToolscriptServer` does) and forgets it when the client ends it.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

import anyio
from anyio.abc import TaskStatus
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    AuthorizationContext,
    authorization_context,
)
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import InitializeRequestParams
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from ..runtime import Runtime
from .events import SessionEvents

__all__ = ["RevivingSessions"]

_log = logging.getLogger(__name__)


class RevivingSessions(StreamableHTTPSessionManager):
    """The SDK's streamable HTTP session manager, with sessions and their events kept in the
    runtime's journal (see the module). `options` are the SDK manager's."""

    def __init__(self, app: Server[Any], runtime: Runtime, **options: Any) -> None:
        super().__init__(app, **options)
        self.runtime = runtime

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)
        if session_id is not None and session_id not in self._server_instances:
            user = scope.get("user")
            owner = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
            async with self._session_creation_lock:
                if session_id not in self._server_instances:
                    await self._revive(session_id, owner)
        await super()._handle_stateful_request(scope, receive, send)

    def _admit_session(
        self, requestor: AuthorizationContext | None, session_id: str | None = None
    ) -> StreamableHTTPServerTransport | None:
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        session_id = session_id or uuid4().hex
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session_id,
            is_json_response_enabled=self.json_response,
            event_store=SessionEvents(self.runtime, session_id),
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        if requestor is not None:
            self._session_owners[session_id] = requestor
        self._server_instances[session_id] = transport
        return transport

    async def _revive(self, session_id: str, owner: AuthorizationContext | None) -> None:
        """Take back `session_id` if the journal keeps it; otherwise leave it unknown (404)."""
        journal = self.runtime.journal
        kept = await anyio.to_thread.run_sync(journal.serve_session, session_id)
        if kept is None or self._task_group is None:
            return
        try:
            client = InitializeRequestParams.model_validate_json(kept.client, by_name=False)
        except ValueError:
            _log.warning("toolscript serve: session %s cannot be taken back", session_id[:64])
            return
        transport = self._admit_session(owner, session_id)
        if transport is None:
            return

        async def run(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            async with transport.connect() as (read, write):
                task_status.started()
                try:
                    idle = transport.idle_scope or anyio.CancelScope()
                    with idle:
                        dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
                            read, write, inline_methods=frozenset({"initialize"})
                        )
                        connection = Connection.for_loop(dispatcher, session_id=session_id)
                        connection.client_params = client
                        connection.protocol_version = kept.protocol_version
                        connection.initialized.set()
                        await serve_connection(
                            self.app,
                            dispatcher,
                            connection=connection,
                            lifespan_state=self._lifespan_state,
                        )
                except Exception:
                    _log.exception("toolscript serve: session %s crashed", session_id[:64])
                finally:
                    await self._discard_session(session_id, transport)

        await self._task_group.start(run)
        _log.info("toolscript serve: took back session %s", session_id[:64])
