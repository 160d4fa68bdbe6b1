"""toolscript: run agent-written Python that calls tools, and report exactly what it did.

The public API::

    from toolscript import Runtime, tool

    async with Runtime(tools=[...], mcp_config="mcp.json") as rt:
        result = await rt.run("print(await search(query='x'))", time_limit=30)
        print(result.text)
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from .background import ScriptHandle
from .config import Settings
from .results import CallRecord, CallReport, ScriptResult
from .runtime import Runtime, RuntimeClosedError
from .shell import Shell
from .tools.python import Tool, tool
from .tools.spec import ToolAnnotations, ToolSpec

try:
    __version__ = _version("toolscript")
    """The installed toolscript's version."""
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.1.0.dev0"

__all__ = [
    "CallRecord",
    "CallReport",
    "Runtime",
    "RuntimeClosedError",
    "ScriptHandle",
    "ScriptResult",
    "Settings",
    "Shell",
    "Tool",
    "ToolAnnotations",
    "ToolSpec",
    "__version__",
    "tool",
]
