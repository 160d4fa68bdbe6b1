"""What a runtime tells about its tools: `Runtime.prompt(matching)` and `Runtime.tool_names`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from toolscript import Runtime, ToolSpec, tool
from toolscript.tools.spec import ToolOutcome

pytestmark = pytest.mark.timeout(30)


def _crm(name: str, description: str) -> ToolSpec:
    async def handler(arguments: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(value="done")

    return ToolSpec(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": {"query": {"type": "string"}}},
        handler=handler,
        server="crm",
    )


@tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    specs = [_crm("find-contact", "Find a contact by name."), _crm("log-call", "Log a call.")]
    async with Runtime(tools=[weather, *specs], journal=":memory:", pool_size=0) as rt:
        yield rt


async def test_tool_names_are_spelled_as_a_script_calls_them(runtime: Runtime) -> None:
    assert runtime.tool_names() == ["weather", "crm.find_contact", "crm.log_call"]


async def test_matching_keeps_the_tools_whose_server_name_or_description_contains_it(
    runtime: Runtime,
) -> None:
    assert runtime.tool_names("CONTACT") == ["crm.find_contact"]
    assert runtime.tool_names("crm") == ["crm.find_contact", "crm.log_call"]
    assert runtime.tool_names("in a city") == ["weather"]
    assert runtime.tool_names("nothing like it") == []
    assert runtime.tool_names("") == runtime.tool_names()


async def test_a_matching_prompt_has_only_the_stubs_of_the_matching_tools(
    runtime: Runtime,
) -> None:
    everything = runtime.prompt()
    some = runtime.prompt("contact")
    assert "async def find_contact(" in some and "async def log_call(" not in some
    assert "async def weather(" not in some
    assert all(stub in everything for stub in ("find_contact", "log_call", "weather"))
    compile(some, "<prompt>", "exec", dont_inherit=True)


def _memory(name: str, description: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": {}},
        handler=_crm(name, description).handler,
        server="memory",
    )


async def test_every_word_of_a_query_must_match_and_names_rank_above_descriptions() -> None:
    specs = [
        _crm("find-contact", "Find a contact by name."),
        _memory("read_graph", "Read the entire knowledge graph."),
        _memory("create_entities", "Create multiple new entities in the knowledge graph."),
        _memory("delete_entities", "Delete multiple entities from the knowledge graph."),
    ]
    async with Runtime(tools=specs, journal=":memory:", pool_size=0) as rt:
        assert rt.tool_names("memory entities") == [
            "memory.create_entities",
            "memory.delete_entities",
        ]
        assert rt.tool_names("create entity") == ["memory.create_entities"]
        assert rt.tool_names("graph")[0] == "memory.read_graph"
        assert set(rt.tool_names("GRAPH")) == {
            "memory.read_graph",
            "memory.create_entities",
            "memory.delete_entities",
        }
        assert rt.tool_names("memory contact") == []
        assert rt.tool_summaries("entities delete") == [
            ("memory.delete_entities", "Delete multiple entities from the knowledge graph.")
        ]
        stubs = rt.prompt("memory entities")
        assert stubs.index("async def create_entities(") < stubs.index("async def delete_entities(")
        assert "read_graph" not in stubs
