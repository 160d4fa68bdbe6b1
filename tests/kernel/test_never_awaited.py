"""A tool call created but never awaited is told once, in the result of the script that made it."""

from __future__ import annotations

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime, tool


@tool
async def echo(x: int) -> int:
    """Echo x."""
    return x


@tool(name="echo")
async def echo_again(x: int) -> int:
    """A second tool with the same name."""
    return -x


NEVER = "were created but never awaited"


@pytest.fixture
async def rt(make_runtime: MakeRuntime) -> Runtime:
    return await make_runtime(tools=[echo, echo_again])


@pytest.mark.timeout(30)
async def test_a_call_kept_in_a_variable_is_told_once_and_not_again_when_dropped(
    rt: Runtime,
) -> None:
    shell = rt.shell("s")
    first = await shell.run("c = echo(x=1)")
    assert NEVER in first.note
    assert NEVER not in (await shell.run("1")).note
    assert NEVER not in (await shell.run("del c")).note
    assert NEVER not in (await shell.run("2")).note


@pytest.mark.timeout(30)
async def test_a_call_returned_as_the_value_is_told_in_its_own_script_not_the_next(
    rt: Runtime,
) -> None:
    shell = rt.shell("s")
    made = await shell.run("echo(x=2)")
    assert NEVER in made.note
    assert made.calls.made == 0
    after = await shell.run("await echo(x=5)")
    assert NEVER not in after.note
    assert after.value == "5"


@pytest.mark.timeout(30)
async def test_two_tools_with_one_name_the_second_is_named_as_not_bound_and_the_first_answers(
    rt: Runtime,
) -> None:
    result = await rt.run("await echo(x=3)")
    assert result.value == "3"
    assert "The tool echo could not be bound and is missing: another tool has the same key" in (
        result.note
    )
