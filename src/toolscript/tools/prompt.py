"""The tool catalogue for a model: every tool as a Python stub that compiles.

Each stub is written from the same binding plan the kernel builds the live function from
(`toolscript.tools.binding`), so the two have the same signature: the same names, kinds,
defaults and annotations. Python tools are top-level functions; the tools of an MCP server
are static methods of a class named for the server, which reads as `await memory.create_entities(...)`
and has the same `__qualname__` as the live function. The object schemas of their arguments
and results are `TypedDict`s, written once above the stubs (`toolscript.tools.typed_dicts`).
Tools that could not be bound are named in a comment with the reason.
"""

from __future__ import annotations

import re
from typing import Any

from .binding import why_spelled
from .typed_dicts import render_typed_dicts

HOW = """\
# Tools you can call from this script. Every tool is a coroutine function: await it,
# {example}
# Arguments are keyword-only. A failed call raises ToolError; a call whose `timeout=`
# passes raises ToolTimeout (the call was sent and may still take effect).
# Results typed as a TypedDict below are plain dicts with those keys."""

IMPORTS = "from typing import Any, Literal, NotRequired, TypedDict"


def matching_plans(plans: list[dict[str, Any]], matching: str) -> list[dict[str, Any]]:
    """The plans of the tools a script can call that match every word of `matching`, best
    first; an empty (or blank) `matching` keeps every one, in the catalogue's order.

    A word matches a tool whose name, server or description contains it, or its stem
    (`entity` finds `create_entities`); a match in the name counts most, then the server,
    then the description. Ties keep the catalogue's order.
    """
    words = [word for word in re.split(r"[\s,]+", matching.lower()) if word]
    callable_plans = [plan for plan in plans if "error" not in plan]
    if not words:
        return callable_plans
    scored: list[tuple[int, int, dict[str, Any]]] = []
    for index, plan in enumerate(callable_plans):
        fields = [
            (3, f"{plan.get('name')} {plan.get('function')}".lower()),
            (2, f"{plan.get('server') or ''} {plan.get('namespace') or ''}".lower()),
            (1, _own_words(plan)),
        ]
        score = 0
        for word in words:
            stem = _stem(word)
            best = max((weight for weight, text in fields if stem in text), default=0)
            if best == 0:
                break
            score += best + (1 if any(word in text for _, text in fields) else 0)
        else:
            scored.append((-score, index, plan))
    return [plan for _, _, plan in sorted(scored, key=lambda item: item[:2])]


def _own_words(plan: dict[str, Any]) -> str:
    """The tool's own description and its parameters' names and descriptions, lowercased:
    not the words toolscript adds to every stub (the `timeout` parameter's, the return's),
    which would match every tool."""
    own = str(plan.get("doc") or "").split("\n\nArgs:", 1)[0]
    parameters = " ".join(
        f"{parameter.get('spelling', '')} {parameter.get('description', '')}"
        for parameter in plan.get("parameters") or ()
        if isinstance(parameter, dict)
    )
    return f"{own} {parameters}".lower()


def _stem(word: str) -> str:
    """`word` without a plural or `-y` ending, so `entity` and `entities` meet at `entit`."""
    for ending in ("ies", "es", "s", "y"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word


def summary(plan: dict[str, Any], width: int = 100) -> str:
    """The first sentence of a plan's description, on one line of at most `width` characters."""
    first = " ".join(str(plan.get("doc") or "").split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0]
    return sentence if len(sentence) <= width else sentence[: width - 1].rstrip() + "…"


def call_name(plan: dict[str, Any]) -> str:
    """How a script calls the tool of a bound plan: `server.tool`, or `tool` at top level."""
    namespace = plan.get("namespace")
    function = str(plan.get("function"))
    return function if namespace is None else f"{namespace}.{function}"


def render_prompt(plans: list[dict[str, Any]]) -> str:
    """The catalogue of `plans` as Python source: a header comment, the result types, then
    one stub per tool."""
    top_level: list[str] = []
    servers: dict[str, list[str]] = {}
    server_names: dict[str, str] = {}
    unbound: list[str] = []
    for plan in plans:
        if "error" in plan:
            unbound.append(_comment(f"{plan.get('key')}: {plan.get('error')}"))
            continue
        namespace = plan["namespace"]
        if namespace is None:
            top_level.append(_stub(plan, indent=""))
        else:
            servers.setdefault(namespace, []).append(_stub(plan, indent="    "))
            server_names.setdefault(namespace, str(plan["server"]))
    head = [_how(plans), *_renames(plans), IMPORTS]
    blocks = ["\n".join(head)]
    types = render_typed_dicts(plans)
    if types:
        blocks.append(types)
    blocks += top_level
    for namespace, stubs in servers.items():
        server = server_names[namespace]
        title = f"Tools of the MCP server {server!r}"
        if namespace != server:
            title += f", bound as `{namespace}` ({why_spelled(server, namespace)})"
        blocks.append(
            "\n\n".join([f"class {namespace}:\n    {_docstring(title + '.', '    ')}", *stubs])
        )
    if unbound:
        blocks.append(
            "\n".join(["# These tools could not be bound and cannot be called:", *unbound])
        )
    return "\n\n\n".join(blocks) + "\n"


def _how(plans: list[dict[str, Any]]) -> str:
    """The header, with an example call of a tool the catalogue has."""
    bound = [plan for plan in plans if "error" not in plan]
    served = [plan for plan in bound if plan.get("namespace") is not None]
    if served:
        plan = served[0]
        example = (
            f"e.g. `result = await {call_name(plan)}(...)` for the tool {plan['name']!r} of\n"
            f"# the MCP server {plan['server']!r} (also reachable as `tools.{plan['namespace']}`)."
        )
    elif bound:
        example = f"e.g. `result = await {call_name(bound[0])}(...)`."
    else:
        example = "e.g. `result = await some_tool(...)`; no tool is connected now."
    return HOW.format(example=example)


def _renames(plans: list[dict[str, Any]]) -> list[str]:
    """One comment line on the names bound under another spelling, when there are any."""
    renamed: dict[str, str] = {}
    for plan in plans:
        if "error" in plan:
            continue
        if plan["namespace"] is not None and plan["namespace"] != plan["server"]:
            renamed[plan["namespace"]] = str(plan["server"])
        elif plan["namespace"] is None and plan["function"] != plan["name"]:
            renamed[plan["function"]] = str(plan["name"])
    clashes = [
        f"`{spelling}` ({why_spelled(name, spelling)})"
        for spelling, name in renamed.items()
        if spelling == name + "_"
    ]
    servers = {str(plan["namespace"]) for plan in plans if plan.get("namespace") is not None}
    taken = [
        f"`{spelling}` (the Python tool {name!r}: `{name}` is the MCP server {name!r})"
        if name in servers
        else f"`{spelling}` ({why_spelled(name, spelling)})"
        for spelling, name in renamed.items()
        if spelling != name + "_" and why_spelled(name, spelling).endswith("another binding")
    ]
    told = {spelling for spelling, name in renamed.items() if spelling == name + "_"}
    told |= {
        spelling
        for spelling, name in renamed.items()
        if why_spelled(name, spelling).endswith("another binding")
    }
    others = [
        f"`{spelling}` (the tool {name!r}: {why_spelled(name, spelling)})"
        for spelling, name in renamed.items()
        # A name Python could spell as it is, yet bound otherwise (`tools` → `tools__2`);
        # `get-weather` → `get_weather` needs no word.
        if spelling not in told and name.isidentifier() and name.isascii()
    ]
    lines = []
    if clashes:
        lines.append(
            _comment_line(
                "Renamed with a trailing _ so imports and builtins still work: "
                + ", ".join(clashes)
                + "."
            )
        )
    if taken:
        lines.append(
            _comment_line("Renamed because another binding has the name: " + ", ".join(taken) + ".")
        )
    if others:
        lines.append(_comment_line("Also renamed: " + ", ".join(others) + "."))
    return lines


def _comment_line(text: str) -> str:
    return "# " + "".join(char if char.isprintable() else " " for char in text)


def signature_text(plan: dict[str, Any]) -> str:
    """The parameter list and return annotation of a plan, as written in its stub."""
    parts: list[str] = []
    for parameter in plan["parameters"]:
        text = f"{parameter['spelling']}: {parameter['annotation']}"
        if not parameter["required"]:
            text += f" = {parameter['default_text']}"
        parts.append(text)
    parts.append(f"{plan['timeout']}: float | None = None")
    if plan["catch_all"]:
        parts.append(f"**{plan['catch_all']}: Any")
    return f"(*, {', '.join(parts)}) -> {plan['returns']}"


def _stub(plan: dict[str, Any], indent: str) -> str:
    head = f"{indent}async def {plan['function']}{signature_text(plan)}:"
    doc = _docstring(plan["doc"], indent + "    ")
    lines = [head, f"{indent}    {doc}"]
    if indent:
        lines.insert(0, f"{indent}@staticmethod")
    return "\n".join(lines)


def _docstring(text: str, indent: str) -> str:
    """`text` as a triple-quoted literal whose value is `text`, its lines indented by `indent`.

    Goal: readable docstrings that always compile to exactly `text`. Backslashes are doubled,
    a run of three quotes and a final quote are escaped, and characters that are not printable
    (control characters, lone surrogates, line separators) are written as escapes. Indenting
    the continuation lines changes the raw string, but not what `inspect.getdoc` returns.
    """
    escaped: list[str] = []
    quotes = 0
    for char in text:
        if char == '"':
            quotes += 1
            escaped.append('\\"' if quotes == 3 else '"')
            quotes %= 3
            continue
        quotes = 0
        if char == "\\":
            escaped.append("\\\\")
        elif char == "\n" or char.isprintable():
            escaped.append(char)
        else:
            escaped.append(char.encode("unicode_escape").decode("ascii"))
    if escaped and escaped[-1] == '"':
        escaped[-1] = '\\"'
    lines = "".join(escaped).split("\n")
    body = "\n".join([lines[0], *((indent + line) if line else "" for line in lines[1:])])
    closing = f"\n{indent}" if len(lines) > 1 else ""
    return f'"""{body}{closing}"""'


def _comment(text: str) -> str:
    return "#   " + "".join(char if char.isprintable() else " " for char in text)
