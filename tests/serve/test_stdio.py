"""`toolscript serve` over stdio, driven by the official MCP client.

The client spawns `python -m toolscript.cli serve --mcp-config ...` wrapping the demo MCP
server, so every call goes client → toolscript → kernel → toolscript → upstream and back.
"""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import mcp.types as types
import pytest

from tests.conftest import eventually, processes_with, wait_for_file

from .conftest import client, notes, run, stdio_server, structured, text

DEMO_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
"""The PNG the demo server's `image` tool answers with."""


@pytest.mark.timeout(45)
async def test_a_run_answers_with_its_text_and_structured_result_and_state_persists(
    tmp_path: Path,
) -> None:
    async with client(stdio_server(tmp_path)) as session:
        first = await run(session, "x = 20\nprint('hello')\nx + 1")
        data = structured(first)
        assert (data["status"], data["exit_code"], data["value"]) == ("ok", 0, "21")
        assert data["stdout"] == "hello\n"
        assert text(first).startswith("exit 0 · ok")
        assert "text" not in data  # the text content carries it, not a field beside it
        assert not first.is_error
        second = await run(session, "x * 2")
        assert structured(second)["value"] == "40"
        assert structured(second)["shell"] == data["shell"]


@pytest.mark.timeout(45)
async def test_a_script_calls_an_upstream_tool_through_toolscript(tmp_path: Path) -> None:
    async with client(stdio_server(tmp_path)) as session:
        tools = await session.list_tools()
        run_python = next(tool for tool in tools.tools if tool.name == "run_python")
        assert "async def add(*, a: int, b: int" in (run_python.description or "")
        result = await run(session, "r = await demo.add(a=2, b=3)\nr['sum']")
        data = structured(result)
        assert (data["status"], data["value"]) == ("ok", "5")
        [record] = data["calls"]["records"]
        assert record["tool"].endswith("add") and record["fate"] == "seen"


@pytest.mark.timeout(45)
async def test_a_time_limit_stops_the_script_and_says_so(tmp_path: Path) -> None:
    async with client(stdio_server(tmp_path)) as session:
        result = await run(session, "import time\ntime.sleep(60)", time_limit_s=1)
        data = structured(result)
        assert data["status"] == "time_limit"
        assert data["time_limit"] == 1
        assert "time limit of 1 s" in text(result)
        assert structured(await run(session, "'still here'"))["value"] == "'still here'"


@pytest.mark.timeout(45)
async def test_a_background_script_can_be_watched_and_cancelled(tmp_path: Path) -> None:
    async with client(stdio_server(tmp_path)) as session:
        started = await run(session, "import time\ntime.sleep(60)", background=True)
        script_id = structured(started)["script_id"]
        assert structured(started)["status"] == "running"
        status = await session.call_tool("script_status", {"script_id": script_id})
        assert structured(status)["status"] == "running"
        beside = await run(session, "1 + 1")  # the session's shell is not held by it
        assert structured(beside)["value"] == "2"
        cancelled = await session.call_tool("cancel_script", {"script_id": script_id})
        assert structured(cancelled)["status"] == "cancelled"
        assert structured(cancelled)["script_id"] == script_id
        again = await session.call_tool("script_status", {"script_id": script_id})
        assert structured(again)["status"] == "cancelled"
        unknown = await session.call_tool("script_status", {"script_id": "mcp-9:bg-nope"})
        assert unknown.is_error and "no background script" in text(unknown)


@pytest.mark.timeout(45)
async def test_a_background_script_that_ends_notifies_the_client_and_keeps_its_result(
    tmp_path: Path,
) -> None:
    heard = notes()
    async with client(stdio_server(tmp_path), heard) as session:
        started = await run(session, "print('done')\n6 * 7", background=True)
        script_id = structured(started)["script_id"]
        with anyio.fail_after(20):
            await heard.logged.wait()
        [event] = heard.logs
        assert event["event"] == "background_script_ended"
        assert (event["script_id"], event["status"]) == (script_id, "ok")
        result = await session.call_tool("script_status", {"script_id": script_id})
        assert (structured(result)["value"], structured(result)["stdout"]) == ("42", "done\n")


@pytest.mark.timeout(45)
async def test_an_upstream_server_that_dies_mid_call_leaves_the_call_pending_source_gone(
    tmp_path: Path,
) -> None:
    async with client(stdio_server(tmp_path)) as session:
        code = "try:\n    await demo.crash()\nexcept ToolError as error:\n    print('raised')\n"
        result = await run(session, code)
        data = structured(result)
        assert data["stdout"] == "raised\n"
        [record] = data["calls"]["records"]
        assert (record["fate"], record["cause"]) == ("pending", "source_gone")
        assert "crash" in text(result)
        after = await run(session, "await demo.echo(text='back')")
        assert structured(after)["value"] == "'back'"


@pytest.mark.timeout(45)
async def test_a_long_run_reports_progress_when_the_client_asks(tmp_path: Path) -> None:
    heard: list[tuple[float, float | None, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async with client(stdio_server(tmp_path)) as session:
        result = await session.call_tool(
            "run_python",
            {"code": "import time\ntime.sleep(2.6)\n'slow'", "time_limit_s": 20},
            progress_callback=progress,
        )
        assert structured(result)["value"] == "'slow'"
    assert heard, "no progress notification during a 2.6 s run"
    value, total, message = heard[0]
    assert total == 20 and 1.9 <= value < 20
    assert message is not None and "time limit 20 s" in message


@pytest.mark.timeout(60)
async def test_progress_notifications_carry_the_last_lines_of_the_output_so_far(
    tmp_path: Path,
) -> None:
    # The script waits until a progress message has shown its output; then it may end.
    go = tmp_path / "go"
    heard: list[str] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(message or "")
        if "stdout:\nstep one done" in (message or ""):
            go.write_text("go")

    code = (
        "import os, time\n"
        "print('step one done', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "'ended'"
    )
    async with client(stdio_server(tmp_path)) as session:
        result = await session.call_tool(
            "run_python", {"code": code, "time_limit_s": 40}, progress_callback=progress
        )
    assert structured(result)["value"] == "'ended'", text(result)
    shown = [message for message in heard if "step one done" in message]
    assert shown and shown[0].endswith("its output so far:\n\nstdout:\nstep one done")


@pytest.mark.timeout(45)
async def test_an_upstream_tool_list_change_is_bound_for_the_next_run_and_announced(
    tmp_path: Path,
) -> None:
    heard = notes()
    async with client(stdio_server(tmp_path), heard, mode="legacy") as session:
        assert structured(await run(session, "hasattr(demo, 'fresh')"))["value"] == "False"
        await run(session, "await demo.grow(name='fresh')")
        with anyio.fail_after(20):
            await heard.tools_changed.wait()
        after = await run(session, "hasattr(demo, 'fresh')")
        assert structured(after)["value"] == "True", text(after)
        tools = await session.list_tools()
        run_python = next(tool for tool in tools.tools if tool.name == "run_python")
        assert "async def fresh(" in (run_python.description or "")


@pytest.mark.timeout(45)
async def test_a_client_that_abandons_a_run_stops_its_script(tmp_path: Path) -> None:
    # The client gives up on run_python (the SDK sends notifications/cancelled): the script
    # is stopped, so the session's shell is free at once, not after the script's 60 s.
    started = tmp_path / "started"
    code = f"import pathlib, time\npathlib.Path({str(started)!r}).write_text('yes')\ntime.sleep(60)"
    async with client(stdio_server(tmp_path)) as session:
        async with anyio.create_task_group() as group:

            async def abandoned() -> None:
                await run(session, code, time_limit_s=120)

            group.start_soon(abandoned)
            await wait_for_file(started, 30)
            group.cancel_scope.cancel()
        with anyio.fail_after(20):
            after = await run(session, "x = 'free'\nx")
        data = structured(after)
        # Had the script not been stopped, this run would have been refused: the shell busy.
        assert (data["status"], data["value"]) == ("ok", "'free'"), text(after)


@pytest.mark.timeout(60)
async def test_images_a_script_shows_reach_the_client_as_image_content(tmp_path: Path) -> None:
    # One image a tool of the upstream server returned, one matplotlib figure drawn in the
    # sandboxed interpreter: both come back beside the text, as the client's image blocks.
    code = (
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "show(await demo.image())\n"
        "figure, axes = plt.subplots(figsize=(2, 2), dpi=50)\n"
        "axes.plot([1, 3, 2])\n"
        "show(figure)\n"
        "'drawn'"
    )
    async with client(stdio_server(tmp_path)) as session:
        result = await run(session, code)
    assert structured(result)["value"] == "'drawn'", text(result)
    first, *images = result.content
    assert isinstance(first, types.TextContent) and "images: 2 shown" in first.text
    blocks = [image for image in images if isinstance(image, types.ImageContent)]
    assert len(blocks) == len(images) == 2
    assert [block.mime_type for block in blocks] == ["image/png", "image/png"]
    tool_image, figure = (base64.b64decode(block.data) for block in blocks)
    assert tool_image == DEMO_PNG
    assert figure.startswith(b"\x89PNG\r\n\x1a\n") and len(figure) > 1_000
    assert [image["mime_type"] for image in structured(result)["images"]] == [
        "image/png",
        "image/png",
    ]


async def test_keep_interpreters_gives_the_shells_to_a_keeper_of_the_state_folder(
    tmp_path: Path,
) -> None:
    server = stdio_server(tmp_path)
    server.args.append("--keep-interpreters")
    keeper_socket = tmp_path / "state" / "keeper.sock"
    async with client(server) as session:
        first = await run(session, "x = 20\nx + 1")
        assert structured(first)["value"] == "21"
        assert keeper_socket.is_socket()
        assert [p.pid for p in processes_with(str(keeper_socket))]
        assert structured(await run(session, "x * 2"))["value"] == "40"
    await eventually(
        lambda: not processes_with(str(keeper_socket)), 10, "the keeper outlived its server"
    )


@pytest.mark.timeout(60)
async def test_the_next_stdio_process_is_a_new_session_told_nothing_of_the_last(
    tmp_path: Path,
) -> None:
    # Two chats of one MCP client in turn: two processes on one journal and state folder.
    async with client(stdio_server(tmp_path)) as first:
        stopped = await run(first, "await demo.slow(seconds=30)", time_limit_s=1)
        assert structured(stopped)["calls"]["by_fate"] == {"pending": 1}
    async with client(stdio_server(tmp_path)) as second:
        fresh = await run(second, "1 + 1")
        assert structured(fresh)["note"] == ""
        assert structured(fresh)["shell"] != structured(stopped)["shell"]
