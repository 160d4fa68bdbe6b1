"""JSON Schemas as Python types: annotation text, and a `TypedDict` for every object schema.

`SchemaTypes` is shared by every tool of a catalogue. `render(schema, hint, root)` gives the
annotation text of one schema (`list[Entity] | None`) and records each object schema it meets
as a `TypedDict` definition: plain JSON data that the prompt writes as a class and the kernel
builds with `typing.TypedDict`, so both read the same keys, the same `NotRequired` keys and
the same field types. `definitions(names)` gives what an annotation needs, in an order that
defines every type before a later one uses it.

Names. Goal: short names a model reads as the thing (`Entity`, `Edit`, `TimeResult`), that
never shadow a binding, a builtin or a standard-library module, and one class per shape.
What fails: names from the tool and the path alone are long (`CreateEntitiesEntitiesItem`);
names from titles alone collide between servers with different shapes. What we do: a type is
named from the schema's `title`, else its `$defs` key, else the property it is the value of
(singular for an array's items: `entities` -> `Entity`), else `<Tool>Result` for an output.
A shape already defined under the same preferred name reuses that type (the memory server's
`Entity` is one class for all its tools); a name taken by another shape is qualified by the
tool (`AddObservationsResult`), then numbered (`Result_2`).

Bounds. Goal: any schema renders, and a hostile or huge one costs little. What fails:
recursive `$ref`s loop, a deep or wide schema makes endless text. What we do: a `$ref` that is
being rendered refers to its type by name (quoted where Python would need it before it is
defined); past `MAX_DEPTH`, `MAX_NODES` nodes, `MAX_FIELDS` keys, `MAX_TYPES` types or
`MAX_ANNOTATION` characters, the rest of a schema is `Any` (or `dict[str, Any]`).
"""

from __future__ import annotations

import json
import keyword
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

MAX_DEPTH = 8
MAX_NODES = 400
MAX_FIELDS = 64
MAX_TYPES = 400
MAX_ANNOTATION = 240
MAX_NAME = 48

TypeDefinition = dict[str, Any]
"""A `TypedDict` as plain data: `name`, and `fields`, each with `key`, `annotation` (text that
is quoted when it names a type defined later), `required`, and maybe `description` (one line)."""

_SIMPLE = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}


class SchemaTypes:
    """The `TypedDict`s of one catalogue, each named once and shared by equal shapes.

    `taken` holds the names a type may not take: every binding, keyword, builtin and
    standard-library module name the caller wants to keep clear.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.taken = set(taken)
        self.definitions_by_name: dict[str, TypeDefinition] = {}
        self._order: list[str] = []
        self._pending: set[str] = set()
        self._by_shape: dict[str, str] = {}
        self._uses: dict[str, set[str]] = {}

    def render(self, schema: Any, hint: str, root: Any, tool: str = "") -> str:
        """The annotation text of `schema` (inside the document `root`), naming new types
        from `hint` and, when that name is taken by another shape, from `tool`."""
        rendering = _Rendering(self, root, tool)
        try:
            found = rendering.render(schema, 0, {}, hint)
        except RecursionError:
            return "Any"
        text = _join(found)
        return "Any" if len(text) > MAX_ANNOTATION else text

    def names_in(self, annotation: str) -> list[str]:
        """The type names `annotation` uses, as written (not inside quotes)."""
        return [name for name in _words(annotation) if name in self.definitions_by_name]

    def definitions(self, annotations: Iterable[str]) -> list[TypeDefinition]:
        """Every type the annotations need (and the ones those need), each before its users."""
        needed: set[str] = set()
        pending = [name for text in annotations for name in self.names_in(text)]
        while pending:
            name = pending.pop()
            if name not in needed:
                needed.add(name)
                pending.extend(self._uses.get(name, ()))
        return [self.definitions_by_name[name] for name in self._order if name in needed]

    # -- used by a rendering -----------------------------------------------------------------

    def reserve(self, preferred: str, tool: str) -> str | None:
        """A free name for a type being rendered, or `None` when the catalogue has too many."""
        if len(self._order) + len(self._pending) >= MAX_TYPES:
            return None
        base = _type_name(preferred)
        candidates = [base, _type_name(f"{tool} {base}")] if tool else [base]
        number = 2
        while all(candidate in self.taken for candidate in candidates):
            candidates = [f"{base}_{number}"]
            number += 1
        name = next(candidate for candidate in candidates if candidate not in self.taken)
        self.taken.add(name)
        self._pending.add(name)
        return name

    def settle(self, name: str, preferred: str, fields: list[dict[str, Any]]) -> str:
        """Define `name` with `fields`, or give the name of the same shape defined before
        under the same `preferred` name.

        A field that names a type still being rendered (a recursive reference, or the type
        itself) is quoted, since Python needs such a name before it is defined.
        """
        self._pending.discard(name)
        known = self.definitions_by_name.keys() | self._pending | {name}
        uses = {word for field in fields for word in _words(field["annotation"]) if word in known}
        shape = json.dumps(
            [preferred, [[f["key"], f["annotation"], f["required"]] for f in fields]]
        )
        existing = self._by_shape.get(shape)
        if existing is not None and name not in uses:
            self.taken.discard(name)
            return existing
        self._by_shape.setdefault(shape, name)
        self._uses[name] = uses - {name}
        forward = self._pending | {name}
        for field in fields:
            if forward.intersection(_words(field["annotation"])):
                field["annotation"] = repr(field["annotation"])
        self.definitions_by_name[name] = {"name": name, "fields": fields}
        self._order.append(name)
        return name


def resolve_root(schema: dict[str, Any]) -> Any:
    """The schema a root `$ref` points to, or the schema itself."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _Rendering(SchemaTypes(), schema, "").lookup(ref)
        if isinstance(target, dict):
            return target
    return schema


class _Rendering:
    """One schema document's rendering, within one budget of nodes."""

    def __init__(self, types: SchemaTypes, root: Any, tool: str) -> None:
        self.types = types
        self.root = root
        self.tool = tool
        self.nodes = 0

    def render(self, schema: Any, depth: int, refs: dict[str, str], hint: str) -> list[str]:
        self.nodes += 1
        if not isinstance(schema, dict) or depth > MAX_DEPTH or self.nodes > MAX_NODES:
            return ["Any"]
        found = self.shape(schema, depth, refs, hint)
        if schema.get("nullable") is True:
            found = _union([found, ["None"]])
        return found

    def shape(
        self, schema: dict[str, Any], depth: int, refs: dict[str, str], hint: str
    ) -> list[str]:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self.reference(ref, depth, refs, hint)
        if "const" in schema:
            return _literals([schema["const"]])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return _literals(schema["enum"])
        for word in ("anyOf", "oneOf"):
            options = schema.get(word)
            if isinstance(options, list) and options:
                return _union([self.render(o, depth + 1, refs, hint) for o in options])
        options = schema.get("allOf")
        if isinstance(options, list) and options and "type" not in schema:
            if len(options) == 1:
                return self.render(options[0], depth + 1, refs, hint)
            merged = self.merged(options)
            return ["Any"] if merged is None else self.render(merged, depth + 1, refs, hint)
        kind = schema.get("type")
        if isinstance(kind, list) and kind:
            return _union([self.of_type(k, schema, depth, refs, hint) for k in kind])
        if isinstance(kind, str):
            return self.of_type(kind, schema, depth, refs, hint)
        if "properties" in schema:
            return self.of_type("object", schema, depth, refs, hint)
        if "items" in schema:
            return self.of_type("array", schema, depth, refs, hint)
        return ["Any"]

    def reference(self, ref: str, depth: int, refs: dict[str, str], hint: str) -> list[str]:
        if ref in refs:
            return [refs[ref]] if refs[ref] else ["Any"]
        target = self.lookup(ref)
        if not isinstance(target, dict):
            return ["Any"]
        if ref.startswith(("#/$defs/", "#/definitions/")) and ref.count("/") == 2:
            hint = ref.rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")
        named = self.object_name(target, hint)
        if named is None:
            return self.render(target, depth + 1, {**refs, ref: ""}, hint)
        return self.typed_dict(target, depth + 1, refs, named, ref)

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

    def merged(self, options: list[Any]) -> dict[str, Any] | None:
        """`allOf` object schemas as one (their properties and required keys together)."""
        properties: dict[str, Any] = {}
        required: list[Any] = []
        for option in options:
            if isinstance(option, dict) and isinstance(option.get("$ref"), str):
                option = self.lookup(option["$ref"])
            if not isinstance(option, dict) or not isinstance(option.get("properties"), dict):
                return None
            properties.update(option["properties"])
            if isinstance(option.get("required"), list):
                required += option["required"]
        return {"type": "object", "properties": properties, "required": required}

    def of_type(
        self, kind: Any, schema: dict[str, Any], depth: int, refs: dict[str, str], hint: str
    ) -> list[str]:
        if kind in _SIMPLE:
            return [_SIMPLE[kind]]
        if kind == "array":
            items = schema.get("items")
            inner = (
                self.render(items, depth + 1, refs, _singular(hint))
                if isinstance(items, dict)
                else ["Any"]
            )
            return [f"list[{_join(inner)}]"]
        if kind == "object":
            named = self.object_name(schema, hint)
            if named is not None:
                return self.typed_dict(schema, depth, refs, named, None)
            values = schema.get("additionalProperties")
            if isinstance(values, dict) and not schema.get("properties"):
                return [f"dict[str, {_join(self.render(values, depth + 1, refs, hint))}]"]
            return ["dict[str, Any]"]
        return ["Any"]

    def object_name(self, schema: dict[str, Any], hint: str) -> str | None:
        """The name an object schema's `TypedDict` would prefer, or `None` if it gets none."""
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties or len(properties) > MAX_FIELDS:
            return None
        kind = schema.get("type", "object")
        if kind != "object" and not (isinstance(kind, list) and "object" in kind):
            return None
        title = schema.get("title")
        return title if isinstance(title, str) and _type_name(title) != "Object" else hint

    def typed_dict(
        self, schema: dict[str, Any], depth: int, refs: dict[str, str], named: str, ref: str | None
    ) -> list[str]:
        name = self.types.reserve(named, self.tool)
        if name is None:
            return ["dict[str, Any]"]
        inner = {**refs, ref: name} if ref is not None else refs
        required = schema.get("required")
        required_keys = (
            {k for k in required if isinstance(k, str)} if isinstance(required, list) else set()
        )
        fields: list[dict[str, Any]] = []
        for key, value in schema["properties"].items():
            text = _join(self.render(value, depth + 1, inner, str(key)))
            if len(text) > MAX_ANNOTATION:
                text = "Any"
            field = {"key": str(key), "annotation": text, "required": key in required_keys}
            about = value.get("description") if isinstance(value, dict) else None
            if isinstance(about, str) and about.strip():
                field["description"] = _one_line(about)
            fields.append(field)
        return [self.types.settle(name, _type_name(named), fields)]


def _one_line(text: str) -> str:
    """The first line of a description, short and printable, for a comment beside a key."""
    line = " ".join(text.strip().split("\n", 1)[0].split())
    line = "".join(char if char.isprintable() else " " for char in line)
    return line if len(line) <= 100 else line[:99] + "…"


def _words(text: str) -> list[str]:
    """The identifiers in annotation text, outside string literals."""
    without_strings = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "", text)
    return re.findall(r"[^\W\d]\w*", without_strings)


def _type_name(text: str) -> str:
    """`text` as a CamelCase identifier: `get_current_timeOutput` -> `GetCurrentTimeOutput`."""
    text = unicodedata.normalize("NFKC", text)
    parts = [part for part in re.split(r"[^0-9A-Za-z]+", text) if part]
    name = "".join(part[0].upper() + part[1:] for part in parts)[:MAX_NAME] or "Object"
    if name[0].isdigit():
        name = "T" + name
    if keyword.iskeyword(name):
        name += "_"
    return name


def _singular(word: str) -> str:
    """An array's item name from the array's: `entities` -> `entity`, `edits` -> `edit`."""
    lower = word.lower()
    if len(word) > 4 and lower.endswith("ies"):
        return word[:-3] + "y"
    if lower.endswith(("sses", "ches", "shes", "xes")):
        return word[:-2]
    if len(word) > 3 and lower.endswith("s") and not lower.endswith(("ss", "us", "is")):
        return word[:-1]
    return word + " item"


def _join(alternatives: list[str]) -> str:
    return " | ".join(alternatives)


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
    if len(head[0] if head else "") > MAX_ANNOTATION:
        names = {bool: "bool", int: "int", str: "str"}
        head = _union([[names[type(v)] for v in values if type(v) in names]])
    return _union([head, *others])
