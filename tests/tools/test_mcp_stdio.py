"""A stdio MCP server's pipes as toolscript reads and writes them (`tools/mcp/stdio.py`), against
real server processes: one on the SDK's server, and one written by hand for what the SDK's
server never puts on the wire."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_asyncio
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest

from toolscript.tools.binding import plan_for
from toolscript.tools.mcp import MCPTools, stdio
from toolscript.tools.mcp.stdio import ServerInput, ServerOutput
from toolscript.tools.spec import SourceGone, ToolOutcome

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVERS = Path(__file__).parent.parent / "mcp_servers"


def server(script: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVERS / script)]}


async def call(tools: MCPTools, server: str, tool: str, **arguments: Any) -> ToolOutcome:
    spec = next(s for s in tools.specs() if s.server == server and s.name == tool)
    return await asyncio.wait_for(spec.handler(arguments), 20)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def demo(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPTools]:
    config = {"mcpServers": {"demo": server("demo_server.py")}}
    tools = await MCPTools.open(config, tmp_path_factory.mktemp("logs"), startup_timeout=20)
    try:
        yield tools
    finally:
        await asyncio.wait_for(tools.aclose(), 15)


@pytest.mark.timeout(30)
async def test_an_answer_of_megabytes_comes_whole_across_many_reads(demo: MCPTools) -> None:
    text = "".join(chr(0x41 + i % 26) for i in range(3_000_000)) + "é"  # 46 reads of 64 KiB
    assert await call(demo, "demo", "echo", text=text) == ToolOutcome(value=text)
    assert await call(demo, "demo", "echo", text="after") == ToolOutcome(value="after")


@pytest.mark.timeout(30)
async def test_the_answers_of_a_burst_come_to_their_own_calls(demo: MCPTools) -> None:
    texts = [f"call {i}" for i in range(300)]
    answers = await asyncio.gather(*(call(demo, "demo", "echo", text=t) for t in texts))
    assert answers == [ToolOutcome(value=t) for t in texts]


@pytest.mark.timeout(30)
async def test_lines_that_are_no_message_are_logged_and_an_answer_cut_in_two_arrives(
    tmp_path: Path,
) -> None:
    async with await MCPTools.open(
        {"mcpServers": {"raw": server("raw_server.py")}}, tmp_path
    ) as tools:
        assert tools.failures == {}
        assert await call(tools, "raw", "noisy", text="through") == ToolOutcome(value="through")
        assert await call(tools, "raw", "noisy", text="again") == ToolOutcome(value="again")
    log = (tmp_path / "raw.log").read_text()
    assert log.count("the connection reported an error") == 2  # the garbage, not the empty line
    assert "this is not JSON-RPC" in log


@pytest.mark.timeout(30)
async def test_an_answer_json_rpc_does_not_allow_ends_its_call_as_an_error_at_once(
    tmp_path: Path,
) -> None:
    # `"result": null` fails validation as a whole: unless it is read as that request's
    # answer, the call waits out its tool timeout, said to be still in flight.
    async with await MCPTools.open(
        {"mcpServers": {"raw": server("raw_server.py")}}, tmp_path
    ) as tools:
        answer = await asyncio.wait_for(call(tools, "raw", "null"), 10)
        assert answer.is_error and "not one JSON-RPC allows" in str(answer.value), answer
        assert await call(tools, "raw", "noisy", text="after") == ToolOutcome(value="after")


@pytest.mark.timeout(30)
async def test_a_server_that_stops_reading_fails_the_next_call_as_gone_and_is_started_again(
    tmp_path: Path,
) -> None:
    async with await MCPTools.open(
        {"mcpServers": {"raw": server("raw_server.py")}}, tmp_path
    ) as tools:
        assert await call(tools, "raw", "deafen") == ToolOutcome(value="deaf now")
        # Its stdout stays open and nothing will ever answer: the failed write must end the
        # session, or this call would wait forever.
        with pytest.raises(SourceGone, match=r"'raw'.*'noisy'"):
            await call(tools, "raw", "noisy", text="lost")
        assert await call(tools, "raw", "noisy", text="back") == ToolOutcome(value="back")
    assert (tmp_path / "raw.log").read_text().count(f": starting {sys.executable}") == 2


@pytest.mark.timeout(30)
async def test_a_server_that_dies_leaving_a_child_on_its_pipes_is_gone_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    import os

    pid_file = tmp_path / "child.pid"
    async with await MCPTools.open(
        {"mcpServers": {"raw": server("raw_server.py")}}, tmp_path
    ) as tools:
        # The child holds the server's stdout: no end of stream ever comes by itself.
        with pytest.raises(SourceGone, match=r"'raw'.*'orphan'"):
            await call(tools, "raw", "orphan", pid_file=str(pid_file))
        assert await call(tools, "raw", "noisy", text="back") == ToolOutcome(value="back")
    child = int(pid_file.read_text())
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    else:
        os.kill(child, 9)
        raise AssertionError("the server's child outlived it")


@pytest.mark.timeout(30)
async def test_a_line_that_never_ends_ends_the_session_not_the_hosts_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE", 1 << 20)
    async with await MCPTools.open(
        {"mcpServers": {"raw": server("raw_server.py")}}, tmp_path
    ) as tools:
        with pytest.raises(SourceGone, match=r"'raw'.*'flood'"):
            await call(tools, "raw", "flood", bytes=4 << 20)
        assert await call(tools, "raw", "noisy", text="back") == ToolOutcome(value="back")
    assert "more than 1 MiB without a line's end" in (tmp_path / "raw.log").read_text()


class _Chunks(anyio.abc.ByteReceiveStream):
    """A stdout that gives `chunks` one per read, then its end."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)

    async def aclose(self) -> None:
        self.chunks = []


def _line(n: int) -> bytes:
    return b'{"jsonrpc": "2.0", "id": %d, "result": {}}\n' % n


@pytest.mark.timeout(10)
async def test_lines_are_cut_where_their_newlines_are_however_the_reads_fall() -> None:
    stream = _line(1) + _line(2) + b"\n" + _line(3) + b"not json\n" + _line(4)
    for cuts in ([len(stream)], [1] * len(stream), [7, 50, 3, 90, 1000]):
        chunks, at = [], 0
        for size in cuts:
            chunks.append(stream[at : at + size])
            at += size
        output = ServerOutput(_Chunks([c for c in chunks if c]))
        got = [item async for item in output]
        assert [getattr(getattr(m, "message", None), "id", None) for m in got] == [1, 2, 3, None, 4]
        assert isinstance(got[3], ValueError)
        with pytest.raises(anyio.EndOfStream):
            await output.receive()


@pytest.mark.timeout(10)
async def test_an_unfinished_last_line_is_not_a_message_and_the_stream_ends() -> None:
    output = ServerOutput(_Chunks([_line(1) + b'{"jsonrpc": "2.0", "id": 2']))
    first = await output.receive()
    assert getattr(getattr(first, "message", None), "id", None) == 1
    with pytest.raises(anyio.EndOfStream):
        await output.receive()


class _Lines(anyio.abc.ByteSendStream):
    """A stdin that is not asyncio's stream: what is sent is kept; `gone` fails each send."""

    def __init__(self, gone: bool = False) -> None:
        self.sent: list[bytes] = []
        self.gone = gone

    async def send(self, item: bytes) -> None:
        if self.gone:
            raise anyio.BrokenResourceError
        self.sent.append(item)

    async def aclose(self) -> None:
        pass


def _request(n: int) -> SessionMessage:
    return SessionMessage(message=JSONRPCRequest(jsonrpc="2.0", id=n, method="ping"))


@pytest.mark.timeout(10)
async def test_a_stdin_that_is_not_asyncios_stream_is_written_through_its_own_send() -> None:
    stdin = _Lines()
    output = ServerOutput(_Chunks([]))
    await ServerInput(stdin, output).send(_request(1))
    assert stdin.sent == [b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n']
    gone = ServerInput(_Lines(gone=True), output)
    await gone.send(_request(2))  # the server is gone: its output ends, nothing raises
    with pytest.raises(anyio.EndOfStream):
        await output.receive()


@pytest.mark.timeout(30)
async def test_a_server_that_writes_no_messages_is_told_apart_from_its_own_stderr(
    tmp_path: Path,
) -> None:
    # Its start failed as "did not start within 30 s. Its last stderr lines:" followed by
    # the continuation lines of toolscript's own multi-line notes, and its stderr's control
    # sequences went into the reason as they were.
    junk = "echo 'this is not an MCP message'; printf '\\033[31mred alert\\033[0m\\n' >&2; sleep 30"
    config = {"mcpServers": {"junk": {"command": "sh", "args": ["-c", junk]}}}
    async with await MCPTools.open(config, tmp_path, startup_timeout=2) as tools:
        reason = tools.failures["junk"]
    assert "did not start within 2 s, and the connection reported 1 error(s)" in reason, reason
    assert "must write only MCP messages on its stdout" in reason, reason
    assert reason.endswith("Its last stderr lines:\n\\x1b[31mred alert\\x1b[0m"), reason
    for line in (tmp_path / "junk.log").read_text().splitlines():
        assert line.startswith("--- toolscript") or "red alert" in line, line


@pytest.mark.timeout(30)
async def test_a_server_whose_working_folder_is_missing_is_not_said_to_lack_its_command(
    tmp_path: Path,
) -> None:
    # It said "the command was not found (/nonexistent)", of a command that exists.
    missing = str(tmp_path / "nonexistent")
    config = {"mcpServers": {"lost": {**server("demo_server.py"), "cwd": missing}}}
    async with await MCPTools.open(config, tmp_path, startup_timeout=10) as tools:
        reason = tools.failures["lost"]
    assert f"its working folder (cwd) does not exist or is not a folder ({missing})" in reason
    assert "command was not found" not in reason


@pytest.mark.timeout(30)
async def test_a_tool_the_sdk_cannot_read_costs_that_tool_its_schema_not_the_server(
    tmp_path: Path,
) -> None:
    # `loose` lists `"required": "text"`, which fails the SDK's model: the listing as a whole
    # would fail, and the server be reported as not started.
    raw = server("raw_server.py")
    raw["args"].append("--unreadable-tool")
    async with await MCPTools.open({"mcpServers": {"raw": raw}}, tmp_path) as tools:
        assert tools.failures == {}
        specs = {spec.name: spec for spec in tools.specs()}
        assert set(specs) == {"noisy", "deafen", "flood", "orphan", "null", "loose"}
        loose = specs["loose"]
        assert loose.description.startswith("Echo the arguments.\n\n(The server's listing")
        assert "required" in loose.description and "pass them by name" in loose.description
        assert plan_for(loose)["catch_all"] == "kwargs"
        assert await call(tools, "raw", "loose", text="hi") == ToolOutcome(value='{"text": "hi"}')
        assert await call(tools, "raw", "noisy", text="still") == ToolOutcome(value="still")
