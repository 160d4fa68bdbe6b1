"""`toolscript exec SCRIPT`: run one script in a fresh interpreter and print its result."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from . import options
from .options import UsageError
from .terminal import for_terminal


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
    Each run is a shell of its own. Exits 0 only when the script succeeded. Ctrl-C stops the
    script (a second one does not wait for it) and prints the calls that may still take
    effect; the exit status is then 130.
    """
    code = _read_stdin() if args.script == "-" else _read_script(Path(args.script))
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

    stopped_by: list[int] = []  # the signal that stopped the run, once one has

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
            most = rt.max_time_limit
            if args.time_limit is not None and args.time_limit > most:
                raise UsageError(
                    f"--time-limit: {args.time_limit:g} is over the most, {most:g} seconds"
                )
            for server, reason in rt.mcp_failures.items():
                said = f"toolscript: MCP server {server!r} did not start: {reason}"
                print(for_terminal(said, sys.stderr), file=sys.stderr)
            # A shell of its own: a call an earlier `exec` left in doubt is that process's
            # to report (`toolscript calls --uncertain`), not this unrelated script's.
            shell = rt.shell(f"exec-{os.getpid()}-{secrets.token_hex(3)}")
            run = asyncio.ensure_future(shell.run(code, time_limit=args.time_limit))
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, _stop, run, shell, signum, stopped_by)
            try:
                return await run
            except asyncio.CancelledError:
                if not stopped_by:
                    raise
                # Stopped (its end journaled): say what the script did, as far as it got.
                return _interrupted(rt, shell.name, stopped_by[0])

    result = asyncio.run(main())
    if isinstance(result, str):
        if args.as_json:
            import json

            result = json.dumps(
                {"status": "cancelled", "exit_code": 128 + stopped_by[0], "text": result},
                indent=2,
                ensure_ascii=False,
            )
            result += "\n"
        sys.stdout.write(for_terminal(result, sys.stdout))
        sys.stdout.flush()
        return 128 + stopped_by[0]
    text = result.text
    if stopped_by:
        # Its first line says how the command ends, as it does for any run.
        name = signal.Signals(stopped_by[0]).name
        _, _, rest = text.partition("\n")
        text = (
            f"exit {128 + stopped_by[0]} · cancelled\n\nStopped by {name}: the script was "
            f"interrupted.\n{rest}"
        )
    if args.as_json:
        import json

        facts = result.to_dict()
        if stopped_by:  # as the command ends, and as its text says
            facts.update(exit_code=128 + stopped_by[0], text=text)
        print(json.dumps(facts, indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(for_terminal(text, sys.stdout))
    sys.stdout.flush()
    return 128 + stopped_by[0] if stopped_by else int(result.exit_code)


def _stop(run: Any, shell: Any, signum: int, stopped_by: list[int]) -> None:
    """Ctrl-C (or SIGTERM): stop the script as a cancel does (interrupt, then a kill after
    the grace period), noting the signal in `stopped_by`, so that its result (its output
    and calls so far) is printed as any result is; a second one does not wait for the
    grace."""
    if stopped_by:
        raise SystemExit(128 + signum)
    stopped_by.append(signum)
    interpreter = shell._interpreter
    if interpreter is None or not interpreter.busy:
        run.cancel()  # not started yet: nothing of it ran
        return
    import asyncio

    name = signal.Signals(signum).name
    grace = shell._services.settings.grace
    from ..results import COMMAND_STOPPED

    stopping = asyncio.ensure_future(interpreter.stop(f"{COMMAND_STOPPED}{name}", grace))
    stopping.add_done_callback(lambda done: done.cancelled() or done.exception())


def _interrupted(rt: Any, shell: str, signum: int) -> str:
    """What a model would read of a script stopped by a signal: its calls as the journal
    has them, those whose effect may still come first."""
    name = signal.Signals(signum).name
    lines = [
        f"exit {128 + signum} · cancelled",
        "",
        f"Stopped by {name}: the script was interrupted.",
    ]
    scripts = rt.journal.scripts(shell=shell)
    calls = rt.journal.calls(script_id=scripts[-1].script_id) if scripts else []
    if calls:
        doubtful = [call for call in calls if call.uncertain or call.fate in (None, "pending")]
        lines += [
            "",
            f"calls: {len(calls)} made, {len(doubtful)} with no answer (they may still take effect)",
        ]
        lines += [f"- {call.tool}({call.args_brief})" for call in doubtful]
    return "\n".join(lines) + "\n"


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


def _read_stdin() -> str:
    from ..kernel.wire import MAX_FRAME

    code = sys.stdin.read(MAX_FRAME + 1)
    if len(code) > MAX_FRAME:
        raise UsageError(
            f"the script on stdin is over {MAX_FRAME >> 20} MiB, more than a script can be"
        )
    return code


def _read_script(path: Path) -> str:
    from ..kernel.wire import MAX_FRAME

    try:
        with path.open("rb") as file:
            data = file.read(MAX_FRAME + 1)  # `/dev/zero` is not read to the end
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    if len(data) > MAX_FRAME:
        raise UsageError(f"{path} is over {MAX_FRAME >> 20} MiB, more than a script can be")
    try:
        return data.decode("utf-8-sig")  # as Python reads a script with a BOM
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
