"""`toolscript calls`: the call journal, every tool call with its fate."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from . import options
from .terminal import escaped, on_terminal

if TYPE_CHECKING:
    from ..host.journal import JournalCall
from .options import UsageError, not_a_file


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
    options.add_journal(parser, memory=False)
    parser.set_defaults(run=calls_command)


def calls_command(args: argparse.Namespace) -> int:
    """Show the call journal: every tool call, its fate, and which are uncertain."""
    import dataclasses
    import json

    from ..host.journal import Journal

    if not 1 <= args.limit <= _MOST:
        raise UsageError(f"--limit: {args.limit} is not a number from 1 to {_MOST}")
    if _not_utf8(args.script):
        raise UsageError(f"--script: {args.script!r} is not a script id")
    if args.journal == ":memory:":
        raise UsageError(
            "--journal: ':memory:' lives only inside the process that opened it; "
            "there is none here to read (give the journal's file)"
        )
    if args.journal == "":
        raise UsageError("--journal: an empty path; give the journal's file")
    if args.journal is not None and not Path(args.journal).is_file():
        # A command that reads must not make a journal where a mistyped path points.
        raise UsageError(f"--journal: {args.journal} {not_a_file(Path(args.journal))}")
    store = Journal.open(args.journal)
    try:
        # The newest `--limit` only, chosen by the query: a journal may hold millions.
        records = store.calls(script_id=args.script, uncertain=args.uncertain, limit=args.limit)
        total = (
            store.count_calls(script_id=args.script, uncertain=args.uncertain)
            if len(records) == args.limit and not args.as_json
            else len(records)
        )
        if args.script is not None and not records and not store.has_script(args.script):
            # Not the same as a script that made no call: said, not shown as "0 call(s)".
            raise UsageError(
                f"--script: the journal has no script {args.script[:200]!r} "
                "(`toolscript calls` shows the ids of the scripts that made calls)"
            )
    finally:
        store.close()
    if args.as_json:
        print(
            json.dumps(
                [
                    {**dataclasses.asdict(call), "idempotency_key": call.idempotency_key}
                    for call in records
                ],
                indent=2,
            )
        )
        return 0
    title = (
        f"{total:,} call(s)"
        if total == len(records)
        else f"the newest {len(records):,} of {total:,} calls"
    )
    title += " with unknown effect" if args.uncertain else ""
    shown = escaped if on_terminal(sys.stdout) else str
    rows = (
        [
            shown(value)
            for value in (
                _clock(call.made_at),
                call.shell,
                call.script_id or "(between scripts)",
                call.tool,
                call.args_brief,
                call.fate or _unsettled(call),
                call.cause or "",
                _note(call),
            )
        ]
        for call in records
    )
    if len(records) > _TABLE_ROWS:
        _print_plain(title, rows)
        return 0

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    for column in _COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows:
        # Plain text: what a script passed, or a tool answered, is neither rich markup
        # (`[link=…]`) nor, on a terminal, control sequences it would obey.
        table.add_row(*map(Text, row))
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Read by a program, not a person at a terminal: no width to fit, so no cell is
        # folded across lines (rich takes 80 columns when it cannot ask).
        console = Console(width=1_000)
    console.print(table)
    return 0


_COLUMNS = ("when", "shell", "script", "tool", "arguments", "fate", "cause", "note")

_TABLE_ROWS = 2_000
"""Past this many calls, lines of plain columns, not a table: a table measures every cell
before it prints the first (100,000 calls took 43 s and 800 MB)."""

_PLAIN_WIDTH = 40
"""The widest a plain column is padded to; a longer cell is printed whole, past it."""


def _print_plain(title: str, rows: Iterable[list[str]]) -> None:
    """`rows` under `title`, one line each, in columns two spaces apart, as they come."""
    widths = [min(len(name), _PLAIN_WIDTH) for name in _COLUMNS]
    rows = list(rows)
    for row in rows:
        for i, value in enumerate(row):
            if len(value) > widths[i]:
                widths[i] = min(len(value), _PLAIN_WIDTH)
    write = sys.stdout.write
    write(title + "\n")
    last = len(_COLUMNS) - 1
    for row in [list(_COLUMNS), *rows]:
        # One line a call: a line break in a cell (an answer's note) is shown, not made.
        cells = (value.replace("\n", "\\n") for value in row)
        line = "  ".join(
            value if i == last else value.ljust(widths[i]) for i, value in enumerate(cells)
        )
        write(line.rstrip() + "\n")


def _note(call: JournalCall) -> str:
    """Why a call's effect is unknown; or, for one settled `pending` whose answer came only
    after its script stopped waiting, that answer."""
    if call.uncertain:
        reason = call.uncertain_reason or ""
        return _UNCERTAIN_WORDS.get(reason, f"effect unknown: {reason}")
    if call.fate == "pending" and call.answered_at is not None:
        kind = "an error" if call.is_error else "an answer"
        return f"effect known: {kind} came after its script stopped waiting: {call.answer_brief}"
    return ""


def _unsettled(call: JournalCall) -> str:
    """A call with no fate yet: answered (its effect happened; whether its script took the
    answer was not told, or its host died first), left by a host that died, or in flight."""
    if call.answered_at is not None:
        return "answered, no fate told"
    if call.uncertain_reason == "host_gone":
        return "none: its host died"
    return "in flight"


_UNCERTAIN_WORDS = {
    "host_gone": "effect unknown: its host ended while it was in flight",
    "pending_at_settle": "effect unknown: no answer had come when its script ended",
    "in_doubt": "effect unknown: in flight when the host restarted; not made again",
}


_MOST = (1 << 63) - 1
"""The largest `--limit` SQLite can take."""


def _not_utf8(text: str | None) -> bool:
    try:
        (text or "").encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _clock(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")
