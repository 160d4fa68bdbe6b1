"""`toolscript tools`: the tool catalogue as the Python stubs a model sees."""

from __future__ import annotations

import argparse
import sys

from . import options
from .terminal import for_terminal


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `tools` command's arguments."""
    parser = options.command(commands, "tools", tools_command.__doc__)
    options.add_tools(parser)
    options.add_mcp_config(parser)
    parser.set_defaults(run=tools_command)


def tools_command(args: argparse.Namespace) -> int:
    """Print the tool catalogue as the Python stubs a model sees (Runtime.prompt())."""
    import asyncio

    config = options.mcp_config(args.mcp_config)
    specs = options.load_tools(args.tools)

    async def main() -> tuple[str, dict[str, str]]:
        from ..runtime import Runtime

        async with Runtime(tools=specs, mcp_config=config, journal=":memory:") as rt:
            return rt.prompt(), dict(rt.mcp_failures)

    prompt, failures = asyncio.run(main())
    for server, reason in failures.items():
        said = f"toolscript: MCP server {server!r} did not start: {reason}"
        print(for_terminal(said, sys.stderr), file=sys.stderr)
    print(prompt)
    return 0
