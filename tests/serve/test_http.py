"""`toolscript serve --http` on 127.0.0.1, driven by the official MCP client and by raw HTTP."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.conftest import eventually, processes_with

from .conftest import client, handshake, http_server, mcp_headers, notes, run, structured


@pytest.mark.timeout(45)
async def test_over_http_scripts_call_upstream_tools_background_ends_are_told_and_the_token_file_is_private(
    tmp_path: Path,
) -> None:
    async with http_server(tmp_path) as server:
        assert stat.S_IMODE(os.stat(server.token_file).st_mode) == 0o600
        assert sum("wrote a new bearer token" in line for line in server.said) == 1
        assert not any(server.token in line for line in server.said)
        heard = notes()
        async with client(server.transport(), heard) as session:
            result = await run(session, "await demo.echo(text='through')")
            assert structured(result)["value"] == "'through'"
            assert structured(result)["calls"]["records"][0]["fate"] == "seen"
            started = await run(session, "await demo.add(a=40, b=2)", background=True)
            with anyio.fail_after(20):
                await heard.logged.wait()  # on the session's own stream
            [event] = heard.logs
            assert event["script_id"] == structured(started)["script_id"]
            status = await session.call_tool("script_status", {"script_id": event["script_id"]})
            assert structured(status)["value"] == "{'sum': 42}"


@pytest.mark.timeout(45)
async def test_two_client_sessions_at_once_have_separate_shells_and_state(
    tmp_path: Path,
) -> None:
    async with (
        http_server(tmp_path) as server,
        client(server.transport()) as first,
        client(server.transport()) as second,
    ):
        await run(first, "x = 'first'")
        await run(second, "x = 'second'")
        answers: dict[str, dict[str, Any]] = {}

        async def read(name: str, session: Any) -> None:
            # Both at once: neither shell is busy with the other's script.
            answers[name] = structured(await run(session, "import time\ntime.sleep(0.3)\nx"))

        async with anyio.create_task_group() as group:
            group.start_soon(read, "first", first)
            group.start_soon(read, "second", second)
        assert answers["first"]["value"] == "'first'"
        assert answers["second"]["value"] == "'second'"
        assert answers["first"]["shell"] != answers["second"]["shell"]


@pytest.mark.timeout(45)
async def test_a_request_without_the_right_token_gets_401_and_runs_nothing(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "run_python",
            "arguments": {"code": f"open({str(marker)!r}, 'w').write('ran')"},
        },
    }
    async with http_server(tmp_path) as server, httpx2.AsyncClient(timeout=30) as http:
        session_id = await handshake(http, server)
        bad_headers: list[dict[str, str]] = [
            {},
            {"Authorization": "Bearer not-the-token"},
            {"Authorization": f"Basic {server.token}"},
            {"Authorization": f"Bearer {server.token}x"},
        ]
        for bad in bad_headers:
            refused = await http.post(
                server.url, json=call, headers={**mcp_headers(session_id), **bad}
            )
            assert refused.status_code == 401, bad
            assert refused.headers["www-authenticate"].startswith("Bearer")
        assert not marker.exists()
        allowed = await http.post(
            server.url,
            json=call,
            headers={**mcp_headers(session_id), "Authorization": f"Bearer {server.token}"},
        )
        assert allowed.status_code == 200
        assert marker.read_text() == "ran"  # the same request with the token does run


@pytest.mark.timeout(45)
async def test_closing_a_client_session_reclaims_its_interpreter(tmp_path: Path) -> None:
    # The interpreter starts a process with a token in its command line, which the test can
    # find from outside the sandbox; the interpreter's end takes it along.
    token = f"tok-{secrets.token_hex(6)}"
    async with http_server(tmp_path) as server:
        async with client(server.transport()) as session:
            result = await run(
                session,
                "import subprocess, sys\n"
                f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)  # {token}'])",
            )
            assert structured(result)["status"] == "ok", result
            assert processes_with(token)
        await eventually(
            lambda: not processes_with(token), 20, "a process of the closed session lived on"
        )
