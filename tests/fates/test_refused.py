"""`refused`: calls that were never dispatched, so they did not happen."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime, tool
from toolscript.tools.spec import ToolOutcome, ToolSpec

from .conftest import call_line


def _tool_with_an_unspellable_parameter(dispatched: list[dict[str, Any]]) -> ToolSpec:
    # "@@" cannot be spelled as a Python identifier, so the bound function takes **kwargs,
    # and an unknown name reaches the host, whose validation refuses it.
    async def handler(args: dict[str, Any]) -> ToolOutcome:
        dispatched.append(args)
        return ToolOutcome("painted")

    return ToolSpec(
        name="paint",
        description="Paint a wall.",
        input_schema={
            "type": "object",
            "properties": {"wall": {"type": "string"}, "@@": {"type": "string"}},
            "required": ["wall"],
            "additionalProperties": False,
        },
        handler=handler,
    )


@pytest.mark.timeout(20)
async def test_a_call_with_an_unknown_argument_is_refused_naming_it(
    make_runtime: MakeRuntime,
) -> None:
    dispatched: list[dict[str, Any]] = []
    runtime = await make_runtime(tools=[_tool_with_an_unspellable_parameter(dispatched)])
    code = (
        "try:\n"
        "    await paint(wall='north', **{'colour': 'red'})\n"
        "except ToolError as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.stdout == "ToolError paint: unknown argument 'colour'\n"
    assert dispatched == []
    [record] = result.calls.records
    assert (record.tool, record.fate, record.cause) == ("paint", "refused", None)
    assert record.answer_brief is not None and "'colour'" in record.answer_brief
    assert result.calls.by_fate == {"refused": 1}
    line = call_line(result.text, "paint", record.args_brief)
    assert "refused" in line and "did not happen" in line and "'colour'" in line
    assert runtime.journal.uncertain() == []


@pytest.mark.timeout(20)
async def test_an_unknown_keyword_on_a_spelled_signature_fails_in_python_and_makes_no_call(
    runtime: Runtime,
) -> None:
    result = await runtime.run("await fast(x=1, colour='red')")
    assert result.status == "error", result.text
    assert result.error is not None
    assert "TypeError" in result.error and "'colour'" in result.error
    assert result.calls.made == 0 and result.calls.records == ()


@pytest.mark.timeout(20)
async def test_a_call_with_an_argument_of_the_wrong_type_is_refused_naming_it(
    runtime: Runtime,
) -> None:
    result = await runtime.run("await fast(x='seven')")
    assert result.status == "error", result.text
    assert result.error is not None
    assert "ToolError: fast: argument 'x' must be of type integer" in result.error
    [record] = result.calls.records
    assert (record.fate, record.cause, record.answered_at) == ("refused", None, None)
    assert record.args_brief == "x='seven'"
    assert "refused before it was sent" in call_line(result.text, "fast", "x='seven'")
    assert runtime.journal.uncertain() == []
    [journaled] = runtime.journal.calls(script_id=result.script_id)
    assert (journaled.fate, journaled.uncertain) == ("refused", False)


def _echo_tool(dispatched: list[Any]) -> Any:
    @tool
    async def echo(value: Any) -> str:
        """Take any value."""
        dispatched.append(value)
        return "echoed"

    return echo


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("argument", "shown", "why"),
    [
        ("{'tags': {1, 2}}", "{'tags': {1, 2}}", "set is not JSON serializable"),
        ("object()", "<object>", "object is not JSON serializable"),
    ],
)
async def test_a_call_whose_arguments_cannot_be_sent_as_json_is_refused_naming_why(
    make_runtime: MakeRuntime, argument: str, shown: str, why: str
) -> None:
    dispatched: list[Any] = []
    runtime = await make_runtime(tools=[_echo_tool(dispatched)])
    code = f"try:\n    await echo(value={argument})\nexcept ToolError as error:\n    print(error)\n"
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert "echo: the call was not sent: its arguments cannot be sent as JSON" in result.stdout
    assert why in result.stdout
    assert dispatched == []
    [record] = result.calls.records
    assert (record.fate, record.cause) == ("refused", None)
    assert record.args_brief == f"value={shown}"
    assert why in call_line(result.text, "echo", f"value={shown}")


@pytest.mark.timeout(20)
async def test_a_tool_call_never_awaited_is_named_in_the_note_and_made_no_call(
    runtime: Runtime,
) -> None:
    code = "fast(x=1)\nkept = slow(x=2)\n'done'"
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert result.calls.made == 0 and result.calls.by_fate == {}
    assert "2 tool call(s) were created but never awaited, so they did not run" in result.note
    assert "fast" in result.note and "slow" in result.note
    assert "never awaited" in result.text
    assert runtime.journal.calls() == []
