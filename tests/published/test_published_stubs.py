"""The stubs of four published MCP servers, and the values their tools return (issue 14).

The reference filesystem, memory and everything servers (npm) and mcp-server-time (PyPI),
pinned in `servers.py` and installed by the test setup. The stubs must show the nested keys
of every object schema, 200 random calls must return values their stubs describe (checked
with pydantic against the TypedDicts of `rt.prompt()` run here, extra keys forbidden), and a
server keyed `time` must work beside `import time`.
"""

from __future__ import annotations

import ast
import json
import random
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError
from typing_extensions import is_typeddict

from toolscript import Runtime

from .conftest import stub_namespace

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(600)]


def stub_of(namespace: dict[str, Any], call: str) -> Any:
    server, _, tool = call.partition(".")
    return getattr(namespace[server], tool)


async def test_the_stubs_of_create_entities_and_edit_file_show_their_items_keys(
    rt: Runtime,
) -> None:
    prompt = rt.prompt()
    compile(prompt, "<prompt>", "exec", dont_inherit=True)
    assert "async def create_entities(*, entities: list[Entity], timeout" in prompt
    assert (
        "class Entity(TypedDict):\n"
        "    name: str  # The name of the entity\n"
        "    entityType: str  # The type of the entity\n"
        "    observations: list[str]  # An array of observation contents associated with"
    ) in prompt
    assert "async def edit_file(*, path: str, edits: list[Edit], dryRun: bool = False," in prompt
    assert (
        "class Edit(TypedDict):\n"
        "    oldText: str  # Text to search for - must match exactly\n"
        "    newText: str  # Text to replace with\n"
    ) in prompt
    namespace = stub_namespace(prompt)
    hints = typing.get_type_hints(stub_of(namespace, "memory.create_entities"))
    assert typing.get_args(hints["entities"])[0].__required_keys__ == {
        "name",
        "entityType",
        "observations",
    }


def keys_of(schema: Any, root: dict[str, Any]) -> set[str] | None:
    """The property names of an object schema (through `$ref`), or None if it has none."""
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        return set(schema["properties"]) or None
    return None


def typed_dicts_in(hint: Any) -> list[Any]:
    """The TypedDicts an annotation names, at any depth."""
    if is_typeddict(hint):
        return [hint]
    return [found for arg in typing.get_args(hint) for found in typed_dicts_in(arg)]


def assert_shows(schema: dict[str, Any], hint: Any, root: dict[str, Any], where: str) -> None:
    """`hint` is a TypedDict with the schema's keys, and so on for every nested object."""
    keys = keys_of(schema, root)
    if keys is None:
        return
    typed = [t for t in typed_dicts_in(hint) if set(typing.get_type_hints(t)) == keys]
    assert typed, f"{where}: no TypedDict with the keys {sorted(keys)} in {hint}"
    fields = typing.get_type_hints(typed[0])
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    for key, inner in schema["properties"].items():
        for part in [inner, *([inner["items"]] if isinstance(inner.get("items"), dict) else [])]:
            if keys_of(part, root):
                assert_shows(part, fields[key], root, f"{where}.{key}")
        for option in inner.get("anyOf", []):
            if keys_of(option, root):
                assert_shows(option, fields[key], root, f"{where}.{key}")


async def test_every_output_schema_is_a_return_type_showing_every_nested_key(
    rt: Runtime,
) -> None:
    namespace = stub_namespace(rt.prompt())
    with_output = {
        f"{spec.server}.{spec.name}": spec.output_schema
        for spec in rt.catalogue.specs
        if spec.output_schema is not None
    }
    assert len(with_output) >= 25  # every filesystem and memory tool, and a few more
    calls = {plan["key"]: f"{plan['namespace']}.{plan['function']}" for plan in rt.catalogue.plans}
    for key, schema in with_output.items():
        key = key.replace(".", "/", 1)
        returned = typing.get_type_hints(stub_of(namespace, calls[key]))["return"]
        assert_shows(schema, returned, schema, key)


async def test_a_server_keyed_time_works_beside_import_time(rt: Runtime) -> None:
    result = await rt.run(
        "import time\n"
        "now = await time_.get_current_time(timezone='Etc/UTC')\n"
        "same = await tools.time_.convert_time(\n"
        "    source_timezone='Etc/UTC', time='12:00', target_timezone='Asia/Tokyo')\n"
        "(time.time() > 0, now['timezone'], same['target']['timezone'])",
        time_limit=30,
    )
    assert result.status == "ok", result.text
    assert ast.literal_eval(result.value or "") == (True, "Etc/UTC", "Asia/Tokyo")
    prompt = rt.prompt()
    assert "class time_:" in prompt
    assert "`time_` ('time' is a standard-library module)" in prompt


# --- 200 random calls -------------------------------------------------------------------------

Arguments = Callable[[random.Random, int], dict[str, Any]]
TIMEZONES = ["Etc/UTC", "Europe/London", "Asia/Tokyo", "America/New_York", "Australia/Sydney"]
WORDS = ["alpha", "beta", "gamma", "delta", "ünïcode", "tab\there", "quote'\""]


def entity(rng: random.Random, number: int) -> dict[str, Any]:
    return {
        "name": f"e{rng.randrange(8)}",
        "entityType": rng.choice(["person", "place"]),
        "observations": rng.sample(WORDS, rng.randrange(3)),
    }


def relation(rng: random.Random) -> dict[str, Any]:
    return {
        "from": f"e{rng.randrange(8)}",
        "to": f"e{rng.randrange(8)}",
        "relationType": rng.choice(["knows", "visits"]),
    }


def calls_of(folder: Path) -> dict[str, Arguments]:
    """Each callable tool with a maker of valid, random arguments for it."""
    root = str(folder)
    files = [f"{root}/notes.txt", f"{root}/edit.txt", f"{root}/sub/readme.md"]
    return {
        "filesystem.read_file": lambda rng, n: {"path": rng.choice(files)},
        "filesystem.read_text_file": lambda rng, n: {"path": rng.choice(files), "head": 2},
        "filesystem.read_media_file": lambda rng, n: {"path": f"{root}/pixel.png"},
        "filesystem.read_multiple_files": lambda rng, n: {"paths": rng.sample(files, 2)},
        "filesystem.write_file": lambda rng, n: {
            "path": f"{root}/written-{n}.txt",
            "content": rng.choice(WORDS),
        },
        "filesystem.edit_file": lambda rng, n: {
            "path": f"{root}/edit.txt",
            "edits": [{"oldText": "alpha", "newText": rng.choice(WORDS)}],
            "dryRun": True,
        },
        "filesystem.create_directory": lambda rng, n: {"path": f"{root}/made/{n}"},
        "filesystem.list_directory": lambda rng, n: {"path": root},
        "filesystem.list_directory_with_sizes": lambda rng, n: {
            "path": root,
            "sortBy": rng.choice(["name", "size"]),
        },
        "filesystem.directory_tree": lambda rng, n: {"path": f"{root}/sub"},
        "filesystem.move_file": lambda rng, n: {
            "source": f"{root}/made/{n}",
            "destination": f"{root}/moved-{n}",
        },
        "filesystem.search_files": lambda rng, n: {"path": root, "pattern": "*.txt"},
        "filesystem.get_file_info": lambda rng, n: {"path": rng.choice(files)},
        "filesystem.list_allowed_directories": lambda rng, n: {},
        "memory.create_entities": lambda rng, n: {
            "entities": [entity(rng, n) for _ in range(rng.randrange(1, 3))]
        },
        "memory.create_relations": lambda rng, n: {"relations": [relation(rng)]},
        "memory.add_observations": lambda rng, n: {
            "observations": [{"entityName": "e0", "contents": [f"seen {n}"]}]
        },
        "memory.delete_entities": lambda rng, n: {"entityNames": [f"gone-{n}"]},
        "memory.delete_observations": lambda rng, n: {
            "deletions": [{"entityName": "e0", "observations": [f"seen {n - 1}"]}]
        },
        "memory.delete_relations": lambda rng, n: {"relations": [relation(rng)]},
        "memory.read_graph": lambda rng, n: {},
        "memory.search_nodes": lambda rng, n: {"query": rng.choice(["e1", "person", "alpha"])},
        "memory.open_nodes": lambda rng, n: {"names": [f"e{rng.randrange(8)}"]},
        "everything.echo": lambda rng, n: {"message": rng.choice(WORDS)},
        "everything.get_sum": lambda rng, n: {"a": rng.randrange(-9, 9), "b": rng.random()},
        "everything.get_structured_content": lambda rng, n: {
            "location": rng.choice(["New York", "Chicago", "Los Angeles"])
        },
        "everything.get_annotated_message": lambda rng, n: {
            "messageType": rng.choice(["error", "success", "debug"]),
            "includeImage": rng.random() < 0.5,
        },
        "everything.get_tiny_image": lambda rng, n: {},
        "everything.get_resource_links": lambda rng, n: {"count": rng.randrange(1, 4)},
        "everything.get_resource_reference": lambda rng, n: {
            "resourceType": rng.choice(["Text", "Blob"]),
            "resourceId": rng.randrange(1, 5),
        },
        "everything.get_env": lambda rng, n: {},
        "everything.gzip_file_as_resource": lambda rng, n: {
            "name": f"g{n}.gz",
            "data": "data:text/plain;base64,aGVsbG8gd29ybGQ=",
            "outputType": rng.choice(["resource", "resourceLink"]),
        },
        "everything.trigger_long_running_operation": lambda rng, n: {"duration": 0.2, "steps": 2},
        "time_.get_current_time": lambda rng, n: {"timezone": rng.choice(TIMEZONES)},
        "time_.convert_time": lambda rng, n: {
            "source_timezone": rng.choice(TIMEZONES),
            "time": f"{rng.randrange(24):02d}:{rng.randrange(60):02d}",
            "target_timezone": rng.choice(TIMEZONES),
        },
    }


def script(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A script that makes `calls` in order and prints one JSON line per answer."""
    lines = ["import json"]
    for call, arguments in calls:
        lines += [
            "try:",
            f"    value = await {call}(**{arguments!r})",
            "except ToolError as error:",
            "    value = {'$error': str(error)}",
            f"print(json.dumps([{call!r}, value], default=repr))",
        ]
    return "\n".join(lines)


async def test_two_hundred_random_calls_return_values_that_match_their_stubs(
    rt: Runtime, folder: Path
) -> None:
    makers = calls_of(folder)
    assert set(makers) <= set(rt.tool_names())
    rng = random.Random(14)
    names = list(makers)
    chosen = names + [rng.choice(names) for _ in range(200 - len(names))]
    rng.shuffle(chosen)
    everyone = [{"name": f"e{i}", "entityType": "person", "observations": []} for i in range(8)]
    planned: list[tuple[str, dict[str, Any]]] = [("memory.create_entities", {"entities": everyone})]
    for number, call in enumerate(chosen):
        if call == "filesystem.move_file":  # it moves a folder made just before
            planned.append(("filesystem.create_directory", {"path": f"{folder}/made/{number}"}))
        planned.append((call, makers[call](rng, number)))
    namespace = stub_namespace(rt.prompt())
    adapters = {
        call: TypeAdapter(typing.get_type_hints(stub_of(namespace, call))["return"])
        for call in makers
    }
    answers: list[list[Any]] = []
    for start in range(0, len(planned), 40):
        result = await rt.run(script(planned[start : start + 40]), time_limit=120)
        assert result.status == "ok", result.text
        answers += [json.loads(line) for line in result.stdout.splitlines()]
    assert [call for call, _ in answers] == [call for call, _ in planned]
    errors = [
        (call, value) for call, value in answers if isinstance(value, dict) and "$error" in value
    ]
    assert errors == []
    for call, value in answers:
        adapters[call].validate_python(value, strict=True)
        if isinstance(value, dict):  # the check has teeth: a key the stub lacks fails it
            with pytest.raises(ValidationError):
                adapters[call].validate_python({**value, "not in the stub": 1}, strict=True)
    kinds = {type(value).__name__ for _, value in answers}
    assert {"dict", "str", "list"} <= kinds  # structured content, text, and content blocks
