"""The tool catalogue for a model: every tool as a Python stub that compiles.

Each stub is written from the same binding plan the kernel builds the live function from
(`toolscript.tools.binding`), so the two have the same signature: the same names, kinds,
defaults and annotations. Python tools are top-level functions; the tools of an MCP server
are static methods of a class named for the server, which reads as `await github.create_issue(...)`
and has the same `__qualname__` as the live function. Tools that could not be bound are named
in a comment with the reason.
"""

from __future__ import annotations

from typing import Any

HEADER = """\
# Tools you can call from this script. Every tool is a coroutine function: await it,
# e.g. `result = await github.create_issue(title="...")` for a tool of the MCP server
# `github` (also reachable as `tools.github`), or `await some_tool(...)` at top level.
# Arguments are keyword-only. A failed call raises ToolError; a call whose `timeout=`
# passes raises ToolTimeout (the call was sent and may still take effect).
from typing import Any, Literal
"""


def matching_plans(plans: list[dict[str, Any]], matching: str) -> list[dict[str, Any]]:
    """The plans of the tools a script can call whose server, name or description contains
    `matching`, case-insensitive; an empty (or blank) `matching` keeps every one."""
    words = matching.strip().lower()
    return [
        plan
        for plan in plans
        if "error" not in plan
        and (
            not words
            or any(
                words in str(plan.get(field) or "").lower()
                for field in ("server", "name", "namespace", "function", "doc")
            )
        )
    ]


def call_name(plan: dict[str, Any]) -> str:
    """How a script calls the tool of a bound plan: `server.tool`, or `tool` at top level."""
    namespace = plan.get("namespace")
    function = str(plan.get("function"))
    return function if namespace is None else f"{namespace}.{function}"


def render_prompt(plans: list[dict[str, Any]]) -> str:
    """The catalogue of `plans` as Python source: a header comment, then one stub per tool."""
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
    blocks = [HEADER.rstrip("\n"), *top_level]
    for namespace, stubs in servers.items():
        title = _docstring(f"Tools of the MCP server {server_names[namespace]!r}.", "    ")
        blocks.append("\n\n".join([f"class {namespace}:\n    {title}", *stubs]))
    if unbound:
        blocks.append(
            "\n".join(["# These tools could not be bound and cannot be called:", *unbound])
        )
    return "\n\n\n".join(blocks) + "\n"


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
