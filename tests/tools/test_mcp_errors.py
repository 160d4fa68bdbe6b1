"""Telling a server's own error from the SDK's word that the answer was lost."""

from __future__ import annotations

import pytest
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED

from toolscript.tools.mcp.errors import answer_was_lost


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
