"""MCP servers as a tool source: real server processes, driven through the SDK's client."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.integration.conftest import http_demo
from toolscript.kernel.content import Audio, Image, Resource, ResourceLink, from_wire
from toolscript.tools.mcp import MCPTools
from toolscript.tools.spec import SourceGone, ToolFailure, ToolOutcome, ToolSpec

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVERS = Path(__file__).parent.parent / "mcp_servers"
DEMO = str(SERVERS / "demo_server.py")


def demo(*extra: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [DEMO, *extra]}


def by_name(tools: MCPTools, server: str = "demo") -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in tools.specs() if spec.server == server}


async def call(tools: MCPTools, tool: str, server: str = "demo", **arguments: Any) -> ToolOutcome:
    return await by_name(tools, server)[tool].handler(arguments)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPTools]:
    config = {
        "mcpServers": {
            "demo": demo(),
            "broken": {"command": sys.executable, "args": [str(SERVERS / "exits_at_once.py")]},
            "missing": {"command": "/nonexistent/toolscript-test-server"},
        }
    }
    tools = await MCPTools.open(config, tmp_path_factory.mktemp("logs"), startup_timeout=20)
    try:
        yield tools
    finally:
        await asyncio.wait_for(tools.aclose(), 15)


# --- listing ----------------------------------------------------------------------------------


async def test_every_upstream_tool_is_a_spec_under_its_server_with_its_own_name(
    shared: MCPTools,
) -> None:
    names = set(by_name(shared))
    assert {"echo", "add", "image", "fail", "odd_names", "crash", "hang", "slow"} <= names
    assert all(spec.server == "demo" for spec in shared.specs())
    assert by_name(shared)["echo"].key == "demo/echo"


async def test_schemas_descriptions_and_annotations_are_copied(shared: MCPTools) -> None:
    echo, add = by_name(shared)["echo"], by_name(shared)["add"]
    assert echo.description == "Say the text back."
    assert echo.input_schema["required"] == ["text"]
    assert echo.annotations.title == "Echo"
    assert echo.annotations.read_only is True
    assert echo.annotations.destructive is None
    assert echo.output_schema is None
    assert add.output_schema is not None
    assert add.output_schema["properties"] == {"sum": {"type": "integer"}}


async def test_parameters_named_file_path_class_kwargs_and_from_are_listed_and_sent_unchanged(
    shared: MCPTools,
) -> None:
    spec = by_name(shared)["odd_names"]
    assert list(spec.input_schema["properties"]) == ["file-path", "class", "kwargs", "from"]
    arguments = {"file-path": "/tmp/a", "class": "B", "kwargs": {"x": 1}, "from": 3}
    outcome = await spec.handler(arguments)
    assert outcome == ToolOutcome(value=arguments)


# --- results ----------------------------------------------------------------------------------


async def test_a_single_text_block_is_a_str(shared: MCPTools) -> None:
    assert await call(shared, "echo", text="hello") == ToolOutcome(value="hello")


async def test_structured_content_is_returned_as_data(shared: MCPTools) -> None:
    assert await call(shared, "add", a=2, b=40) == ToolOutcome(value={"sum": 42})


async def test_an_image_becomes_a_marked_block_that_the_kernel_turns_into_an_image(
    shared: MCPTools,
) -> None:
    outcome = await call(shared, "image")
    assert outcome.is_error is False
    [block] = outcome.value
    assert block["$toolscript"] == "image"
    assert block["mime_type"] == "image/png"
    [image] = from_wire(outcome.value)
    assert isinstance(image, Image)
    assert image.data.startswith(b"\x89PNG")
    assert repr(image) == f"<Image image/png {image.size:,} bytes>"


async def test_a_result_of_several_blocks_is_a_list_with_each_kind_marked(
    shared: MCPTools,
) -> None:
    outcome = await call(shared, "mixed")
    caption, image, audio, text_resource, blob_resource, link = from_wire(outcome.value)
    assert caption == "caption"
    assert isinstance(image, Image) and image.mime_type == "image/png"
    assert isinstance(audio, Audio) and audio.data == b"RIFF"
    assert text_resource == Resource(uri="note://1", mime_type="text/plain", text="hello")
    assert blob_resource == Resource(
        uri="blob://1", mime_type="application/octet-stream", data=b"\x00\x01"
    )
    assert link == ResourceLink(uri="file:///tmp/report.csv", name="report", mime_type="text/csv")


async def test_an_error_result_is_an_error_outcome_with_the_servers_message(
    shared: MCPTools,
) -> None:
    outcome = await call(shared, "fail", message="access denied to /etc")
    assert outcome == ToolOutcome(value="access denied to /etc", is_error=True)


async def test_an_unknown_tool_is_answered_as_an_error_outcome(shared: MCPTools) -> None:
    outcome = await shared.servers["demo"].call("no_such_tool", {})
    assert outcome.is_error is True
    assert "no_such_tool" in outcome.value


async def test_calls_on_one_session_run_concurrently(shared: MCPTools) -> None:
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(call(shared, "slow", seconds=0.2) for _ in range(5))), 10
    )
    assert outcomes == [ToolOutcome(value="slept")] * 5


# --- what toolscript declares, where stderr goes --------------------------------------------


async def test_toolscript_declares_no_client_capabilities(shared: MCPTools) -> None:
    outcome = await call(shared, "client_capabilities")
    assert outcome == ToolOutcome(value={})


async def test_a_servers_stderr_goes_to_its_log_file(shared: MCPTools) -> None:
    await call(shared, "to_stderr", text="a line for the log 7f3a")
    log = shared.servers["demo"].log_path
    assert log.name == "demo.log"
    assert "a line for the log 7f3a" in log.read_text()


# --- servers that cannot start ---------------------------------------------------------------


async def test_a_server_that_exits_at_once_is_named_with_its_stderr_and_the_others_work(
    shared: MCPTools,
) -> None:
    reason = shared.failures["broken"]
    assert "'broken'" in reason
    assert "missing API key" in reason
    assert not [spec for spec in shared.specs() if spec.server == "broken"]
    assert await call(shared, "echo", text="still here") == ToolOutcome(value="still here")


async def test_a_server_whose_command_does_not_exist_is_named_with_the_reason(
    shared: MCPTools,
) -> None:
    reason = shared.failures["missing"]
    assert "'missing'" in reason
    assert "not found" in reason
    assert set(shared.failures) == {"broken", "missing"}


@pytest.mark.timeout(20)
async def test_a_server_that_never_finishes_its_handshake_fails_within_the_startup_bound(
    tmp_path: Path,
) -> None:
    config = {
        "mcpServers": {
            "mute": {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]}
        }
    }
    started = asyncio.get_running_loop().time()
    tools = await MCPTools.open(config, tmp_path, startup_timeout=0.5)
    await tools.aclose()
    assert "did not start within 0.5 s" in tools.failures["mute"]
    assert asyncio.get_running_loop().time() - started < 10


@pytest.mark.timeout(30)
async def test_a_failed_start_quotes_only_its_own_stderr_lines_not_an_earlier_starts(
    tmp_path: Path,
) -> None:
    def failing(word: str) -> dict[str, Any]:
        script = "import sys; sys.stderr.write(sys.argv[1] + '\\n'); sys.exit(2)"
        return {"mcpServers": {"flaky": {"command": sys.executable, "args": ["-c", script, word]}}}

    first = await MCPTools.open(failing("first-start-says-this"), tmp_path, startup_timeout=20)
    await first.aclose()
    second = await MCPTools.open(failing("second-start-says-this"), tmp_path, startup_timeout=20)
    await second.aclose()
    assert "first-start-says-this" in first.failures["flaky"]
    reason = second.failures["flaky"]
    assert "second-start-says-this" in reason
    assert "first-start-says-this" not in reason
    log = (tmp_path / "flaky.log").read_text()
    assert "first-start-says-this" in log and "second-start-says-this" in log


# --- cancellation -----------------------------------------------------------------------------


@pytest.mark.timeout(20)
async def test_a_call_the_host_gives_up_on_reaches_the_server_as_a_cancellation(
    shared: MCPTools, tmp_path: Path
) -> None:
    marker = tmp_path / "hang.cancelled"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(call(shared, "hang", marker=str(marker)), 0.5)
    seen = await asyncio.wait_for(call(shared, "cancellations", timeout=5), 10)
    assert seen == ToolOutcome(value={"markers": [str(marker)]})
    assert marker.read_text() == "cancelled"
    assert await call(shared, "echo", text="after") == ToolOutcome(value="after")


# --- a server that dies -----------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_a_server_that_crashes_mid_call_raises_source_gone_and_the_next_call_restarts_it(
    tmp_path: Path,
) -> None:
    async with await MCPTools.open({"mcpServers": {"demo": demo()}}, tmp_path) as tools:
        with pytest.raises(SourceGone, match=r"'demo'.*'crash'"):
            await asyncio.wait_for(call(tools, "crash"), 10)
        assert await asyncio.wait_for(call(tools, "echo", text="back"), 20) == ToolOutcome(
            value="back"
        )
        log = (tmp_path / "demo.log").read_text()
        assert "crashing on purpose" in log
        assert log.count(f": starting {sys.executable}") == 2


@pytest.mark.timeout(40)
async def test_a_server_that_keeps_dying_is_not_started_again_past_the_bound(
    tmp_path: Path,
) -> None:
    config = {"mcpServers": {"demo": demo()}}
    async with await MCPTools.open(config, tmp_path, max_restarts=1) as tools:
        for _ in range(2):
            with pytest.raises(SourceGone):
                await asyncio.wait_for(call(tools, "crash"), 20)
        for _ in range(2):
            with pytest.raises(ToolFailure, match="keeps dying"):
                await asyncio.wait_for(call(tools, "echo", text="again"), 20)
        assert (tmp_path / "demo.log").read_text().count(f": starting {sys.executable}") == 2


@pytest.mark.timeout(40)
async def test_a_server_given_up_is_started_again_once_its_pause_has_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given up for good, a server down for a minute stayed lost for the runtime's whole life.
    from toolscript.tools.mcp import server as mcp_server

    monkeypatch.setattr(mcp_server, "RESTART_WINDOW", 5.0)
    config = {"mcpServers": {"demo": demo()}}
    async with await MCPTools.open(config, tmp_path, max_restarts=1) as tools:
        for _ in range(2):
            with pytest.raises(SourceGone):
                await asyncio.wait_for(call(tools, "crash"), 20)
        with pytest.raises(ToolFailure, match="keeps dying"):
            await asyncio.wait_for(call(tools, "echo", text="again"), 20)
        await asyncio.sleep(5.2)
        outcome = await asyncio.wait_for(call(tools, "echo", text="back"), 20)
        assert outcome == ToolOutcome(value="back")


# --- the tool list changes --------------------------------------------------------------------


@pytest.mark.timeout(20)
async def test_list_changed_updates_the_specs_and_calls_on_change(tmp_path: Path) -> None:
    changed: asyncio.Queue[str] = asyncio.Queue()
    async with await MCPTools.open(
        {"mcpServers": {"demo": demo()}}, tmp_path, on_change=changed.put_nowait
    ) as tools:
        assert "fresh" not in by_name(tools)
        assert await call(tools, "grow", name="fresh") == ToolOutcome(value="grown")
        assert await asyncio.wait_for(changed.get(), 10) == "demo"
        spec = by_name(tools)["fresh"]
        assert spec.description == "Added at run time."
        outcome = await spec.handler({})
        assert outcome.is_error is True


# --- closing ----------------------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_closing_a_server_that_ignores_stdin_closing_and_sigterm_is_bounded(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    config = {"mcpServers": {"stubborn": demo("--linger", "--pid-file", str(pid_file))}}
    tools = await MCPTools.open(config, tmp_path)
    assert tools.failures == {}
    pid = int(pid_file.read_text())
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(tools.aclose(), 20)
    assert loop.time() - started < 12
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# --- streamable HTTP --------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http_url() -> AsyncIterator[str]:
    async with http_demo() as url:
        yield url


@pytest.mark.timeout(30)
async def test_the_same_tools_work_over_streamable_http_with_the_configured_headers(
    http_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMO_TOKEN", "s3cret")
    config = {
        "mcpServers": {
            "web": {"type": "http", "url": http_url, "headers": {"X-Demo-Token": "${DEMO_TOKEN}"}}
        }
    }
    async with await MCPTools.open(config, tmp_path, startup_timeout=15) as tools:
        assert tools.failures == {}
        assert "odd_names" in by_name(tools, "web")
        assert await call(tools, "echo", "web", text="over http") == ToolOutcome(value="over http")
        assert await call(tools, "add", "web", a=1, b=2) == ToolOutcome(value={"sum": 3})
        assert await call(tools, "header", "web", name="x-demo-token") == ToolOutcome(
            value="s3cret"
        )
        assert (await call(tools, "fail", "web", message="no")).is_error is True
        [image] = from_wire((await call(tools, "image", "web")).value)
        assert isinstance(image, Image)
        arguments = {"file-path": "p", "class": "c", "kwargs": {}, "from": 1}
        assert await call(tools, "odd_names", "web", **arguments) == ToolOutcome(value=arguments)


@pytest.mark.timeout(30)
async def test_a_call_the_host_gives_up_on_over_http_reaches_the_server_as_a_cancellation(
    http_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "hang.cancelled"
    config = {"mcpServers": {"web": {"url": http_url}}}
    async with await MCPTools.open(config, tmp_path, startup_timeout=15) as tools:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(call(tools, "hang", "web", marker=str(marker)), 0.5)
        seen = await asyncio.wait_for(call(tools, "cancellations", "web", timeout=5), 10)
        assert seen == ToolOutcome(value={"markers": [str(marker)]})
        assert await call(tools, "echo", "web", text="after") == ToolOutcome(value="after")


@pytest.mark.timeout(30)
async def test_an_http_server_that_dies_mid_call_raises_source_gone_not_an_error_answer(
    tmp_path: Path,
) -> None:
    async with http_demo() as url:
        config = {"mcpServers": {"web": {"url": url}}}
        async with await MCPTools.open(config, tmp_path, startup_timeout=15) as tools:
            with pytest.raises(SourceGone, match="'web'"):
                await asyncio.wait_for(call(tools, "crash", "web"), 10)
            with pytest.raises(ToolFailure, match="'web' could not start: cannot connect"):
                await asyncio.wait_for(call(tools, "echo", "web", text="anyone?"), 10)


async def test_an_http_server_that_is_not_listening_is_reported_by_name(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = {"mcpServers": {"gone": {"url": f"http://127.0.0.1:{port}/mcp"}}}
    tools = await MCPTools.open(config, tmp_path, startup_timeout=10)
    await tools.aclose()
    assert "'gone'" in tools.failures["gone"]


@pytest.mark.timeout(30)
async def test_an_answer_over_a_mebibyte_comes_whole_over_http_as_over_stdio(
    http_url: str, tmp_path: Path
) -> None:
    text = "x" * (3 << 20)  # over the SDK's default bound of 1 MiB on one server-sent event
    config = {"mcpServers": {"web": {"url": http_url}}}
    async with await MCPTools.open(config, tmp_path, startup_timeout=15) as tools:
        assert await call(tools, "echo", "web", text=text) == ToolOutcome(value=text)
        assert await call(tools, "echo", "web", text="after") == ToolOutcome(value="after")


@pytest.mark.timeout(60)
async def test_an_http_server_that_restarted_between_calls_is_used_again_on_a_new_session(
    tmp_path: Path,
) -> None:
    # A forwarder on one port stands for the server's address; the process behind it is
    # replaced, as a restarted server is, and the new one knows none of the old sessions.
    backend: dict[str, int] = {}

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", backend["port"])

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(1 << 16):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    forwarder = await asyncio.start_server(forward, "127.0.0.1", 0)
    port = forwarder.sockets[0].getsockname()[1]
    config = {"mcpServers": {"web": {"url": f"http://127.0.0.1:{port}/mcp"}}}
    try:
        async with http_demo() as first:
            backend["port"] = int(first.rsplit(":", 1)[1].split("/")[0])
            tools = await MCPTools.open(config, tmp_path, startup_timeout=15)
            assert tools.failures == {}
            assert await call(tools, "echo", "web", text="before") == ToolOutcome(value="before")
        try:
            async with http_demo() as second:
                backend["port"] = int(second.rsplit(":", 1)[1].split("/")[0])
                for text in ("after", "again"):
                    outcome = await asyncio.wait_for(call(tools, "echo", "web", text=text), 20)
                    assert outcome == ToolOutcome(value=text)
        finally:
            await asyncio.wait_for(tools.aclose(), 15)
    finally:
        forwarder.close()


@pytest.mark.timeout(30)
async def test_an_http_error_with_no_answer_leaves_the_calls_effect_unknown(
    tmp_path: Path,
) -> None:
    # A proxy's 504 while the tool runs on upstream is no answer: the call may have taken
    # effect, so it is `SourceGone` (pending), never the tool's error answer. A JSON-RPC error
    # in the body of an HTTP error is the server's own answer, and stays one.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVERS / "http_errors.py"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        kind, port = (await asyncio.wait_for(process.stdout.readline(), 20)).decode().split()
        assert kind == "PORT"
        config = {"mcpServers": {"web": {"url": f"http://127.0.0.1:{port}/mcp"}}}
        async with await MCPTools.open(config, tmp_path, startup_timeout=15) as tools:
            with pytest.raises(SourceGone, match="HTTP error and no answer"):
                await asyncio.wait_for(call(tools, "gateway_timeout", "web"), 10)
            refused = await asyncio.wait_for(call(tools, "bad_params", "web"), 10)
            assert refused == ToolOutcome(value="MCP error -32602: bad params", is_error=True)
            assert await call(tools, "ok", "web") == ToolOutcome(value="ok")
    finally:
        process.kill()
        await asyncio.wait_for(process.wait(), 10)


async def test_a_start_cancelled_while_one_server_hangs_in_its_handshake_ends_that_server(
    tmp_path: Path,
) -> None:
    # `gather` gives up at the first start that is cancelled: the open must still wait for
    # the server that hangs to be stopped, or it is left running.
    marker = tmp_path / "hangs.pid"
    hangs = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(1000)"
    config = {
        "mcpServers": {"demo": demo(), "hangs": {"command": sys.executable, "args": ["-c", hangs]}}
    }
    opening = asyncio.ensure_future(MCPTools.open(config, tmp_path, startup_timeout=20))
    async with asyncio.timeout(20):
        while not marker.exists() or not marker.read_text():
            await asyncio.sleep(0.05)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    pid = int(marker.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
