"""The options several commands share, each defined once, and what they turn into.

This module is imported whenever the command line starts: typer and the standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

ToolsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tools",
        help="Python tools as MODULE:ATTR (one tool, or a list of them). Repeatable.",
        metavar="MODULE:ATTR",
    ),
]
MCPConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--mcp-config",
        help="An MCP client config file whose servers' tools scripts can call: "
        '{"mcpServers": {name: {command, args, env} | {url}}}.',
        exists=True,
        dir_okay=False,
        readable=True,
    ),
]
JournalOption = Annotated[
    str | None,
    typer.Option(
        "--journal", help="The journal file, or ':memory:' (default: the one in the state dir)."
    ),
]
NetworkOption = Annotated[
    bool,
    typer.Option("--network", help="Let scripts use the host's network (off by default)."),
]
SandboxOption = Annotated[
    str,
    typer.Option(
        "--sandbox",
        help="auto: sandbox every interpreter where the machine allows it; required: refuse "
        "to run without one; off: no sandbox (for debugging).",
        metavar="auto|required|off",
    ),
]
MountOption = Annotated[
    list[str] | None,
    typer.Option(
        "--mount",
        help="Show a host folder or file to scripts, read-only unless ':rw' ends it; "
        "':/PATH' before that shows it at PATH. Repeatable.",
        metavar="HOST[:/PATH][:rw]",
    ),
]
KeepInterpretersOption = Annotated[
    bool,
    typer.Option(
        "--keep-interpreters",
        help="Have a keeper process own the interpreters, so that shells, their variables "
        "and running scripts outlive this process if it dies; the next one on the same state "
        "directory takes them back.",
    ),
]
JSONOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def load_tools(references: list[str] | None) -> list[Any]:
    """Import each `MODULE:ATTR` of `--tools` (one tool or a list of them); a bad one is a
    usage error."""
    from ..tools.references import ToolReferenceError
    from ..tools.references import load_tools as load

    try:
        return load(references)
    except ToolReferenceError as error:
        raise typer.BadParameter(str(error), param_hint="--tools") from None


def sandbox_knobs(sandbox: str, network: bool, mounts: list[str] | None) -> dict[str, Any]:
    """The `Runtime` keyword arguments for `--sandbox`, `--network` and `--mount`; a bad value
    is a usage error."""
    if sandbox not in ("auto", "required", "off"):
        raise typer.BadParameter(
            f"{sandbox!r} is not auto, required or off", param_hint="--sandbox"
        )
    parsed: dict[str, str] = {}
    for text in mounts or ():
        writable = text.endswith(":rw")
        rest = text[: -len(":rw")] if writable else text.removesuffix(":ro")
        host, _, target = rest.partition(":/")
        mode = "rw" if writable else "ro"
        parsed[host] = f"/{target}:{mode}" if target else mode
    return {"sandbox": sandbox, "network": network, "mounts": parsed}
