"""What a failure of an MCP server or call means, told apart and said in a sentence.

A call that fails is one of three things: the server answered with an error (the tool's
answer, `is_error`), the server answered something toolscript cannot use (also an error
answer), or the answer can never come because the server went away (`SourceGone`: the call
was sent, so its effect is unknown).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx2
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST
from pydantic import ValidationError

from ..spec import SourceGone, ToolOutcome

__all__ = [
    "answer_error",
    "answer_was_lost",
    "failure_reason",
    "http_error_without_answer",
    "session_expired",
    "source_gone",
    "unknown_effect",
]

# Goal: tell "the server answered with an error" from "the answer can never come".
# What fails: the SDK reports both as `MCPError`, and it synthesizes the lost-answer errors
# (the session's EOF fan-out; the streamable HTTP transport when a response stream breaks)
# with code -32000, which JSON-RPC also leaves to servers for their own errors.
# What we do: code -32000 with one of the SDK's own messages (mcp 2.3.0) means the answer was
# lost, so the call is `SourceGone` (effect unknown), never an error answer. A server's own
# -32000 with other words stays the tool's error.
_LOST_ANSWER_MESSAGE = "Connection closed"
_LOST_STREAM_PREFIX = "SSE stream "


def answer_was_lost(exc: MCPError) -> bool:
    """Whether `exc` is the SDK saying the answer can never come, not the server's error.

    "Connection closed" is matched whole: a server's own -32000 that merely begins so
    ("Connection closed by the database") is its answer, not a sign it went away."""
    return exc.code == CONNECTION_CLOSED and (
        exc.message == _LOST_ANSWER_MESSAGE or exc.message.startswith(_LOST_STREAM_PREFIX)
    )


# Goal: a streamable HTTP server that restarted (or expired the session) is used again.
# What fails: it answers 404 to the old session id, which the SDK's client hands on as an
# error answer: "Session terminated" (its own words for a 404 without a JSON-RPC body), or the
# server's own body ("Session not found" from the Python and TypeScript SDKs' servers).
# What we do: those words mean the session is gone; the caller opens a new one.
# The words alone are not enough: a tool may answer with its own error in those words, after
# it took effect, and the call must then not be made again. Each is taken only with the code
# its sender gives it: the SDK client's INVALID_REQUEST for a 404 without a body, the Python
# SDK server's INVALID_REQUEST and the TypeScript SDK server's -32001 for an unknown session.
_SESSION_GONE = frozenset(
    {
        (INVALID_REQUEST, "Session terminated"),
        (INVALID_REQUEST, "Session not found"),
        (-32001, "Session not found"),
    }
)


def session_expired(exc: MCPError) -> bool:
    """Whether `exc` is an HTTP server saying it no longer knows the client's session."""
    return (exc.code, exc.message) in _SESSION_GONE


# Goal: a call is never said answered when nothing says whether the tool ran.
# What fails: an HTTP status of 400 or more with no JSON-RPC error in its body (a proxy's
# 502 or 504 while the tool runs on upstream, a server framework's 500 page) reaches us as
# the SDK's own -32603 "Server returned an error response", which reads as the tool's error
# answer: the model repeats a call that may have taken effect.
# What we do: those exact words are the call's effect unknown (`SourceGone`), as a lost
# connection is; a server's own -32603, with its own words, stays the tool's error.
_HTTP_ERROR_WITHOUT_ANSWER = "Server returned an error response"


def http_error_without_answer(exc: MCPError) -> bool:
    """Whether `exc` is the SDK's stand-in for an HTTP error status that carried no answer."""
    return exc.code == INTERNAL_ERROR and exc.message == _HTTP_ERROR_WITHOUT_ANSWER


def unknown_effect(server: str, tool: str, log_path: Path) -> SourceGone:
    """The error for a call answered by an HTTP error status with no answer in it."""
    return SourceGone(
        f"MCP server {server!r} (or a proxy in front of it) answered the call of {tool!r} "
        "with an HTTP error and no answer, so whether it took effect is unknown: check "
        f"before you repeat it. Its log is {str(log_path)!r}."
    )


def answer_error(
    server: str, tool: str, exc: MCPError | RuntimeError | ValidationError
) -> ToolOutcome:
    """The error answer for a call the server answered with an error, or with an answer
    toolscript cannot use."""
    if isinstance(exc, MCPError):
        return ToolOutcome(value=f"MCP error {exc.code}: {exc.message}", is_error=True)
    return ToolOutcome(
        value=f"MCP server {server!r} gave an answer to {tool!r} that toolscript cannot use: {exc}",
        is_error=True,
    )


def source_gone(server: str, tool: str, *, closing: bool, log_path: Path) -> SourceGone:
    """The error for a call in flight when its server went away."""
    after = (
        "toolscript was closing it."
        if closing
        else "The next call opens a new session (a local server is started again)."
    )
    return SourceGone(
        f"MCP server {server!r} went away while the call of {tool!r} was in "
        f"flight, so whether it took effect is unknown. {after} "
        f"Its log is {str(log_path)!r}."
    )


def failure_reason(exc: BaseException, cwd: str | None = None) -> str:
    """A one-line reason for a failure, looking inside exception groups of one; `cwd` is
    the server's working folder, if its config gives one."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if (
        cwd is not None
        and isinstance(exc, FileNotFoundError | NotADirectoryError)
        # uvloop's spawn names no file: the folder is looked at instead
        and (exc.filename == cwd or (exc.filename is None and not os.path.isdir(cwd)))
    ):
        return f"its working folder (cwd) does not exist or is not a folder ({cwd})"
    if isinstance(exc, FileNotFoundError):
        return f"the command was not found ({exc.filename or exc})"
    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        return "it closed the connection during the handshake (did the process exit?)"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect ({exc})"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
