"""A tool built by hand from the public names alone, as docs/api/tools.md shows it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import ToolOutcome, ToolSpec


async def add(arguments: dict[str, Any]) -> ToolOutcome:
    if arguments["b"] < 0:
        return ToolOutcome("b must not be negative", is_error=True)
    return ToolOutcome(arguments["a"] + arguments["b"])


SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


@pytest.mark.timeout(30)
async def test_a_tool_spec_made_from_public_names_answers_and_errs(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(tools=[ToolSpec("add", "Add two numbers.", SCHEMA, add)])
    result = await runtime.run(
        "try:\n    await add(a=1, b=-1)\nexcept ToolError as e:\n    said = str(e)\n"
        "(await add(a=1, b=2), said)"
    )
    assert result.status == "ok", result.text
    assert result.value == "(3, 'b must not be negative')"
    assert result.calls.by_fate == {"seen": 2}
