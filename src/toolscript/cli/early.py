"""`toolscript exec`'s interpreter started before the command line is even parsed.

Goal: `toolscript exec script.py` costs little more than starting Python once.

What fails: starting the head start (`toolscript.host.headstart`) from the `exec` command.
By then the process has imported the command line (argparse, every command's module) and
read its arguments, and the sandboxed interpreter, the longer of the two starts that run side
by side, begins a third of the way into the command.

What we do: `main` looks at the raw arguments first. For `exec` without an option that
changes the interpreter's sandbox (`--sandbox`, `--mount`, `--network`, `--cwd`, `--no-cwd`,
or any abbreviation of them), the settings are the defaults, so the head start can begin at
once, with what `exec` would ask for: no environment, the current folder shown read-write
and worked in, no network, the default limits. The parse that follows is the usual one;
when it ends in an error, or the runtime opens with other settings after all, the head
start is ended unused (`claim` checks its settings), so a guess changes when the
interpreter starts, never what it is.

Standard library only, and no argparse: everything imported here is imported before the
interpreter starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["begin_exec"]

# The options of `exec` that change its interpreter's settings: with any of them (or an
# abbreviation argparse would accept), `exec` starts its own head start after parsing.
_SANDBOX_OPTIONS = ("--sandbox", "--mount", "--network", "--cwd", "--no-cwd", "--help")


def begin_exec(argv: Sequence[str]) -> None:
    """Begin `exec`'s head start from the raw arguments when they leave its settings at their
    defaults; otherwise do nothing."""
    if list(argv[:1]) != ["exec"] or not _default_settings(argv[1:]):
        return
    try:
        folder = os.path.realpath(os.getcwd())
    except OSError:
        return  # `exec` says why, when it runs
    from ..host import headstart
    from ..host.sandbox import Mount

    headstart.begin(
        env={}, mounts=[Mount(folder, folder, writable=True)], network=False, cwd=folder
    )


def _default_settings(arguments: Sequence[str]) -> bool:
    for argument in arguments:
        if argument == "--":
            return True
        if argument.startswith("-") and not argument.startswith("--"):
            if argument != "-":  # '-' is the script read from stdin; '-h' asks for help
                return False
        elif argument.startswith("--"):
            name = argument.partition("=")[0]
            if any(option.startswith(name) for option in _SANDBOX_OPTIONS):
                return False
    return True
