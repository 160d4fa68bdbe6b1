"""What the client's model reads: the tool list, small and large catalogues (in-process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from toolscript import Runtime, ToolSpec
from toolscript.serve import ToolscriptServer
from toolscript.serve.description import NAMES_LIMIT, STUBS_LIMIT, SUMMARIES_LIMIT
from toolscript.tools.spec import ToolOutcome


def _specs(count: int, server: str = "crm") -> list[ToolSpec]:
    async def handler(arguments: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(value="done")

    return [
        ToolSpec(
            name=f"find-record-{number}",
            description=f"Find records of kind {number}. " + "Details. " * 30,
            input_schema={
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
            handler=handler,
            server=server,
        )
        for number in range(count)
    ]


async def _tools(runtime: Runtime) -> dict[str, Any]:
    async with Client(ToolscriptServer(runtime).server) as client:
        listed = await client.list_tools()
        return {tool.name: tool for tool in listed.tools}


@pytest.mark.timeout(30)
async def test_a_small_catalogue_is_described_as_stubs_in_run_python() -> None:
    async with Runtime(tools=_specs(3), journal=":memory:", pool_size=0) as runtime:
        tools = await _tools(runtime)
    assert set(tools) == {"run_python", "script_status", "cancel_script"}
    description = tools["run_python"].description or ""
    assert "async def find_record_1(*, query: str" in description
    for promise in ("await", "stay for your next", "may still take effect", "exit code"):
        assert promise in description


@pytest.mark.timeout(30)
async def test_a_large_catalogue_is_named_and_its_stubs_are_found_with_list_tools() -> None:
    async with Runtime(tools=_specs(60), journal=":memory:", pool_size=0) as runtime:
        assert len(runtime.prompt()) > STUBS_LIMIT
        async with Client(ToolscriptServer(runtime).server) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert "list_tools" in listed
            description = listed["run_python"].description or ""
            assert "async def" not in description and "find_record_59" in description
            assert "list_tools" in description
            assert "crm (60 tools):\n  find_record_0: Find records of kind 0.\n" in description
            found = await client.call_tool("list_tools", {"query": "kind 42."})
            assert found.structured_content is not None
            assert found.structured_content["matched"] == 1
            assert "async def find_record_42(*, query: str" in found.structured_content["stubs"]
            nothing = await client.call_tool("list_tools", {"query": "no such words"})
            assert nothing.is_error
            long = await client.call_tool("list_tools", {"query": "nothing " * 20_000})
            assert long.is_error and len(str(long.content)) < 1_000
            extra = await client.call_tool("list_tools", {"query": "kind", "x": 1})
            assert extra.is_error and "takes only query, not 'x'" in str(extra.content)
            assert listed["list_tools"].input_schema.get("additionalProperties") is False


@pytest.mark.timeout(30)
async def test_list_tools_for_a_server_that_did_not_start_says_so(tmp_path: Path) -> None:
    config = {"mcpServers": {"github": {"command": str(tmp_path / "no-such-command")}}}
    async with Runtime(
        tools=_specs(60), mcp_config=config, journal=":memory:", pool_size=0
    ) as runtime:
        assert set(runtime.mcp_failures) == {"github"}
        async with Client(ToolscriptServer(runtime).server) as client:
            nothing = await client.call_tool("list_tools", {"query": "github issues"})
    said = str(nothing.content)
    assert nothing.is_error and "the MCP server 'github' did not start" in said, said


@pytest.mark.timeout(30)
async def test_list_tools_is_no_tool_where_it_is_not_offered() -> None:
    async with (
        Runtime(tools=_specs(3), journal=":memory:", pool_size=0) as runtime,
        Client(ToolscriptServer(runtime).server) as client,
    ):
        called = await client.call_tool("list_tools", {"query": "kind"})
    assert called.is_error and "list_tools" in str(called.content)
    assert "async def" not in str(called.content)


@pytest.mark.timeout(30)
async def test_past_the_summaries_limit_the_description_names_the_tools_by_server() -> None:
    specs = _specs(250) + _specs(2, server="other")
    async with Runtime(tools=specs, journal=":memory:", pool_size=0) as runtime:
        tools = await _tools(runtime)
        summaries = sum(len(f"  {name}: {about}") for name, about in runtime.tool_summaries())
    assert summaries > SUMMARIES_LIMIT
    description = tools["run_python"].description or ""
    assert "Find records of kind" not in description
    assert "crm: find_record_0, find_record_1," in description
    assert "other: find_record_0, find_record_1" in description
    assert len(description) < STUBS_LIMIT + NAMES_LIMIT
