"""Listing an MCP server's tools across pages."""

from __future__ import annotations

from typing import Any

import mcp.types as types
import pytest

from toolscript.tools.mcp.connection import Connection


class _Pages:
    """A session whose server answers every page with the same tools and a next cursor, as a
    server that ignores the cursor does."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.asked = 0

    async def list_tools(self, params: Any = None) -> types.ListToolsResult:
        self.asked += 1
        tools = [
            types.Tool(name=name, input_schema={"type": "object", "properties": {}})
            for name in self.names
        ]
        return types.ListToolsResult(tools=tools, next_cursor="again")


async def _noop(message: Any) -> None:
    return None


@pytest.mark.asyncio
async def test_a_tool_listed_twice_or_a_page_served_again_is_listed_once() -> None:
    connection = Connection("loop", lambda: None, _noop)  # type: ignore[arg-type,return-value]
    pages = _Pages(["a", "b", "a"])
    connection._session = pages  # type: ignore[assignment]
    tools = await connection.list_tools()
    assert [tool.name for tool in tools] == ["a", "b"]
    assert pages.asked == 2  # the cursor came back: no third page
