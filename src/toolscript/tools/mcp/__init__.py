"""MCP servers as a source of tools, through the official SDK's client.

`MCPTools.open(config, log_dir)` connects to every configured server at once and lists their
tools; `.specs()` gives one `ToolSpec` per upstream tool, whose handler calls it over a session
that stays open between calls. A server that cannot start is named in `.failures` and the
others still work. A stdio server's stderr goes to `log_dir/<server>.log`, never to the host.

How a call can end, as the host sees it:

- an answer: a `ToolOutcome` (an `isError` result, which is how servers report unknown tools,
  invalid arguments and denials, is an outcome with `is_error=True`, not an exception);
- the server went away while the call was in flight: `SourceGone` (the call was sent, so its
  effect is unknown); the server is started again for the next call, a bounded number of times;
- the host cancels the handler (its timeout): the SDK sends `notifications/cancelled` to the
  server for that request and the session stays usable.

The modules: `config` reads the `{"mcpServers": ...}` file; `source` opens every server as one
source (`MCPTools`); `server` is one server's life (start, restarts, tool list, log, stop);
`connection` is one client session and the calls on it; `results` turns an MCP result into the
script's value; `errors` tells a server's error from a lost answer.
"""

from __future__ import annotations

from .config import MCPConfig, MCPConfigError, load_mcp_config
from .results import tool_outcome
from .server import MCPServer
from .source import MCPTools

__all__ = [
    "MCPConfig",
    "MCPConfigError",
    "MCPServer",
    "MCPTools",
    "load_mcp_config",
    "tool_outcome",
]
