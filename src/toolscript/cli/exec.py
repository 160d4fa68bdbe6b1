"""`toolscript exec SCRIPT`: run one script in a fresh interpreter and print its result."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .options import (
    CheckOption,
    JournalOption,
    JSONOption,
    MCPConfigOption,
    MountOption,
    NetworkOption,
    SandboxOption,
    ToolsOption,
    check_knob,
    load_tools,
    sandbox_knobs,
)


def exec_command(
    script: Annotated[
        Path,
        typer.Argument(
            help="The Python script to run ('-' reads standard input).",
            allow_dash=True,
            metavar="SCRIPT",
        ),
    ],
    tools: ToolsOption = None,
    mcp_config: MCPConfigOption = None,
    time_limit: Annotated[
        float | None, typer.Option("--time-limit", help="Seconds before the script is stopped.")
    ] = None,
    as_json: JSONOption = False,
    journal: JournalOption = None,
    network: NetworkOption = False,
    sandbox: SandboxOption = "auto",
    mount: MountOption = None,
    check: CheckOption = "warn",
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
    if at all. Each run is a shell of its own. Exits 0 only when the script succeeded.
    """
    import asyncio
    import os
    import secrets

    code = sys.stdin.read() if str(script) == "-" else _read_script(script)
    specs = load_tools(tools)
    workdir = None if no_cwd else (cwd or Path.cwd())
    knobs = sandbox_knobs(sandbox, network, mount) | check_knob(check)

    async def main() -> Any:
        from ..runtime import Runtime

        # One script needs one interpreter: started directly, it is ready sooner than a
        # template that then forks it, and no pool is filled only to be closed.
        async with Runtime(
            tools=specs,
            mcp_config=mcp_config,
            journal=journal,
            workdir=workdir,
            fork=False,
            pool_size=0,
            **knobs,
        ) as rt:
            for server, reason in rt.mcp_failures.items():
                typer.echo(f"toolscript: MCP server {server!r} did not start: {reason}", err=True)
            # A shell of its own: a call an earlier `exec` left in doubt is that process's
            # to report (`toolscript calls --uncertain`), not this unrelated script's.
            shell = rt.shell(f"exec-{os.getpid()}-{secrets.token_hex(3)}")
            return await shell.run(code, time_limit=time_limit)

    result = asyncio.run(main())
    if as_json:
        import json

        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        typer.echo(result.text, nl=False)
    raise typer.Exit(result.exit_code)


def _read_script(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise typer.BadParameter(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise typer.BadParameter(f"{path} is not UTF-8 text") from None
