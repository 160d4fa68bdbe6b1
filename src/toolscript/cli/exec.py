"""`toolscript exec SCRIPT`: run one script in a fresh interpreter and print its result."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from . import options
from .options import UsageError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `exec` command's arguments."""
    parser = options.command(commands, "exec", exec_command.__doc__)
    parser.add_argument("script", metavar="SCRIPT", help="The Python script ('-' reads stdin).")
    options.add_tools(parser)
    options.add_mcp_config(parser)
    parser.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="Seconds before the script is stopped (default: 30, the runtime's "
        "default_time_limit).",
    )
    options.add_json(parser)
    options.add_journal(parser)
    options.add_sandbox(parser)
    options.add_check(parser)
    parser.add_argument(
        "--cwd",
        metavar="FOLDER",
        help="The folder the script works in, shown read-write in the sandbox "
        "(default: the current folder).",
    )
    parser.add_argument(
        "--no-cwd", action="store_true", help="Show the script no folder of yours: a private one."
    )
    parser.set_defaults(run=exec_command)


def exec_command(args: argparse.Namespace) -> int:
    """Run SCRIPT in a fresh interpreter and print what the model would read.

    The script works in the current folder (read-write), so `open("data.csv")` and a saved
    `plot.png` behave as you expect; everything else of the host it sees read-only, if at all.
    Each run is a shell of its own. Exits 0 only when the script succeeded.
    """
    code = sys.stdin.read() if args.script == "-" else _read_script(Path(args.script))
    if args.time_limit is not None and not 0 < args.time_limit < float("inf"):
        raise UsageError(f"--time-limit: {args.time_limit:g} is not a positive number of seconds")
    if args.cwd is not None and not Path(args.cwd).is_dir():
        raise UsageError(f"--cwd: {args.cwd} is not a folder")
    workdir = None if args.no_cwd else Path(args.cwd or Path.cwd())
    knobs = options.sandbox_knobs(args) | {"check": args.check}
    if args.sandbox != "off":
        # First, so that the interpreter starts while the rest is read and imported.
        _head_start(knobs["mounts"], workdir, args.network)
    config = options.mcp_config(args.mcp_config)
    specs = options.load_tools(args.tools)

    import asyncio
    import os
    import secrets

    async def main() -> Any:
        from ..runtime import Runtime

        # One script needs one interpreter: started directly, it is ready sooner than a
        # template that then forks it, and no pool is filled only to be closed.
        async with Runtime(
            tools=specs,
            mcp_config=config,
            journal=args.journal,
            workdir=workdir,
            fork=False,
            pool_size=0,
            **knobs,
        ) as rt:
            for server, reason in rt.mcp_failures.items():
                print(f"toolscript: MCP server {server!r} did not start: {reason}", file=sys.stderr)
            # A shell of its own: a call an earlier `exec` left in doubt is that process's
            # to report (`toolscript calls --uncertain`), not this unrelated script's.
            shell = rt.shell(f"exec-{os.getpid()}-{secrets.token_hex(3)}")
            return await shell.run(code, time_limit=args.time_limit)

    result = asyncio.run(main())
    if args.as_json:
        import json

        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(result.text)
    sys.stdout.flush()
    return int(result.exit_code)


def _head_start(mounts: dict[str | Path, str], workdir: Path | None, network: bool) -> None:
    """Start the script's interpreter now, while the runtime is imported (`headstart`)."""
    from ..host import headstart
    from ..host.sandbox import Mount, parse_mounts

    try:
        shown = parse_mounts(dict(mounts))
    except ValueError as error:
        raise UsageError(f"--mount: {error}") from None
    folder = None
    if workdir is not None:
        folder = str(workdir.expanduser().resolve())
        shown.append(Mount(folder, folder, writable=True))
    headstart.begin(env={}, mounts=shown, network=network, cwd=folder)


def _read_script(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
