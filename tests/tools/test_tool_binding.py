"""Binding plans and the functions the kernel builds from them (docs/design.md#tools-inside-the-script, issue 3).

The kernel's binding module is loaded in-process here; a version inside the real kernel
subprocess belongs with the kernel's own tests.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import keyword
import pydoc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolscript.kernel.binding import Bound, ServerTools, bind
from toolscript.tools.binding import plan_for, plans_for, spell
from toolscript.tools.prompt import render_prompt
from toolscript.tools.spec import ToolOutcome, ToolSpec


async def answer(arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(value=arguments)


def spec(
    name: str,
    properties: dict[str, Any] | None = None,
    required: list[str] | None = None,
    server: str | None = "files",
    description: str = "A tool.",
    **more: Any,
) -> ToolSpec:
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required is not None:
        schema["required"] = required
    return ToolSpec(
        name=name,
        description=description,
        input_schema=schema,
        handler=answer,
        server=server,
        **more,
    )


class FakeInvoke:
    """Records each call as (key, arguments, timeout) and answers with a fixed value."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], float | None]] = []

    async def __call__(self, key: str, arguments: dict[str, Any], timeout: float | None) -> Any:
        self.calls.append((key, arguments, timeout))
        return "answered"


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 5))


def stubs_of(plans: list[dict[str, Any]]) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "tools"}  # the module the kernel's types are in
    exec(compile(render_prompt(plans), "<prompt>", "exec", dont_inherit=True), namespace)
    return namespace


def live_and_stub(plans: list[dict[str, Any]], bound: Bound) -> list[tuple[Any, Any]]:
    stubs = stubs_of(plans)
    pairs = []
    for plan in plans:
        if "error" in plan:
            continue
        if plan["namespace"] is None:
            pairs.append((bound.top_level[plan["function"]], stubs[plan["function"]]))
        else:
            live = getattr(bound.servers[plan["namespace"]], plan["function"])
            stub = getattr(stubs[plan["namespace"]], plan["function"])
            pairs.append((live, stub))
    return pairs


AWKWARD = spec(
    "write-file",
    {
        "file-path": {"type": "string", "description": "Where to write."},
        "class": {"type": "integer", "default": 3},
        "kwargs": {"type": "object", "description": "Options of its own."},
        "from": {"type": "string"},
    },
    required=["file-path", "kwargs"],
)


def test_parameters_named_file_path_class_kwargs_and_from_are_spelled_and_mapped_back() -> None:
    plan = plan_for(AWKWARD)
    invoke = FakeInvoke()
    bound = bind([plan], invoke)
    write = bound.servers["files"].write_file
    signature = inspect.signature(write)
    assert list(signature.parameters) == ["file_path", "class_", "kwargs", "from_", "timeout"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in signature.parameters.values())
    assert signature.parameters["file_path"].default is inspect.Parameter.empty
    assert signature.parameters["kwargs"].default is inspect.Parameter.empty
    assert signature.parameters["class_"].default == 3

    result = run(write(file_path="/tmp/a", class_=4, kwargs={"mode": "w"}, from_="me"))

    assert result == "answered"
    assert invoke.calls == [
        (
            "files/write-file",
            {"file-path": "/tmp/a", "class": 4, "kwargs": {"mode": "w"}, "from": "me"},
            None,
        )
    ]


def test_a_tool_that_declares_kwargs_keeps_its_whole_signature_and_its_prompt_compiles() -> None:
    plan = plan_for(AWKWARD)
    assert plan["catch_all"] is None
    assert plan["extra"] == []
    stubs = stubs_of([plan])
    stub = stubs["files"].write_file
    assert "kwargs" in inspect.signature(stub).parameters
    assert inspect.signature(stub) == inspect.signature(
        bind([plan], FakeInvoke()).servers["files"].write_file
    )


def test_a_renamed_parameter_is_named_in_the_docstring_with_its_own_name() -> None:
    plan = plan_for(AWKWARD)
    assert "file_path (sent as 'file-path'): Where to write." in plan["doc"]
    assert "class_ (sent as 'class')" in plan["doc"]


def test_omitted_optional_parameters_are_not_sent() -> None:
    invoke = FakeInvoke()
    write = bind([plan_for(AWKWARD)], invoke).servers["files"].write_file
    run(write(file_path="/a", kwargs={}))
    assert invoke.calls[0][1] == {"file-path": "/a", "kwargs": {}}


def test_an_optional_parameter_without_a_default_shows_none_and_none_is_not_sent() -> None:
    plan = plan_for(AWKWARD)
    from_ = next(p for p in plan["parameters"] if p["name"] == "from")
    assert from_["annotation"] == "str | None"
    assert from_["default_text"] == "None"
    invoke = FakeInvoke()
    write = bind([plan], invoke).servers["files"].write_file
    run(write(file_path="/a", kwargs={}, from_=None))
    assert "from" not in invoke.calls[0][1]


def test_a_missing_required_argument_is_a_python_type_error_before_anything_is_sent() -> None:
    invoke = FakeInvoke()
    write = bind([plan_for(AWKWARD)], invoke).servers["files"].write_file
    with pytest.raises(TypeError, match="file_path"):
        run(write(kwargs={}))
    assert invoke.calls == []


def test_the_call_timeout_is_passed_to_invoke_and_not_sent_as_an_argument() -> None:
    invoke = FakeInvoke()
    write = bind([plan_for(AWKWARD)], invoke).servers["files"].write_file
    run(write(file_path="/a", kwargs={}, timeout=2.5))
    assert invoke.calls[0] == ("files/write-file", {"file-path": "/a", "kwargs": {}}, 2.5)


def test_a_tool_with_its_own_timeout_parameter_gets_another_keyword_for_the_call_timeout() -> None:
    plan = plan_for(spec("wait", {"timeout": {"type": "number"}}, required=["timeout"]))
    assert plan["timeout"] == "call_timeout"
    invoke = FakeInvoke()
    wait = bind([plan], invoke).servers["files"].wait
    run(wait(timeout=30, call_timeout=1))
    assert invoke.calls == [("files/wait", {"timeout": 30}, 1)]


def test_tool_names_that_collide_after_spelling_never_take_a_sibling_s_name() -> None:
    specs = [spec("get-sum"), spec("get_sum"), spec("get.sum")]
    plans = plans_for(specs)
    assert [p["function"] for p in plans] == ["get_sum_2", "get_sum", "get_sum_3"]
    invoke = FakeInvoke()
    bound = bind(plans, invoke)
    assert bound.failures == []
    server = bound.servers["files"]
    run(server.get_sum())
    run(server.get_sum_2())
    run(server.get_sum_3())
    assert [key for key, _, _ in invoke.calls] == [
        "files/get_sum",
        "files/get-sum",
        "files/get.sum",
    ]


def test_parameters_that_collide_after_spelling_are_all_kept_and_mapped_back() -> None:
    plan = plan_for(
        spec("t", {"a-b": {"type": "string"}, "a_b": {"type": "integer"}, "a b": {}}, required=[])
    )
    spellings = {p["name"]: p["spelling"] for p in plan["parameters"]}
    assert spellings == {"a-b": "a_b_2", "a_b": "a_b", "a b": "a_b_3"}
    invoke = FakeInvoke()
    tool = bind([plan], invoke).servers["files"].t
    run(tool(a_b=1, a_b_2="x", a_b_3=None))
    assert invoke.calls[0][1] == {"a-b": "x", "a_b": 1}


def test_a_parameter_that_cannot_be_spelled_goes_through_kwargs_and_is_named_in_the_docstring() -> (
    None
):
    plan = plan_for(
        spec(
            "odd",
            {
                "": {"type": "string", "description": "The empty one."},
                "!!!": {"type": "integer"},
                "ok": {"type": "boolean"},
            },
            required=["", "ok"],
        )
    )
    assert [p["spelling"] for p in plan["parameters"]] == ["ok"]
    assert [e["name"] for e in plan["extra"]] == ["", "!!!"]
    assert plan["catch_all"] == "kwargs"
    assert "'' (required, str): The empty one." in plan["doc"]
    assert "'!!!' (int | None)" in plan["doc"]
    invoke = FakeInvoke()
    odd = bind([plan], invoke).servers["files"].odd
    signature = inspect.signature(odd)
    assert signature.parameters["ok"].default is inspect.Parameter.empty
    assert signature.parameters["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    run(odd(ok=True, **{"": "x", "!!!": 3}))
    assert invoke.calls[0][1] == {"ok": True, "": "x", "!!!": 3}
    compile(render_prompt([plan]), "<prompt>", "exec", dont_inherit=True)


@pytest.mark.parametrize(
    ("more", "said"),
    [
        ({"additionalProperties": {"type": "string"}}, "(str)"),
        ({"additionalProperties": True}, "(Any)"),
        ({"patternProperties": {"^x-": {"type": "integer"}}}, "(Any)"),
    ],
    ids=["additional-schema", "additional-true", "pattern"],
)
def test_a_schema_that_takes_more_arguments_than_it_names_gets_a_catch_all(
    more: dict[str, Any], said: str
) -> None:
    tag = spec("tag", {"id": {"type": "string"}}, required=["id"])
    tag.input_schema.update(more)
    plan = plan_for(tag)
    assert plan["catch_all"] == "kwargs"
    assert f"**kwargs: further arguments the tool takes, by their own names {said}." in plan["doc"]
    invoke = FakeInvoke()
    live = bind([plan], invoke).servers["files"].tag
    run(live(id="42", color="red", **{"x-size": 3}))
    assert invoke.calls == [("files/tag", {"id": "42", "color": "red", "x-size": 3}, None)]
    stub = stubs_of([plan])["files"].tag
    assert inspect.signature(stub) == inspect.signature(live)


def test_a_schema_that_takes_no_more_or_says_nothing_of_it_gets_no_catch_all() -> None:
    # Most schemas leave `additionalProperties` out: a catch-all there would hide every
    # misspelled keyword from Python and from the check.
    closed = spec("tag", {"id": {"type": "string"}})
    closed.input_schema["additionalProperties"] = False
    assert plan_for(closed)["catch_all"] is None
    assert plan_for(spec("tag", {"id": {"type": "string"}}))["catch_all"] is None


def test_an_argument_given_by_both_its_names_is_a_type_error() -> None:
    plan = plan_for(spec("odd", {"!": {}, "a-b": {}}, required=["a-b"]))
    invoke = FakeInvoke()
    odd = bind([plan], invoke).servers["files"].odd
    with pytest.raises(TypeError, match="got the argument 'a-b' twice"):
        run(odd(a_b=1, **{"a-b": 2}))
    assert invoke.calls == []


def test_python_tools_live_at_top_level_and_server_tools_under_their_server() -> None:
    plans = plans_for([spec("send", server=None), spec("create-issue", server="git-hub")])
    bound = bind(plans, FakeInvoke())
    assert set(bound.top_level) == {"send", "git_hub"}
    assert isinstance(bound.top_level["git_hub"], ServerTools)
    assert bound.servers == {"git_hub": bound.top_level["git_hub"]}
    assert bound.qualnames == frozenset({"send", "git_hub.create_issue"})
    assert bound.servers["git_hub"].create_issue.__qualname__ == "git_hub.create_issue"
    assert bound.top_level["send"].__module__ == "tools"


def test_a_server_and_a_python_tool_of_the_same_name_both_stay_reachable() -> None:
    plans = plans_for([spec("x", server="notes"), spec("notes", server=None)])
    assert plans[0]["namespace"] == "notes"
    assert plans[1]["function"] == "notes_2"
    bound = bind(plans, FakeInvoke())
    assert bound.failures == []
    assert isinstance(bound.top_level["notes"], ServerTools)
    assert callable(bound.top_level["notes_2"])


def test_names_the_stubs_and_the_kernel_use_are_spelled_around() -> None:
    plans = plans_for(
        [spec("list", server=None), spec("tools", server=None), spec("str"), spec("class")]
    )
    assert [p["function"] for p in plans] == ["list_", "tools_", "str_", "class_"]
    assert spell("__init__") == "_init__"
    assert spell("ﬁle") == "file"
    assert spell("2fa") == "_2fa"
    assert spell("-") is None


def test_a_plan_that_cannot_be_built_fails_alone_and_bind_never_raises() -> None:
    good = plans_for([spec("good"), spec("other", server=None)])
    broken_spelling = {**good[0], "key": "files/bad", "function": "not an identifier"}
    missing_keys = {"key": "files/empty"}
    bad_parameters = {**good[0], "key": "files/params", "function": "params", "parameters": 7}
    not_a_mapping: Any = ["a", "list"]
    plans = [*good, broken_spelling, missing_keys, bad_parameters, not_a_mapping]
    bound = bind(plans, FakeInvoke())
    assert set(bound.top_level) == {"files", "other"}
    assert dir(bound.servers["files"]) == ["good"]
    failed = dict(bound.failures)
    assert set(failed) == {"files/bad", "files/empty", "files/params", "<a plan without a key>"}
    assert "'not an identifier' is not a Python identifier" in failed["files/bad"]


def test_a_planned_failure_is_reported_and_named_by_its_server() -> None:
    plans = plans_for([spec("same"), spec("same"), spec("fine")])
    assert plans[1]["error"] == "another tool has the same key 'files/same'"
    bound = bind(plans, FakeInvoke())
    assert bound.failures == [("files/same", "another tool has the same key 'files/same'")]
    with pytest.raises(AttributeError, match="could not be bound: 'same'"):
        _ = bound.servers["files"].missing
    assert "could not be bound" in render_prompt(plans)


def test_a_spec_whose_schema_is_broken_still_gets_a_callable_plan() -> None:
    broken: Any = None
    plans = plans_for(
        [
            ToolSpec(name="a", description="", input_schema=broken, handler=answer),
            ToolSpec(name="b", description="", input_schema={"properties": ["x"]}, handler=answer),
            ToolSpec(
                name="c",
                description="",
                input_schema={"properties": {"x": "not a schema", "y": {"type": 5}}},
                handler=answer,
            ),
        ]
    )
    assert [p.get("error") for p in plans] == [None, None, None]
    assert plans[0]["catch_all"] == "kwargs"
    assert "input schema is not a JSON object" in plans[0]["doc"]
    assert [p["annotation"] for p in plans[2]["parameters"]] == ["Any", "Any"]
    invoke = FakeInvoke()
    bound = bind(plans, invoke)
    run(bound.top_level["a"](anything=1))
    assert invoke.calls == [("a", {"anything": 1}, None)]
    compile(render_prompt(plans), "<prompt>", "exec", dont_inherit=True)


def test_help_on_a_server_lists_its_tools_with_signatures_and_docstrings() -> None:
    bound = bind(plans_for([AWKWARD, spec("read", description="Read a file.")]), FakeInvoke())
    files = bound.servers["files"]
    text = pydoc.render_doc(files, renderer=pydoc.plaintext)
    assert "write_file(*, file_path: str" in text
    assert "Read a file." in text
    assert repr(files) == "<tools of server 'files': read, write_file>"
    assert dir(files) == ["read", "write_file"]
    tool_text = pydoc.render_doc(files.read, renderer=pydoc.plaintext)
    assert "read(*, timeout: float | None = None) -> str | list[typing.Any]" in tool_text
    assert "Read a file." in tool_text


def test_an_unknown_tool_of_a_server_is_an_attribute_error_listing_its_tools() -> None:
    files = bind(plans_for([spec("read")]), FakeInvoke()).servers["files"]
    with pytest.raises(
        AttributeError, match="server 'files' has no tool 'wirte'; its tools are: read"
    ):
        _ = files.wirte


def test_plans_are_json_data() -> None:
    plans = plans_for([AWKWARD, spec("odd", {"": {"default": [1, {"a": None}]}})])
    assert json.loads(json.dumps(plans)) == plans


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"type": "string"}, "str"),
        ({"type": "integer"}, "int"),
        ({"type": "number"}, "float"),
        ({"type": "boolean"}, "bool"),
        ({"type": "null"}, "None"),
        ({"type": "array", "items": {"type": "string"}}, "list[str]"),
        ({"type": "array"}, "list[Any]"),
        ({"type": "object", "properties": {"a": {}}}, "X"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "dict[str, int]"),
        ({"enum": ["a", "b"]}, "Literal['a', 'b']"),
        ({"enum": ["a", None, 1.5]}, "Literal['a'] | float | None"),
        ({"const": 3}, "Literal[3]"),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "str | None"),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, "int | str"),
        ({"anyOf": [{"type": "integer"}, {}]}, "Any"),
        ({"type": ["string", "null"]}, "str | None"),
        ({"type": "string", "nullable": True}, "str | None"),
        ({"$ref": "#/$defs/Name"}, "str"),
        ({"$ref": "#/$defs/Tree"}, "Tree"),
        ({"$ref": "#/$defs/List"}, "list[Any]"),
        ({"$ref": "https://example.com/schema"}, "Any"),
        ({"allOf": [{"type": "string"}]}, "str"),
        ({"not": {}}, "Any"),
        ({"type": "mystery"}, "Any"),
    ],
)
def test_annotations_are_rendered_from_the_json_schema(schema: dict[str, Any], text: str) -> None:
    defs = {
        "Name": {"type": "string"},
        "Tree": {"type": "object", "properties": {"kids": {"$ref": "#/$defs/Tree"}}},
        "List": {"type": "array", "items": {"$ref": "#/$defs/List"}},
    }
    tool = ToolSpec(
        name="t",
        description="",
        input_schema={
            "type": "object",
            "properties": {"x": schema},
            "required": ["x"],
            "$defs": defs,
        },
        handler=answer,
    )
    assert plan_for(tool)["parameters"][0]["annotation"] == text


def test_a_huge_enum_is_rendered_as_its_type() -> None:
    tool = spec("t", {"x": {"enum": [f"value number {i}" for i in range(100)]}}, required=["x"])
    assert plan_for(tool)["parameters"][0]["annotation"] == "str"


def test_the_return_annotation_comes_from_the_output_schema() -> None:
    with_output = spec("t", output_schema={"type": "object", "properties": {"n": {}}})
    assert plan_for(with_output)["returns"] == "TResult"
    assert plan_for(with_output)["types"] == [
        {"name": "TResult", "fields": [{"key": "n", "annotation": "Any", "required": False}]}
    ]
    assert plan_for(spec("t", output_schema={"type": "object"}))["returns"] == "dict[str, Any]"


def test_an_mcp_tool_without_an_output_schema_returns_its_text_and_a_python_tool_any() -> None:
    assert plan_for(spec("t"))["returns"] == "str | list[Any]"
    assert "its text, as one str" in plan_for(spec("t"))["doc"]
    assert plan_for(spec("t", server=None))["returns"] == "Any"


def test_a_default_too_big_to_show_is_left_to_the_tool() -> None:
    tool = spec("t", {"x": {"type": "array", "default": list(range(1000))}})
    parameter = plan_for(tool)["parameters"][0]
    assert parameter["default_text"] == "None"
    assert parameter["annotation"] == "list[Any] | None"


CATALOGUE = [
    AWKWARD,
    spec(
        "read", {"path": {"type": "string"}, "lines": {"type": "integer", "default": 10}}, ["path"]
    ),
    spec(
        "search",
        {
            "query": {"type": "string"},
            "kind": {"enum": ["code", "issues"], "default": "code"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "filters": {"type": "object", "additionalProperties": {"type": "string"}},
            "flags": {"type": "array", "items": {"type": "boolean"}, "default": [True, False]},
            "ratio": {"type": "number", "default": 0.5},
        },
        ["query"],
        server="git-hub",
        output_schema={"type": "object"},
    ),
    spec("odd", {"": {}, "x y": {"type": "string"}}, ["x y"], server=None),
    spec("list", server=None, description='Quotes """ and \\ and \x00 and \ud800.'),
]


def test_every_live_signature_and_docstring_equals_its_stub_s() -> None:
    plans = plans_for(CATALOGUE)
    bound = bind(plans, FakeInvoke())
    assert bound.failures == []
    pairs = live_and_stub(plans, bound)
    assert len(pairs) == len(CATALOGUE)
    for live, stub in pairs:
        assert str(inspect.signature(live)) == str(inspect.signature(stub))
        assert inspect.getdoc(live) == inspect.getdoc(stub)
        assert live.__qualname__ == stub.__qualname__


names = st.one_of(
    st.sampled_from(
        ["", "-", "class", "kwargs", "timeout", "from", "file-path", "a", "a_", "__x", "x" * 3]
    ),
    st.text(max_size=8),
)
leaf_schemas = st.one_of(
    st.just({}),
    st.sampled_from(
        [
            {"type": t}
            for t in ["string", "integer", "number", "boolean", "null", "array", "object", "bogus"]
        ]
    ),
    st.builds(
        lambda values: {"enum": values},
        st.lists(st.one_of(st.text(max_size=5), st.integers(), st.none(), st.floats()), max_size=4),
    ),
    st.builds(lambda ref: {"$ref": ref}, st.sampled_from(["#", "#/x", "#/properties/a", "bad"])),
    st.integers(),
    st.none(),
)
schemas = st.recursive(
    leaf_schemas,
    lambda inner: st.one_of(
        st.builds(lambda s: {"type": "array", "items": s}, inner),
        st.builds(lambda s: {"anyOf": s}, st.lists(inner, max_size=3)),
        st.builds(lambda s: {"oneOf": s, "nullable": True}, st.lists(inner, max_size=3)),
        st.builds(lambda s: {"type": "object", "additionalProperties": s}, inner),
        st.builds(
            lambda properties, required, title: {
                "type": "object",
                "properties": properties,
                "required": required,
                **({"title": title} if title is not None else {}),
            },
            st.dictionaries(names, inner, max_size=3),
            st.lists(names, max_size=2),
            st.one_of(st.none(), names),
        ),
        st.builds(
            lambda s, d: {**s, "default": d} if isinstance(s, dict) else s,
            inner,
            st.one_of(
                st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=3), st.floats()
            ),
        ),
    ),
    max_leaves=8,
)
tool_specs = st.builds(
    lambda name, server, properties, required, description, output: ToolSpec(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": properties, "required": required},
        handler=answer,
        server=server,
        output_schema=output if isinstance(output, dict) else None,
    ),
    names,
    st.one_of(st.none(), names),
    st.dictionaries(names, schemas, max_size=6),
    st.lists(names, max_size=3),
    st.text(max_size=20),
    schemas,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(tool_specs, max_size=5))
def test_any_schemas_give_plans_with_unique_valid_spellings_and_stubs_that_match(
    specs: list[ToolSpec],
) -> None:
    plans = plans_for(specs)
    assert len(plans) == len(specs)
    json.dumps(plans)
    top_level: list[str] = []
    per_server: dict[str, list[str]] = {}
    for plan in plans:
        if "error" in plan:
            continue
        names_used = [p["spelling"] for p in plan["parameters"]]
        names_used.append(plan["timeout"])
        if plan["catch_all"]:
            names_used.append(plan["catch_all"])
        for name in [*names_used, plan["function"]]:
            assert name.isidentifier() and not keyword.iskeyword(name)
        assert len(set(names_used)) == len(names_used)
        if plan["namespace"] is None:
            top_level.append(plan["function"])
        else:
            per_server.setdefault(plan["namespace"], []).append(plan["function"])
    top_level += list(per_server)
    assert len(set(top_level)) == len(top_level)
    for functions in per_server.values():
        assert len(set(functions)) == len(functions)

    bound = bind(plans, FakeInvoke())
    assert [key for key, _ in bound.failures] == [p["key"] for p in plans if "error" in p]
    for live, stub in live_and_stub(plans, bound):
        assert str(inspect.signature(live)) == str(inspect.signature(stub))


@pytest.mark.parametrize("optional", [False, True])
def test_parameters_named_like_the_kernels_own_names_are_passed_as_they_are(
    optional: bool,
) -> None:
    # A tool whose arguments are all required calls `invoke` with its key straight from the
    # function; the names it uses for both step around the tool's own parameters.
    names = ["_send", "_sendkey", "_send_", "_send_key", "key"]
    plans = plans_for(
        [
            spec(
                "send",
                {name: {"type": "integer"} for name in names},
                required=names[:-1] if optional else names,
                server=None,
            )
        ]
    )
    invoke = FakeInvoke()
    bound = bind(plans, invoke)
    function = bound.top_level["send"]
    assert list(inspect.signature(function).parameters)[:5] == names
    assert run(function(**{name: i for i, name in enumerate(names)})) == "answered"
    assert invoke.calls == [(plans[0]["key"], {name: i for i, name in enumerate(names)}, None)]
