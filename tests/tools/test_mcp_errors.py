"""Telling a server's own error from the SDK's word that the answer was lost."""

from __future__ import annotations

import pytest
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED

from toolscript.tools.mcp.errors import answer_was_lost, session_expired


@pytest.mark.parametrize(
    "message",
    ["Connection closed", "SSE stream failed: boom", "SSE stream ended without a response"],
)
def test_the_sdks_own_lost_answers_are_lost(message: str) -> None:
    assert answer_was_lost(MCPError(code=CONNECTION_CLOSED, message=message))


@pytest.mark.parametrize(
    "message", ["Connection closed by upstream", "Connection closed: the database is down"]
)
def test_a_servers_own_error_that_begins_like_the_sdks_is_its_answer(message: str) -> None:
    assert not answer_was_lost(MCPError(code=CONNECTION_CLOSED, message=message))


@pytest.mark.parametrize(
    ("code", "message"),
    [(-32600, "Session terminated"), (-32600, "Session not found"), (-32001, "Session not found")],
)
def test_a_session_the_server_no_longer_knows_is_expired(code: int, message: str) -> None:
    assert session_expired(MCPError(code=code, message=message))


@pytest.mark.parametrize("code", [-32000, -32603, 1])
def test_a_tools_own_error_in_a_sessions_words_is_its_answer(code: int) -> None:
    # A tool's error answer, sent after it took effect: made again on a new session, the call
    # would run twice.
    assert not session_expired(MCPError(code=code, message="Session not found"))
