"""The `toolscript` command: run a script, show the catalogue, read the journal, serve, act.

One module per command. Starting the command line imports typer and these modules only; each
command imports the runtime, the MCP server or the agent when it runs, so `toolscript exec`
does not pay for the MCP SDK, and `--help` pays for none of them.
"""

from __future__ import annotations

import typer

from .agent import agent_command
from .calls import calls_command
from .exec import exec_command
from .serve import serve_command
from .tools import tools_command

__all__ = ["app", "main"]

app = typer.Typer(
    name="toolscript",
    help="Run agent-written Python that calls tools, and report exactly what it did.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help and usage errors: rendering them with rich costs more
    # than the rest of `--help`
)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"toolscript {version('toolscript')}")
        except PackageNotFoundError:
            typer.echo("toolscript (not installed)")
        raise typer.Exit()


@app.callback()
def _options(
    shown: bool = typer.Option(
        False,
        "--version",
        help="Print toolscript's version and exit.",
        callback=_version,
        is_eager=True,
    ),
) -> None:
    """Run agent-written Python that calls tools, and report exactly what it did."""


app.command("exec")(exec_command)
app.command("tools")(tools_command)
app.command("calls")(calls_command)
app.command("agent")(agent_command)
app.command("serve")(serve_command)


def main() -> None:
    """The console entry point."""
    app()
