"""`toolscript serve --http` killed and started again on the same state directory: the
official client goes on with its session, resumes its streams, and reads its scripts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ClientMessageMetadata

from tests.conftest import eventually, processes_with, wait_for_file
from toolscript.actions import CANCEL_REASON
from toolscript.serve.session import KEPT_NOTE, RESTARTED_NOTE

from .conftest import (
    HANDSHAKE,
    HTTPServer,
    Notes,
    http_server,
    mcp_headers,
    notes,
    structured,
    text,
)

pytestmark = pytest.mark.timeout(240)


@contextlib.asynccontextmanager
async def session_on(
    server: HTTPServer, heard: Notes | None = None, *, session_id: str | None = None
) -> AsyncIterator[tuple[ClientSession, list[str]]]:
    """The official client session on `server`: a new one (the handshake), or, given
    `session_id`, the session of that id without a new handshake, as a client goes on after
    its server restarted. Yields it and the session ids the server's responses named."""
    heard = heard or notes()
    headers = {"Authorization": f"Bearer {server.token}"}
    if session_id is not None:
        headers.update({"Mcp-Session-Id": session_id, "MCP-Protocol-Version": HANDSHAKE})
    named: list[str] = []

    async def note_session(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            named.append(response.headers["mcp-session-id"])

    http = httpx2.AsyncClient(headers=headers, event_hooks={"response": [note_session]})
    async with (
        http,
        streamable_http_client(server.url, http_client=http, terminate_on_close=False) as (
            read,
            write,
        ),
        ClientSession(
            read, write, logging_callback=heard.hear_log, read_timeout_seconds=60
        ) as client,
    ):
        if session_id is None:
            await client.initialize()
        yield client, named


def kept_sessions(folder: Path) -> list[str]:
    """The session ids the journal of the servers in `folder` keeps."""
    with contextlib.closing(sqlite3.connect(folder / "journal.sqlite3")) as journal:
        return [row[0] for row in journal.execute("SELECT session_id FROM serve_sessions")]


def run_python(code: str, **arguments: Any) -> types.CallToolRequest:
    return types.CallToolRequest(
        params=types.CallToolRequestParams(name="run_python", arguments={"code": code, **arguments})
    )


def collector() -> tuple[list[str], Any]:
    """A list of the event ids a stream gave, and the callback that fills it."""
    ids: list[str] = []

    async def note(event_id: str) -> None:
        ids.append(event_id)

    return ids, note


def gated(gate: Path, mark: Path | None = None) -> str:
    """Code that waits until `gate` exists (after making `mark`, if given)."""
    made = f"open({str(mark)!r}, 'w').close()\n" if mark else ""
    return (
        f"{made}import os, asyncio\n"
        f"while not os.path.exists({str(gate)!r}):\n"
        "    await asyncio.sleep(0.05)\n"
    )


async def test_a_killed_server_restarted_on_its_state_gives_the_client_back_its_session(
    tmp_path: Path,
) -> None:
    gate, running_mark = tmp_path / "gate", tmp_path / "running"
    heard = notes()
    async with http_server(tmp_path) as first, session_on(first, heard) as (client, named):
        session_id = named[-1]
        start_events, note_start = collector()
        started = await client.send_request(
            run_python("print('from the background')\n6 * 7", background=True),
            types.CallToolResult,
            metadata=ClientMessageMetadata(on_resumption_token_update=note_start),
        )
        finished_id = structured(started)["script_id"]
        await eventually(
            lambda: any(log.get("script_id") == finished_id for log in heard.logs),
            60,
            "the background script's end was not announced",
        )
        unfinished = await client.call_tool("run_python", {"code": gated(gate), "background": True})
        unfinished_id = structured(unfinished)["script_id"]

        # A foreground run in flight when the server is killed: the client has its stream's
        # first event and the progress after it.
        run_events, note_run = collector()
        progressed = asyncio.Event()

        async def progress(*_: Any) -> None:
            progressed.set()

        in_flight = asyncio.ensure_future(
            client.send_request(
                run_python(gated(gate, running_mark), time_limit_s=120),
                types.CallToolResult,
                metadata=ClientMessageMetadata(on_resumption_token_update=note_run),
                progress_callback=progress,
            )
        )
        await wait_for_file(running_mark, 60)
        await asyncio.wait_for(progressed.wait(), 60)
        await eventually(lambda: len(run_events) >= 2, 10, "the progress event had no id")
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()
        in_flight.cancel()
        with contextlib.suppress(BaseException):
            await in_flight

    async with http_server(tmp_path) as second:
        async with session_on(second, session_id=session_id) as (client, _):
            # The run's stream, resumed after its first event: the progress the server
            # stored, then the answer that no server will give, as an error.
            resumed, note_resumed = collector()
            with pytest.raises(MCPError) as ended:
                await client.send_request(
                    run_python(""),
                    types.CallToolResult,
                    metadata=ClientMessageMetadata(
                        resumption_token=run_events[0], on_resumption_token_update=note_resumed
                    ),
                )
            assert "restarted while this request ran" in str(ended.value)
            assert run_events[1] in resumed

            # The background start's stream, resumed: its answer outlived the server.
            replayed = await client.send_request(
                run_python(""),
                types.CallToolResult,
                metadata=ClientMessageMetadata(resumption_token=start_events[0]),
            )
            assert structured(replayed)["script_id"] == finished_id

            status = await client.call_tool("script_status", {"script_id": finished_id})
            assert not status.is_error
            assert structured(status)["status"] == "ok"
            assert structured(status)["value"] == "42"
            assert "from the background" in text(status)
            cancelled = await client.call_tool("cancel_script", {"script_id": finished_id})
            assert structured(cancelled)["value"] == "42"

            lost = await client.call_tool("script_status", {"script_id": unfinished_id})
            assert lost.is_error
            assert structured(lost)["status"] == "host_restarted"
            assert "was running when toolscript serve stopped" in text(lost)

            # The session keeps its shell (a new interpreter: the old one died).
            ran = await client.call_tool("run_python", {"code": "x = 1\nx + 1"})
            assert structured(ran)["shell"] == finished_id.split(":")[0]
            assert text(ran).startswith(RESTARTED_NOTE)
            assert structured(ran)["server_restarted"] is True
            assert structured(ran)["variables_kept"] is False
            again = await client.call_tool("run_python", {"code": "x + 1"})
            assert structured(again)["value"] == "2"
            assert RESTARTED_NOTE not in text(again)

        async with httpx2.AsyncClient() as http:
            unknown = await http.post(
                second.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={**mcp_headers("0" * 32), "Authorization": f"Bearer {second.token}"},
            )
            assert unknown.status_code == 404

    gate.touch()
    await eventually(
        lambda: not processes_with(str(tmp_path)), 30, "processes of the servers were left"
    )


async def test_a_session_that_never_called_a_tool_is_taken_back_after_a_kill(
    tmp_path: Path,
) -> None:
    async with http_server(tmp_path) as first, session_on(first) as (client, named):
        session_id = named[-1]
        await client.list_tools()
        await eventually(
            lambda: session_id in kept_sessions(tmp_path), 30, "the session was not kept"
        )
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()

    async with (
        http_server(tmp_path) as second,
        session_on(second, session_id=session_id) as (
            client,
            _,
        ),
    ):
        ran = await client.call_tool("run_python", {"code": "x = 20\nx + 1"})
        assert not ran.is_error, text(ran)
        assert structured(ran)["value"] == "21"
        assert structured(ran)["shell"] == f"mcp-{session_id[:12]}"


async def test_a_server_stopped_cleanly_and_started_again_reports_the_scripts_it_stopped(
    tmp_path: Path,
) -> None:
    gate, running_mark = tmp_path / "gate", tmp_path / "running"
    async with http_server(tmp_path) as first, session_on(first) as (client, named):
        session_id = named[-1]
        started = await client.call_tool(
            "run_python", {"code": gated(gate, running_mark), "background": True}
        )
        script_id = structured(started)["script_id"]
        await wait_for_file(running_mark, 60)
        first.process.terminate()
        assert await first.process.wait() == 0

    async with (
        http_server(tmp_path) as second,
        session_on(second, session_id=session_id) as (client, _),
    ):
        status = await client.call_tool("script_status", {"script_id": script_id})
        assert structured(status)["status"] == "cancelled"
        assert "toolscript serve stopped" in text(status)
        # Nobody cancelled it: the server stopped, and the note says so.
        assert "Stopped: the shell was closed because toolscript serve stopped." in text(status)
        assert "Cancelled by the caller" not in text(status)

        # A session its client ends is forgotten: no later server takes it back.
        assert kept_sessions(tmp_path) == [session_id]
        async with httpx2.AsyncClient() as http:
            ended = await http.delete(
                second.url,
                headers={**mcp_headers(session_id), "Authorization": f"Bearer {second.token}"},
            )
            assert ended.status_code == 200
        await eventually(lambda: not kept_sessions(tmp_path), 10, "the session was kept")

    await eventually(
        lambda: not processes_with(str(tmp_path)), 30, "processes of the servers were left"
    )


async def test_a_killed_server_that_keeps_its_interpreters_gives_back_scripts_and_variables(
    tmp_path: Path,
) -> None:
    marks = {name: tmp_path / name for name in ("ended", "began", "running", "go", "never")}
    ends = f"print('ended while no server ran')\nopen({str(marks['ended'])!r}, 'w').close()\n6 * 7"
    async with (
        http_server(tmp_path, "--keep-interpreters") as first,
        session_on(first) as (client, named),
    ):
        session_id = named[-1]
        assert not (await client.call_tool("run_python", {"code": "x = 41"})).is_error
        start_events, note_start = collector()
        started = await client.send_request(
            run_python(gated(marks["go"], marks["began"]) + ends, background=True),
            types.CallToolResult,
            metadata=ClientMessageMetadata(on_resumption_token_update=note_start),
        )
        finished_id = structured(started)["script_id"]
        running = await client.call_tool(
            "run_python", {"code": gated(marks["never"], marks["running"]), "background": True}
        )
        running_id = structured(running)["script_id"]
        await wait_for_file(marks["began"], 60)
        await wait_for_file(marks["running"], 60)
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()

    # No server runs: the keeper keeps both scripts, and one of them ends.
    marks["go"].touch()
    await wait_for_file(marks["ended"], 60)

    async with (
        http_server(tmp_path, "--keep-interpreters") as second,
        session_on(second, session_id=session_id) as (client, _),
    ):
        replayed = await client.send_request(
            run_python(""),
            types.CallToolResult,
            metadata=ClientMessageMetadata(resumption_token=start_events[0]),
        )
        assert structured(replayed)["script_id"] == finished_id

        status = await client.call_tool("script_status", {"script_id": finished_id})
        assert not status.is_error, text(status)
        assert (structured(status)["status"], structured(status)["value"]) == ("ok", "42")
        assert "ended while no server ran" in text(status)

        still = await client.call_tool("script_status", {"script_id": running_id})
        assert structured(still)["status"] == "running", text(still)
        cancelled = await client.call_tool("cancel_script", {"script_id": running_id})
        assert structured(cancelled)["status"] in ("cancelled", "stopped"), text(cancelled)
        assert CANCEL_REASON in text(cancelled)
        # The session is told of the end of a script it took back: on its standalone
        # stream, stored for a client that (re)opens it.
        await eventually(
            lambda: announced(tmp_path, session_id) == [running_id],
            30,
            "the end of the script taken back was not announced",
        )

        # The shell's interpreter was kept: its variables are there, and the note says so.
        ran = await client.call_tool("run_python", {"code": "x + 1"})
        assert structured(ran)["value"] == "42", text(ran)
        assert text(ran).startswith(KEPT_NOTE)
        assert structured(ran)["variables_kept"] is True
        again = await client.call_tool("run_python", {"code": "x + 2"})
        assert KEPT_NOTE not in text(again)

    assert kept_results(tmp_path) == {
        finished_id: "ok",
        running_id: structured(cancelled)["status"],
    }
    await eventually(
        lambda: not processes_with(str(tmp_path)), 30, "processes of the servers were left"
    )


async def test_a_foreground_run_a_kept_interpreter_went_on_with_answers_its_resumed_stream(
    tmp_path: Path,
) -> None:
    # The server is killed while a foreground run_python runs; its interpreter is kept, and
    # the script goes on. The client resumes the run's stream from the next server: the
    # answer is the script's own result, not a word that it was stopped.
    gate, running_mark = tmp_path / "gate", tmp_path / "running"
    async with (
        http_server(tmp_path, "--keep-interpreters") as first,
        session_on(first) as (client, named),
    ):
        session_id = named[-1]
        run_events, note_run = collector()
        in_flight = asyncio.ensure_future(
            client.send_request(
                run_python(gated(gate, running_mark) + "'went on'", time_limit_s=120),
                types.CallToolResult,
                metadata=ClientMessageMetadata(on_resumption_token_update=note_run),
            )
        )
        await wait_for_file(running_mark, 60)
        await eventually(lambda: len(run_events) >= 1, 30, "the run's stream had no event id")
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()
        in_flight.cancel()
        with contextlib.suppress(BaseException):
            await in_flight

    gate.touch()  # the script goes on while no server runs
    async with (
        http_server(tmp_path, "--keep-interpreters") as second,
        session_on(second, session_id=session_id) as (client, _),
    ):
        resumed = await client.send_request(
            run_python(""),
            types.CallToolResult,
            metadata=ClientMessageMetadata(resumption_token=run_events[0]),
        )
        assert not resumed.is_error, text(resumed)
        assert structured(resumed)["value"] == "'went on'", text(resumed)
        assert "restarted while this request ran" not in text(resumed)


def kept_results(folder: Path) -> dict[str, str]:
    """The background results the journal of the servers in `folder` keeps, by script id."""
    with contextlib.closing(sqlite3.connect(folder / "journal.sqlite3")) as journal:
        return dict(journal.execute("SELECT script_id, status FROM script_results"))


def announced(folder: Path, session_id: str) -> list[str]:
    """The script ids whose end a session's standalone stream announced, as stored."""
    with contextlib.closing(sqlite3.connect(folder / "journal.sqlite3")) as journal:
        rows = journal.execute(
            "SELECT message FROM stream_events WHERE session = ? AND stream = '_GET_stream'",
            (session_id,),
        )
        found = [json.loads(row[0]).get("params", {}).get("data", {}) for row in rows if row[0]]
    return [data["script_id"] for data in found if data.get("event") == "background_script_ended"]
