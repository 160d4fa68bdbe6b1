"""`toolscript calls`: the call journal, every tool call with its fate."""

from __future__ import annotations

from typing import Annotated

import typer

from .options import JournalOption, JSONOption


def calls_command(
    uncertain: Annotated[
        bool, typer.Option("--uncertain", help="Only calls whose effect is unknown.")
    ] = False,
    script: Annotated[
        str | None, typer.Option("--script", help="Only the calls of this script id.")
    ] = None,
    as_json: JSONOption = False,
    limit: Annotated[int, typer.Option("--limit", help="At most this many, newest.")] = 200,
    journal: JournalOption = None,
) -> None:
    """Show the call journal: every tool call, its fate, and which are uncertain."""
    import dataclasses
    import json

    from ..host.journal import Journal

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
