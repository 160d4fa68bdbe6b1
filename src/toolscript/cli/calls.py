"""`toolscript calls`: the call journal, every tool call with its fate."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import options
from .options import UsageError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `calls` command's arguments."""
    parser = options.command(commands, "calls", calls_command.__doc__)
    parser.add_argument(
        "--uncertain", action="store_true", help="Only calls whose effect is unknown."
    )
    parser.add_argument("--script", metavar="SCRIPT_ID", help="Only the calls of this script.")
    options.add_json(parser)
    parser.add_argument(
        "--limit", type=int, default=200, metavar="N", help="At most this many, newest."
    )
    options.add_journal(parser)
    parser.set_defaults(run=calls_command)


def calls_command(args: argparse.Namespace) -> int:
    """Show the call journal: every tool call, its fate, and which are uncertain."""
    import dataclasses
    import json

    from ..host.journal import Journal

    if args.limit < 1:
        raise UsageError(f"--limit: {args.limit} is not a positive number")
    if args.journal not in (None, ":memory:") and not Path(args.journal).is_file():
        # A command that reads must not make a journal where a mistyped path points.
        what = "is a folder" if Path(args.journal).is_dir() else "does not exist"
        raise UsageError(f"--journal: {args.journal} {what}")
    store = Journal.open(args.journal)
    try:
        if args.uncertain:
            records = store.uncertain()
            if args.script is not None:
                records = [call for call in records if call.script_id == args.script]
            records = records[-args.limit :]
        else:
            records = store.calls(script_id=args.script, limit=args.limit)
    finally:
        store.close()
    if args.as_json:
        print(json.dumps([dataclasses.asdict(call) for call in records], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    title = f"{len(records)} call(s)" + (" with unknown effect" if args.uncertain else "")
    table = Table(title=title)
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
    return 0


def _clock(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")
