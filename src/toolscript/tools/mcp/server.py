"""One configured MCP server: its start, its restarts, its tools, its log, its stop."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import mcp.types as types
from mcp import MCPError
from pydantic import ValidationError

from ..spec import ToolAnnotations, ToolFailure, ToolOutcome, ToolSpec, call_context
from .config import HTTPServerConfig, ServerConfig
from .connection import CLOSE_TIMEOUT, Connection, transport
from .errors import (
    answer_error,
    answer_was_lost,
    failure_reason,
    http_error_without_answer,
    session_expired,
    source_gone,
    unknown_effect,
)
from .results import tool_outcome

__all__ = ["DEFAULT_STARTUP_TIMEOUT", "MAX_RESTARTS", "RESTART_WINDOW", "MCPServer"]

logger = logging.getLogger(__name__)

DEFAULT_STARTUP_TIMEOUT = 30.0
"""Seconds a server gets to start and answer the handshake and the first tool listing."""

MAX_RESTARTS = 3
RESTART_WINDOW = 60.0
"""A server that had to be started again (it went away, or a restart failed) more than
`MAX_RESTARTS` times in `RESTART_WINDOW` seconds is not started again for the next
`RESTART_WINDOW` seconds; its calls meanwhile fail with a `ToolFailure` saying so. (Given up
for good, a server that was down for a minute, or an HTTP server out of reach for a few
seconds, stayed lost for as long as the runtime ran.)"""


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
        self._connection: Connection | None = None
        self._connecting = asyncio.Lock()
        self._restarts: deque[float] = deque()
        self._given_up: str | None = None
        self._given_up_until = 0.0
        self._log = ServerLog(log_path, config.name)
        self._restart: asyncio.Task[Connection] | None = None
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
            self._log.write(f"start-up failed: {self.failure}")
        return self.failure

    def specs(self) -> list[ToolSpec]:
        """One `ToolSpec` per tool the server listed: names unchanged, schemas and hints copied."""
        return [_tool_spec(self, tool) for tool in self._tools]

    async def call(
        self, tool: str, arguments: Mapping[str, Any], *, structured: bool = True
    ) -> ToolOutcome:
        """Call one of the server's tools and return its answer: its structured content when
        `structured` (the tool publishes an output schema), else its content.

        Raises `SourceGone` when the server went away with the call in flight, and
        `ToolFailure` when the call could not be sent (the server is closed, will not start
        again, or keeps dying).
        """
        call = call_context()
        key = call.idempotency_key if call is not None else None
        connection = await self._connected()
        try:
            try:
                result = await connection.call_tool(tool, arguments, key)
            except MCPError as exc:
                if not (isinstance(self.config, HTTPServerConfig) and session_expired(exc)):
                    raise
                # The server no longer knows the session (it restarted, or expired it): it
                # refused the call without running it, so the call is made once more on a new
                # session, as the protocol asks of a client that gets 404 for its session.
                connection.gone.set()
                self._log.write(f"the session had expired at a call of {tool!r}; opening a new one")
                connection = await self._connected()
                result = await connection.call_tool(tool, arguments, key)
        except MCPError as exc:
            if connection.gone.is_set() or answer_was_lost(exc):
                connection.gone.set()
                self._log.write(f"went away during a call of {tool!r}")
                raise source_gone(
                    self.name, tool, closing=self._closed, log_path=self.log_path
                ) from exc
            if http_error_without_answer(exc):
                self._log.write(f"answered a call of {tool!r} with an HTTP error and no answer")
                raise unknown_effect(self.name, tool, self.log_path) from exc
            return answer_error(self.name, tool, exc)
        except (RuntimeError, ValidationError) as exc:
            return answer_error(self.name, tool, exc)
        return tool_outcome(result, structured=structured)

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
            self._log.write("closed")
        self._log.close()

    # --- connecting and restarting ------------------------------------------------------------

    # Goal: a server that went away comes back for the next call, however slowly it starts.
    # What fails: restarting inside the call that found it gone ties the restart to that call;
    # when the call's tool timeout passes first, the restart is cancelled with it, the next
    # call starts another, and a server that starts slower than the tool timeout is restarted
    # by every call until it counts as "keeps dying", though it never died again.
    # What we do: the restart runs in a task of the server's own, bounded by `startup_timeout`;
    # the calls that need it share it and wait for it shielded, so giving up on a call never
    # stops the restart. Only closing the server does.
    async def _connected(self) -> Connection:
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

    async def _reconnect(self) -> Connection:
        try:
            return await self._reconnect_once()
        except asyncio.CancelledError:
            if self._closed:  # cancelled by `aclose`: the waiting calls get a reason, not a cancel
                raise ToolFailure(
                    f"MCP server {self.name!r} was closed while it restarted."
                ) from None
            raise

    async def _reconnect_once(self) -> Connection:
        async with self._connecting:
            connection = self._connection
            if connection is not None and not connection.gone.is_set():
                return connection
            if self._closed:
                raise ToolFailure(f"MCP server {self.name!r} is closed.")
            if self._given_up is not None:
                if time.monotonic() < self._given_up_until:
                    raise ToolFailure(self._given_up)
                self._given_up = None
                self._restarts.clear()
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
                f"{len(self._restarts)} times in the last {RESTART_WINDOW:g} s, so toolscript "
                f"stopped starting it for {RESTART_WINDOW:g} s. Look at its log "
                f"{str(self.log_path)!r}."
            )
            self._given_up_until = now + RESTART_WINDOW
            self._log.write(self._given_up)
            raise ToolFailure(self._given_up)
        self._log.write("starting it again")

    async def _connect(self) -> Connection:
        """Start a session and list the tools, bounded by `startup_timeout`; `ToolFailure` if not."""
        self._log.write(f"starting {_describe(self.config)}")
        self._log.begin_start()
        connection = Connection(
            self.name, transport(self.config, self._log.open), self._on_notification
        )
        try:
            async with asyncio.timeout(self.startup_timeout):
                await connection.open()
                tools = await connection.list_tools()
        except TimeoutError:
            await connection.close()
            raise ToolFailure(
                f"MCP server {self.name!r} did not start within {self.startup_timeout:g} s"
                f"{self._connection_errors()}{self._log.tail()}"
            ) from None
        except Exception as exc:
            await connection.close()
            raise ToolFailure(
                f"MCP server {self.name!r} could not start: "
                f"{failure_reason(exc, getattr(self.config, 'cwd', None))}{self._log.tail()}"
            ) from exc
        except BaseException:
            await connection.close()
            raise
        self._replace_tools(tools)
        return connection

    def _connection_errors(self) -> str:
        """What the connection reported since the current start, for a failure's words."""
        log = self._log
        if not log.errors or log.first_error is None:
            return ""
        first = _CONTROL.sub(_escaped, log.first_error.splitlines()[0][:200])
        return (
            f", and the connection reported {log.errors} error(s) meanwhile (a stdio server "
            f"must write only MCP messages on its stdout); the first: {first}"
        )

    # --- the tool list -------------------------------------------------------------------------

    async def _on_notification(self, message: types.ServerNotification | Exception) -> None:
        if isinstance(message, Exception):
            self._log.connection_error(failure_reason(message))
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
                tools = await connection.list_tools()
            except Exception as exc:
                self._log.write(
                    f"could not list the tools after list_changed: {failure_reason(exc)}"
                )
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


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters but newline and tab: a server's stderr quoted in a result may not
recolour or rewrite the terminal that shows it."""


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


class ServerLog:
    """A server's log file: its stderr, with toolscript's own lines marked `--- toolscript`.

    Opened on the first line, appended to (across starts, and across runtimes that share the
    state directory), never reopened once closed. `tail` quotes only the current start.
    """

    def __init__(self, path: Path, server: str) -> None:
        self.path = path
        self.server = server
        self._file: TextIO | None = None
        self._closed = False
        self._start = 0
        self.errors = 0
        """How many errors the connection reported since the current start."""
        self.first_error: str | None = None

    def open(self) -> TextIO:
        """The open file, opened for appending if it is not yet; a stdio server's stderr."""
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
        return self._file

    def write(self, line: str) -> None:
        """Append one line of toolscript's own, stamped with the time."""
        if self._closed and self._file is None:
            return
        try:
            log = self.open()
            stamp = f"--- toolscript {time.strftime('%Y-%m-%d %H:%M:%S')}:"
            # Every line of a message of several (a validation error's) is marked, so that
            # `tail` never quotes toolscript's own words as the server's.
            log.write("".join(f"{stamp} {part}\n" for part in line.splitlines() or [""]))
            log.flush()
        except OSError:
            logger.warning("cannot write the log of MCP server %r", self.server, exc_info=True)

    def connection_error(self, reason: str) -> None:
        """The connection reported an error (a line on a stdio server's stdout that is not
        an MCP message, say): logged, and counted for the current start."""
        self.write(f"the connection reported an error: {reason}")
        self.errors += 1
        if self.first_error is None:
            self.first_error = reason

    def begin_start(self) -> None:
        """The server starts now: what it writes from here on is the current start's."""
        self.errors, self.first_error = 0, None
        try:
            self._start = self.open().tell()
        except OSError:
            self._start = 0

    def tail(self, lines: int = 5, limit: int = 600) -> str:
        """The current start's last stderr lines, as the end of a sentence that names the
        failure."""
        try:
            with open(self.path, "rb") as log:
                log.seek(self._start)
                text = log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        own = [line.rstrip() for line in text.splitlines() if not line.startswith("--- toolscript")]
        tail = _CONTROL.sub(_escaped, "\n".join(line for line in own[-lines:] if line)[-limit:])
        return f". Its last stderr lines:\n{tail}" if tail else f". See {str(self.path)!r}."

    def close(self) -> None:
        """Close the file; later lines are dropped."""
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None


def _tool_spec(server: MCPServer, tool: types.Tool) -> ToolSpec:
    """The `ToolSpec` of one of `server`'s tools, whose handler calls it on the server."""

    structured = tool.output_schema is not None

    async def handler(arguments: dict[str, Any]) -> ToolOutcome:
        return await server.call(tool.name, arguments, structured=structured)

    hints = tool.annotations
    return ToolSpec(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        handler=handler,
        server=server.name,
        output_schema=None if tool.output_schema is None else dict(tool.output_schema),
        annotations=ToolAnnotations(
            title=(hints.title if hints is not None else None) or tool.title,
            read_only=hints.read_only_hint if hints is not None else None,
            destructive=hints.destructive_hint if hints is not None else None,
            idempotent=hints.idempotent_hint if hints is not None else None,
            open_world=hints.open_world_hint if hints is not None else None,
        ),
    )


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a background task's exception as seen; the calls that awaited it have it already."""
    if not task.cancelled():
        task.exception()


def _describe(config: ServerConfig) -> str:
    if isinstance(config, HTTPServerConfig):
        return config.url
    return " ".join([config.command, *config.args])
