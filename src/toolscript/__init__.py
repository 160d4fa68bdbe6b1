"""toolscript: run agent-written Python that calls tools, and report exactly what it did.

The public API::

    from toolscript import Runtime, tool

    async with Runtime(tools=[...], mcp_config="mcp.json") as rt:
        result = await rt.run("print(await search(query='x'))", time_limit=30)
        print(result.text)
"""

from __future__ import annotations

from .host.calls import CallRecord, CallReport
from .host.result import ScriptResult
from .runtime import Runtime, RuntimeClosedError, Shell
from .tools.python import Tool, tool
from .tools.spec import ToolAnnotations, ToolSpec

__all__ = [
    "CallRecord",
    "CallReport",
    "Runtime",
    "RuntimeClosedError",
    "ScriptResult",
    "Shell",
    "Tool",
    "ToolAnnotations",
    "ToolSpec",
    "tool",
]
