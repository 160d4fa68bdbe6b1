"""A tool built by hand from the public names alone, as docs/api/tools.md shows it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime, ToolOutcome, ToolSpec


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


async def _answer(arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(1)


@pytest.mark.parametrize(
    ("fields", "error", "words"),
    [
        ({"name": ""}, ValueError, "name must be a non-empty string"),
        ({"handler": 5}, TypeError, "handler must be an async function"),
        ({"input_schema": {"type": "string"}}, ValueError, "input_schema must be a JSON Schema"),
        ({"input_schema": ["x"]}, ValueError, "input_schema must be a JSON Schema"),
        ({"timeout": 0}, ValueError, "timeout must be a positive, finite number"),
        ({"timeout": float("nan")}, ValueError, "timeout must be a positive, finite number"),
    ],
    ids=[
        "empty name",
        "handler not callable",
        "schema of a string",
        "schema a list",
        "timeout 0",
        "timeout nan",
    ],
)
def test_a_hand_built_spec_no_call_could_reach_is_refused_by_the_runtime_naming_the_field(
    fields: dict[str, Any], error: type[Exception], words: str
) -> None:
    spec = ToolSpec(
        **{
            "name": "t",
            "description": "A tool.",
            "input_schema": {"type": "object"},
            "handler": _answer,
            **fields,
        }
    )
    with pytest.raises(error, match=words):
        Runtime(tools=[spec])


def test_a_hand_built_spec_whose_schema_allows_an_object_among_other_types_is_taken() -> None:
    spec = ToolSpec("t", "A tool.", {"type": ["object", "null"], "properties": {}}, _answer)
    Runtime(tools=[spec])  # taken: a call with named arguments can match it
