"""Not a test module: a user's program, as the docs write it, that `mypy --strict` checks
(it is in `[tool.mypy] files`). A false error here is a false error in every user's code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolscript import Runtime, ScriptResult, ToolOutcome, ToolSpec, tool


@tool
async def send_message(channel_id: str, text: str) -> str:
    """Send a message to a channel."""
    return f"sent to {channel_id}"


async def main() -> ScriptResult:
    mounts: dict[str, str] = {"/data": "ro"}
    by_path: dict[Path, str] = {Path("/srv"): "/srv:rw"}
    limits: dict[str, int] = {"processes": 10}
    Runtime(mounts=by_path, limits=limits)
    async with Runtime(tools=[send_message], mounts=mounts, journal=":memory:") as rt:
        return await rt.shell("main").run("1", time_limit=30)


async def add(arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(arguments["a"] + arguments["b"])


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
ADD = ToolSpec("add", "Add two numbers.", SCHEMA, add)
