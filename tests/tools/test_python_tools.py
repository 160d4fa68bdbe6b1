"""Python functions as tools: `@tool` (issue 3)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import functools
import inspect
import io
import threading
import typing
from typing import Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel

from toolscript import CallContext, Runtime, ToolAnnotations, ToolSpec
from toolscript.kernel.binding import bind
from toolscript.tools.binding import plan_for
from toolscript.tools.prompt import render_prompt
from toolscript.tools.python import Tool, tool
from toolscript.tools.spec import SourceGone, ToolFailure, ToolOutcome, current_call
from toolscript.tools.validation import ArgumentValidator


class Address(BaseModel):
    street: str
    city: str = "Paris"


class Person(BaseModel):
    name: str
    home: Address
    born: datetime.date | None = None


@tool
async def send_message(channel_id: str, text: str = "hello", urgent: bool = False) -> str:
    """Send a message to a channel.

    Posts it as the bot user.

    Args:
        channel_id: The channel to post in.
        text: What to say.
    """
    return f"{channel_id}:{text}:{urgent}"


@tool(
    name="add-person", description="Add a person.", timeout=2.5, destructive=False, idempotent=True
)
def add_person(
    person: Person, tags: list[str] | None = None, *, mode: Literal["a", "b"] = "a"
) -> Person:
    """Ignored because a description is given.

    :param person: Who to add.
    """
    return person


async def test_the_input_schema_comes_from_the_type_hints_and_the_docstring() -> None:
    schema = send_message.spec.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["channel_id"]
    assert schema["properties"]["channel_id"]["type"] == "string"
    assert schema["properties"]["channel_id"]["description"] == "The channel to post in."
    assert schema["properties"]["text"]["default"] == "hello"
    assert schema["properties"]["urgent"]["type"] == "boolean"
    assert (
        send_message.spec.description == "Send a message to a channel.\n\nPosts it as the bot user."
    )
    assert send_message.spec.name == "send_message"
    assert send_message.spec.server is None


async def test_model_parameters_get_a_self_contained_schema() -> None:
    schema = add_person.spec.input_schema
    assert schema["properties"]["person"]["description"] == "Who to add."
    assert set(schema["$defs"]) == {"Person", "Address"}
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate({"person": {"name": "Ada", "home": {"street": "Rue"}}})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"person": {"name": "Ada", "home": {}}})


async def test_options_set_the_name_description_timeout_and_hints() -> None:
    spec = add_person.spec
    assert spec.name == "add-person"
    assert spec.description == "Add a person."
    assert spec.timeout == 2.5
    assert spec.annotations.destructive is False
    assert spec.annotations.idempotent is True
    assert spec.annotations.read_only is None


async def test_the_output_schema_comes_from_the_return_annotation() -> None:
    assert send_message.spec.output_schema == {"type": "string"}
    assert add_person.spec.output_schema is not None
    assert add_person.spec.output_schema["title"] == "Person"

    @tool
    def untyped(x: int):  # type: ignore[no-untyped-def]
        return x

    @tool
    def anything(x: int) -> Any:
        return x

    assert untyped.spec.output_schema is None
    assert anything.spec.output_schema is None


async def test_the_handler_calls_the_function_and_answers_with_json_data() -> None:
    outcome = await send_message.spec.handler({"channel_id": "c1", "urgent": True})
    assert outcome == ToolOutcome(value="c1:hello:True")


async def test_arguments_are_converted_to_the_annotated_types_and_results_to_json() -> None:
    outcome = await add_person.spec.handler(
        {"person": {"name": "Ada", "home": {"street": "Rue"}, "born": "1815-12-10"}, "mode": "b"}
    )
    assert outcome == ToolOutcome(
        value={"name": "Ada", "home": {"street": "Rue", "city": "Paris"}, "born": "1815-12-10"}
    )


async def test_a_sync_function_runs_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()

    @tool
    def where() -> int:
        return threading.get_ident()

    outcome = await where.spec.handler({})
    assert isinstance(outcome.value, int)
    assert outcome.value != loop_thread


async def test_an_exception_from_the_function_becomes_an_error_result_with_its_type() -> None:
    @tool
    async def fail(n: int) -> int:
        raise ValueError(f"bad n {n}")

    assert await fail.spec.handler({"n": 3}) == ToolOutcome(
        value="ValueError: bad n 3", is_error=True
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_system_exit_and_keyboard_interrupt_from_a_tool_are_its_error_results(
    kind: str,
) -> None:
    # Left out, asyncio ends the host's event loop with them (argparse exits on a bad line).
    def parse(argv: list[str]) -> int:
        import argparse

        parser = argparse.ArgumentParser(prog="x", exit_on_error=True, add_help=False)
        parser.add_argument("--n", type=int, required=True)
        with contextlib.redirect_stderr(io.StringIO()):
            return int(parser.parse_args(argv).n)

    def interrupt() -> None:
        raise KeyboardInterrupt

    if kind == "async":

        async def parse_async(argv: list[str]) -> int:
            return parse(argv)

        async def interrupt_async() -> None:
            interrupt()

        tools = tool(parse_async), tool(interrupt_async)
    else:
        tools = tool(parse), tool(interrupt)
    assert await tools[0].spec.handler({"argv": ["--n", "oops"]}) == ToolOutcome(
        value="SystemExit: 2", is_error=True
    )
    assert await tools[1].spec.handler({}) == ToolOutcome(value="KeyboardInterrupt", is_error=True)


async def test_an_async_generator_tool_answers_its_items_as_a_generator_does() -> None:
    @tool
    async def countdown(start: int) -> typing.AsyncIterator[int]:
        for n in range(start, 0, -1):
            await asyncio.sleep(0)
            yield n

    @tool
    def countup(stop: int) -> typing.Iterator[int]:
        yield from range(1, stop + 1)

    assert await countdown.spec.handler({"start": 3}) == ToolOutcome(value=[3, 2, 1])
    assert await countup.spec.handler({"stop": 3}) == ToolOutcome(value=[1, 2, 3])
    # Their stubs say so: a list of the items.
    for made in (countdown, countup):
        assert made.spec.output_schema is not None
        stub = render_prompt([plan_for(made.spec)])
        assert "-> list[int]" in stub, stub


async def test_a_tool_failure_becomes_an_error_result_with_its_message_alone() -> None:
    @tool
    def deny() -> None:
        raise ToolFailure("access denied")

    assert await deny.spec.handler({}) == ToolOutcome(value="access denied", is_error=True)


async def test_source_gone_and_cancellation_pass_through() -> None:
    @tool
    async def gone() -> None:
        raise SourceGone("the database went away")

    with pytest.raises(SourceGone):
        await gone.spec.handler({})

    started = asyncio.Event()

    @tool
    async def slow() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(slow.spec.handler({}))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


async def test_an_argument_that_cannot_be_converted_is_an_error_result() -> None:
    outcome = await add_person.spec.handler(
        {"person": {"name": "Ada", "home": {"street": "R"}, "born": "never"}}
    )
    assert outcome.is_error
    # It names the argument, and where in it pydantic found the problem, without its links.
    said = str(outcome.value)
    assert said.startswith("the argument `person` could not be converted: born: "), said
    assert "https://" not in said


async def test_a_return_value_that_is_not_json_data_is_an_error_result() -> None:
    @tool
    def opaque() -> Any:
        return object()

    outcome = await opaque.spec.handler({})
    assert outcome.is_error
    assert "could not be turned into JSON data" in str(outcome.value)


async def test_a_returned_tool_outcome_is_passed_on_as_it_is() -> None:
    @tool
    def explicit() -> ToolOutcome:
        return ToolOutcome(value="told", is_error=True)

    assert await explicit.spec.handler({}) == ToolOutcome(value="told", is_error=True)


async def test_the_decorated_function_is_still_the_function() -> None:
    assert isinstance(send_message, Tool)
    assert await send_message("c", text="hi") == "c:hi:False"
    ada = Person(name="Ada", home=Address(street="Rue"))
    assert add_person(ada) is ada
    assert send_message.__name__ == "send_message"
    assert send_message.__doc__ is not None and send_message.__doc__.startswith("Send a message")
    assert list(inspect.signature(send_message).parameters) == ["channel_id", "text", "urgent"]


def test_a_function_with_star_args_cannot_be_a_tool() -> None:
    def spread(*names: str) -> None: ...

    def spread_keywords(**options: str) -> None: ...

    def positional(a: int, /) -> None: ...

    for function in (spread, spread_keywords, positional):
        with pytest.raises(TypeError, match="named arguments only"):
            tool(function)


def test_a_function_whose_hints_cannot_be_resolved_cannot_be_a_tool() -> None:
    def unresolved(x: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        ...

    with pytest.raises(TypeError, match="cannot be resolved"):
        tool(unresolved)


async def test_a_python_tool_binds_at_top_level_and_validates_against_its_schema() -> None:
    plan = plan_for(send_message.spec)
    calls: list[tuple[str, dict[str, Any], float | None]] = []

    async def invoke(key: str, arguments: dict[str, Any], timeout: float | None) -> Any:
        calls.append((key, arguments, timeout))
        return (await send_message.spec.handler(arguments)).value

    bound = bind([plan], invoke)
    live = bound.top_level["send_message"]
    assert str(inspect.signature(live)) == (
        "(*, channel_id: str, text: str = 'hello', urgent: bool = False, "
        "timeout: float | None = None) -> str"
    )
    assert await live(channel_id="c") == "c:hello:False"
    assert calls == [("send_message", {"channel_id": "c"}, None)]
    validator = ArgumentValidator(send_message.spec.input_schema, plan)
    assert validator.validate({"channel_id": "c", "extra": 1}) == "unknown argument 'extra'"


async def test_a_call_context_parameter_is_filled_by_the_host_and_is_not_an_argument() -> None:
    @tool(idempotent=True)
    async def store(key: str, context: CallContext) -> str:
        """Store under a key, once per idempotency key."""
        return f"{key} {context.idempotency_key} {context.repeated}"

    assert set(store.spec.input_schema["properties"]) == {"key"}
    assert store.spec.input_schema.get("required") == ["key"]
    assert store.spec.repeat_is_safe
    assert "context" not in render_prompt([plan_for(store.spec)])

    context = contextvars.copy_context()
    context.run(current_call.set, ("ab12-3.7", "main:5f", True))  # as the dispatcher does
    outcome = await asyncio.create_task(store.handle({"key": "k"}), context=context)
    assert outcome == ToolOutcome(value="k main:5f.7 True")


class Reading(typing.TypedDict):
    value: float
    unit: Literal["C", "F"]


class Station(typing.TypedDict, total=False):
    name: str
    readings: list[Reading]


@tool
async def station(code: str) -> Station | None:
    """A weather station."""
    return {"name": code, "readings": [{"value": 1.0, "unit": "C"}]}


def test_a_return_typed_with_typing_typeddict_gives_its_keys_even_before_python_3_12() -> None:
    # pydantic takes only typing_extensions' TypedDict before 3.12; the natural import on
    # 3.11 is typing's, and the stub said `Any` for it, with no word why.
    assert station.spec.output_schema is not None
    prompt = render_prompt([plan_for(station.spec)])
    assert "-> Station | None:" in prompt, prompt
    assert "class Reading(TypedDict):" in prompt and "unit: Literal['C', 'F']" in prompt
    assert "name: NotRequired[str]" in prompt and "readings: NotRequired[list[Reading]]" in prompt


class Point(typing.TypedDict):
    x: int
    label: typing.NotRequired[str]


@tool
async def plot(point: Point, more: list[Point] | None = None) -> str:
    """Plot a point."""
    return f"{point['x']} {point.get('label')} {len(more or [])}"


async def test_a_parameter_typed_with_typing_typeddict_is_taken_and_checked() -> None:
    # pydantic takes only typing_extensions' TypedDict before 3.12: the decorator raised
    # pydantic's own error at import, for the natural import on 3.11.
    schema = plot.spec.input_schema
    assert jsonschema.Draft202012Validator(schema).is_valid({"point": {"x": 1}})
    assert not jsonschema.Draft202012Validator(schema).is_valid({"point": {"label": "a"}})
    prompt = render_prompt([plan_for(plot.spec)])
    assert "class Point(TypedDict):" in prompt and "label: NotRequired[str]" in prompt, prompt
    outcome = await plot.spec.handler({"point": {"x": 1, "label": "a"}, "more": [{"x": 2}]})
    assert outcome == ToolOutcome(value="1 a 1")
    refused = await plot.spec.handler({"point": {"x": "one"}})
    assert refused.is_error, refused


def scale(value: int, factor: int) -> int:
    """Scale a value."""
    return value * factor


class Counter:
    """Counts."""

    def __init__(self) -> None:
        self.total = 0

    async def __call__(self, by: int) -> int:
        """Add `by` to the count."""
        self.total += by
        return self.total


async def test_a_partial_and_a_callable_object_are_tools_described_by_their_function() -> None:
    # Both raised AttributeError ('__name__'), and with a name given, "cannot be resolved".
    doubled = tool(functools.partial(scale, factor=2))
    counter = Counter()
    counting = tool(counter)
    assert doubled.spec.name == "scale" and doubled.spec.description == "Scale a value."
    assert doubled.spec.input_schema["required"] == ["value"]
    assert counting.spec.name == "Counter" and counting.is_async
    assert counting.spec.description == "Add `by` to the count."
    assert list(counting.spec.input_schema["properties"]) == ["by"]
    assert await doubled.spec.handler({"value": 21}) == ToolOutcome(value=42)
    assert await counting.spec.handler({"by": 2}) == ToolOutcome(value=2)
    assert (await counting.spec.handler({"by": "two"})).is_error
    assert counter.total == 2


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"timeout": -1}, "timeout"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"timeout": "5"}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"name": ""}, "name"),
        ({"name": 3}, "name"),
        ({"description": 3}, "description"),
        ({"read_only": "yes"}, "read_only"),
        ({"destructive": 1}, "destructive"),
        ({"idempotent": "no"}, "idempotent"),
    ],
)
def test_a_bad_option_of_tool_is_refused_naming_it(options: dict[str, Any], named: str) -> None:
    # As `Runtime(tool_timeout=-1)` is: at once, not as a failure of every call later.
    def answer(x: int) -> int:
        """Answer."""
        return x

    with pytest.raises(ValueError, match=f"^tool: {named} must be"):
        tool(**options)(answer)


def test_a_lambda_without_a_name_is_refused_and_a_bad_annotations_value_too() -> None:
    with pytest.raises(ValueError, match="lambda has no name"):
        tool(lambda: 1)
    assert tool(name="one")(lambda: 1).name == "one"
    with pytest.raises(ValueError, match="read_only must be True, False or None"):
        ToolAnnotations(read_only="x")  # type: ignore[arg-type]

    async def handler(arguments: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(1)

    spec = ToolSpec("one", "One.", {"type": "object"}, handler, annotations=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="annotations must be a ToolAnnotations"):
        Runtime(tools=[spec])
    with pytest.raises(ValueError, match="mcp_config must be"):
        Runtime(mcp_config=5)  # type: ignore[arg-type]


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise SystemExit("from __str__")


@pytest.mark.timeout(30)
async def test_a_tool_failure_whose_message_raises_is_a_tool_error_not_the_hosts_end(
    make_runtime: Any,
) -> None:
    # The exception's `__str__` is the tool's code: a `SystemExit` from it ended the host's
    # `asyncio.run`. A hand-built handler's `KeyboardInterrupt` did too.
    @tool
    def odd() -> int:
        """Fail oddly."""
        raise _Unprintable

    async def interrupting(arguments: dict[str, Any]) -> ToolOutcome:
        raise KeyboardInterrupt

    async def unprintable(arguments: dict[str, Any]) -> ToolOutcome:
        await asyncio.sleep(0)
        raise _Unprintable

    specs = [
        ToolSpec("interrupting", "Interrupt.", {"type": "object"}, interrupting),
        ToolSpec("unprintable", "Fail oddly, later.", {"type": "object"}, unprintable),
    ]
    runtime = await make_runtime(tools=[odd, *specs])
    for name in ("odd", "interrupting", "unprintable"):
        result = await runtime.run(
            f"try:\n    await {name}()\nexcept ToolError as error:\n    said = str(error)\nsaid"
        )
        assert result.status == "ok" and result.calls.by_fate == {"seen": 1}, result.text
        assert "_Unprintable" in (result.value or "") or "KeyboardInterrupt" in (
            result.value or ""
        ), result.value
    assert (await runtime.run("1 + 1")).value == "2"


def test_a_hand_built_spec_with_a_plain_handler_is_refused_at_once() -> None:
    def plain(arguments: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(1)

    with pytest.raises(TypeError, match="must be an async function"):
        Runtime(tools=[ToolSpec("plain", "Plain.", {"type": "object"}, plain)])  # type: ignore[arg-type]
