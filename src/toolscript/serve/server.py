"""The MCP server in front of a `Runtime`: code mode for any MCP client.

It offers `run_python(code, time_limit_s=None, background=False)`, `script_status(script_id)`
and `cancel_script(script_id)` (and `list_tools(query)` when the catalogue is too large to
describe up front). Each answer is the script result's `text` as text content and its
`to_dict()` as structured content.

One concept, though a little over 500 lines: the MCP protocol's side of the server (its
handlers, sessions, protocol versions, content and notifications); the actions themselves
are `toolscript.actions`, the tool descriptions `serve.description`.

Sessions. A shell belongs to one MCP client session and is closed with it:

- over stdio the process serves one client, so the process is the session;
- over streamable HTTP a session is the SDK's (the `Mcp-Session-Id` the client got at its
  handshake), and it ends when the client deletes it or it idles out in the SDK. It is kept
  in the journal, with its streams' events and its background results, so a server
  restarted on the same state directory takes it back (`serve.revival`, `serve.past`).

Goal: state that persists between calls of one client, and only that client.
What fails: the 2026-07-28 protocol has no sessions (every HTTP request stands alone), and
mcp 2.3.0's `Client` picks it by default after probing `server/discover`.
What we do: over HTTP, `server/discover` answers with the handshake versions only, which the
official clients (Python, TypeScript, Go) take as "use the handshake", so they get a session.
A client that insists on the stateless protocol over HTTP is served from one shared
"stateless" shell. Over stdio either protocol is fine: the process is the session.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import IO, Any, Literal, cast

import anyio
import mcp.types as types
import uvicorn
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from .. import ScriptHandle, ScriptResult
from ..actions import Answer, no_such_tool, said_back, unknown_arguments
from ..runtime import Runtime
from .auth import BearerTokenGate
from .description import matching_stubs, tool_list
from .hosts import HostCheck, HostGate
from .past import recall_for
from .revival import RevivingSessions
from .session import Session
from .stdin import StdinLines

__all__ = ["INSTRUCTIONS", "ToolscriptServer"]

_log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "toolscript runs Python code in which the tools of the user's MCP servers are async "
    "functions. Use run_python to call many tools in one step, combine and filter their "
    "results in code, and read one truthful report of what happened."
)

_SESSION_KEY = "toolscript.session"

HTTP_SHUTDOWN_DRAIN = 1
"""Seconds open HTTP responses (a client's idle event stream) get once the sessions ended."""

ABANDONED_STOP_MARGIN = 2.0
"""Seconds beyond the runtime's grace period a run waits for an abandoned run to be stopped."""

PROGRESS_OUTPUT = 4_000
"""Characters of a running script's output (its last lines) a progress notification carries."""

HTTP_ANSWER_BYTES = 1_000_000
"""Bytes of JSON an answer takes at most over HTTP. The official SDKs read a server-sent event
of at most 1 MiB (mcp's `DEFAULT_MAX_SSE_EVENT_SIZE`) and fail the whole call past it, so an
answer over that (a script's output of many short lines, 1 MB of stdout and of stderr, an
image of 1 MB) reached the client as an error and nothing else."""

RECONNECT_AFTER_MS = 3_000
"""How long a client whose stream broke is asked to wait before it resumes it (SSE `retry`),
long enough for a server restarted at once to be listening again."""

Transport = Literal["stdio", "http"]


class _Server(Server[Any]):
    """The SDK's low-level server, announcing that its tool list can change."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class _Uvicorn(uvicorn.Server):
    """uvicorn's server without its signal handlers, which would end the process on SIGTERM
    before the runtime is closed: `toolscript serve` calls `ToolscriptServer.stop` instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ToolscriptServer:
    """An MCP server whose tools run Python scripts in a `Runtime`'s shells.

    - `transport`: "stdio" (one client, the process is its session) or "http".
    - `progress_after`, `progress_every`: seconds before the first progress notification of a
      run, and between the next ones (sent only when the client gave a progress token).
    - `keep_results_for`, `keep_results`: how long, and how many, ended background results
      each session keeps for `script_status`.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        transport: Transport = "stdio",
        progress_after: float = 2.0,
        progress_every: float = 2.0,
        keep_results_for: float = 3600.0,
        keep_results: int = 100,
    ) -> None:
        self.runtime = runtime
        self.transport: Transport = transport
        self.progress_after = progress_after
        self.progress_every = progress_every
        self.keep_results_for = keep_results_for
        self.keep_results = keep_results
        self._bus = InMemorySubscriptionBus()
        self.server = _Server(
            "toolscript",
            version=_version(),
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self._bus),
        )
        if transport == "http":
            self.server.add_request_handler("server/discover", types.RequestParams, self._discover)
            self.server.add_notification_handler(
                "notifications/initialized", types.NotificationParams, self._initialized
            )
        self._sessions: set[Session] = set()
        self._stdio: Session | None = None
        self._stateless: Session | None = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self._stopping = False
        self._stopped = False
        self._stopper: asyncio.Future[None] | None = None
        self._end_transport: Callable[[], None] | None = None
        self._tools = self._tool_list()
        runtime.on_catalogue_change(self._catalogue_changed)
        self._taken_back: dict[str, ScriptHandle] = {}
        """Background scripts the runtime took back from its keeper, until their session
        comes back: their ends are kept in the journal even before."""
        self._takers: dict[str, Session] = {}
        if transport == "http":
            for handle in runtime.background:  # none has ended yet (`Runtime.background`)
                self._taken_back[handle.id] = handle
                handle.add_done_callback(self._taken_back_ended)

    # -- serving -----------------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout until stdin closes or `stop()`."""
        from mcp.server.stdio import stdio_server

        try:
            with StdinLines.claim() as lines:
                self._end_transport = lines.end
                # The client closing stdin stops the server as SIGTERM does: the run in
                # progress is answered (cancelled) before the session ends.
                lines.on_end_of_input = functools.partial(
                    _call_soon_from_thread, asyncio.get_running_loop(), self.stop
                )
                if self._stopped:
                    lines.end()
                # AsyncFile calls only `readline` (in a worker thread) and `close` on it.
                stdin = anyio.AsyncFile(cast("IO[str]", lines))
                try:
                    async with stdio_server(stdin=stdin) as (read, write):
                        await self.server.run(
                            read, write, self.server.create_initialization_options()
                        )
                except* (BrokenPipeError, ConnectionResetError):
                    # The client is gone (killed, or it closed its end of our stdout): the
                    # way a stdio session often ends, as stdin closing is. Nothing more can
                    # be written there, not even Python's own flush at exit.
                    _stdout_to_devnull()
        finally:
            self._end_transport = None
            await self.aclose()

    def http_app(
        self,
        token: str,
        host: str = "127.0.0.1",
        *,
        port: int,
        allow_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
    ) -> ASGIApp:
        """The streamable HTTP app on path `/mcp`, for a server bound to (`host`, `port`).

        A request is let in only when its `Host` names the server (and its `Origin`, if any,
        is the server's own or in `allow_origins`; see `toolscript.serve.hosts`), and then only
        with the bearer token. `allow_hosts` are extra `NAME[:PORT]` values for `Host`.
        """
        check = HostCheck.for_bind(host, port, allow_hosts=allow_hosts, allow_origins=allow_origins)
        sessions = RevivingSessions(
            self.server,
            self.runtime,
            retry_interval=RECONNECT_AFTER_MS,
            # The SDK's own check is on for a loopback bind only, and could not admit
            # --allow-host names there: HostGate checks every request instead.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        app = Starlette(
            routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(sessions))],
            lifespan=lambda _: sessions.run(),
        )
        return HostGate(BearerTokenGate(app, token), check)

    async def serve_http(
        self,
        listener: socket.socket,
        token: str,
        host: str = "127.0.0.1",
        *,
        allow_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
    ) -> None:
        """Serve streamable HTTP on a bound, listening socket until `stop()` or cancelled.

        `host` is the address or name the socket was bound as; the other arguments are
        `http_app`'s. It installs no signal handlers: `toolscript serve` has SIGTERM and
        SIGINT call `stop()`.
        """
        port = int(listener.getsockname()[1])
        app = self.http_app(
            token, host, port=port, allow_hosts=allow_hosts, allow_origins=allow_origins
        )
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            access_log=False,
            timeout_graceful_shutdown=HTTP_SHUTDOWN_DRAIN,
        )
        server = _Uvicorn(config)

        def end() -> None:
            server.should_exit = True

        self._end_transport = end
        if self._stopped:
            end()
        try:
            await server.serve(sockets=[listener])
        finally:
            self._end_transport = None
            await self.aclose()

    def stop(self) -> None:
        """End serving, as `toolscript serve` does on SIGTERM and SIGINT. Returns at once.

        New tool calls are refused; every session is closed (its scripts stopped: a run in
        progress is answered as cancelled); then the transport ends, so `serve_stdio` or
        `serve_http` returns. Call it on the serving event loop; calling it again does nothing.
        """
        if self._stopping:
            return
        self._stopping = True
        self._stopper = asyncio.ensure_future(self._stop())

    async def _stop(self) -> None:
        try:
            await self.aclose()
        finally:
            self._stopped = True
            if self._end_transport is not None:
                self._end_transport()

    async def aclose(self) -> None:
        """End every session: cancel their background scripts, stop their interpreters."""
        sessions = [*self._sessions]
        self._sessions.clear()
        reason = "toolscript serve stopped" if self._stopping else "the MCP client's session ended"
        await asyncio.gather(
            *(session.close(reason) for session in sessions), return_exceptions=True
        )
        for task in [*self._tasks]:
            task.cancel()

    # -- the tool list -----------------------------------------------------------------------

    def _tool_list(self) -> list[types.Tool]:
        return tool_list(self.runtime, keep_results_for=self.keep_results_for)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tools)

    async def _discover(
        self, ctx: ServerRequestContext[Any], params: types.RequestParams
    ) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS),
            capabilities=self.server.get_capabilities(NotificationOptions(tools_changed=True)),
            instructions=INSTRUCTIONS,
        )

    def _catalogue_changed(self) -> None:
        self._spawn(self._announce_tools())

    async def _announce_tools(self) -> None:
        tools = self._tool_list()
        if tools == self._tools:
            return
        self._tools = tools
        for session in [*self._sessions]:
            await session.notify("notifications/tools/list_changed", None)
        await self._bus.publish(ToolsListChanged())

    # -- the calls ---------------------------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        result = await self._answer_call(ctx, params)
        return _fit(result, HTTP_ANSWER_BYTES) if self.transport == "http" else result

    async def _answer_call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if self._stopping:
            return _content(Answer.refusal("toolscript serve is shutting down; nothing was run."))
        arguments = params.arguments or {}
        session = self._session_for(ctx)
        if params.name == "run_python":
            return await self._run_python(ctx, session, arguments)
        if params.name == "script_status":
            return _content(await session.actions.script_status(arguments))
        if params.name == "cancel_script":
            return _content(await session.actions.cancel_script(arguments))
        if params.name == "list_tools" and any(t.name == "list_tools" for t in self._tools):
            query = arguments.get("query", "")
            problems = unknown_arguments(arguments, ("query",))
            if not isinstance(query, str):
                problems.insert(0, "`query` must be a string")
            if problems:
                return _content(Answer.refusal(f"list_tools was not run: {'; '.join(problems)}."))
            stubs, count = matching_stubs(self.runtime, query)
            if count == 0:
                words = set(query.lower().split())
                down = [
                    f"the MCP server {name!r} did not start, so it has no tools: {why}"
                    for name, why in self.runtime.mcp_failures.items()
                    if name.lower() in words
                ]
                if down:
                    return _content(
                        Answer.refusal(f"No tool matches {said_back(query)}: {'; '.join(down)}")
                    )
                return _content(
                    Answer.refusal(
                        f"No tool matches {said_back(query)}; try a shorter word or a server."
                    )
                )
            return types.CallToolResult(
                content=[types.TextContent(text=stubs)],
                structured_content={"matched": count, "stubs": stubs},
            )
        return _content(no_such_tool(params.name, [tool.name for tool in self._tools]))

    async def _run_python(
        self, ctx: ServerRequestContext[Any], session: Session, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        request = session.actions.check_run(arguments)
        if isinstance(request, Answer):
            return _content(request)
        if request.background:

            async def ended(result: ScriptResult) -> None:
                await self._background_ended(session, result)

            return _content(await session.actions.start(request, on_done=ended))
        stopping = session.abandoned
        if stopping is not None and not stopping.done():
            # The client gave up on this session's last run, which is being stopped (an
            # interrupt, then a kill after the grace period). A run that follows at once
            # waits for that, rather than being refused as a second script in the shell.
            await asyncio.wait({stopping}, timeout=self.runtime.grace + ABANDONED_STOP_MARGIN)
        run = session.actions.run(request)
        answer = await self._with_progress(ctx, run, request.time_limit, session)
        return _content(session.tell_restart(answer))

    async def _with_progress(
        self,
        ctx: ServerRequestContext[Any],
        run: Coroutine[Any, Any, Answer],
        limit: float | None,
        session: Session,
    ) -> Answer:
        """Await a run, reporting progress while it lasts; a cancelled request stops it."""
        task = asyncio.ensure_future(run)
        self._keep(task)
        total = limit if limit is not None else self.runtime.default_time_limit
        started = time.monotonic()
        wait = self.progress_after
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=wait)
                if done:
                    return task.result()
                elapsed = time.monotonic() - started
                message = f"the script has run for {elapsed:.0f} s (time limit {total:g} s)"
                output = session.actions.output(PROGRESS_OUTPUT)
                message += f"; its output so far:\n\n{output}" if output else "; no output yet"
                with contextlib.suppress(Exception):  # best effort: the client may be gone
                    await ctx.session.report_progress(round(elapsed, 1), total, message)
                wait = self.progress_every
        finally:
            if not task.done():
                task.cancel()  # the request was cancelled: the runtime stops the script
                session.abandoned = task

    async def _taken_back_ended(self, result: ScriptResult) -> None:
        await self._background_ended(self._takers.pop(str(result.script_id), None), result)

    async def _background_ended(self, session: Session | None, result: ScriptResult) -> None:
        if self.transport == "http":  # kept first: a restarted server answers with it
            answer = Answer.of(result)
            with contextlib.suppress(Exception):  # the runtime may be closing
                self.runtime.journal.record_result(
                    answer.script_id or "",
                    result.shell,
                    result.status,
                    answer.text,
                    json.dumps(answer.data),
                )
        if session is None:
            return  # its session has not come back yet: it will read the result kept
        await session.notify(
            "notifications/message",
            {
                "level": "info" if result.status == "ok" else "warning",
                "logger": "toolscript",
                "data": {
                    "event": "background_script_ended",
                    "script_id": result.script_id,
                    "status": result.status,
                    "exit_code": result.exit_code,
                    "message": f"Background script {result.script_id} ended: {result.status}. "
                    "Its result is available from script_status.",
                },
            },
        )

    # -- sessions ----------------------------------------------------------------------------

    async def _initialized(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams
    ) -> None:
        """A client finished its handshake: its session is kept from now on, so a restarted
        server takes it back even if it never called a tool before the restart."""
        self._session_for(ctx)

    def _session_for(self, ctx: ServerRequestContext[Any]) -> Session:
        connection = _connection_of(ctx)
        if self.transport == "stdio":
            if self._stdio is None:
                self._stdio = self._new_session()
            if connection is not None:
                self._stdio.notifier = connection
            return self._stdio
        if connection is None or connection.session_id is None:
            if self._stateless is None:
                self._stateless = self._new_session("mcp-stateless")
            return self._stateless
        session = connection.state.get(_SESSION_KEY)
        if isinstance(session, Session):
            return session
        shell, taken_back = self._kept_shell(connection, connection.session_id)
        session = self._new_session(shell)
        if taken_back:
            session.came_back()
            self._give_back(session)
        session.notifier = connection
        connection.state[_SESSION_KEY] = session

        async def end() -> None:  # spawned: the SDK bounds this teardown tightly
            self._spawn(self._end_session(session, connection.session_id))

        connection.exit_stack.push_async_callback(end)
        return session

    def _new_session(self, name: str | None = None) -> Session:
        # Over stdio the process is the session, and the next process serves a new client
        # (docs/serve.md): a name of its own, so that it neither takes back the last one's
        # kept interpreter nor is told of the calls the last one was left in doubt about.
        name = name or f"mcp-{secrets.token_hex(6)}"
        session = Session(
            self.runtime.shell(name),
            max_time_limit=self.runtime.max_time_limit,
            keep_for=self.keep_results_for,
            keep_count=self.keep_results,
            recall=recall_for(self.runtime, name, self.keep_results_for),
        )
        self._sessions.add(session)
        return session

    def _give_back(self, session: Session) -> None:
        """Have a session taken back track the background scripts of its shell that the
        runtime took back (ended or not); `recall` answers only for the others."""
        mine = [key for key in self._taken_back if key.startswith(f"{session.name}:")]
        started = {
            script.script_id: script.started_at
            for script in self.runtime.journal.scripts(shell=session.name)
            if script.script_id in mine
        }
        for script_id in mine:
            handle = self._taken_back.pop(script_id)
            if not handle.done():
                self._takers[script_id] = session
            running_for = time.time() - started.get(script_id, time.time())
            session.actions.track(handle, running_for=max(0.0, running_for))

    def _kept_shell(self, connection: Connection, session_id: str) -> tuple[str, bool]:
        """The shell name of an HTTP session, and whether it was taken back: the name the
        journal keeps for it (a session a restarted server took back), or a new one, kept
        from now on. Named from the session id, so a restarted server's new sessions never
        take an old session's name."""
        journal = self.runtime.journal
        kept = journal.serve_session(session_id)
        if kept is not None:
            return kept.shell, True
        shell = f"mcp-{session_id[:12]}"
        client = connection.client_params
        if client is not None:
            details = client.model_dump_json(by_alias=True, exclude_none=True)
            journal.remember_session(session_id, shell, connection.protocol_version, details)
        return shell, False

    async def _end_session(self, session: Session, session_id: str | None = None) -> None:
        self._sessions.discard(session)
        if session_id is not None and not self._stopping:
            # The client ended it, or it idled out: a restarted server must not take it back.
            with contextlib.suppress(Exception):
                self.runtime.journal.forget_session(session_id)
        await session.close()

    def _spawn(self, work: Awaitable[Any]) -> None:
        self._keep(asyncio.ensure_future(work))

    def _keep(self, task: asyncio.Future[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("toolscript serve: a background task failed", exc_info=task.exception())


def _connection_of(ctx: ServerRequestContext[Any]) -> Connection | None:
    # mcp 2.3.0 gives the low-level handlers the per-client `Connection` (its scratch `state`,
    # its teardown `exit_stack`, its standalone channel) only through the session object.
    connection = getattr(ctx.session, "_connection", None)
    return connection if isinstance(connection, Connection) else None


def _content(answer: Answer) -> types.CallToolResult:
    content: list[types.ContentBlock] = [types.TextContent(text=answer.text)]
    for image in answer.images:
        data = base64.b64encode(image.data).decode("ascii")
        content.append(types.ImageContent(data=data, mime_type=image.mime_type))
    facts = answer.data
    if facts is not None and "text" in facts:
        # The text content carries it: as a field too, the client would get it twice.
        facts = {key: value for key, value in facts.items() if key != "text"}
    return types.CallToolResult(content=content, structured_content=facts, is_error=answer.is_error)


_CUT_FIELDS = ("stdout", "stderr", "value", "error", "output")
"""The structured content's strings that can be long: cut first when an answer is too big."""


def _encoded_size(result: types.CallToolResult) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def _fit(result: types.CallToolResult, budget: int) -> types.CallToolResult:
    """`result`, within `budget` bytes of JSON: the structured content's longest strings cut
    in the middle first (the text content has them cut already), then images dropped from
    the last, saying so in the text."""
    if _encoded_size(result) <= budget:
        return result
    data = dict(result.structured_content or {})
    content = list(result.content)
    fitted = result.model_copy(update={"structured_content": data or None, "content": content})
    while _encoded_size(fitted) > budget:
        long = [
            key for key in _CUT_FIELDS if isinstance(data.get(key), str) and len(data[key]) > 2_000
        ]
        if not long:
            break
        key = max(long, key=lambda name: len(data[name].encode()))
        text = data[key]
        keep = len(text) // 2
        head = keep // 2
        cut = len(text) - keep
        data[key] = (
            f"{text[:head]}\n… {cut:,} characters cut to fit the answer …\n"
            f"{text[len(text) - (keep - head) :]}"
        )
    dropped = 0
    while _encoded_size(fitted) > budget and isinstance(content[-1], types.ImageContent):
        content.pop()
        dropped += 1
    if dropped:
        said = (
            f"\n\n{dropped} image(s) not sent: the answer would have been over "
            f"{budget:,} bytes, more than MCP clients over HTTP read in one message."
        )
        first = content[0]
        if isinstance(first, types.TextContent):
            content[0] = types.TextContent(text=first.text + said)
        if data:
            data["images_not_sent"] = dropped
    return fitted


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("toolscript")
    except metadata.PackageNotFoundError:
        return "0"


def _call_soon_from_thread(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: serving is over anyway
        loop.call_soon_threadsafe(callback)


def _stdout_to_devnull() -> None:
    """Point fd 1 at /dev/null: a write to the dead client's pipe would fail again."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
