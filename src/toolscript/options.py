"""Command-line options that `exec`, `serve` and `agent` share: how scripts are sandboxed."""

from __future__ import annotations

from typing import Annotated, Any

import typer

NetworkOption = Annotated[
    bool,
    typer.Option("--network", help="Let scripts use the host's network (off by default)."),
]
SandboxOption = Annotated[
    str,
    typer.Option(
        "--sandbox",
        help="auto: sandbox every interpreter where the machine allows it; required: refuse "
        "to run without one; off: no sandbox (for debugging).",
        metavar="auto|required|off",
    ),
]
MountOption = Annotated[
    list[str] | None,
    typer.Option(
        "--mount",
        help="Show a host folder or file to scripts, read-only unless ':rw' ends it; "
        "':/PATH' before that shows it at PATH. Repeatable.",
        metavar="HOST[:/PATH][:rw]",
    ),
]


def sandbox_knobs(sandbox: str, network: bool, mounts: list[str] | None) -> dict[str, Any]:
    """The `Runtime` keyword arguments for these options; a bad value is a usage error."""
    if sandbox not in ("auto", "required", "off"):
        raise typer.BadParameter(
            f"{sandbox!r} is not auto, required or off", param_hint="--sandbox"
        )
    parsed: dict[str, str] = {}
    for text in mounts or ():
        writable = text.endswith(":rw")
        rest = text[: -len(":rw")] if writable else text.removesuffix(":ro")
        host, _, target = rest.partition(":/")
        mode = "rw" if writable else "ro"
        parsed[host] = f"/{target}:{mode}" if target else mode
    return {"sandbox": sandbox, "network": network, "mounts": parsed}
