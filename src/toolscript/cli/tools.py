"""`toolscript tools`: the tool catalogue as the Python stubs a model sees."""

from __future__ import annotations

import typer

from .options import MCPConfigOption, ToolsOption, load_tools


def tools_command(tools: ToolsOption = None, mcp_config: MCPConfigOption = None) -> None:
    """Print the tool catalogue as the Python stubs a model sees (Runtime.prompt())."""
    import asyncio

    specs = load_tools(tools)

    async def main() -> tuple[str, dict[str, str]]:
        from ..runtime import Runtime

        async with Runtime(tools=specs, mcp_config=mcp_config, journal=":memory:") as rt:
            return rt.prompt(), dict(rt.mcp_failures)

    prompt, failures = asyncio.run(main())
    for server, reason in failures.items():
        typer.echo(f"toolscript: MCP server {server!r} did not start: {reason}", err=True)
    typer.echo(prompt)
