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


@pytest.mark.timeout(30)
async def test_calls_kept_in_a_list_or_a_dict_are_told_once(rt: Runtime) -> None:
    # The calls of a gather that was never made: each named, none made, told once.
    shell = rt.shell("s")
    made = await shell.run(
        "calls = [echo(x=i) for i in range(3)]\nby_name = {'a': echo(x=9)}\nlen(calls)"
    )
    assert made.status == "ok", made.text
    assert "4 tool call(s) were created but never awaited" in made.note, made.note
    assert made.calls.made == 0
    assert NEVER not in (await shell.run("1")).note
    gathered = await shell.run("import asyncio\nawait asyncio.gather(*calls)")
    assert gathered.value == "[0, 1, 2]", gathered.text
    assert NEVER not in gathered.note


@pytest.mark.timeout(30)
async def test_containers_are_looked_into_only_so_far_in_all(rt: Runtime) -> None:
    # Ten thousand items in all, whatever the script holds: past them, a call is told only
    # when it is dropped.
    shell = rt.shell("s")
    big = await shell.run("big = list(range(1_000_000)) + [echo(x=1)]\nbig[:1]")
    assert big.status == "ok", big.text
    assert NEVER not in big.note
    many = await shell.run("a = list(range(10_000))\nb = [echo(x=2)]")
    assert many.status == "ok", many.text
    assert NEVER not in many.note, many.note
