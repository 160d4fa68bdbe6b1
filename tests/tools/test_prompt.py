"""The tool catalogue as Python stubs (docs/design.md#tools-inside-the-script): it compiles and reads naturally."""

from __future__ import annotations

import inspect
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolscript.tools.binding import plans_for
from toolscript.tools.prompt import _docstring, matching_plans, render_prompt
from toolscript.tools.spec import ToolOutcome, ToolSpec


async def answer(arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(value=None)


def spec(name: str, server: str | None, **schema: Any) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"Does {name}.",
        input_schema={"type": "object", **schema},
        handler=answer,
        server=server,
    )


SPECS = [
    spec("send_message", None, properties={"text": {"type": "string"}}, required=["text"]),
    spec(
        "create-issue",
        "github",
        properties={"title": {"type": "string"}, "labels": {"type": "array"}},
        required=["title"],
    ),
    spec(
        "list-issues",
        "github",
        properties={"state": {"enum": ["open", "closed"], "default": "open"}},
    ),
    spec("now", "time"),
]


def compiled(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "tools"}
    exec(compile(source, "<prompt>", "exec", dont_inherit=True), namespace)
    return namespace


def test_the_catalogue_compiles_and_groups_tools_by_server() -> None:
    namespace = compiled(render_prompt(plans_for(SPECS)))
    assert inspect.iscoroutinefunction(namespace["send_message"])
    assert inspect.iscoroutinefunction(namespace["github"].create_issue)
    assert inspect.iscoroutinefunction(namespace["github"].list_issues)
    assert inspect.iscoroutinefunction(namespace["time_"].now)


def test_the_catalogue_reads_as_python_with_a_header_saying_tools_are_awaited() -> None:
    text = render_prompt(plans_for(SPECS))
    assert text.startswith("# Tools you can call")
    assert "await github.create_issue(" in text
    assert (
        "async def send_message(*, text: str, timeout: float | None = None) -> Any:\n"
        '    """Does send_message.' in text
    )
    assert 'class github:\n    """Tools of the MCP server \'github\'."""' in text
    assert (
        "    @staticmethod\n"
        "    async def list_issues(*, state: Literal['open', 'closed'] = 'open', "
        "timeout: float | None = None) -> str | list[Any]:" in text
    )


def test_a_stub_s_signature_is_the_plan_s() -> None:
    plans = plans_for(SPECS)
    namespace = compiled(render_prompt(plans))
    signature = inspect.signature(namespace["github"].create_issue)
    assert str(signature) == (
        "(*, title: str, labels: list[typing.Any] | None = None, timeout: float | None = None)"
        " -> str | list[typing.Any]"
    )


def test_tools_that_could_not_be_bound_are_named_in_a_comment() -> None:
    plans = plans_for([*SPECS, SPECS[0]])
    text = render_prompt(plans)
    assert "# These tools could not be bound and cannot be called:" in text
    assert "#   send_message: another tool has the same key 'send_message'" in text
    compiled(text)


def test_an_empty_catalogue_compiles() -> None:
    compiled(render_prompt([]))


@settings(max_examples=300, deadline=None)
@given(st.text(), st.sampled_from(["", "    ", "        "]))
def test_any_docstring_compiles_to_its_own_text(text: str, indent: str) -> None:
    literal = _docstring(text, indent)
    value = eval(compile(literal, "<doc>", "eval", dont_inherit=True))
    lines = text.split("\n")
    expected = "\n".join([lines[0], *((indent + line) if line else "" for line in lines[1:])])
    if len(lines) > 1:
        expected += "\n" + indent
    assert value == expected


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60), st.text(max_size=20))
def test_any_description_and_names_give_a_catalogue_that_compiles(
    description: str, name: str
) -> None:
    tool = ToolSpec(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": {name: {"description": description}}},
        handler=answer,
        server=name or None,
    )
    compiled(render_prompt(plans_for([tool])))


def test_finding_tools_matches_their_own_words_not_the_stubs_boilerplate() -> None:
    plans = plans_for(SPECS)
    # Every stub says "Seconds to wait for the answer, then ToolTimeout" of its `timeout`:
    # a word of that matches no tool.
    for word in ("seconds", "toolTimeout", "wait", "answer", "effect"):
        assert matching_plans(plans, word) == [], word
    assert [plan["function"] for plan in matching_plans(plans, "labels")] == ["create_issue"]
    assert [plan["function"] for plan in matching_plans(plans, "does now")] == ["now"]
