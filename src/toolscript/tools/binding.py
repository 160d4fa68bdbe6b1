"""Binding plans: how each tool appears inside a script, decided once, in the host.

One concept: how a tool's schema becomes a Python signature, with every rule of spelling and
folding in one place, since the stubs and the live functions must follow the same ones (the
schemas' types are rendered by `toolscript.tools.schema_types`). A plan is plain JSON-safe
data. The kernel builds a live `async def` from it (`toolscript.kernel.binding.bind`) and `toolscript.tools.prompt.render_prompt` writes the same
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
- `returns`: the return annotation text: the output schema's type (a `TypedDict` for an
  object), else `str | list[Any]` for an MCP tool (its text, or its content blocks) and `Any`
  for a Python tool; `doc`: the docstring, which says what the value is and, when the Python
  spelling differs, the tool's and the server's own names.
- `types`: the `TypedDict` definitions the annotations name (see
  `toolscript.tools.schema_types`), each before any that uses it; a definition of the same
  name is the same in every plan of a catalogue.
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

Clashes. Goal: a server or Python tool never hides, or is hidden by, a name a script uses.
What fails: a server keyed `time` bound as `time` is replaced by `import time`, and the
script's `time.get_current_time` is an `AttributeError` that points nowhere. What we do:
servers and Python tools (which share the script's namespace) named like a standard-library
module, a builtin, a keyword or a name the stubs use get the trailing `_` too (`time_`),
everywhere: the stub, the live binding and `tools.time_`; the prompt says why in one line.
"""

from __future__ import annotations

import builtins
import keyword
import math
import sys
import textwrap
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from toolscript.tools.schema_types import SchemaTypes, resolve_root
from toolscript.tools.spec import ToolSpec

ANNOTATION_NAMES = frozenset(
    {"Any", "Literal", "NotRequired", "TypedDict", "str", "int", "float", "bool", "list", "dict"}
)
"""Names the rendered annotations use; a tool spelled like one would shadow it in the stubs."""

RESERVED_MEMBER = ANNOTATION_NAMES | {"staticmethod"}
"""Names a server's tool may not take: its stub sits in a class whose every method is
decorated `@staticmethod`, so a tool spelled so would shadow the decorator of every stub
after it (each then a plain method taking `self`, for the check as well)."""

RESERVED_TOP_LEVEL = ANNOTATION_NAMES | {"tools", "ToolError", "ToolTimeout", "show"}
"""Names a top-level tool or server may not take: the stubs and the kernel use them."""

STANDARD_LIBRARY = frozenset(sys.stdlib_module_names)
BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("__"))

CLASHING_TOP_LEVEL = RESERVED_TOP_LEVEL | STANDARD_LIBRARY | BUILTINS
"""Names a server or Python tool is never bound under as they are: `time` is `time_`, so a
script can `import time` and still call the server's tools."""

CONTENT_NAMES = frozenset({"Image", "Audio", "Resource", "ResourceLink"})
"""The kinds of content block a text-answering tool may return; no type takes these names."""

TEXT_RETURNS = "str | list[Any]"
"""The return annotation of an MCP tool that publishes no output schema."""

TIMEOUT_DOC = "Seconds to wait for the answer, then ToolTimeout (the call may still take effect)."

_MAX_DEFAULT = 160


def plans_for(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """One plan per spec, in order, with names unique among siblings. Never raises for one tool."""
    specs = list(specs)
    top_level = _TopLevelNames(specs)
    types = SchemaTypes(top_level.taken())
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
            plans.append(_plan(spec, function, namespace, types))
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
    spellings = spell_all(names, CLASHING_TOP_LEVEL, taken)
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
        spelled = spell_all(names, CLASHING_TOP_LEVEL)
        self.server_spellings = dict(zip(servers, spelled[: len(servers)], strict=True))
        self.functions: dict[int, str | None] = dict(
            zip(python_tools, spelled[len(servers) :], strict=True)
        )
        for server in servers:
            members = [i for i, spec in enumerate(specs) if spec.server == server]
            member_spellings = spell_all([str(specs[i].name) for i in members], RESERVED_MEMBER)
            self.functions.update(zip(members, member_spellings, strict=True))
        self.specs = specs

    def taken(self) -> set[str]:
        """Every spelling in use, and every name the stubs must keep clear (for type names)."""
        spellings = {*self.server_spellings.values(), *self.functions.values()}
        return {name for name in spellings if name} | CLASHING_TOP_LEVEL | CONTENT_NAMES

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


def _plan(
    spec: ToolSpec, function: str, namespace: str | None, types: SchemaTypes
) -> dict[str, Any]:
    schema = spec.input_schema
    problem = None
    properties: dict[str, Any] = {}
    required: set[str] = set()
    more: Any = None  # the schema of the arguments it takes beyond its own, if it says so
    if not isinstance(schema, dict):
        problem = "its input schema is not a JSON object"
    else:
        shape = resolve_root(schema)
        if isinstance(shape, dict):
            more = shape.get("additionalProperties")
            if more is True or (shape.get("patternProperties") and not isinstance(more, dict)):
                more = {}
            elif not isinstance(more, dict):
                more = None
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

    def annotate(part: Any, hint: str, root: Any) -> str:
        return types.render(part, hint, root, tool=function)

    names = list(properties)
    spellings = spell_all(names)
    parameters: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for name, spelling in zip(names, spellings, strict=True):
        annotation = annotate(properties[name], name, schema)
        parameter = _parameter(properties[name], name in required, annotation)
        if spelling is None:
            parameter.pop("default", None)
            parameter.pop("default_text", None)
            extra.append({"name": name, **parameter})
        else:
            parameters.append({"name": name, "spelling": spelling, **parameter})

    taken = {p["spelling"] for p in parameters}
    catch_all = None
    if extra or problem is not None or more is not None:
        catch_all = _unique("kwargs", taken) if "kwargs" not in taken else _unique("extra", taken)
        taken.add(catch_all)
    timeout = "timeout" if "timeout" not in taken else _unique("call_timeout", taken)

    output = spec.output_schema
    if output is not None:
        returns = annotate(output, f"{function} result", output)
    else:
        returns = "Any" if spec.server is None else TEXT_RETURNS
    annotations = [p["annotation"] for p in [*parameters, *extra]] + [returns]
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
        "types": types.definitions(annotations),
        "doc": _doc(
            spec,
            function,
            namespace,
            parameters,
            extra,
            catch_all,
            timeout,
            problem,
            returns,
            None if more is None else annotate(more, f"{function} argument", schema),
        ),
    }


def _parameter(schema: Any, required: bool, annotation: str) -> dict[str, Any]:
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
        alternatives = annotation.split(" | ")
        if default is None and "Any" not in alternatives and "None" not in alternatives:
            annotation += " | None"
        parameter["default"] = default
        parameter["default_text"] = default_text
    return {"annotation": annotation, **parameter}


def why_spelled(name: str, spelling: str) -> str:
    """In a few words, why a server or tool `name` is bound as `spelling`."""
    if name == spelling:
        return ""
    if keyword.iskeyword(name):
        return f"{name!r} is a Python keyword"
    if name in STANDARD_LIBRARY:
        return f"{name!r} is a standard-library module"
    if name in BUILTINS:
        return f"{name!r} is a Python builtin"
    if name in RESERVED_TOP_LEVEL:
        return f"{name!r} is a name the stubs use"
    if spell(name) == name:
        return f"{name!r} is taken by another binding"
    if name.isidentifier() and name.startswith("__"):
        return f"{name!r} starts with two underscores, as the names Python itself uses do"
    if name.isidentifier():
        return f"Python reads {name!r} as {unicodedata.normalize('NFKC', name)!r} (NFKC)"
    return f"{name!r} is not a Python identifier"


def _doc(
    spec: ToolSpec,
    function: str,
    namespace: str | None,
    parameters: list[dict[str, Any]],
    extra: list[dict[str, Any]],
    catch_all: str | None,
    timeout: str,
    problem: str | None,
    returns: str,
    more: str | None = None,
) -> str:
    """The tool's docstring; `more`: the type of the arguments it takes beyond its own, when
    its schema says it takes any (`additionalProperties`, `patternProperties`)."""
    lines = [_plain(spec.description).strip() if isinstance(spec.description, str) else ""]
    if not lines[0]:
        lines[0] = f"The tool {spec.name!r}."
    server = spec.server
    if spec.name != function or (server is not None and server != namespace):
        owner = "" if server is None else f" on the MCP server {server!r}"
        why = why_spelled(str(spec.name), function)
        lines += ["", f"Its own name: {spec.name!r}{owner}." + (f" Renamed: {why}." if why else "")]
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
    elif catch_all is not None and problem is None and more is not None:
        lines += _entry(
            f"**{catch_all}", f"further arguments the tool takes, by their own names ({more})."
        )
    elif catch_all is not None:
        lines += _entry(f"**{catch_all}", "the tool's arguments, by their own names.")
    lines += _entry(timeout, TIMEOUT_DOC)
    lines += [
        "",
        "Returns:",
        textwrap.fill(
            _returns_doc(spec, returns), 92, initial_indent="    ", subsequent_indent="    "
        ),
    ]
    return "\n".join(lines).strip()


def _returns_doc(spec: ToolSpec, returns: str) -> str:
    if spec.server is None:
        return f"{returns}: the function's return value, as JSON data."
    if spec.output_schema is not None:
        return f"{returns}: the tool's structured content, as its output schema describes it."
    return (
        f"{returns}: its text, as one str; a list of its content blocks (str, Image, Audio, "
        "Resource, ResourceLink) when it answers other than one text block."
    )


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
