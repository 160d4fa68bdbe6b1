"""The `toolscript` command: run a script, show the catalogue, read the journal, serve, act."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .options import MountOption, NetworkOption, SandboxOption, sandbox_knobs

app = typer.Typer(
    name="toolscript",
    help="Run agent-written Python that calls tools, and report exactly what it did.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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
        help='An MCP client config file: {"mcpServers": {name: {command, args, env} | {url}}}.',
        exists=True,
        dir_okay=False,
        readable=True,
    ),
]


def load_tools(references: list[str] | None) -> list[Any]:
    """Import each `MODULE:ATTR` (one tool or a list of them); a bad one is a usage error."""
    from .tools.references import ToolReferenceError
    from .tools.references import load_tools as load

    try:
        return load(references)
    except ToolReferenceError as error:
        raise typer.BadParameter(str(error), param_hint="--tools") from None


@app.command("exec")
def exec_command(
    script: Annotated[
        Path,
        typer.Argument(
            help="The Python script to run ('-' reads standard input).", allow_dash=True
        ),
    ],
    tools: ToolsOption = None,
    mcp_config: MCPConfigOption = None,
    time_limit: Annotated[
        float | None, typer.Option("--time-limit", help="Seconds before the script is stopped.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    journal: Annotated[
        str | None,
        typer.Option("--journal", help="Journal file, or ':memory:' (default: the state dir)."),
    ] = None,
    network: NetworkOption = False,
    sandbox: SandboxOption = "auto",
    mount: MountOption = None,
    cwd: Annotated[
        Path | None,
        typer.Option(
            "--cwd",
            help="The folder the script works in, shown read-write in the sandbox "
            "(default: the current directory).",
            exists=True,
            file_okay=False,
        ),
    ] = None,
    no_cwd: Annotated[
        bool,
        typer.Option("--no-cwd", help="Show the script no folder of yours: a private one."),
    ] = False,
) -> None:
    """Run SCRIPT in a fresh interpreter and print what the model would read.

    The script works in the current directory (read-write), so `open("data.csv")` and a
    saved `plot.png` behave as you expect; everything else of the host it sees read-only,
    if at all. Exits 0 only when the script succeeded.
    """
    code = sys.stdin.read() if str(script) == "-" else _read_script(script)
    specs = load_tools(tools)
    workdir = None if no_cwd else (cwd or Path.cwd())
    knobs = sandbox_knobs(sandbox, network, mount)

    async def main() -> Any:
        from .runtime import Runtime

        async with Runtime(
            tools=specs,
            mcp_config=mcp_config,
            journal=journal,
            workdir=workdir,
            **knobs,
        ) as rt:
            for server, reason in rt.mcp_failures.items():
                typer.echo(f"toolscript: MCP server {server!r} did not start: {reason}", err=True)
            return await rt.run(code, time_limit=time_limit)

    result = asyncio.run(main())
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        typer.echo(result.text, nl=False)
    raise typer.Exit(result.exit_code)


@app.command("tools")
def tools_command(tools: ToolsOption = None, mcp_config: MCPConfigOption = None) -> None:
    """Print the tool catalogue as the Python stubs a model sees (Runtime.prompt())."""
    specs = load_tools(tools)

    async def main() -> tuple[str, dict[str, str]]:
        from .runtime import Runtime

        async with Runtime(tools=specs, mcp_config=mcp_config, journal=":memory:") as rt:
            return rt.prompt(), dict(rt.mcp_failures)

    prompt, failures = asyncio.run(main())
    for server, reason in failures.items():
        typer.echo(f"toolscript: MCP server {server!r} did not start: {reason}", err=True)
    typer.echo(prompt)


@app.command("calls")
def calls_command(
    uncertain: Annotated[
        bool, typer.Option("--uncertain", help="Only calls whose effect is unknown.")
    ] = False,
    script: Annotated[
        str | None, typer.Option("--script", help="Only the calls of this script id.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    limit: Annotated[int, typer.Option("--limit", help="At most this many, newest.")] = 200,
    journal: Annotated[
        str | None,
        typer.Option("--journal", help="Journal file (default: the state dir's journal)."),
    ] = None,
) -> None:
    """Show the call journal: every tool call, its fate, and which are uncertain."""
    import dataclasses

    from .host.journal import Journal

    store = Journal.open(journal)
    try:
        if uncertain:
            records = store.uncertain()
            if script is not None:
                records = [call for call in records if call.script_id == script]
            records = records[-limit:]
        else:
            records = store.calls(script_id=script, limit=limit)
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(call) for call in records], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(records)} call(s)" + (" with unknown effect" if uncertain else ""))
    for column in ("when", "shell", "script", "tool", "arguments", "fate", "cause", "note"):
        table.add_column(column, overflow="fold")
    for call in records:
        note = "uncertain: " + (call.uncertain_reason or "") if call.uncertain else ""
        table.add_row(
            _clock(call.made_at),
            call.shell,
            call.script_id or "(between scripts)",
            call.tool,
            call.args_brief,
            call.fate or "in flight",
            call.cause or "",
            note,
        )
    Console().print(table)


def _clock(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def _read_script(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise typer.BadParameter(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise typer.BadParameter(f"{path} is not UTF-8 text") from None


def _register_agent() -> None:
    from .agent.command import agent_command

    app.command("agent")(agent_command)


_register_agent()


def _register_serve() -> None:
    from .serve.command import serve_command

    app.command("serve")(serve_command)


_register_serve()


def main() -> None:
    """The console entry point."""
    app()


if __name__ == "__main__":
    main()
