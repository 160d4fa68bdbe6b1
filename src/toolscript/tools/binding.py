"""Binding plans: how each tool appears inside a script, decided once, in the host.

One concept, though a little over 500 lines: how a tool's schema becomes a Python
signature, with every rule of spelling and folding in one place, since the stubs and the
live functions must follow the same ones. A plan is plain JSON-safe data. The kernel builds a live `async def` from it
(`toolscript.kernel.binding.bind`) and `toolscript.tools.prompt.render_prompt` writes the same
function as a stub, so the signature the model reads and the one the script calls cannot
disagree: neither side decides anything, both copy the plan.

A plan is a dict with these keys:

- `key`: the tool's key (`ToolSpec.key`), sent with every call.
- `name`, `server`: the tool's and the server's own names (`server` is `None` for Python tools).
- `function`: the tool's identifier spelling; `namespace`: the server's (`None`: top level).
- `parameters`: one dict per named parameter, in the schema's order: `name` (original),
  `spelling`, `annotation` (Python type text), `required`, and for optional ones `default`
  (a JSON value) and `default_text` (the same value as a Python literal). All are keyword-only.
- `extra`: parameters whose names cannot be spelled as identifiers at all (`""`, `"!!!"`); each
  has `name`, `annotation`, `required` and `description`. They go through the catch-all.
- `catch_all`: the spelling of the `**kwargs` parameter, or `None` when the tool needs none.
- `timeout`: the spelling of the per-call timeout keyword (`timeout`, or `call_timeout` when
  the tool has a parameter of its own spelled `timeout`).
- `returns`: the return annotation text; `doc`: the docstring.
- `error`: present only on a plan that could not be made; it then holds only `key`, `name`,
  `server`, `error` and (when the server's spelling is known) `namespace`, and the kernel
  reports the tool as not bound, naming the reason.

Optional parameters. Goal: the signature shows which parameters a call can leave out, and a
call sends only what the script passed. What fails: a parameter shown without a default reads
as required; a private sentinel default leaks into `help()` and the prompt as noise. What we
do: an optional parameter whose schema has a default that is a small JSON value shows it
(`per_page: int = 30`); one without (or with a default too big to show) shows `= None`, its
annotation gains `| None`, and `None` means "not given". The kernel sends a parameter only
when the value passed is not the very default object, so a call never sends what the script
did not pass (passing a default's own object back sends nothing, which by the schema has the
same effect). The cost: a nullable parameter with no default cannot be sent an explicit
`null`; leaving it out is the choice that never does what the script did not ask for.

Spelling. A name that is already an identifier keeps it. Others are spelled: characters that
cannot be in an identifier become `_` (`file-path` → `file_path`), a keyword or a reserved name
gets a trailing `_` (`class` → `class_`), a leading digit gets a leading `_`, a leading `__`
becomes `_` (a class body would mangle it), and the result is NFKC-normalized as Python's
parser does. Names that were identifiers are placed first, so a rename never takes a sibling's
name; a rename that collides gets `_2`, `_3`, ... in schema order. A name with nothing left to
spell (`""`, `"!!!"`) goes through the catch-all and is listed in the docstring.
"""

from __future__ import annotations

import keyword
import math
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from toolscript.tools.spec import ToolSpec

ANNOTATION_NAMES = frozenset({"Any", "Literal", "str", "int", "float", "bool", "list", "dict"})
"""Names the rendered annotations use; a tool spelled like one would shadow it in the stubs."""

RESERVED_TOP_LEVEL = ANNOTATION_NAMES | {"tools", "ToolError", "ToolTimeout"}
"""Names a top-level tool or server may not take: the stubs and the kernel use them."""

TIMEOUT_DOC = "Seconds to wait for the answer, then ToolTimeout (the call may still take effect)."

_MAX_DEPTH = 8
_MAX_NODES = 400
_MAX_ANNOTATION = 240
_MAX_DEFAULT = 160


def plans_for(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """One plan per spec, in order, with names unique among siblings. Never raises for one tool."""
    specs = list(specs)
    top_level = _TopLevelNames(specs)
    plans: list[dict[str, Any]] = []
    keys: set[str] = set()
    for index, spec in enumerate(specs):
        namespace = None
        try:
            namespace = top_level.namespace(index)
            if spec.key in keys:
                raise _Unplannable(f"another tool has the same key {spec.key!r}")
            keys.add(spec.key)
            function = top_level.function(index)
            plans.append(_plan(spec, function, namespace))
        except Exception as error:
            why = str(error) if isinstance(error, _Unplannable) else f"planning failed: {error!r}"
            plans.append(_failed_plan(spec, why, namespace))
    return plans


def down_server_spellings(
    plans: Iterable[dict[str, Any]], servers: Iterable[str]
) -> dict[str, str]:
    """How a script names each of `servers` that has no tools (it did not start), by server:
    spelled as any server is, never taking a name `plans` bind at top level."""
    taken = {
        str(plan["namespace"] if plan.get("namespace") is not None else plan.get("function"))
        for plan in plans
    }
    names = list(servers)
    spellings = spell_all(names, RESERVED_TOP_LEVEL, taken)
    return {name: spelling for name, spelling in zip(names, spellings, strict=True) if spelling}


def plan_for(spec: ToolSpec) -> dict[str, Any]:
    """The plan of one tool on its own (names are unique only among its own parameters)."""
    return plans_for([spec])[0]


def spell(name: str, reserved: frozenset[str] = frozenset()) -> str | None:
    """`name` as a Python identifier, before uniqueness; `None` if nothing of it can be spelled."""
    name = unicodedata.normalize("NFKC", name)
    if not name.isidentifier():
        kept = "".join(ch if ("a" + ch).isidentifier() else "_" for ch in name)
        while "__" in kept:
            kept = kept.replace("__", "_")
        kept = kept.strip("_")
        if not kept:
            return None
        name = "_" + kept if kept[0].isdigit() else kept
        name = unicodedata.normalize("NFKC", name)
        if not name.isidentifier():
            return None
    if name.startswith("__"):
        name = "_" + name.lstrip("_") if name.strip("_") else "_"
    if keyword.iskeyword(name) or name in reserved:
        name += "_"
    return name


def spell_all(
    names: Sequence[str], reserved: frozenset[str] = frozenset(), taken: Iterable[str] = ()
) -> list[str | None]:
    """Unique spellings for sibling names: exact identifiers first, then renames in order."""
    spellings: list[str | None] = [None] * len(names)
    used = set(taken)
    exact = [i for i, name in enumerate(names) if spell(name, reserved) == name]
    for i in exact:
        if names[i] not in used:
            spellings[i] = names[i]
            used.add(names[i])
    for i, name in enumerate(names):
        if spellings[i] is not None:
            continue
        base = spell(name, reserved)
        if base is None:
            continue
        spellings[i] = _unique(base, used)
        used.add(spellings[i] or base)
    return spellings


class _Unplannable(Exception):
    """A tool that cannot be bound, with the reason in words."""


def _unique(base: str, used: set[str]) -> str:
    if base not in used:
        return base
    number = 2
    while f"{base}_{number}" in used:
        number += 1
    return f"{base}_{number}"


class _TopLevelNames:
    """Spellings of servers and Python tools (which share the script's namespace), and of
    each server's tools (which share their server's namespace)."""

    def __init__(self, specs: Sequence[ToolSpec]) -> None:
        servers: list[str] = []
        for spec in specs:
            if spec.server is not None and str(spec.server) not in servers:
                servers.append(str(spec.server))
        python_tools = [i for i, spec in enumerate(specs) if spec.server is None]
        names = servers + [str(specs[i].name) for i in python_tools]
        spelled = spell_all(names, RESERVED_TOP_LEVEL)
        self.server_spellings = dict(zip(servers, spelled[: len(servers)], strict=True))
        self.functions: dict[int, str | None] = dict(
            zip(python_tools, spelled[len(servers) :], strict=True)
        )
        for server in servers:
            members = [i for i, spec in enumerate(specs) if spec.server == server]
            member_spellings = spell_all([str(specs[i].name) for i in members], ANNOTATION_NAMES)
            self.functions.update(zip(members, member_spellings, strict=True))
        self.specs = specs

    def function(self, index: int) -> str:
        spelling = self.functions.get(index)
        if spelling is None:
            raise _Unplannable(
                f"the tool name {self.specs[index].name!r} cannot be spelled in Python"
            )
        return spelling

    def namespace(self, index: int) -> str | None:
        server = self.specs[index].server
        if server is None:
            return None
        spelling = self.server_spellings.get(str(server))
        if spelling is None:
            raise _Unplannable(f"the server name {server!r} cannot be spelled in Python")
        return spelling


def _failed_plan(spec: ToolSpec, why: str, namespace: str | None) -> dict[str, Any]:
    server = None if spec.server is None else str(spec.server)
    plan = {"key": str(spec.key), "name": str(spec.name), "server": server, "error": why}
    return plan if namespace is None else {**plan, "namespace": namespace}


def _plan(spec: ToolSpec, function: str, namespace: str | None) -> dict[str, Any]:
    schema = spec.input_schema
    annotator = _Annotator(schema)
    problem = None
    properties: dict[str, Any] = {}
    required: set[str] = set()
    if not isinstance(schema, dict):
        problem = "its input schema is not a JSON object"
    else:
        shape = annotator.resolve(schema)
        raw_properties = shape.get("properties", {}) if isinstance(shape, dict) else None
        raw_required = shape.get("required", []) if isinstance(shape, dict) else None
        if not isinstance(raw_properties, dict):
            problem = "its input schema's `properties` is not an object"
        else:
            properties = {str(name): value for name, value in raw_properties.items()}
        if isinstance(raw_required, list):
            required = {name for name in raw_required if isinstance(name, str)}
        for name in sorted(required - properties.keys()):
            properties[name] = {}

    names = list(properties)
    spellings = spell_all(names)
    parameters: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for name, spelling in zip(names, spellings, strict=True):
        parameter = _parameter(name, properties[name], name in required, annotator)
        if spelling is None:
            parameter.pop("default", None)
            parameter.pop("default_text", None)
            extra.append({"name": name, **parameter})
        else:
            parameters.append({"name": name, "spelling": spelling, **parameter})

    taken = {p["spelling"] for p in parameters}
    catch_all = None
    if extra or problem is not None:
        catch_all = _unique("kwargs", taken) if "kwargs" not in taken else _unique("extra", taken)
        taken.add(catch_all)
    timeout = "timeout" if "timeout" not in taken else _unique("call_timeout", taken)

    output = spec.output_schema
    returns = "Any" if output is None else _Annotator(output).text(output)
    return {
        "key": spec.key,
        "name": spec.name,
        "server": spec.server,
        "function": function,
        "namespace": namespace,
        "parameters": parameters,
        "extra": extra,
        "catch_all": catch_all,
        "timeout": timeout,
        "returns": returns,
        "doc": _doc(spec, parameters, extra, catch_all, timeout, problem),
    }


def _parameter(name: str, schema: Any, required: bool, annotator: _Annotator) -> dict[str, Any]:
    alternatives = annotator.alternatives(schema)
    text = schema.get("description") if isinstance(schema, dict) else None
    parameter: dict[str, Any] = {
        "required": required,
        "description": text.strip() if isinstance(text, str) else "",
    }
    if not required:
        default, default_text = None, "None"
        if isinstance(schema, dict) and "default" in schema:
            literal = _literal(schema["default"])
            if literal is not None:
                default, default_text = schema["default"], literal
        if default is None and "Any" not in alternatives and "None" not in alternatives:
            alternatives = [*alternatives, "None"]
        parameter["default"] = default
        parameter["default_text"] = default_text
    return {"annotation": _join(alternatives), **parameter}


def _doc(
    spec: ToolSpec,
    parameters: list[dict[str, Any]],
    extra: list[dict[str, Any]],
    catch_all: str | None,
    timeout: str,
    problem: str | None,
) -> str:
    lines = [_plain(spec.description).strip() if isinstance(spec.description, str) else ""]
    if not lines[0]:
        lines[0] = f"The tool {spec.name!r}."
    if problem is not None:
        lines += ["", f"Its arguments are not described: {problem}. Pass them by name."]
    lines += ["", "Args:"]
    for parameter in parameters:
        label = parameter["spelling"]
        if parameter["name"] != parameter["spelling"]:
            label += f" (sent as {parameter['name']!r})"
        elif not parameter["description"]:
            continue
        lines += _entry(label, parameter["description"])
    if extra:
        lines += _entry(f"**{catch_all}", "arguments whose names are not Python identifiers:")
        for item in extra:
            need = "required, " if item["required"] else ""
            lines += _entry(
                f"    {item['name']!r} ({need}{item['annotation']})", item["description"]
            )
    elif catch_all is not None:
        lines += _entry(f"**{catch_all}", "the tool's arguments, by their own names.")
    lines += _entry(timeout, TIMEOUT_DOC)
    return "\n".join(lines).strip()


def _entry(label: str, description: str) -> list[str]:
    text = _plain(description).strip().split("\n") or [""]
    first = f"    {label}: {text[0]}".rstrip()
    return [first, *(f"        {line}".rstrip() for line in text[1:])]


def _plain(text: str) -> str:
    """Text with `\n` line ends and no tabs, so a docstring reads the same wherever indented."""
    return text.replace("\r\n", "\n").replace("\r", "\n").expandtabs(4)


def _literal(value: Any) -> str | None:
    """`value` as a Python literal if it is a small JSON value, else `None`."""
    budget = [40]

    def small(item: Any, depth: int) -> bool:
        budget[0] -= 1
        if budget[0] < 0 or depth > 6:
            return False
        if item is None or type(item) in (bool, int, str):
            return True
        if type(item) is float:
            return math.isfinite(item)
        if type(item) is list:
            return all(small(x, depth + 1) for x in item)
        if type(item) is dict:
            return all(type(k) is str and small(v, depth + 1) for k, v in item.items())
        return False

    if not small(value, 0):
        return None
    text = repr(value)
    return text if len(text) <= _MAX_DEFAULT else None


def _join(alternatives: list[str]) -> str:
    return " | ".join(alternatives)


class _Annotator:
    """Renders JSON Schemas as Python annotation text, within a budget of effort.

    Handles `type` (also lists), `enum`/`const` (as `Literal`), `anyOf`/`oneOf` (unions),
    `allOf` of one schema, `items`, `additionalProperties`, `nullable`, and `$ref` within the
    same document (cycles and anything unresolvable become `Any`). Anything else is `Any`.
    """

    def __init__(self, root: Any) -> None:
        self.root = root
        self.nodes = 0

    def text(self, schema: Any) -> str:
        return _join(self.alternatives(schema))

    def alternatives(self, schema: Any) -> list[str]:
        self.nodes = 0
        try:
            found = self.render(schema, 0, frozenset())
        except Exception:
            return ["Any"]
        if len(_join(found)) > _MAX_ANNOTATION:
            return ["Any"]
        return found

    def resolve(self, schema: dict[str, Any]) -> Any:
        """The schema a root `$ref` points to, or the schema itself."""
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self.lookup(ref)
            if isinstance(target, dict):
                return target
        return schema

    def lookup(self, ref: str) -> Any:
        if ref == "#":
            return self.root
        if not ref.startswith("#/"):
            return None
        node = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    def render(self, schema: Any, depth: int, refs: frozenset[str]) -> list[str]:
        self.nodes += 1
        if not isinstance(schema, dict) or depth > _MAX_DEPTH or self.nodes > _MAX_NODES:
            return ["Any"]
        found = self.render_shape(schema, depth, refs)
        if schema.get("nullable") is True:
            found = _union([found, ["None"]])
        return found

    def render_shape(self, schema: dict[str, Any], depth: int, refs: frozenset[str]) -> list[str]:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            if ref in refs:
                return ["Any"]
            return self.render(self.lookup(ref), depth + 1, refs | {ref})
        if "const" in schema:
            return _literals([schema["const"]])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return _literals(schema["enum"])
        for word in ("anyOf", "oneOf"):
            options = schema.get(word)
            if isinstance(options, list) and options:
                return _union([self.render(option, depth + 1, refs) for option in options])
        options = schema.get("allOf")
        if isinstance(options, list) and len(options) == 1 and "type" not in schema:
            return self.render(options[0], depth + 1, refs)
        kind = schema.get("type")
        if isinstance(kind, list) and kind:
            return _union([self.render_type(k, schema, depth, refs) for k in kind])
        if isinstance(kind, str):
            return self.render_type(kind, schema, depth, refs)
        if "properties" in schema:
            return ["dict[str, Any]"]
        if "items" in schema:
            return self.render_type("array", schema, depth, refs)
        return ["Any"]

    def render_type(
        self, kind: Any, schema: dict[str, Any], depth: int, refs: frozenset[str]
    ) -> list[str]:
        simple = {
            "string": "str",
            "integer": "int",
            "number": "float",
            "boolean": "bool",
            "null": "None",
        }
        if kind in simple:
            return [simple[kind]]
        if kind == "array":
            items = schema.get("items")
            inner = self.render(items, depth + 1, refs) if isinstance(items, dict) else ["Any"]
            return [f"list[{_join(inner)}]"]
        if kind == "object":
            values = schema.get("additionalProperties")
            if isinstance(values, dict) and not schema.get("properties"):
                return [f"dict[str, {_join(self.render(values, depth + 1, refs))}]"]
            return ["dict[str, Any]"]
        return ["Any"]


def _union(groups: list[list[str]]) -> list[str]:
    """Alternatives of several schemas as one union: deduplicated, `None` last, `Any` absorbing."""
    found: list[str] = []
    for group in groups:
        for item in group:
            if item == "Any":
                return ["Any"]
            if item not in found:
                found.append(item)
    if "None" in found:
        found.remove("None")
        found.append("None")
    return found or ["Any"]


def _literals(values: list[Any]) -> list[str]:
    literal: list[str] = []
    others: list[list[str]] = []
    for value in values:
        if value is None:
            others.append(["None"])
        elif type(value) in (bool, int) or (type(value) is str and len(value) <= 80):
            text = repr(value)
            if text not in literal:
                literal.append(text)
        elif type(value) is str:
            others.append(["str"])
        elif type(value) is float:
            others.append(["float"])
        elif type(value) is list:
            others.append(["list[Any]"])
        elif type(value) is dict:
            others.append(["dict[str, Any]"])
        else:
            return ["Any"]
    head = [f"Literal[{', '.join(literal)}]"] if literal else []
    if len(head[0] if head else "") > _MAX_ANNOTATION:
        head = _union([_literal_types(values)])
    return _union([head, *others])


def _literal_types(values: list[Any]) -> list[str]:
    names = {bool: "bool", int: "int", str: "str"}
    return [names[type(value)] for value in values if type(value) in names]
