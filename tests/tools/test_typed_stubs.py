"""Object schemas as `TypedDict`s in the stubs and in the kernel (issue 14, item 1).

The prompt is compiled and run here, and the kernel's binding module builds the same types
in-process; both must agree, and any schema, however deep, recursive or large, must render
quickly into Python that compiles.
"""

from __future__ import annotations

import time
import typing
from typing import Any

import pytest
import typing_extensions
from pydantic import TypeAdapter, ValidationError

from toolscript.kernel.binding import bind
from toolscript.tools.binding import plans_for
from toolscript.tools.prompt import render_prompt
from toolscript.tools.schema_types import MAX_FIELDS, MAX_TYPES
from toolscript.tools.spec import ToolOutcome, ToolSpec


async def answer(arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(value=None)


def spec(
    name: str,
    properties: dict[str, Any] | None = None,
    required: list[str] | None = None,
    server: str | None = "graph",
    output: dict[str, Any] | None = None,
    **schema: Any,
) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"Does {name}.",
        input_schema={
            "type": "object",
            "properties": properties or {},
            "required": required or [],
            **schema,
        },
        handler=answer,
        server=server,
        output_schema=output,
    )


def stubs(specs: list[ToolSpec]) -> tuple[str, dict[str, Any]]:
    """The prompt, and the namespace it defines (with pydantic-readable TypedDicts)."""
    text = render_prompt(plans_for(specs))
    readable = text.replace("from typing import", "from typing_extensions import")
    namespace: dict[str, Any] = {"__name__": "tools"}
    exec(compile(readable, "<prompt>", "exec", dont_inherit=True), namespace)
    return text, namespace


def returns(namespace: dict[str, Any], server: str, tool: str) -> Any:
    return typing.get_type_hints(getattr(namespace[server], tool))["return"]


ENTITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The name of the entity"},
        "entityType": {"type": "string"},
        "observations": {"type": "array", "items": {"type": "string"}},
        "rank": {"type": "integer"},
    },
    "required": ["name", "entityType", "observations"],
}
RELATION = {
    "type": "object",
    "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
    "required": ["from", "to"],
}


def test_an_array_of_objects_is_a_list_of_a_typed_dict_named_for_its_items() -> None:
    text, namespace = stubs([spec("create", {"entities": {"type": "array", "items": ENTITY}})])
    assert "async def create(*, entities: list[Entity] | None = None," in text
    assert (
        "class Entity(TypedDict):\n"
        "    name: str  # The name of the entity\n"
        "    entityType: str\n"
        "    observations: list[str]\n"
        "    rank: NotRequired[int]\n"
    ) in text
    entity = namespace["Entity"]
    assert entity.__required_keys__ == {"name", "entityType", "observations"}
    assert entity.__optional_keys__ == {"rank"}


def test_keys_that_are_keywords_use_the_call_form_of_typed_dict() -> None:
    text, namespace = stubs([spec("relate", {"relations": {"type": "array", "items": RELATION}})])
    assert "Relation = TypedDict(\n    'Relation',\n    {\n        'from': str," in text
    assert namespace["Relation"].__required_keys__ == {"from", "to"}


def test_the_output_schema_is_the_return_type_and_nested_objects_are_typed_dicts() -> None:
    output = {
        "type": "object",
        "properties": {
            "entities": {"type": "array", "items": ENTITY},
            "where": {"type": "object", "properties": {"x": {"type": "number"}}},
        },
        "required": ["entities"],
    }
    text, namespace = stubs([spec("read_graph", output=output)])
    assert "async def read_graph(*, timeout: float | None = None) -> ReadGraphResult:" in text
    assert "    entities: list[Entity]\n    where: NotRequired[Where]\n" in text
    adapter = TypeAdapter(returns(namespace, "graph", "read_graph"))
    good = {"entities": [{"name": "a", "entityType": "b", "observations": []}]}
    assert adapter.validate_python(good, strict=True) == good
    with pytest.raises(ValidationError):
        adapter.validate_python({"entities": [{"name": "a"}]}, strict=True)


def test_refs_to_defs_are_named_by_their_title_or_their_key_and_defined_once() -> None:
    output = {
        "type": "object",
        "title": "TimeConversionResult",
        "properties": {"source": {"$ref": "#/$defs/At"}, "target": {"$ref": "#/$defs/At"}},
        "required": ["source", "target"],
        "$defs": {
            "At": {"type": "object", "title": "TimeResult", "properties": {"tz": {}}},
        },
    }
    keyed = {
        "type": "object",
        "properties": {"p": {"$ref": "#/definitions/Point"}},
        "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    }
    text, _ = stubs([spec("convert", output=output), spec("where", output=keyed)])
    assert text.count("class TimeResult(TypedDict):") == 1
    assert "class TimeConversionResult(TypedDict):\n    source: TimeResult\n" in text
    assert "class Point(TypedDict):\n    x: NotRequired[int]\n" in text


def test_enums_are_literals_and_any_of_is_a_union_of_typed_dicts() -> None:
    schema = {
        "shape": {
            "anyOf": [
                {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {}}},
                {"type": "object", "properties": {"kind": {"enum": ["square", "box"]}}},
                {"type": "null"},
            ]
        }
    }
    schema["frame"] = {"type": ["object", "null"], "properties": {"w": {"type": "integer"}}}
    text, namespace = stubs([spec("draw", schema, ["shape"])])
    assert "frame: Frame | None = None," in text
    assert "async def draw(*, shape: Shape | DrawShape | None," in text
    assert "    kind: NotRequired[Literal['circle']]\n" in text
    assert "    kind: NotRequired[Literal['square', 'box']]\n" in text
    assert namespace["DrawShape"].__optional_keys__ == {"kind"}


def test_recursive_refs_name_their_own_type_and_render_once() -> None:
    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "other": {"$ref": "#/$defs/Other"},
                },
                "required": ["name"],
            },
            "Other": {"type": "object", "properties": {"back": {"$ref": "#/$defs/Node"}}},
        },
    }
    started = time.perf_counter()
    text, namespace = stubs([spec("tree", output=tree)])
    assert time.perf_counter() - started < 5
    assert "    children: NotRequired['list[Node]']\n" in text
    assert "    back: NotRequired['Node']\n" in text
    assert text.count("class Node(TypedDict):") == 1
    assert namespace["Node"].__required_keys__ == {"name"}


def test_a_deep_schema_is_cut_to_any_below_the_depth_bound() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for level in range(2000):
        schema = {"type": "object", "properties": {f"k{level}": schema}}
    started = time.perf_counter()
    text, _ = stubs([spec("deep", {"x": schema}, ["x"])])
    assert time.perf_counter() - started < 5
    assert "Any" in text and text.count("(TypedDict)") < 20


def test_huge_and_hostile_schemas_render_bounded_and_compile() -> None:
    wide = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(5000)}}
    many = {
        f"p{i}": {"type": "object", "properties": {f"only{i}": {"type": "integer"}}}
        for i in range(MAX_TYPES + 50)
    }
    odd_keys = {
        "type": "object",
        "title": "class",
        "properties": {
            '"""': {"type": "string"},
            "a\nb": {"type": "string", "description": "line one\nline two"},
            "\ud800": {},
            "__private": {},
            "ﬁle": {},
        },
    }
    started = time.perf_counter()
    text, namespace = stubs(
        [
            spec("odd", {"x": odd_keys}, ["x"], output={**odd_keys, "title": ""}),
            spec("wide", {"x": wide}, ["x"]),
            spec("many", many),
        ]
    )
    assert time.perf_counter() - started < 10
    assert f"k{MAX_FIELDS}" not in text
    assert "async def wide(*, x: dict[str, Any]," in text
    assert text.count("(TypedDict)") + text.count("= TypedDict(") <= MAX_TYPES
    assert "async def odd(*, x: Class, timeout: float | None = None) -> OddResult:" in text
    assert "Class = TypedDict(\n    'Class',\n    {\n        '\"\"\"': NotRequired[str]," in text
    assert "        'a\\nb': NotRequired[str],  # line one\n" in text
    odd = namespace["Class"]
    assert set(odd.__optional_keys__) == {'"""', "a\nb", "\ud800", "__private", "ﬁle"}


def test_type_names_never_take_a_server_a_tool_a_builtin_or_a_module_name() -> None:
    object_schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    specs = [
        spec("Entity", server=None),
        spec("t", {"entity": object_schema, "json": object_schema, "dict": object_schema}),
        spec("u", output={**object_schema, "title": "ToolError"}),
    ]
    text, namespace = stubs(specs)
    assert "async def t(*, entity: TEntity | None = None, json: Json | None = None," in text
    assert "dict: Dict | None = None" in text
    assert "-> UToolError:" in text
    assert callable(namespace["Entity"])


def test_the_kernel_builds_the_same_types_the_prompt_defines() -> None:
    specs = [
        spec("create", {"entities": {"type": "array", "items": ENTITY}}, ["entities"]),
        spec("relate", {"relations": {"type": "array", "items": RELATION}}, server="other"),
        spec("read", output={"type": "object", "properties": {"all": {"items": ENTITY}}}),
    ]
    plans = plans_for(specs)
    bound = bind(plans, answer)  # type: ignore[arg-type]
    assert bound.failures == []
    _, namespace = stubs(specs)
    for name, made in bound.types.items():
        assert typing_extensions.is_typeddict(made)
        assert made.__module__ == "tools"
        assert bound.top_level[name] is made
        assert made.__required_keys__ == namespace[name].__required_keys__
        assert made.__optional_keys__ == namespace[name].__optional_keys__
        assert str(typing.get_type_hints(made)) == str(typing.get_type_hints(namespace[name]))
    assert set(bound.types) == {"Entity", "Relation", "AllItem", "ReadResult"}
    live = bound.servers["graph"].create
    assert str(typing.get_type_hints(live)["entities"]) == "list[tools.Entity]"
