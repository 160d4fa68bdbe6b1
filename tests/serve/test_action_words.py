"""serve says the words of `toolscript.actions`, unchanged, and adds only MCP's shape (in-process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client

from toolscript import Runtime
from toolscript.actions import Actions, Answer
from toolscript.serve import ToolscriptServer

from .conftest import text

pytestmark = pytest.mark.timeout(30)

BAD_RUNS: list[dict[str, Any]] = [
    {"source": "x"},
    {"code": "1", "time_limit_s": 0},
    {"code": "1", "time_limit_s": 601},
    {"code": "1", "background": "yes"},
]


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with Runtime(journal=":memory:", pool_size=0) as rt:
        yield rt


def said(runtime: Runtime, arguments: dict[str, Any]) -> str:
    """What `toolscript.actions` refuses these run_python arguments with."""
    answer = Actions(runtime.shell("words"), max_time_limit=runtime.max_time_limit).check_run(
        arguments
    )
    assert isinstance(answer, Answer)
    return answer.text


async def test_bad_run_python_arguments_are_refused_in_the_words_of_the_actions(
    runtime: Runtime,
) -> None:
    async with Client(ToolscriptServer(runtime).server) as client:
        for arguments in BAD_RUNS:
            refused = await client.call_tool("run_python", arguments)
            assert refused.is_error and refused.structured_content is None
            assert text(refused) == said(runtime, arguments)


async def test_status_of_an_unknown_script_and_an_unknown_tool_are_refused_in_those_words(
    runtime: Runtime,
) -> None:
    async with Client(ToolscriptServer(runtime).server) as client:
        bad = await client.call_tool("script_status", {"script_id": ""})
        unknown = await client.call_tool("cancel_script", {"script_id": "mcp-1:bg-nope"})
        nothing = await client.call_tool("frobnicate", {})
    assert bad.is_error and text(bad) == (
        "script_status was not run: `script_id` must be the id run_python gave, a string."
    )
    assert unknown.is_error and text(unknown).startswith(
        "There is no background script 'mcp-1:bg-nope' here (known: none)."
    )
    assert nothing.is_error and text(nothing) == (
        "There is no tool named 'frobnicate'; the tools are run_python, script_status, "
        "cancel_script."
    )


async def test_a_huge_script_id_or_tool_name_is_not_said_back_whole(runtime: Runtime) -> None:
    huge = "x" * 100_000
    async with Client(ToolscriptServer(runtime).server) as client:
        unknown = await client.call_tool("script_status", {"script_id": huge})
        nothing = await client.call_tool(huge, {})
    for answer in (unknown, nothing):
        assert answer.is_error
        assert "x" * 200 + "…" in text(answer) and len(text(answer)) < 1_000


async def test_a_second_run_while_one_runs_is_refused_with_what_the_client_can_do() -> None:
    import asyncio

    from toolscript import tool

    entered, opened = asyncio.Event(), asyncio.Event()

    @tool
    async def hold() -> str:
        """Wait until the test lets go."""
        entered.set()
        await opened.wait()
        return "let go"

    async with (
        Runtime(tools=[hold], journal=":memory:", pool_size=0) as runtime,
        Client(ToolscriptServer(runtime).server) as client,
    ):
        first = asyncio.ensure_future(client.call_tool("run_python", {"code": "await hold()"}))
        await asyncio.wait_for(entered.wait(), 20)
        second = await client.call_tool("run_python", {"code": "1 + 1"})
        opened.set()
        done = await first
    refused = text(second)
    assert second.is_error and "already running" in refused, refused
    # An MCP client has one shell: it can wait, or run the script in the background.
    assert "background=true" in refused and "another shell" not in refused, refused
    assert not done.is_error and "let go" in text(done)
