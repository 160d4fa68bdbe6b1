"""A runtime with the four published MCP servers, shared by this folder's tests."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from toolscript import Runtime

from .servers import installed

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="session")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The filesystem server's folder, with a few files of each kind."""
    root = tmp_path_factory.mktemp("published-files")
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "edit.txt").write_text("alpha\nbeta\n")
    (root / "pixel.png").write_bytes(PNG)
    (root / "sub").mkdir()
    (root / "sub" / "readme.md").write_text("# Readme\n\nsome words\n")
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rt(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Runtime]:
    servers = await asyncio.to_thread(installed)
    memory = tmp_path_factory.mktemp("memory") / "graph.jsonl"
    runtime = Runtime(
        mcp_config=servers.config(folder, memory),
        journal=":memory:",
        state_dir=tmp_path_factory.mktemp("state"),
        output_limit=4_000_000,
        tool_timeout=30,
    )
    await asyncio.wait_for(runtime.start(), 120)
    try:
        assert runtime.mcp_failures == {}, runtime.mcp_failures
        yield runtime
    finally:
        await asyncio.wait_for(runtime.aclose(), 30)


def stub_namespace(prompt: str) -> dict[str, Any]:
    """The prompt run in this process, with TypedDicts that pydantic reads on Python 3.11
    and that forbid keys the stub does not name."""
    readable = prompt.replace("from typing import", "from typing_extensions import")
    namespace: dict[str, Any] = {"__name__": "tools"}
    exec(compile(readable, "<prompt>", "exec", dont_inherit=True), namespace)
    for value in namespace.values():
        if isinstance(value, type) and hasattr(value, "__required_keys__"):
            value.__pydantic_config__ = {"extra": "forbid"}  # type: ignore[attr-defined]
    return namespace
