"""The `toolscript` command: run a script, show the catalogue, read the journal, serve, act.

One module per command, each with `add_parser` (its arguments) and its command function.
Starting the command line imports `argparse` and these modules only; each command imports the
runtime, the MCP server or the agent when it runs, so `toolscript exec` does not pay for the
MCP SDK, and `--help` pays for none of them.

A mistake in how a command was called is one line on standard error and exit status 2, never
a traceback: a bad option value, a missing file, an MCP config that cannot be used, a missing
extra, a missing API key.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["build_parser", "main", "run"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command line."""
    import argparse

    from . import agent, calls, exec, serve, tools
    from .options import HelpFormatter, Version

    parser = argparse.ArgumentParser(
        prog="toolscript",
        description="Run agent-written Python that calls tools, and report exactly what it did.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action=Version, help="Print toolscript's version and exit.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")
    for module in (exec, tools, calls, agent, serve):
        module.add_parser(commands)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line on `argv` (default: `sys.argv[1:]`); its exit status."""
    from .options import UsageError

    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        parser.print_help()
        return 2
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.run(args))
    except UsageError as error:
        print(f"toolscript {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader stopped reading (`toolscript calls --json | head`): not an error of ours.
        # What is left unwritten goes nowhere, so that the exit's flush does not fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
    except Exception as error:
        # A journal file that cannot be one is the caller's to fix, as a bad path is.
        import sqlite3

        from ..host.journal import JournalAccessError, JournalFileError, JournalVersionError

        if isinstance(error, sqlite3.DatabaseError):
            # Damaged past what opening it reads: found by a query.
            error = JournalFileError("the journal", f"{error}; it is damaged")
        if not isinstance(error, (JournalAccessError, JournalFileError, JournalVersionError)):
            raise
        print(f"toolscript {args.command}: error: {error}", file=sys.stderr)
        return 2


def main() -> None:
    """The console entry point.

    What the command does, it has done when `run` returns: its runtime is closed, its
    processes ended and its journal written. What the interpreter would do after that (tear
    down every module, collect the garbage) changes nothing but the time the command takes,
    so the exit handlers run and the process ends.

    `exec` with its default settings begins its interpreter before anything else is imported
    or parsed (`early`).
    """
    from .early import begin_exec

    begin_exec(sys.argv[1:])
    status = run()
    if sys.dont_write_bytecode:
        _cache_own_bytecode()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        status = status or 120  # as Python itself exits when it cannot flush
    os._exit(status)


def _cache_own_bytecode() -> None:
    """Compile toolscript's own modules once when Python was told not to cache bytecode.

    Goal: a command costs the same whether or not `PYTHONDONTWRITEBYTECODE` is set. What
    fails: leaving it to imports, which then compile every module from source on every
    command (an editable install never gets the bytecode that `pip install` writes), and the
    sandboxed interpreter, which reads the kernel from a read-only folder, can never write its
    own. What we do: after a command, when toolscript's bytecode is missing or older than its
    source, compile the package's modules once, as an install would; a folder that cannot be
    written is left as it is.
    """
    import contextlib
    import importlib.util
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent
    for probe in (package / "runtime.py", package / "kernel" / "runner.py"):
        try:
            cached = Path(importlib.util.cache_from_source(str(probe)))
            if cached.stat().st_mtime < probe.stat().st_mtime:
                break
        except (OSError, NotImplementedError, ValueError):
            break
    else:
        return
    import compileall

    with contextlib.suppress(Exception):
        compileall.compile_dir(package, quiet=2)
