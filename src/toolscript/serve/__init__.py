"""toolscript as an MCP server: `run_python` and friends in front of a `Runtime`.

`ToolscriptServer(runtime, transport="stdio" | "http")` is the server; `toolscript serve` (see
`toolscript.cli.serve`) runs it from the command line.
"""

from __future__ import annotations

from .server import ToolscriptServer

__all__ = ["ToolscriptServer"]
