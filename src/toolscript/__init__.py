"""toolscript: run agent-written Python that calls tools, and report exactly what it did.

The public API::

    from toolscript import Runtime, tool

    async with Runtime(tools=[...], mcp_config="mcp.json") as rt:
        result = await rt.run("print(await search(query='x'))", time_limit=30)
        print(result.text)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import Agent, ExecutionControl, InvalidControl, Turn
    from .background import ScriptHandle
    from .config import Settings
    from .host.images import ScriptImage
    from .host.journal import Journal, JournalCall, JournalScript
    from .host.journal.records import (
        JournalAccessError,
        JournalFileError,
        JournalOpenError,
        JournalVersionError,
    )
    from .host.keeper import KeeperError
    from .host.sandbox import SandboxError
    from .results import CallRecord, CallReport, ScriptResult
    from .runtime import Runtime, RuntimeClosedError
    from .shell import Shell
    from .tools.mcp.config import MCPConfigError
    from .tools.python import Tool, tool
    from .tools.spec import CallContext, ToolAnnotations, ToolOutcome, ToolSpec

# Each public name loads its module when it is first asked for: `toolscript --help`, or a
# command that runs no script, does not pay for the whole runtime.
_WHERE = {
    "Agent": "agent",
    "CallContext": "tools.spec",
    "CallRecord": "results",
    "CallReport": "results",
    "ExecutionControl": "agent",
    "InvalidControl": "agent",
    "Journal": "host.journal",
    "JournalCall": "host.journal",
    "JournalAccessError": "host.journal.records",
    "JournalFileError": "host.journal.records",
    "JournalOpenError": "host.journal.records",
    "JournalScript": "host.journal",
    "JournalVersionError": "host.journal.records",
    "KeeperError": "host.keeper",
    "MCPConfigError": "tools.mcp.config",
    "Runtime": "runtime",
    "RuntimeClosedError": "runtime",
    "SandboxError": "host.sandbox",
    "ScriptHandle": "background",
    "ScriptImage": "host.images",
    "ScriptResult": "results",
    "Settings": "config",
    "Shell": "shell",
    "Tool": "tools.python",
    "ToolAnnotations": "tools.spec",
    "ToolOutcome": "tools.spec",
    "ToolSpec": "tools.spec",
    "Turn": "agent",
    "tool": "tools.python",
}

__all__ = [
    "Agent",
    "CallContext",
    "CallRecord",
    "CallReport",
    "ExecutionControl",
    "InvalidControl",
    "Journal",
    "JournalAccessError",
    "JournalCall",
    "JournalFileError",
    "JournalOpenError",
    "JournalScript",
    "JournalVersionError",
    "KeeperError",
    "MCPConfigError",
    "Runtime",
    "RuntimeClosedError",
    "SandboxError",
    "ScriptHandle",
    "ScriptImage",
    "ScriptResult",
    "Settings",
    "Shell",
    "Tool",
    "ToolAnnotations",
    "ToolOutcome",
    "ToolSpec",
    "Turn",
    "__version__",
    "tool",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _installed_version()
    elif name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'toolscript' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _installed_version() -> str:
    """The installed toolscript's version (the source tree's, when it was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("toolscript")
    except PackageNotFoundError:
        return "0.1.0.dev0"
