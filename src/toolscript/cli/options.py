"""The options several commands share, each defined once, and what they turn into.

The command line is `argparse`, which the standard library already holds: a parser made with
typer built pydantic validators for every parameter before it read one, and that cost more than
running a whole script. This module is imported whenever the command line starts, so it
imports the standard library only.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """A mistake in how a command was called (a bad value, a missing file, a missing extra or
    API key): printed as one line, and the command exits with status 2."""


class Version(argparse.Action):
    """`--version`: looked up only when asked for (reading package metadata takes time)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from .. import __version__

        print(f"toolscript {__version__}")
        parser.exit()


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help as written (paragraphs kept), with each option's default when it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "(default" in text
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or isinstance(action, argparse._StoreFalseAction)  # "--no-x": its default is x on
        ):
            return text
        return f"{text} (default: {default})"


def command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    doc: str | None,
) -> argparse.ArgumentParser:
    """A subcommand whose help is `doc` (its first line is the one-line summary)."""
    text = (doc or "").strip()
    summary = text.splitlines()[0] if text else ""
    return commands.add_parser(
        name,
        help=summary,
        description=_dedent(text),
        formatter_class=HelpFormatter,
    )


def add_tools(parser: argparse.ArgumentParser) -> None:
    """`--tools MODULE:ATTR`, repeatable."""
    parser.add_argument(
        "--tools",
        action="append",
        metavar="MODULE:ATTR",
        help="Python tools as MODULE:ATTR (one tool, or a list of them). Repeatable.",
    )


def add_mcp_config(parser: argparse.ArgumentParser) -> None:
    """`--mcp-config FILE`."""
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        help="An MCP client config file whose servers' tools scripts can call: "
        '{"mcpServers": {name: {command, args, env} | {url}}}.',
    )


def add_journal(parser: argparse.ArgumentParser, *, memory: bool = True) -> None:
    """`--journal FILE`; `memory`: whether `:memory:` is offered (not to a command that
    reads a journal another process wrote)."""
    parser.add_argument(
        "--journal",
        metavar="FILE",
        help=(
            "The journal file, or ':memory:' (default: the one in the state folder)."
            if memory
            else "The journal file (default: the one in the state folder)."
        ),
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    """`--json`."""
    parser.add_argument(
        "--json", dest="as_json", action="store_true", help="Print JSON instead of text."
    )


def add_sandbox(parser: argparse.ArgumentParser) -> None:
    """`--network`, `--sandbox` and `--mount`."""
    parser.add_argument(
        "--network",
        action="store_true",
        help="Let scripts use the host's network (off by default).",
    )
    parser.add_argument(
        "--sandbox",
        choices=("auto", "required", "off"),
        default="auto",
        metavar="auto|required|off",
        help="auto: sandbox every interpreter where the machine allows it; required: refuse "
        "to run without one; off: no sandbox (for debugging).",
    )
    parser.add_argument(
        "--mount",
        action="append",
        metavar="HOST[:/PATH][:rw]",
        help="Show a host folder or file to scripts, read-only unless ':rw' ends it; "
        "':/PATH' before that shows it at PATH. Repeatable.",
    )


def add_check(parser: argparse.ArgumentParser) -> None:
    """`--check warn|refuse|off`."""
    parser.add_argument(
        "--check",
        choices=("warn", "refuse", "off"),
        default="warn",
        metavar="warn|refuse|off",
        help="Check each script against the tools' stubs before it runs. warn: run it, the "
        "findings first in what it prints; refuse: run nothing when the check finds a "
        "problem; off: no check.",
    )


def add_keep_interpreters(parser: argparse.ArgumentParser) -> None:
    """`--keep-interpreters`."""
    parser.add_argument(
        "--keep-interpreters",
        action="store_true",
        help="Have a keeper process own the interpreters, so that shells, their variables "
        "and running scripts outlive this process if it dies; the next one on the same state "
        "folder takes them back.",
    )


def load_tools(references: list[str] | None) -> list[Any]:
    """Import each `MODULE:ATTR` of `--tools` (one tool or a list of them)."""
    if not references:
        return []
    from ..tools.references import ToolReferenceError
    from ..tools.references import load_tools as load

    try:
        return load(references)
    except ToolReferenceError as error:
        raise UsageError(f"--tools: {error}") from None


def not_a_file(path: Path) -> str:
    """What `path`, which is not a regular file, is instead, for a usage error."""
    if path.is_dir():
        return "is a folder"
    if path.exists():
        return "is not a regular file"
    return "does not exist"


def mcp_config(path: str | None) -> Path | None:
    """The `--mcp-config` file, read and checked now: a missing file or a config that cannot be
    used is a usage error naming what is wrong, before anything starts."""
    if path is None:
        return None
    found = Path(path)
    if not found.is_file():
        raise UsageError(f"--mcp-config: {path} {not_a_file(found)}")
    from ..tools.mcp.config import MCPConfigError, load_mcp_config

    try:
        load_mcp_config(found)
    except MCPConfigError as error:
        raise UsageError(f"--mcp-config: {error}") from None
    return found


def sandbox_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """The `Runtime` keyword arguments for `--sandbox`, `--network` and `--mount`."""
    parsed: dict[str, str] = {}
    for text in args.mount or ():
        writable = text.endswith(":rw")
        rest = text[: -len(":rw")] if writable else text.removesuffix(":ro")
        host, to, target = rest.partition(":/")
        if to and not target:
            raise UsageError(f"--mount: {text}: the sandbox's / cannot be replaced; name a folder")
        if target.endswith((":ro", ":rw")):
            raise UsageError(f"--mount: {text}: the mode is given twice (HOST[:/PATH][:rw])")
        if not os.path.exists(host):
            base, colon, mode = host.rpartition(":")
            if colon and os.path.exists(base):
                raise UsageError(
                    f"--mount: {text}: {mode!r} is not 'ro' or 'rw' (HOST[:/PATH][:rw])"
                )
            raise UsageError(f"--mount: {host} does not exist")
        mode = "rw" if writable else "ro"
        parsed[host] = f"/{target}:{mode}" if target else mode
    return {"sandbox": args.sandbox, "network": args.network, "mounts": parsed}


def _dedent(text: str) -> str:
    first, _, rest = text.partition("\n")
    import textwrap

    return f"{first}\n{textwrap.dedent(rest)}" if rest else first
