"""The example notes server (examples/notes_server.py), started from examples/mcp.json."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from toolscript.tools.mcp import MCPTools
from toolscript.tools.spec import ToolOutcome

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[2]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def notes(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPTools]:
    # From another folder: examples/mcp.json names the server relative to its own folder.
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("elsewhere"))
        tools = await MCPTools.open(ROOT / "examples" / "mcp.json", tmp_path_factory.mktemp("logs"))
    try:
        yield tools
    finally:
        await asyncio.wait_for(tools.aclose(), 15)


async def call(tools: MCPTools, tool: str, **arguments: Any) -> ToolOutcome:
    [spec] = [spec for spec in tools.specs() if spec.name == tool]
    return await spec.handler(arguments)


async def test_the_notes_server_starts_from_the_example_config_with_its_four_tools(
    notes: MCPTools,
) -> None:
    assert notes.failures == {}
    assert {spec.name for spec in notes.specs()} == {
        "add_note",
        "list_notes",
        "search_notes",
        "delete_note",
    }
    assert all(spec.server == "notes" for spec in notes.specs())


async def test_notes_can_be_added_listed_by_tag_searched_and_deleted(notes: MCPTools) -> None:
    first = (await call(notes, "add_note", title="Milk", text="Buy milk", tags=["home"])).value
    second = (await call(notes, "add_note", title="Deploy", text="Ship on Friday")).value
    assert (first["title"], first["tags"]) == ("Milk", ["home"])
    assert second["tags"] == []
    assert second["id"] != first["id"]

    tagged = (await call(notes, "list_notes", tag="home")).value
    assert [note["title"] for note in tagged["notes"]] == ["Milk"]
    found = (await call(notes, "search_notes", query="FRIDAY")).value
    assert [note["title"] for note in found["notes"]] == ["Deploy"]

    deleted = await call(notes, "delete_note", id=second["id"])
    assert deleted == ToolOutcome(value=f"Deleted note {second['id']} ('Deploy').")
    again = await call(notes, "delete_note", id=second["id"])
    assert again.is_error is True
    assert f"no note with id {second['id']}" in again.value


async def test_the_demo_script_runs_against_the_server(notes: MCPTools) -> None:
    # Until `toolscript exec` exists, bind the tools as plain async functions that return the
    # answer's value, and run the script as a cell with top-level await.
    async def bound(name: str, **arguments: Any) -> Any:
        outcome = await call(notes, name, **arguments)
        assert outcome.is_error is False, outcome.value
        return outcome.value

    namespace = types.SimpleNamespace(
        **{
            spec.name: (lambda name: lambda **arguments: bound(name, **arguments))(spec.name)
            for spec in notes.specs()
        }
    )
    source = (ROOT / "examples" / "notes_demo.py").read_text()
    code = compile(source, "notes_demo.py", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        await eval(code, {"notes": namespace})
    assert "notes mention coffee" in printed.getvalue()
    assert "Deleted note" in printed.getvalue()
