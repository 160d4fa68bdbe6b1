"""MCP servers as a source of tools, through the official SDK's client.

`MCPTools.open(config, log_dir)` connects to every configured server at once and lists their
tools; `.specs()` gives one `ToolSpec` per upstream tool, whose handler calls it over a session
that stays open between calls. A server that cannot start is named in `.failures` and the
others still work. A stdio server's stderr goes to `log_dir/<server>.log`, never to the host.

How a call can end, as the host sees it:

- an answer: a `ToolOutcome` (an `isError` result, which is how servers report unknown tools,
  invalid arguments and denials, is an outcome with `is_error=True`, not an exception);
- the server went away while the call was in flight: `SourceGone` (the call was sent, so its
  effect is unknown); the server is started again for the next call, a bounded number of times;
- the host cancels the handler (its timeout): the SDK sends `notifications/cancelled` to the
  server for that request and the session stays usable.

As a client, toolscript declares no capabilities (no roots, no sampling, no elicitation), so
a server gets no more reach than its own configuration gives it (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import anyio
import httpx2
import mcp.types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client._transport import TransportStreams
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED
from pydantic import ValidationError

from .mcp_config import HTTPServerConfig, MCPConfig, ServerConfig, load_mcp_config
from .spec import Handler, SourceGone, ToolAnnotations, ToolFailure, ToolOutcome, ToolSpec

__all__ = ["MCPServer", "MCPTools", "tool_outcome"]

logger = logging.getLogger(__name__)

DEFAULT_STARTUP_TIMEOUT = 30.0
"""Seconds a server gets to start and answer the handshake and the first tool listing."""

CLOSE_TIMEOUT = 10.0
"""Seconds a server gets to close. The SDK's own stdio shutdown (close stdin, wait 2 s, SIGTERM
to the process group, wait 2 s, SIGKILL) fits inside it; past it we stop waiting."""

MAX_RESTARTS = 3
RESTART_WINDOW = 60.0
"""A server that had to be started again (it went away, or a restart failed) more than
`MAX_RESTARTS` times in `RESTART_WINDOW` seconds is not started again while this `MCPServer`
lives; its calls fail with a `ToolFailure` saying so."""

_MAX_LIST_PAGES = 100


def _client_info() -> types.Implementation:
    try:
        version = metadata.version("toolscript")
    except metadata.PackageNotFoundError:
        version = "0"
    return types.Implementation(name="toolscript", version=version)


class MCPServer:
    """One configured MCP server: its connection, its current tools, and its log.

    Start it with `await start()` (which never raises: a failure is kept in `.failure`), call
    its tools with `await call(name, arguments)` or through `specs()`, and `await aclose()`.
    `on_change(server_name)` is called after its tool list changed (the server announced
    `notifications/tools/list_changed`, or it came back with different tools after a restart).
    """

    def __init__(
        self,
        config: ServerConfig,
        log_path: Path,
        *,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        max_restarts: int = MAX_RESTARTS,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.max_restarts = max_restarts
        self.on_change = on_change
        self.failure: str | None = None
        self._tools: tuple[types.Tool, ...] = ()
        self._listed = False
        self._listing = asyncio.Lock()
        self._connection: _Connection | None = None
        self._connecting = asyncio.Lock()
        self._restarts: deque[float] = deque()
        self._given_up: str | None = None
        self._log: TextIO | None = None
        self._restart: asyncio.Task[_Connection] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False

    @property
    def name(self) -> str:
        """The server's name in the config, which is also `ToolSpec.server` of its tools."""
        return self.config.name

    @property
    def tools(self) -> tuple[types.Tool, ...]:
        """The server's tools as it last listed them."""
        return self._tools

    async def start(self) -> str | None:
        """Connect and list the tools. Returns `None`, or the reason it failed (also `.failure`)."""
        try:
            async with self._connecting:
                self._connection = await self._connect()
        except ToolFailure as exc:
            self.failure = str(exc)
            self._write_log(f"start-up failed: {self.failure}")
        return self.failure

    def specs(self) -> list[ToolSpec]:
        """One `ToolSpec` per tool the server listed: names unchanged, schemas and hints copied."""
        return [self._spec(tool) for tool in self._tools]

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Call one of the server's tools and return its answer.

        Raises `SourceGone` when the server went away with the call in flight, and
        `ToolFailure` when the call could not be sent (the server is closed, will not start
        again, or keeps dying).
        """
        connection = await self._connected()
        try:
            result = await connection.session.call_tool(tool, dict(arguments))
        except MCPError as exc:
            if connection.gone.is_set() or _answer_was_lost(exc):
                connection.gone.set()
                self._write_log(f"went away during a call of {tool!r}")
                after = (
                    "toolscript was closing it."
                    if self._closed
                    else "The next call opens a new session (a local server is started again)."
                )
                raise SourceGone(
                    f"MCP server {self.name!r} went away while the call of {tool!r} was in "
                    f"flight, so whether it took effect is unknown. {after} "
                    f"Its log is {str(self.log_path)!r}."
                ) from exc
            return ToolOutcome(value=f"MCP error {exc.code}: {exc.message}", is_error=True)
        except (RuntimeError, ValidationError) as exc:
            return ToolOutcome(
                value=f"MCP server {self.name!r} gave an answer to {tool!r} that toolscript "
                f"cannot use: {exc}",
                is_error=True,
            )
        return tool_outcome(result)

    async def aclose(self) -> None:
        """Close the session and stop the server, within `CLOSE_TIMEOUT` seconds."""
        self._closed = True
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(self._background, timeout=CLOSE_TIMEOUT)
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
            self._write_log("closed")
        if self._log is not None:
            self._log.close()
            self._log = None

    # --- connecting and restarting ------------------------------------------------------------

    # Goal: a server that went away comes back for the next call, however slowly it starts.
    # What fails: restarting inside the call that found it gone ties the restart to that call;
    # when the call's tool timeout passes first, the restart is cancelled with it, the next
    # call starts another, and a server that starts slower than the tool timeout is restarted
    # by every call until it counts as "keeps dying", though it never died again.
    # What we do: the restart runs in a task of the server's own, bounded by `startup_timeout`;
    # the calls that need it share it and wait for it shielded, so giving up on a call never
    # stops the restart. Only closing the server does.
    async def _connected(self) -> _Connection:
        connection = self._connection
        if connection is not None and not connection.gone.is_set():
            return connection
        restart = self._restart
        if restart is None or restart.done():
            restart = asyncio.get_running_loop().create_task(
                self._reconnect(), name=f"mcp-restart:{self.name}"
            )
            restart.add_done_callback(_retrieve)
            self._restart = restart
            self._background.add(restart)
            restart.add_done_callback(self._background.discard)
        return await asyncio.shield(restart)

    async def _reconnect(self) -> _Connection:
        try:
            return await self._reconnect_once()
        except asyncio.CancelledError:
            if self._closed:  # cancelled by `aclose`: the waiting calls get a reason, not a cancel
                raise ToolFailure(
                    f"MCP server {self.name!r} was closed while it restarted."
                ) from None
            raise

    async def _reconnect_once(self) -> _Connection:
        async with self._connecting:
            connection = self._connection
            if connection is not None and not connection.gone.is_set():
                return connection
            if self._closed:
                raise ToolFailure(f"MCP server {self.name!r} is closed.")
            if self._given_up is not None:
                raise ToolFailure(self._given_up)
            if connection is not None:
                self._connection = None
                await connection.close()
            self._count_restart()
            self._connection = await self._connect()
            return self._connection

    def _count_restart(self) -> None:
        now = time.monotonic()
        self._restarts.append(now)
        while self._restarts and self._restarts[0] < now - RESTART_WINDOW:
            self._restarts.popleft()
        if len(self._restarts) > self.max_restarts:
            self._given_up = (
                f"MCP server {self.name!r} keeps dying: it had to be started again "
                f"{len(self._restarts)} times in the last {RESTART_WINDOW:.0f} s, so toolscript "
                f"stopped starting it. Look at its log {str(self.log_path)!r}."
            )
            self._write_log(self._given_up)
            raise ToolFailure(self._given_up)
        self._write_log("starting it again")

    async def _connect(self) -> _Connection:
        """Start a session and list the tools, bounded by `startup_timeout`; `ToolFailure` if not."""
        self._write_log(f"starting {_describe(self.config)}")
        connection = _Connection(self.name, self._transport, self._on_notification)
        try:
            async with asyncio.timeout(self.startup_timeout):
                await connection.open()
                tools = await _list_all_tools(connection.session)
        except TimeoutError:
            await connection.close()
            raise ToolFailure(
                f"MCP server {self.name!r} did not start within {self.startup_timeout:g} s"
                f"{self._log_tail()}"
            ) from None
        except Exception as exc:
            await connection.close()
            raise ToolFailure(
                f"MCP server {self.name!r} could not start: {_reason(exc)}{self._log_tail()}"
            ) from exc
        except BaseException:
            await connection.close()
            raise
        self._replace_tools(tools)
        return connection

    def _transport(self) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
        config = self.config
        if isinstance(config, HTTPServerConfig):
            return _http_transport(config)
        parameters = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            env=dict(config.env) or None,
            cwd=config.cwd,
        )
        return stdio_client(parameters, errlog=self._open_log())

    # --- the tool list -------------------------------------------------------------------------

    async def _on_notification(self, message: types.ServerNotification | Exception) -> None:
        if isinstance(message, Exception):
            self._write_log(f"the connection reported an error: {_reason(message)}")
        elif isinstance(message, types.ToolListChangedNotification) and not self._closed:
            task = asyncio.get_running_loop().create_task(self._relist())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _relist(self) -> None:
        connection = self._connection
        if connection is None or connection.gone.is_set():
            return
        async with self._listing:
            try:
                tools = await _list_all_tools(connection.session)
            except Exception as exc:
                self._write_log(f"could not list the tools after list_changed: {_reason(exc)}")
                return
            self._replace_tools(tools)

    def _replace_tools(self, tools: tuple[types.Tool, ...]) -> None:
        before = [tool.model_dump(mode="json") for tool in self._tools]
        first, self._listed = not self._listed, True
        self._tools = tools
        if first or before == [tool.model_dump(mode="json") for tool in tools]:
            return
        if self.on_change is not None:
            try:
                self.on_change(self.name)
            except Exception:
                logger.exception("on_change callback failed for MCP server %r", self.name)

    def _spec(self, tool: types.Tool) -> ToolSpec:
        hints = tool.annotations
        return ToolSpec(
            name=tool.name,
            description=tool.description or "",
            input_schema=dict(tool.input_schema),
            handler=self._handler(tool.name),
            server=self.name,
            output_schema=None if tool.output_schema is None else dict(tool.output_schema),
            annotations=ToolAnnotations(
                title=(hints.title if hints is not None else None) or tool.title,
                read_only=hints.read_only_hint if hints is not None else None,
                destructive=hints.destructive_hint if hints is not None else None,
                idempotent=hints.idempotent_hint if hints is not None else None,
                open_world=hints.open_world_hint if hints is not None else None,
            ),
        )

    def _handler(self, tool: str) -> Handler:
        async def handler(arguments: dict[str, Any]) -> ToolOutcome:
            return await self.call(tool, arguments)

        return handler

    # --- the log ---------------------------------------------------------------------------------

    def _open_log(self) -> TextIO:
        if self._log is None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
        return self._log

    def _write_log(self, line: str) -> None:
        if self._closed and self._log is None:
            return
        try:
            log = self._open_log()
            log.write(f"--- toolscript {time.strftime('%Y-%m-%d %H:%M:%S')}: {line}\n")
            log.flush()
        except OSError:
            logger.warning("cannot write the log of MCP server %r", self.name, exc_info=True)

    def _log_tail(self, lines: int = 5, limit: int = 600) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                own = [line.rstrip() for line in log if not line.startswith("--- toolscript")]
        except OSError:
            return ""
        tail = "\n".join(line for line in own[-lines:] if line)[-limit:]
        return f". Its last stderr lines:\n{tail}" if tail else f". See {str(self.log_path)!r}."


class MCPTools:
    """Every configured MCP server, as one source of tools.

    Open with `await MCPTools.open(config, log_dir)` (or `async with await MCPTools.open(...)`),
    read `.specs()` and `.failures`, close with `await aclose()`.
    """

    def __init__(self, servers: Mapping[str, MCPServer]) -> None:
        self.servers: dict[str, MCPServer] = dict(servers)

    @classmethod
    async def open(
        cls,
        config: MCPConfig | Mapping[str, Any] | str | Path,
        log_dir: Path,
        *,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        max_restarts: int = MAX_RESTARTS,
        on_change: Callable[[str], None] | None = None,
    ) -> MCPTools:
        """Start every server at once, each bounded by `startup_timeout` seconds.

        `config` is an `MCPConfig`, the `{"mcpServers": ...}` dict, or a path to the file
        (`MCPConfigError` if it is not usable). A server that fails to start does not fail the
        whole: its reason is in `.failures`.
        """
        if not isinstance(config, MCPConfig):
            config = load_mcp_config(config)
        names = _log_names(config.servers)
        tools = cls(
            {
                name: MCPServer(
                    server,
                    Path(log_dir) / f"{names[name]}.log",
                    startup_timeout=startup_timeout,
                    max_restarts=max_restarts,
                    on_change=on_change,
                )
                for name, server in config.servers.items()
            }
        )
        try:
            await asyncio.gather(*(server.start() for server in tools.servers.values()))
        except BaseException:
            await tools.aclose()
            raise
        return tools

    @property
    def failures(self) -> dict[str, str]:
        """The servers that could not start, by name, with the reason in a sentence."""
        return {
            name: server.failure
            for name, server in self.servers.items()
            if server.failure is not None
        }

    def specs(self) -> list[ToolSpec]:
        """The tools of every server that started, in config order."""
        return [spec for server in self.servers.values() for spec in server.specs()]

    def set_on_change(self, on_change: Callable[[str], None] | None) -> None:
        """Have `on_change(server_name)` called whenever a server's tool list changes."""
        for server in self.servers.values():
            server.on_change = on_change

    async def aclose(self) -> None:
        """Close every server at once; bounded by `CLOSE_TIMEOUT` for each."""
        await asyncio.gather(*(server.aclose() for server in self.servers.values()))

    async def __aenter__(self) -> MCPTools:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def tool_outcome(result: types.CallToolResult) -> ToolOutcome:
    """Turn an MCP tool result into what the host passes to the kernel (docs/design.md#tools-inside-the-script).

    An error result is its text; else structured content when present; else a single text
    block as `str`; else a list of blocks, text as `str` and the rest as dicts marked with
    `"$toolscript"` (see `toolscript.kernel.content`).
    """
    if result.is_error:
        text = "\n".join(
            block.text for block in result.content if isinstance(block, types.TextContent)
        )
        return ToolOutcome(
            value=text or "The tool reported an error without a message.", is_error=True
        )
    if result.structured_content is not None:
        return ToolOutcome(value=result.structured_content)
    if len(result.content) == 1 and isinstance(result.content[0], types.TextContent):
        return ToolOutcome(value=result.content[0].text)
    return ToolOutcome(value=[_block(block) for block in result.content])


def _block(block: types.ContentBlock) -> Any:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return {"$toolscript": "image", "mime_type": block.mime_type, "data": block.data}
    if isinstance(block, types.AudioContent):
        return {"$toolscript": "audio", "mime_type": block.mime_type, "data": block.data}
    if isinstance(block, types.EmbeddedResource):
        contents = block.resource
        wire: dict[str, Any] = {
            "$toolscript": "resource",
            "uri": str(contents.uri),
            "mime_type": contents.mime_type,
        }
        if isinstance(contents, types.TextResourceContents):
            wire["text"] = contents.text
        else:
            wire["data"] = contents.blob
        return wire
    return {
        "$toolscript": "resource_link",
        "uri": str(block.uri),
        "name": block.name,
        "mime_type": block.mime_type,
    }


# --- one session ----------------------------------------------------------------------------------


class _Connection:
    """One session with a server, owned by a task of its own.

    Goal: keep a session open across calls made from many tasks, and notice when it ends.
    What fails: the SDK's transports and `ClientSession` are anyio context managers whose task
    groups must be entered and exited by the same task, so neither the opener of the first
    call nor a handler the host may cancel can own them.
    What we do: a dedicated task enters the transport and the session and waits until asked
    to close; calls use the session from their own tasks (which the SDK supports). Messages
    from the transport pass through a small pump that sets `gone` when the stream ends (the
    process exited or the connection dropped), so the next call knows to start a new session.
    """

    def __init__(
        self,
        name: str,
        transport: Callable[[], contextlib.AbstractAsyncContextManager[TransportStreams]],
        on_notification: MessageHandlerFnT,
    ) -> None:
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
        assert self._session is not None, "the connection is not open"
        return self._session

    async def open(self) -> None:
        """Start the owning task and wait until the handshake is done (or raise its error)."""
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._own(self._ready), name=f"mcp:{self.name}")
        self._session = await asyncio.shield(self._ready)

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
                    pumps = await stack.enter_async_context(anyio.create_task_group())
                    stack.callback(pumps.cancel_scope.cancel)
                    forward, session_read = anyio.create_memory_object_stream[
                        SessionMessage | Exception
                    ](0)
                    pumps.start_soon(self._pump, read, forward)
                    session = await stack.enter_async_context(
                        ClientSession(
                            session_read,
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

    async def _pump(
        self,
        source: Any,
        sink: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        try:
            async with sink:
                async for item in source:
                    await sink.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        finally:
            self.gone.set()


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a background task's exception as seen; the calls that awaited it have it already."""
    if not task.cancelled():
        task.exception()


class _Cancelled(Exception):
    """The session's task ended before the handshake finished (it was cancelled)."""

    def __str__(self) -> str:
        return "the start-up was cancelled"


@asynccontextmanager
async def _http_transport(config: HTTPServerConfig) -> AsyncIterator[TransportStreams]:
    # The SDK takes headers, timeouts and auth only on a client passed in (no `headers=`).
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=config.headers, timeout=timeout) as client,
        streamable_http_client(config.url, http_client=client) as streams,
    ):
        yield streams


async def _list_all_tools(session: ClientSession) -> tuple[types.Tool, ...]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tuple(tools)


# Goal: tell "the server answered with an error" from "the answer can never come".
# What fails: the SDK reports both as `MCPError`, and it synthesizes the lost-answer errors
# (the session's EOF fan-out; the streamable HTTP transport when a response stream breaks)
# with code -32000, which JSON-RPC also leaves to servers for their own errors.
# What we do: code -32000 with one of the SDK's own messages (mcp 2.3.0) means the answer was
# lost, so the call is `SourceGone` (effect unknown), never an error answer. A server's own
# -32000 with other words stays the tool's error.
_LOST_ANSWER_MESSAGES = ("Connection closed", "SSE stream ")


def _answer_was_lost(exc: MCPError) -> bool:
    return exc.code == CONNECTION_CLOSED and exc.message.startswith(_LOST_ANSWER_MESSAGES)


def _reason(exc: BaseException) -> str:
    """A one-line reason for a failure, looking inside exception groups of one."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"the command was not found ({exc.filename or exc})"
    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        return "it closed the connection during the handshake (did the process exit?)"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect ({exc})"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _describe(config: ServerConfig) -> str:
    if isinstance(config, HTTPServerConfig):
        return config.url
    return " ".join([config.command, *config.args])


def _log_names(servers: Mapping[str, ServerConfig]) -> dict[str, str]:
    """A distinct, file-safe log name per server."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for name in servers:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "server"
        candidate, number = base, 2
        while candidate.lower() in taken:
            candidate, number = f"{base}-{number}", number + 1
        taken.add(candidate.lower())
        names[name] = candidate
    return names
