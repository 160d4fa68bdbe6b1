"""Talk to `toolscript serve` as an MCP client would: `python examples/serve_demo.py`.

It starts `toolscript serve --mcp-config examples/mcp.json` over stdio with the official MCP
client, lists the tools toolscript offers, and calls `run_python` with a script that uses the
example notes server's tools as Python functions. Run it from the repository root.
"""

from __future__ import annotations

import asyncio
import sys

from mcp import Client, StdioServerParameters

SCRIPT = """
await notes.add_note(title="Groceries", text="Milk, coffee beans.", tags=["home"])
await notes.add_note(title="Grinder", text="A finer grind for the coffee.")
found = await notes.search_notes(query="coffee")
[n["title"] for n in found["notes"]]
"""


async def main() -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolscript.cli", "serve", "--mcp-config", "examples/mcp.json"],
    )
    async with Client(server) as client:
        listed = await client.list_tools()
        print("tools offered:", [tool.name for tool in listed.tools])
        result = await client.call_tool("run_python", {"code": SCRIPT})
        for block in result.content:
            print(getattr(block, "text", block))


if __name__ == "__main__":
    asyncio.run(main())
