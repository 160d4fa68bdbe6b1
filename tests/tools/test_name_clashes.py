"""Servers and tools named like Python's own names (issue 14, item 2).

A name that is a standard-library module, a builtin, a keyword or another binding is bound
with a trailing `_`; the stub, the kernel and `tools.<name>` all use that spelling, and the
prompt says why in one line.
"""

from __future__ import annotations

from typing import Any

import pytest

from toolscript import Runtime, tool
from toolscript.kernel.binding import ServerTools, bind
from toolscript.tools.binding import plans_for, why_spelled
from toolscript.tools.prompt import render_prompt
from toolscript.tools.spec import ToolOutcome, ToolSpec


async def answer(arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(value="answered")


def spec(name: str, server: str | None) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"Does {name}.",
        input_schema={"type": "object", "properties": {}},
        handler=answer,
        server=server,
    )


@pytest.mark.parametrize(
    ("name", "spelling", "why"),
    [
        ("time", "time_", "'time' is a standard-library module"),
        ("json", "json_", "'json' is a standard-library module"),
        ("print", "print_", "'print' is a Python builtin"),
        ("class", "class_", "'class' is a Python keyword"),
        ("tools", "tools_", "'tools' is a name the stubs use"),
    ],
)
def test_a_server_named_like_python_s_own_names_gets_a_trailing_underscore_and_says_why(
    name: str, spelling: str, why: str
) -> None:
    plans = plans_for([spec("now", name)])
    assert plans[0]["namespace"] == spelling
    text = render_prompt(plans)
    assert f"class {spelling}:\n" in text
    assert f"Tools of the MCP server {name!r}, bound as `{spelling}` ({why})." in text
    assert (
        f"# Renamed with a trailing _ so imports and builtins still work: `{spelling}` ({why})."
        in text
    )
    assert f"e.g. `result = await {spelling}.now(...)`" in text
    assert f"(also reachable as `tools.{spelling}`)" in text
    bound = bind(plans, answer)  # type: ignore[arg-type]
    assert isinstance(bound.top_level[spelling], ServerTools)
    assert name not in bound.top_level


def test_a_python_tool_named_like_a_module_is_renamed_and_its_docstring_names_it() -> None:
    plans = plans_for([spec("json", None)])
    assert plans[0]["function"] == "json_"
    assert "Its own name: 'json'." in plans[0]["doc"]
    assert "`json_` ('json' is a standard-library module)" in render_prompt(plans)


def test_a_renamed_server_never_takes_a_binding_that_is_already_there() -> None:
    plans = plans_for([spec("now", "time"), spec("time_", None)])
    assert [plan["namespace"] for plan in plans] == ["time__2", None]
    assert plans[1]["function"] == "time_"
    assert "Its own name: 'now' on the MCP server 'time'." in plans[0]["doc"]


def test_a_servers_tool_named_staticmethod_is_renamed_and_the_tools_after_it_keep_theirs() -> None:
    # Its stub `async def staticmethod(...)` sat in the class before the other stubs, so
    # their `@staticmethod` was the tool: the check saw methods taking `self`, and let a
    # call with a wrong keyword through.
    plans = plans_for([spec("staticmethod", "a"), spec("foo", "a")])
    assert [plan["function"] for plan in plans] == ["staticmethod_", "foo"]
    prompt = render_prompt(plans)
    assert "async def staticmethod(" not in prompt
    compile(prompt, "<stubs>", "exec")
    namespace: dict[str, Any] = {}
    exec(prompt, namespace)  # the stubs run: every method is still a static one
    assert isinstance(namespace["a"].__dict__["foo"], staticmethod)


def test_a_tool_whose_python_spelling_differs_names_its_own_name_and_server() -> None:
    (plan,) = plans_for([spec("get-forecast", "weather")])
    assert plan["function"] == "get_forecast"
    assert "Its own name: 'get-forecast' on the MCP server 'weather'." in plan["doc"]
    (same,) = plans_for([spec("forecast", "weather")])
    assert "Its own name" not in same["doc"]


@tool(name="json")
async def json_tool(text: str) -> str:
    """Quote a text."""
    return f"«{text}»"


@pytest.mark.timeout(60)
async def test_a_tool_named_json_works_beside_import_json_in_one_script() -> None:
    async with Runtime(tools=[json_tool], journal=":memory:") as rt:
        result = await rt.shell().run(
            "import json\n"
            "quoted = await json_(text='hi')\n"
            "also = await tools.json_(text='ho')\n"
            "json.dumps([quoted, also], ensure_ascii=False)",
            time_limit=30,
        )
    assert result.status == "ok", result.text
    assert result.value == '\'["«hi»", "«ho»"]\''


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (
            "import time\nawait time.get_current_time()",
            "Hint: `time` here is the module 'time'; the MCP server 'time' is bound as "
            "`time_` (`await time_.get_current_time(...)`).",
        ),
        (
            "await tools.time.get_current_time()",
            "Hint: the MCP server 'time' is bound as `time_` (`tools.time_`).",
        ),
    ],
    ids=["module", "tools"],
)
async def test_a_renamed_server_reached_by_its_own_name_is_an_error_that_names_its_spelling(
    code: str, hint: str
) -> None:
    async with Runtime(
        tools=[spec("get_current_time", "time")], journal=":memory:", check="off"
    ) as rt:
        result = await rt.shell().run(code, time_limit=30)
        fine = await rt.shell().run("import time\nawait time_.get_current_time()")
        other = await rt.shell().run("import os\nos.no_such_thing")
    assert result.status == "error" and result.error is not None, result.text
    assert result.error.rstrip().endswith(hint), result.error
    assert (fine.status, fine.value) == ("ok", "'answered'"), fine.text
    assert other.error is not None and "Hint" not in other.error


def test_a_python_tool_named_like_the_stubs_own_names_is_named_in_the_header() -> None:
    # `tools` is the stubs' own namespace, and `tools_` the server's: the tool is bound as
    # `tools__2`, and the header says so, not only its docstring. A name Python cannot
    # spell as it is needs no such line.
    specs = [spec("tools", None), spec("read", "tools"), spec("get-weather", None)]
    prompt = render_prompt(plans_for(specs))
    header = [line for line in prompt.splitlines() if line.startswith("# Also renamed: ")]
    assert header == [
        "# Also renamed: `tools__2` (the tool 'tools': 'tools' is a name the stubs use)."
    ]


def test_each_renaming_gives_its_own_reason() -> None:
    assert why_spelled("__builtins__", "_builtins__") == (
        "'__builtins__' starts with two underscores, as the names Python itself uses do"
    )
    assert (
        why_spelled("get-forecast", "get_forecast") == "'get-forecast' is not a Python identifier"
    )
    assert "NFKC" in why_spelled("\ufb01le", "file")
