"""What the MCP client's model reads about toolscript's tools: their descriptions.

The `run_python` description carries the whole catalogue as Python stubs when it is small
enough (`STUBS_LIMIT` characters); past that each server with its tool count and a line per
tool (`SUMMARIES_LIMIT`), then the tools' names alone, then the servers' counts; and a
`list_tools` tool gives the stubs of the ones the model asks for, so a client with hundreds of upstream tools does
not pay for all their signatures in every request.
"""

from __future__ import annotations

import mcp.types as types

from ..actions import run_python_schema, script_id_schema
from ..runtime import Runtime

__all__ = [
    "NAMES_LIMIT",
    "STUBS_LIMIT",
    "SUMMARIES_LIMIT",
    "catalogue_is_large",
    "list_tools_description",
    "matching_stubs",
    "run_python_description",
    "tool_list",
]

STUBS_LIMIT = 12_000
"""Characters of stubs that still go into the `run_python` description."""

SUMMARIES_LIMIT = 10_000
"""Characters of one-line tool summaries that still go into it when the stubs do not."""

NAMES_LIMIT = 6_000
"""Characters of tool names that still go into it when the stubs do not."""

_HOW = """\
Run Python code and get back exactly what it did, tool calls included.

How the code runs:
- It runs like a notebook cell: top-level `await` works, and the value of the last
  expression is returned. Variables, imports and functions you define stay for your next
  run_python call in this session, unless the result says the interpreter was replaced.
- The tools listed below are Python async functions. Call them with `await` and keyword
  arguments, e.g. `r = await server_name.tool_name(arg=1)`; run several at once with
  `import asyncio` and `await asyncio.gather(...)`. A call you do not await does not run.
- A tool that fails raises `ToolError` (catch it if you want to go on). A call can take
  `timeout=` seconds; when that passes it raises `ToolTimeout`, but the call was sent and
  may still take effect. The same holds for a call still waiting when the script is
  stopped: retrying such a call may do it twice, so check its effect first.
- `show(obj)` puts an image in the answer, for you to see: PNG or JPEG bytes, a PIL image,
  a matplotlib figure, or the image a tool returned.
- time_limit_s (default {default:g} s, at most {most:g} s): the script is interrupted when it
  passes, then killed if it does not stop.
- background=true starts the script in an interpreter of its own (it does not see this
  session's variables) and returns at once with its script_id; you are notified when it
  ends. script_status(script_id) shows its output so far while it runs, and its result
  once it ended; cancel_script(script_id) stops it. Results are kept {keep_minutes:g} minutes after the end.

What comes back: the first line gives the exit code and how the script ended (ok, error,
time_limit, cancelled, crashed, refused); then the runner's notes (read them: they say when
state was lost or what to do next); then every tool call whose answer the script did not
see, with its fate (a call with no answer "may still take effect"); then stderr, stdout
(long output is cut in the middle, and the cut is stated) and the last expression's value;
the images the script showed follow as image content. The structured content holds the
same facts as fields."""


def catalogue_is_large(runtime: Runtime) -> bool:
    """Whether the stubs of every tool are too long to put in the description."""
    return len(runtime.prompt()) > STUBS_LIMIT


def run_python_description(runtime: Runtime, *, keep_results_for: float) -> str:
    """The `run_python` tool's description, built from the runtime's current catalogue."""
    how = _HOW.format(
        default=runtime.default_time_limit,
        most=runtime.max_time_limit,
        keep_minutes=keep_results_for / 60,
    )
    parts = [how, _failures(runtime)]
    prompt = runtime.prompt()
    names = runtime.tool_names()
    if not names:
        parts.append("No tools are connected: the code can still compute, read and write files.")
    elif len(prompt) <= STUBS_LIMIT:
        parts.append("The tools, as Python stubs:\n```python\n" + prompt.rstrip() + "\n```")
    else:
        parts.append(
            f"There are {len(names)} tools, too many to show their signatures here. Call "
            "list_tools with words, a server or a tool name to read the signatures and "
            "descriptions of the matching ones, or run `help(server_name.tool_name)` in a "
            "script.\n" + _summaries(runtime.tool_summaries())
        )
    return "\n\n".join(part for part in parts if part)


def list_tools_description() -> str:
    """The `list_tools` tool's description (offered only when the catalogue is large)."""
    return (
        "Show the Python signatures and descriptions of the tools that run_python code can "
        "call. `query` keeps only the tools whose name, server or description has every word "
        "of it (case-insensitive, e.g. 'memory entities'), best match first; leave it empty "
        "for all of them (long)."
    )


def matching_stubs(runtime: Runtime, query: str) -> tuple[str, int]:
    """The stubs of the tools matching `query`, and how many matched."""
    count = len(runtime.tool_names(query))
    if count == 0:
        return "", 0
    return runtime.prompt(query), count


def _summaries(summaries: list[tuple[str, str]]) -> str:
    """Each server with its tool count and a line per tool, if short enough; else names."""
    by_namespace: dict[str, list[tuple[str, str]]] = {}
    for name, about in summaries:
        namespace, _, function = name.rpartition(".")
        by_namespace.setdefault(namespace, []).append((function, about))
    lines: list[str] = []
    for namespace, tools in by_namespace.items():
        count = f"{len(tools)} tool{'s' if len(tools) != 1 else ''}"
        lines.append(f"{namespace} ({count}):" if namespace else f"top level ({count}):")
        lines += [
            f"  {function}: {about}" if about else f"  {function}" for function, about in tools
        ]
    text = "\n".join(lines)
    if len(text) <= SUMMARIES_LIMIT:
        return "The tools by server:\n" + text
    return _names([name for name, _ in summaries])


def _names(names: list[str]) -> str:
    by_namespace: dict[str, list[str]] = {}
    for name in names:
        namespace, _, function = name.rpartition(".")
        by_namespace.setdefault(namespace, []).append(function)
    lines = [
        (f"{namespace}: " if namespace else "top level: ") + ", ".join(functions)
        for namespace, functions in by_namespace.items()
    ]
    text = "\n".join(lines)
    if len(text) <= NAMES_LIMIT:
        return "The tools by server:\n" + text
    return "The servers and how many tools each has: " + ", ".join(
        f"{namespace or 'top level'} ({len(functions)})"
        for namespace, functions in by_namespace.items()
    )


def _failures(runtime: Runtime) -> str:
    failures = runtime.mcp_failures
    if not failures:
        return ""
    lines = [f"- {name}: {reason}" for name, reason in failures.items()]
    return "These MCP servers did not start, so their tools are missing:\n" + "\n".join(lines)


def tool_list(runtime: Runtime, *, keep_results_for: float) -> list[types.Tool]:
    """The tools toolscript offers: `run_python`, `script_status`, `cancel_script`, and
    `list_tools` when the catalogue is too large to describe up front."""
    tools = [
        types.Tool(
            name="run_python",
            title="Run Python",
            description=run_python_description(runtime, keep_results_for=keep_results_for),
            input_schema=run_python_schema(
                default_time_limit=runtime.default_time_limit,
                max_time_limit=runtime.max_time_limit,
            ),
            annotations=types.ToolAnnotations(
                title="Run Python", destructive_hint=True, open_world_hint=True
            ),
        ),
        types.Tool(
            name="script_status",
            title="Background script status",
            description="The status of a background script started by run_python with "
            "background=true: still running (and for how long), or its full result, in "
            "the same shape as run_python's.",
            input_schema=script_id_schema(),
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        types.Tool(
            name="cancel_script",
            title="Cancel a background script",
            description="Stop a background script (an interrupt, then a kill if it does "
            "not stop) and return its result, in the same shape as run_python's. Tool "
            "calls it had in flight may still take effect: the result says which.",
            input_schema=script_id_schema(),
            annotations=types.ToolAnnotations(destructive_hint=True, idempotent_hint=True),
        ),
    ]
    if catalogue_is_large(runtime):
        tools.append(
            types.Tool(
                name="list_tools",
                title="Tools for run_python",
                description=list_tools_description(),
                input_schema={
                    "type": "object",
                    "properties": {"query": {"type": "string", "default": ""}},
                    "additionalProperties": False,
                },
                annotations=types.ToolAnnotations(read_only_hint=True),
            )
        )
    return tools
