"""Argument validation before dispatch: a refused call names the argument and the problem."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolscript.tools import validation
from toolscript.tools.binding import plan_for
from toolscript.tools.spec import ToolOutcome, ToolSpec
from toolscript.tools.validation import ArgumentValidator

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "file-path": {"type": "string"},
        "count": {"type": "integer"},
        "mode": {"enum": ["r", "w"]},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        "size": {"type": "integer", "minimum": 1},
    },
    "required": ["file-path"],
    "additionalProperties": False,
}


async def answer(arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(value=None)


@pytest.fixture(scope="module")
def validator() -> ArgumentValidator:
    plan = plan_for(ToolSpec(name="write", description="", input_schema=SCHEMA, handler=answer))
    return ArgumentValidator(SCHEMA, plan)


def test_valid_arguments_pass(validator: ArgumentValidator) -> None:
    assert validator.validate({"file-path": "/a", "count": 2, "items": [{"name": "x"}]}) is None


def test_an_argument_of_the_wrong_type_is_named_with_what_it_got(
    validator: ArgumentValidator,
) -> None:
    problem = validator.validate({"file-path": "/a", "count": "x"})
    assert problem == "argument 'count' must be of type integer, got 'x'"


def test_a_renamed_argument_is_named_by_its_own_name_and_its_python_spelling(
    validator: ArgumentValidator,
) -> None:
    problem = validator.validate({"file-path": 5})
    assert problem == "argument 'file-path' (file_path in Python) must be of type string, got 5"


def test_a_missing_required_argument_is_named(validator: ArgumentValidator) -> None:
    assert validator.validate({}) == "missing required argument 'file-path' (file_path in Python)"


def test_an_unknown_argument_is_named_when_the_schema_allows_no_others(
    validator: ArgumentValidator,
) -> None:
    assert validator.validate({"file-path": "/a", "colour": 1}) == "unknown argument 'colour'"


def test_a_value_outside_an_enum_is_named_with_the_choices(validator: ArgumentValidator) -> None:
    problem = validator.validate({"file-path": "/a", "mode": "x"})
    assert problem == "argument 'mode' must be one of ['r', 'w'], got 'x'"


def test_a_problem_deep_inside_an_argument_gives_its_path(validator: ArgumentValidator) -> None:
    assert validator.validate({"file-path": "/a", "items": [{"name": "x"}, {}]}) == (
        "argument 'items' at [1] lacks the required field 'name'"
    )
    assert validator.validate({"file-path": "/a", "items": [{"name": "x", "z": 1}]}) == (
        "argument 'items' at [0] has an unknown field 'z'"
    )


def test_other_constraints_are_named_by_their_keyword(validator: ArgumentValidator) -> None:
    problem = validator.validate({"file-path": "/a", "size": 0})
    assert problem == "argument 'size' does not satisfy `minimum: 1` (got 0)"


def test_arguments_that_are_not_an_object_are_refused(validator: ArgumentValidator) -> None:
    assert validator.validate(["a"]) == "the arguments must be of type object, got ['a']"


def test_a_huge_wrong_value_is_named_briefly(validator: ArgumentValidator) -> None:
    problem = validator.validate({"file-path": "/a", "count": "x" * 1_000_000})
    assert problem is not None
    assert problem.startswith("argument 'count' must be of type integer, got 'xxx")
    assert len(problem) < 200


def test_arguments_nested_100000_levels_deep_are_refused_without_raising() -> None:
    recursive = ArgumentValidator(
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/tree"}},
            "$defs": {"tree": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
        }
    )
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert recursive.validate({"a": deep}) == "the arguments are nested too deeply to be checked"


@pytest.mark.parametrize(
    "schema",
    [
        None,
        "a string",
        {"type": "str"},
        {"properties": []},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "items": [{"type": "string"}]},
    ],
)
def test_a_broken_schema_never_raises_and_says_it_is_broken(schema: Any) -> None:
    broken = ArgumentValidator(schema)
    assert broken.broken is not None
    problem = broken.validate({"a": 1})
    assert problem is not None
    assert problem.startswith("the tool's input schema is broken (")
    assert problem.endswith("so its arguments cannot be checked")


def test_a_reference_that_leads_nowhere_is_reported_as_a_broken_schema_at_call_time() -> None:
    nowhere = ArgumentValidator({"type": "object", "properties": {"a": {"$ref": "#/$defs/gone"}}})
    assert nowhere.validate({}) is None
    problem = nowhere.validate({"a": 1})
    assert problem is not None and problem.startswith("the tool's input schema is broken (")


def test_a_draft_7_schema_that_does_not_say_so_is_checked_as_draft_7() -> None:
    tuple_items = ArgumentValidator({"type": "array", "items": [{"type": "string"}]})
    assert tuple_items.broken is None
    assert tuple_items.validate(["a"]) is None
    assert tuple_items.validate([1]) == "the arguments[0] must be of type string, got 1"


def test_formats_are_not_asserted() -> None:
    dated = ArgumentValidator(
        {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}
    )
    assert dated.validate({"d": "not a date"}) is None


def test_the_schema_is_compiled_once_not_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = ArgumentValidator(SCHEMA)

    def refuse(schema: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(validation, "_compile", refuse)
    assert checked.validate({"file-path": 1}) is not None
    assert checked.validate({"file-path": "/a"}) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
schema_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=6)
    | st.sampled_from(["string", "integer", "object", "array", "#", "#/x"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "properties",
                    "items",
                    "required",
                    "$ref",
                    "enum",
                    "anyOf",
                    "minimum",
                    "additionalProperties",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=15,
)


@settings(max_examples=150, deadline=None)
@given(schema_values, json_values)
def test_any_schema_and_any_arguments_give_a_sentence_or_none_and_never_raise(
    schema: Any, arguments: Any
) -> None:
    problem = ArgumentValidator(schema).validate(arguments)
    assert problem is None or (isinstance(problem, str) and problem)


REAL = ArgumentValidator(
    SCHEMA, plan_for(ToolSpec(name="write", description="", input_schema=SCHEMA, handler=answer))
)


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_any_arguments_against_a_real_schema_give_a_sentence_or_none(arguments: Any) -> None:
    problem = REAL.validate(arguments)
    assert problem is None or isinstance(problem, str)


def test_a_value_a_false_schema_forbids_is_named_in_a_sentence() -> None:
    # jsonschema gives such an error no validator and no path: the sentence must still say
    # which argument, and never "does not satisfy `None: None`".
    forbid = {"type": "object", "properties": {"legacy": False, "name": {"type": "string"}}}
    said = ArgumentValidator(forbid).validate({"legacy": 1, "name": "a"})
    assert said == "argument 'legacy' is not allowed (the schema allows no value)"
    assert ArgumentValidator(forbid).validate({"name": "a"}) is None
    no_items = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"empty_list": {"type": "array", "items": False}},
    }
    said = ArgumentValidator(no_items).validate({"empty_list": [1]})
    assert said is not None and "None" not in said and "'empty_list'" in said, said
