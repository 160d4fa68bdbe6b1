"""Shared pieces for the `toolscript serve` tests: the real command, the official MCP client.

Every server here is `python -m toolscript.cli serve` in a subprocess, wrapping the demo MCP
server of tests/mcp_servers over stdio. Over HTTP it listens on 127.0.0.1 port 0 and the test
reads the address from the line it prints on stderr, with a bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
from anyio.abc import Process
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "tests" / "mcp_servers" / "demo_server.py")

HANDSHAKE = "2025-11-25"
"""The protocol version raw HTTP requests in these tests speak."""

START_BOUND = 30.0
"""Seconds a server gets to start (the runtime, the upstream server, the first kernel)."""


def write_config(folder: Path) -> Path:
    """An MCP client config with the demo server as `demo`, over stdio."""
    path = folder / "mcp.json"
    path.write_text(
        json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": [DEMO]}}})
    )
    return path


def serve_args(folder: Path, *extra: str) -> list[str]:
    """The command line of `toolscript serve` wrapping the demo server."""
    return [
        "-m",
        "toolscript.cli",
        "serve",
        "--mcp-config",
        str(write_config(folder)),
        "--journal",
        str(folder / "journal.sqlite3"),
        # Scripts and tests trade files in the test's folder: the sandbox shows it.
        "--mount",
        f"{folder}:rw",
        *extra,
    ]


def environment(folder: Path) -> dict[str, str]:
    """The server's environment: its state (logs) under the test's folder, and the test's
    `PYTHONPATH`, so that the server imports the toolscript under test."""
    found = {"TOOLSCRIPT_STATE": str(folder / "state"), "PATH": os.environ.get("PATH", "")}
    if "PYTHONPATH" in os.environ:
        found["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return found


def stdio_server(folder: Path) -> StdioServerParameters:
    """`toolscript serve` over stdio, as the client's subprocess."""
    return StdioServerParameters(
        command=sys.executable, args=serve_args(folder), env=environment(folder)
    )


@dataclass
class Notes:
    """What a client heard besides answers: log messages and list changes."""

    logs: list[Any]
    tools_changed: anyio.Event
    logged: anyio.Event

    async def hear_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)
        self.logged.set()

    async def hear(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_changed.set()


def notes() -> Notes:
    """A fresh listener for a client's notifications."""
    return Notes([], anyio.Event(), anyio.Event())


def client(target: Any, heard: Notes | None = None, *, mode: str = "auto") -> Client:
    """The official client, with its notifications going to `heard`."""
    heard = heard or notes()
    return Client(
        target,
        logging_callback=heard.hear_log,
        message_handler=heard.hear,
        read_timeout_seconds=60,
        mode=mode,
    )


@dataclass
class HTTPServer:
    """A running `toolscript serve --http`: its URL, token, and what it said on stderr."""

    url: str
    token: str
    token_file: Path
    said: list[str]
    process: Process

    def transport(self, token: str | None = None, *, headers: dict[str, str] | None = None) -> Any:
        """A streamable HTTP transport that sends `token` (by default the right one), and
        `headers` on every request."""
        sent = {"Authorization": f"Bearer {token if token is not None else self.token}"}
        sent.update(headers or {})
        return streamable_http_client(self.url, http_client=httpx2.AsyncClient(headers=sent))


@contextlib.asynccontextmanager
async def http_server(
    folder: Path, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[HTTPServer]:
    """`toolscript serve --http 127.0.0.1:0 --token-file F [extra...]` in a subprocess."""
    token_file = folder / "token"
    process = await anyio.open_process(
        [
            sys.executable,
            *serve_args(folder, "--http", "127.0.0.1:0", "--token-file", str(token_file), *extra),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        env={**os.environ, **environment(folder), **(env or {})},
    )
    said: list[str] = []
    try:
        assert process.stderr is not None
        stream = process.stderr
        buffered = b""
        url = None
        with anyio.fail_after(START_BOUND):
            while url is None:
                chunk = await stream.receive()
                buffered += chunk
                *lines, rest = buffered.split(b"\n")
                buffered = rest
                for line in lines:
                    text = line.decode()
                    said.append(text)
                    if "serving MCP at " in text:
                        url = text.split("serving MCP at ", 1)[1].strip()
        # Nothing else is read from stderr: the server says little after this line, and
        # a pipe holds far more than that.
        yield HTTPServer(url, token_file.read_text().strip(), token_file, said, process)
    finally:
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
        # Its pipes too, killed or not: a transport left open warns when it is collected,
        # later, in whatever test runs then, after this test's loop has closed.
        with anyio.move_on_after(5):
            await process.aclose()


def initialize_request(request_id: int) -> dict[str, Any]:
    """The JSON-RPC `initialize` request a raw client opens with."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }


async def handshake(http: httpx2.AsyncClient, server: HTTPServer) -> str:
    """Open a session by hand (with the token), refused first without it; its id."""
    initialize = initialize_request(1)
    refused = await http.post(server.url, json=initialize, headers=mcp_headers(None))
    assert refused.status_code == 401
    assert "mcp-session-id" not in refused.headers
    token = {"Authorization": f"Bearer {server.token}"}
    opened = await http.post(server.url, json=initialize, headers={**mcp_headers(None), **token})
    assert opened.status_code == 200, opened.text
    session_id = opened.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    ready = await http.post(
        server.url, json=initialized, headers={**mcp_headers(session_id), **token}
    )
    assert ready.status_code == 202
    return str(session_id)


def mcp_headers(session_id: str | None) -> dict[str, str]:
    """The headers of a raw streamable HTTP request (without the token)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": HANDSHAKE,
    }
    if session_id is not None:
        headers["Mcp-Session-Id"] = session_id
    return headers


async def run(client: Client, code: str, **arguments: Any) -> types.CallToolResult:
    """Call run_python and return its result."""
    return await client.call_tool("run_python", {"code": code, **arguments})


def structured(result: types.CallToolResult) -> dict[str, Any]:
    """A result's structured content, which every toolscript answer has."""
    assert result.structured_content is not None, result.content
    return dict(result.structured_content)


def text(result: types.CallToolResult) -> str:
    """A result's text content."""
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text
