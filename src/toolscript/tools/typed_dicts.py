"""The `TypedDict`s of the binding plans, written as Python source for the prompt.

Each definition (see `toolscript.tools.schema_types`) is written once, before the stubs that
use it, in the order the plans list them, which is the order the kernel builds them in. A
class statement when every key can be a field name (`class Entity(TypedDict):`), else the
call form (`Relation = TypedDict("Relation", {"from": str, ...})`), which takes any key.
Optional keys are `NotRequired[...]`; each key's description, when it has one, is a comment.
"""

from __future__ import annotations

import keyword
import unicodedata
from typing import Any

__all__ = ["ordered_definitions", "render_typed_dict", "render_typed_dicts"]


def ordered_definitions(plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The type definitions of `plans`, each once, in the order the kernel builds them."""
    seen: dict[str, dict[str, Any]] = {}
    for plan in plans:
        if "error" in plan:
            continue
        for definition in plan.get("types") or ():
            seen.setdefault(str(definition["name"]), definition)
    return list(seen.values())


def render_typed_dicts(plans: list[dict[str, Any]]) -> str:
    """Every `TypedDict` the plans use, as source, separated by blank lines ("" if none)."""
    return "\n\n\n".join(render_typed_dict(d) for d in ordered_definitions(plans))


def render_typed_dict(definition: dict[str, Any]) -> str:
    """One `TypedDict` definition as source."""
    name = str(definition["name"])
    fields = list(definition["fields"])
    if all(_field_name(str(field["key"])) for field in fields):
        lines = [f"class {name}(TypedDict):"]
        for field in fields:
            lines.append(f"    {field['key']}: {_annotation(field)}{_comment(field)}")
        return "\n".join(lines)
    lines = [f"{name} = TypedDict("]
    lines.append(f"    {name!r},")
    lines.append("    {")
    for field in fields:
        lines.append(f"        {str(field['key'])!r}: {_annotation(field)},{_comment(field)}")
    lines.append("    },")
    lines.append(")")
    return "\n".join(lines)


def _field_name(key: str) -> bool:
    return (
        key.isidentifier()
        and not keyword.iskeyword(key)
        and not key.startswith("__")
        and unicodedata.normalize("NFKC", key) == key
    )


def _annotation(field: dict[str, Any]) -> str:
    text = str(field["annotation"])
    return text if field["required"] else f"NotRequired[{text}]"


def _comment(field: dict[str, Any]) -> str:
    description = field.get("description")
    return f"  # {description}" if description else ""
