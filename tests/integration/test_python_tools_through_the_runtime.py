"""Python tools inside scripts: `@tool` functions answered by a real runtime and kernel.

The handlers run in this test process (the host), so a test can see exactly what each one
received, and whether it ran at all.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel

from toolscript import Runtime, ToolSpec, tool
from toolscript.tools.spec import ToolOutcome

from .conftest import error_of, run, value_of

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Point(BaseModel):
    """A point on the plane."""

    x: int
    y: int


received: list[tuple[str, Any]] = []
"""`(tool, what its handler got)` for every handler that ran."""

released = threading.Event()


@tool
def greet(name: str, punctuation: str = "!") -> str:
    """Greet someone.

    Args:
        name: Who to greet.
        punctuation: What ends the greeting.
    """
    received.append(("greet", name))
    return f"Hello, {name}{punctuation}"


@tool
async def shout(text: str) -> str:
    """Say it louder."""
    await asyncio.sleep(0)
    return text.upper()


@tool
def distance(a: Point, b: Point) -> float:
    """The distance between two points."""
    received.append(("distance", (a, b)))
    return float(((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5)


@tool(timeout=10)
def wait_for_release() -> bool:
    """Block this thread until `release` runs (bounded), and say whether it did."""
    return released.wait(5)


@tool
async def release() -> None:
    """Let `wait_for_release` go."""
    released.set()


@tool
def explode(how: str) -> None:
    """Always fails."""
    raise ValueError(f"the disk is {how}")


@tool
def count(n: int) -> int:
    """Record that it ran with `n`."""
    received.append(("count", n))
    return n


@tool(name="!!!")
def unspellable() -> None:
    """A tool whose name cannot be spelled in Python."""
    received.append(("!!!", None))


async def _never_called(arguments: dict[str, Any]) -> ToolOutcome:
    received.append(("legacy", arguments))
    return ToolOutcome(value="ran")


BROKEN_SCHEMA = ToolSpec(
    name="legacy",
    description="A tool whose input schema is not valid JSON Schema.",
    input_schema={"type": "object", "properties": {"x": {"type": 12}}},
    handler=_never_called,
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rt() -> AsyncIterator[Runtime]:
    tools = [greet, shout, distance, wait_for_release, release, explode, count, unspellable]
    runtime = Runtime(tools=[*tools, BROKEN_SCHEMA], journal=":memory:", grace=0.5)
    await asyncio.wait_for(runtime.start(), 30)
    try:
        yield runtime
    finally:
        await asyncio.wait_for(runtime.aclose(), 20)


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    received.clear()
    released.clear()


async def test_a_sync_tool_is_called_with_its_arguments_and_its_default(rt: Runtime) -> None:
    code = "(await greet(name='Ada'), await greet(name='Bob', punctuation='?'))"
    assert await value_of(rt, code) == ("Hello, Ada!", "Hello, Bob?")
    assert received == [("greet", "Ada"), ("greet", "Bob")]


async def test_an_async_tool_is_awaited_in_the_host(rt: Runtime) -> None:
    assert await value_of(rt, "await shout(text='quiet')") == "QUIET"


async def test_pydantic_typed_parameters_reach_the_function_as_models(rt: Runtime) -> None:
    code = "await distance(a={'x': 0, 'y': 0}, b={'x': 3, 'y': 4})"
    assert await value_of(rt, code) == 5.0
    assert received == [("distance", (Point(x=0, y=0), Point(x=3, y=4)))]


async def test_a_model_argument_that_does_not_fit_is_refused_naming_where(rt: Runtime) -> None:
    message, _ = await error_of(rt, "distance(a={'x': 0, 'y': 0}, b={'x': 'three', 'y': 4})")
    assert message.startswith("distance: argument 'b' at ['x'] must be of type integer")
    assert received == []


@pytest.mark.timeout(30)
async def test_a_sync_tool_that_blocks_does_not_block_other_calls(rt: Runtime) -> None:
    code = """
import asyncio
released, _ = await asyncio.gather(wait_for_release(), release())
released
"""
    assert await value_of(rt, code) is True


async def test_an_exception_in_a_tool_raises_tool_error_with_its_type_and_message(
    rt: Runtime,
) -> None:
    message, result = await error_of(rt, "explode(how='full')")
    assert message == "ValueError: the disk is full"
    [record] = result.calls.records
    assert (record.tool, record.fate, record.is_error) == ("explode", "seen", True)


async def test_an_invalid_call_is_refused_without_running_the_tool_naming_the_argument(
    rt: Runtime,
) -> None:
    message, result = await error_of(rt, "count(n='seven')")
    assert message == "count: argument 'n' must be of type integer, got 'seven'"
    assert received == []
    [record] = result.calls.records
    assert (record.fate, record.is_error) == ("refused", True)
    assert "refused before it was sent" in result.text


async def test_an_unknown_keyword_is_a_type_error_in_the_script_and_nothing_is_sent(
    rt: Runtime,
) -> None:
    message, result = await error_of(rt, "count(m=1)", "TypeError")
    assert message == "count() got an unexpected keyword argument 'm'"
    assert result.calls.made == 0
    assert received == []


async def test_a_tool_coroutine_never_awaited_is_named_in_the_note_and_did_not_run(
    rt: Runtime,
) -> None:
    result = await run(rt, "count(n=1)\n'done'")
    assert result.status == "ok", result.text
    assert "1 tool call(s) were created but never awaited, so they did not run: count" in (
        result.note
    )
    assert result.note in result.text
    assert result.calls.made == 0
    assert received == []


async def test_a_tool_that_cannot_be_bound_is_named_with_why_and_the_others_work(
    rt: Runtime,
) -> None:
    result = await run(rt, "await count(n=2)")
    assert result.status == "ok", result.text
    assert result.value == "2"
    assert "The tool !!! could not be bound and is missing" in result.note
    assert "the tool name '!!!' cannot be spelled in Python" in result.note
    assert result.note in result.text
    assert "#   !!!: the tool name '!!!' cannot be spelled in Python" in rt.prompt()
    assert received == [("count", 2)]


async def test_a_tool_whose_schema_is_broken_is_bound_and_its_calls_are_refused_saying_why(
    rt: Runtime,
) -> None:
    message, _ = await error_of(rt, "legacy(x=1)")
    assert message.startswith("legacy: the tool's input schema is broken (")
    assert message.endswith("so its arguments cannot be checked")
    assert received == []
