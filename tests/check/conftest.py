"""The catalogue the check is tested against: typed Python tools and the real demo MCP server.

`add_note` and `search_notes` have typed signatures and `TypedDict` returns; the demo server
(tests/mcp_servers/demo_server.py) runs as a real process over stdio, bound as `demo`.
Every handler call is written to `made`, so a test can say that nothing ran.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typing_extensions import TypedDict

from tests.conftest import MakeRuntime
from toolscript import Runtime, tool

DEMO = str(Path(__file__).resolve().parents[1] / "mcp_servers" / "demo_server.py")


class Note(TypedDict):
    id: int
    text: str
    tags: list[str]


def catalogue_tools(made: list[str]) -> list[Any]:
    """Python tools that record each call in `made`."""

    @tool
    async def add_note(text: str, tags: list[str] | None = None) -> Note:
        """Add a note and return it."""
        made.append("add_note")
        return {"id": len(made), "text": text, "tags": tags or []}

    @tool
    async def search_notes(query: str, limit: int = 10) -> list[Note]:
        """Notes whose text holds `query`."""
        made.append("search_notes")
        return [{"id": 1, "text": f"about {query}", "tags": ["found"]}][:limit]

    return [add_note, search_notes]


@pytest.fixture
def made() -> list[str]:
    """The tool handlers called, in order."""
    return []


@pytest.fixture
def start_checked(make_runtime: MakeRuntime, made: list[str]) -> Any:
    """Start a runtime with the check's catalogue and the given `check` mode."""

    async def start(check: str) -> Runtime:
        return await make_runtime(
            tools=catalogue_tools(made),
            mcp_config={"mcpServers": {"demo": {"command": sys.executable, "args": [DEMO]}}},
            check=check,
        )

    return start


def journaled_calls(runtime: Runtime, script_id: str) -> int:
    """How many tool calls the journal holds for the script."""
    return len(runtime.journal.calls(script_id=script_id))
