"""Shared pieces for the end-to-end tests: real kernels, real MCP server processes.

Everything here starts real processes (the demo MCP server of tests/mcp_servers over stdio or
streamable HTTP, the kernel) and bounds every wait, so a regression fails instead of hanging.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from toolscript import Runtime, ScriptResult

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ROOT / "tests" / "mcp_servers"
DEMO = str(SERVERS / "demo_server.py")
EXITS_AT_ONCE = str(SERVERS / "exits_at_once.py")

SCRIPT_BOUND = 30.0
"""Seconds a test waits for one run's result, past the script's own time limit."""


def stdio_demo(*extra: str) -> dict[str, Any]:
    """The config entry of the demo server over stdio."""
    return {"command": sys.executable, "args": [DEMO, *extra]}


def broken_servers() -> dict[str, Any]:
    """Config entries of two servers that cannot start: one exits at once, one does not exist."""
    return {
        "broken": {"command": sys.executable, "args": [EXITS_AT_ONCE]},
        "missing": {"command": "/nonexistent/toolscript-test-server"},
    }


@contextlib.asynccontextmanager
async def http_demo() -> AsyncIterator[str]:
    """The demo server over streamable HTTP on 127.0.0.1 (port 0); yields its URL.

    The server prints `PORT <n>` once it listens; that line is awaited with a bound.
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        DEMO,
        "--http",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 20)
        kind, port = line.decode().split()
        assert kind == "PORT", line
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.returncode is None:
            process.kill()
        await asyncio.wait_for(process.wait(), 10)


async def run(rt: Runtime, code: str, *, time_limit: float = 10.0) -> ScriptResult:
    """Run `code` in the runtime's default shell, bounded past its own time limit."""
    return await asyncio.wait_for(rt.run(code, time_limit=time_limit), time_limit + SCRIPT_BOUND)


async def value_of(rt: Runtime, code: str, *, time_limit: float = 10.0) -> Any:
    """Run `code`, require it to end `ok`, and return its last expression as Python data."""
    result = await run(rt, code, time_limit=time_limit)
    assert result.status == "ok", result.text
    assert result.value is not None, result.text
    return ast.literal_eval(result.value)


async def error_of(rt: Runtime, call: str, error: str = "ToolError") -> tuple[str, ScriptResult]:
    """Run a script that awaits `call` and catches `error`: the error's message, and the result.

    Fails the test when the script does not end `ok` or the call does not raise `error`.
    """
    code = (
        f"try:\n    await {call}\nexcept {error} as caught:\n    message = str(caught)\n"
        "else:\n    message = None\nmessage"
    )
    result = await run(rt, code)
    assert result.status == "ok", result.text
    message = ast.literal_eval(result.value or "None")
    assert isinstance(message, str), f"`await {call}` did not raise {error}:\n{result.text}"
    return message, result
