"""One client session with an MCP server, through the official SDK, and the calls made on it.

Goal: keep a session open across calls made from many tasks, and notice when it ends.
What fails: the SDK's transports and `ClientSession` are anyio context managers whose task
groups must be entered and exited by the same task, so neither the opener of the first call
nor a handler the host may cancel can own them.
What we do: a dedicated task enters the transport and the session and waits until asked to
close; calls use the session from their own tasks (which the SDK supports). The session reads
the transport's messages through a watch that sets `gone` when the stream ends (the process
exited or the connection dropped), so the next call knows to start a new session.

As a client, toolscript declares no capabilities (no roots, no sampling, no elicitation), so a
server gets no more reach than its own configuration gives it (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import typing
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from importlib import metadata
from typing import Any, TextIO, cast

import anyio
import httpx2
import mcp.types as types
import pydantic
from mcp import ClientSession
from mcp.client._transport import TransportStreams
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage
from mcp_types.methods import SERVER_RESULTS

from .config import HTTPServerConfig, ServerConfig
from .stdio import MAX_LINE, stdio_streams
from .streams import MessageReader

__all__ = ["CLOSE_TIMEOUT", "Connection", "Transport", "transport"]

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT = 10.0
"""Seconds a server gets to close. A stdio server's shutdown (close stdin, wait 2 s, SIGTERM
to the process group, wait 2 s, SIGKILL) fits inside it; past it we stop waiting."""

_MAX_LIST_PAGES = 100

Transport = Callable[[], contextlib.AbstractAsyncContextManager[TransportStreams]]
"""Opens the streams of one session: a child process's stdio, or streamable HTTP."""


def transport(config: ServerConfig, errlog: Callable[[], TextIO]) -> Transport:
    """How to reach the server of `config`; a stdio server's stderr goes to `errlog()`."""
    if isinstance(config, HTTPServerConfig):
        return lambda: _http_transport(config)
    return lambda: stdio_streams(config, errlog())


class Connection:
    """One session with a server, owned by a task of its own (see the module's docstring).

    `await open()` starts it, `call_tool` and `list_tools` use it from any task, `gone` is set
    once it has ended for any reason, and `await close()` ends it within `CLOSE_TIMEOUT`.
    """

    def __init__(self, name: str, transport: Transport, on_notification: MessageHandlerFnT) -> None:
        self.name = name
        self.gone = asyncio.Event()
        self._transport = transport
        self._on_notification = on_notification
        self._session: ClientSession | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._stop = asyncio.Event()
        self._scope = anyio.CancelScope()
        self._task: asyncio.Task[None] | None = None

    @property
    def session(self) -> ClientSession:
        """The open session; only after `open()` returned."""
        assert self._session is not None, "the connection is not open"
        return self._session

    async def open(self) -> None:
        """Start the owning task and wait until the handshake is done (or raise its error)."""
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._own(self._ready), name=f"mcp:{self.name}")
        self._session = await asyncio.shield(self._ready)

    async def call_tool(
        self, tool: str, arguments: Mapping[str, Any], idempotency_key: str | None = None
    ) -> types.CallToolResult:
        """Call one tool, its idempotency key in the request's `_meta` when given; the SDK's
        `MCPError` and answer-parsing errors pass through."""
        if idempotency_key is None:
            return await self.session.call_tool(tool, dict(arguments))
        meta = cast(types.RequestParamsMeta, {"idempotencyKey": idempotency_key})
        return await self.session.call_tool(tool, dict(arguments), meta=meta)

    async def list_tools(self) -> tuple[types.Tool, ...]:
        """Every tool the server lists, following its pages (at most 100 of them)."""
        tools: list[types.Tool] = []
        names: set[str] = set()
        cursors: set[str] = set()
        cursor: str | None = None
        for _ in range(_MAX_LIST_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            page = await self.session.list_tools(params=params)
            for tool in page.tools:
                # A server that lists a tool twice, or serves one page again, has it once: the
                # first. (Each copy past the first would be reported as a tool not bound.)
                if tool.name not in names:
                    names.add(tool.name)
                    tools.append(tool)
            cursor = page.next_cursor
            if cursor is None or cursor in cursors:
                break
            cursors.add(cursor)
        return tuple(tools)

    async def close(self) -> None:
        """End the session and the transport; bounded by `CLOSE_TIMEOUT`."""
        self._stop.set()
        if self._ready is not None and not self._ready.done():
            self._scope.cancel()
        task = self._task
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
        if not done:
            logger.warning("MCP server %r did not close within %g s", self.name, CLOSE_TIMEOUT)
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        if self._ready is not None and self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved here, so asyncio does not log it as lost

    async def _own(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            with self._scope:
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._transport())
                    session = await stack.enter_async_context(
                        ClientSession(
                            _Watched(read, self.gone),
                            write,
                            message_handler=self._on_notification,
                            client_info=_client_info(),
                        )
                    )
                    await session.initialize()
                    ready.set_result(session)
                    await self._until_stopped_or_gone()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else _Cancelled())
            elif not isinstance(exc, Exception):
                raise
            else:
                logger.debug("MCP server %r: session ended with %r", self.name, exc)
        finally:
            self.gone.set()
            if not ready.done():
                ready.set_exception(_Cancelled())

    async def _until_stopped_or_gone(self) -> None:
        stop = asyncio.ensure_future(self._stop.wait())
        gone = asyncio.ensure_future(self.gone.wait())
        try:
            await asyncio.wait({stop, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            gone.cancel()


class _Watched(MessageReader):
    """The transport's read stream as the session reads it: `gone` is set when it ends.

    In the session's own reads, not in a task that forwards them: a task between the two
    would cost every answer another pass of the event loop. A stream closed or broken under
    the read ends like one that reached its end, as it did through the forwarding task.
    The transport owns the stream: closing this leaves it to the transport, as before.
    """

    def __init__(self, stream: ReadStream[SessionMessage | Exception], gone: asyncio.Event):
        self._stream = stream
        self._gone = gone

    async def receive(self) -> SessionMessage | Exception:
        try:
            message = await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._gone.set()
            raise anyio.EndOfStream from None
        if type(message) is SessionMessage:
            answer = message.message
            if type(answer) is types.JSONRPCResponse and type(answer.result.get("tools")) is list:
                _readable_tools(answer.result["tools"])
        return message


# Goal: one tool that the SDK cannot read costs that tool, not the server. What fails: the
# SDK validates a `tools/list` result as a whole, so one tool whose schema breaks its model
# (`"required": "a"`, say) fails the listing, and the server is reported as not started,
# every good tool with it. What we do: before the session reads a listing, each tool in it
# is validated on its own, and one that fails is replaced, if it has a name, by a tool of
# that name whose input schema takes any argument by name and whose description says why:
# it can still be called. (Only a `tools/list` result holds `tools`.)
def _readable_tools(tools: list[Any]) -> None:
    """Replace, in place, each tool of a listing that the SDK's model would refuse."""
    for index, item in enumerate(tools):
        try:
            for model in _tool_models():
                model.validate_python(item, by_name=False)
        except pydantic.ValidationError as problem:
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name:
                tools[index] = _unreadable_tool(name, item, problem)
            else:
                tools[index] = None  # left out below: a tool without a name cannot be called
    tools[:] = [item for item in tools if item is not None]


@functools.cache
def _tool_models() -> tuple[pydantic.TypeAdapter[Any], ...]:
    """The models the SDK reads a listed tool with, one per protocol version's listing."""
    listings = {model for (method, _), model in SERVER_RESULTS.items() if method == "tools/list"}
    found = []
    for listing in listings:
        fields = getattr(listing, "model_fields", {})
        tools = fields.get("tools")
        items = typing.get_args(tools.annotation) if tools is not None else ()
        if items:
            found.append(pydantic.TypeAdapter(items[0]))
    return tuple(found) or (pydantic.TypeAdapter(types.Tool),)


class _Cancelled(Exception):
    """The session's task ended before the handshake finished (it was cancelled)."""

    def __str__(self) -> str:
        return "the start-up was cancelled"


def _client_info() -> types.Implementation:
    try:
        version = metadata.version("toolscript")
    except metadata.PackageNotFoundError:
        version = "0"
    return types.Implementation(name="toolscript", version=version)


@asynccontextmanager
async def _http_transport(config: HTTPServerConfig) -> AsyncIterator[TransportStreams]:
    # The SDK takes headers, timeouts and auth only on a client passed in (no `headers=`).
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=config.headers, timeout=timeout) as client,
        # The SDK's own bound on one server-sent event is 1 MiB: an answer longer than that
        # would fail as if the server had gone. An HTTP server's answers get the stdio bound.
        streamable_http_client(
            config.url, http_client=client, max_sse_event_size=MAX_LINE
        ) as streams,
    ):
        yield streams


def _unreadable_tool(
    name: str, item: dict[str, Any], problem: pydantic.ValidationError
) -> dict[str, Any]:
    """A tool of a listing the SDK could not read, as one it can: callable, its arguments by
    name, its description saying why."""
    first = problem.errors()[0] if problem.errors() else {"loc": (), "msg": str(problem)}
    where = ".".join(str(part) for part in first.get("loc", ()))
    said = f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    description = item.get("description")
    text = description.strip() + "\n\n" if isinstance(description, str) else ""
    text += (
        f"(The server's listing of this tool could not be read ({said[:300]}), so its "
        "arguments are not described: pass them by name.)"
    )
    return {
        "name": name,
        "description": text,
        "inputSchema": {"type": "object", "additionalProperties": True},
    }
