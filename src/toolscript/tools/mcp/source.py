"""Every configured MCP server, as one source of tools."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from ..spec import ToolSpec
from .config import MCPConfig, ServerConfig, load_mcp_config
from .server import DEFAULT_STARTUP_TIMEOUT, MAX_RESTARTS, MCPServer

__all__ = ["MCPTools"]


class MCPTools:
    """Every configured MCP server, as one source of tools.

    Open with `await MCPTools.open(config, log_dir)` (or `async with await MCPTools.open(...)`),
    read `.specs()` and `.failures`, close with `await aclose()`.
    """

    def __init__(self, servers: Mapping[str, MCPServer]) -> None:
        self.servers: dict[str, MCPServer] = dict(servers)

    @classmethod
    async def open(
        cls,
        config: MCPConfig | Mapping[str, Any] | str | Path,
        log_dir: Path,
        *,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        max_restarts: int = MAX_RESTARTS,
        on_change: Callable[[str], None] | None = None,
    ) -> MCPTools:
        """Start every server at once, each bounded by `startup_timeout` seconds.

        `config` is an `MCPConfig`, the `{"mcpServers": ...}` dict, or a path to the file
        (`MCPConfigError` if it is not usable). A server that fails to start does not fail the
        whole: its reason is in `.failures`.
        """
        if not isinstance(config, MCPConfig):
            config = load_mcp_config(config)
        names = _log_names(config.servers)
        tools = cls(
            {
                name: MCPServer(
                    server,
                    Path(log_dir) / f"{names[name]}.log",
                    startup_timeout=startup_timeout,
                    max_restarts=max_restarts,
                    on_change=on_change,
                )
                for name, server in config.servers.items()
            }
        )
        starts = [asyncio.ensure_future(server.start()) for server in tools.servers.values()]
        try:
            await asyncio.gather(*starts)
        except BaseException:
            # `gather` gives up at the first start that is cancelled (it cancelled them all);
            # the others may still be ending the process they began. Each undoes its own
            # start: wait for all of them, or a server still in its handshake is left running.
            await asyncio.wait(starts)
            await tools.aclose()
            raise
        return tools

    @property
    def failures(self) -> dict[str, str]:
        """The servers that could not start, by name, with the reason in a sentence."""
        return {
            name: server.failure
            for name, server in self.servers.items()
            if server.failure is not None
        }

    def specs(self) -> list[ToolSpec]:
        """The tools of every server that started, in config order."""
        return [spec for server in self.servers.values() for spec in server.specs()]

    def set_on_change(self, on_change: Callable[[str], None] | None) -> None:
        """Have `on_change(server_name)` called whenever a server's tool list changes."""
        for server in self.servers.values():
            server.on_change = on_change

    async def aclose(self) -> None:
        """Close every server at once; bounded by `CLOSE_TIMEOUT` for each."""
        await asyncio.gather(*(server.aclose() for server in self.servers.values()))

    async def __aenter__(self) -> MCPTools:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def _log_names(servers: Mapping[str, ServerConfig]) -> dict[str, str]:
    """A distinct, file-safe log name per server."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for name in servers:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "server"
        candidate, number = base, 2
        while candidate.lower() in taken:
            candidate, number = f"{base}-{number}", number + 1
        taken.add(candidate.lower())
        names[name] = candidate
    return names
