"""`toolscript serve --http` answers only to its own names, and stops cleanly on a signal.

The servers here bind 127.0.0.1 only; what a server bound elsewhere answers to is checked on
`HostCheck` itself, which is what the server asks for every request.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp.types as types
import pytest

from toolscript.serve.hosts import HostCheck

from .conftest import (
    client,
    environment,
    handshake,
    http_server,
    initialize_request,
    mcp_headers,
    run,
    serve_args,
    structured,
)

# -- which Host and Origin a server answers ----------------------------------------------------


def test_a_server_bound_to_another_address_answers_only_to_that_address_and_port() -> None:
    check = HostCheck.for_bind("192.0.2.10", 8765)
    assert check.refusal("192.0.2.10:8765", None) is None
    assert check.refusal("192.0.2.10:8765", None, arrived_at="192.0.2.10") is None
    for forged in [
        "evil.example:8765",
        "evil.example",
        "192.0.2.10:8766",
        "192.0.2.10",  # port 80, not the server's
        "localhost:8765",  # not bound to loopback
        "127.0.0.1:8765",
        "192.0.2.10:8765@evil.example",
        "",
        None,
    ]:
        refusal = check.refusal(forged, None, arrived_at="192.0.2.10")
        assert refusal is not None and refusal.status == 421, forged
        assert "--allow-host" in refusal.message


def test_a_server_bound_by_name_answers_to_that_name_and_its_address() -> None:
    check = HostCheck.for_bind("Tools.Example.Lan", 8765)
    assert check.refusal("tools.example.lan:8765", None) is None
    assert check.refusal("TOOLS.example.lan:8765", None) is None
    assert check.refusal("192.0.2.10:8765", None, arrived_at="192.0.2.10") is None
    assert check.refusal("192.0.2.11:8765", None, arrived_at="192.0.2.10") is not None
    assert check.refusal("evil.example:8765", None, arrived_at="192.0.2.10") is not None


def test_a_server_bound_to_every_address_answers_to_the_address_a_connection_arrived_at() -> None:
    for wildcard in ["0.0.0.0", "::"]:
        check = HostCheck.for_bind(wildcard, 8765)
        assert check.refusal("192.0.2.10:8765", None, arrived_at="192.0.2.10") is None
        assert check.refusal("[2001:db8::1]:8765", None, arrived_at="2001:db8::1") is None
        assert check.refusal("localhost:8765", None, arrived_at="127.0.0.1") is None
        for forged in ["192.0.2.11:8765", "localhost:8765", "0.0.0.0:8765", "evil.example:8765"]:
            refusal = check.refusal(forged, None, arrived_at="192.0.2.10")
            assert refusal is not None and refusal.status == 421, (wildcard, forged)


def test_a_loopback_server_answers_to_the_loopback_names_on_its_own_port_only() -> None:
    check = HostCheck.for_bind("127.0.0.1", 8765)
    for name in ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LocalHost:8765"]:
        assert check.refusal(name, None) is None, name
    for forged in ["evil.example:8765", "localhost:3000", "127.0.0.1:8766", "[::1]", "::1"]:
        refusal = check.refusal(forged, None)
        assert refusal is not None and refusal.status == 421, forged


@pytest.mark.parametrize("bound", ["192.0.2.10", "127.0.0.1", "0.0.0.0"])
def test_a_foreign_origin_is_refused_with_403_whatever_the_bind(bound: str) -> None:
    check = HostCheck.for_bind(bound, 8765)
    host = "192.0.2.10:8765" if bound != "127.0.0.1" else "127.0.0.1:8765"
    arrived = host.rpartition(":")[0]
    assert check.refusal(host, f"http://{host}", arrived_at=arrived) is None  # its own
    for foreign in [
        "http://evil.example",
        "https://evil.example:8765",
        f"http://{arrived}:3000",  # another server on the same machine
        "http://localhost:3000",
        "null",
        "file://",
        "evil.example",
    ]:
        refusal = check.refusal(host, foreign, arrived_at=arrived)
        assert refusal is not None and refusal.status == 403, (bound, foreign)
        assert "--allow-origin" in refusal.message


def test_allowed_hosts_and_origins_are_answered_besides_the_bound_address() -> None:
    check = HostCheck.for_bind(
        "192.0.2.10",
        8765,
        allow_hosts=["proxy.example", "other.example:9000", "[2001:db8::2]:443"],
        allow_origins=["https://App.Example/", "http://localhost:6274"],
    )
    for allowed in [
        "proxy.example",
        "proxy.example:443",
        "other.example:9000",
        "[2001:db8::2]:443",
    ]:
        assert check.refusal(allowed, None) is None, allowed
    for forged in ["other.example:9001", "other.example", "evil.example", "[2001:db8::2]:80"]:
        refusal = check.refusal(forged, None)
        assert refusal is not None and refusal.status == 421, forged
    for origin in ["https://app.example", "http://localhost:6274", "https://proxy.example"]:
        assert check.refusal("proxy.example", origin) is None, origin
    for origin in ["https://evil.example", "http://localhost:6275", "https://app.example:8443"]:
        refusal = check.refusal("proxy.example", origin)
        assert refusal is not None and refusal.status == 403, origin


def test_a_malformed_allowed_host_or_origin_is_an_error() -> None:
    for hosts, origins in [
        (["evil.example:port"], []),
        (["a/b"], []),
        ([""], []),
        ([], ["app.example"]),
        ([], ["ftp://app.example"]),
        ([], ["https://app.example/path"]),
    ]:
        with pytest.raises(ValueError):
            HostCheck.for_bind("127.0.0.1", 8765, allow_hosts=hosts, allow_origins=origins)


# -- the same, end to end on 127.0.0.1 ---------------------------------------------------------


def _marker_call(marker: Path) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "run_python",
            "arguments": {"code": f"open({str(marker)!r}, 'a').write('ran\\n')"},
        },
    }


@pytest.mark.timeout(45)
async def test_over_http_a_forged_host_or_a_foreign_origin_is_refused_and_runs_nothing(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    call = _marker_call(marker)
    async with http_server(tmp_path) as server, httpx2.AsyncClient(timeout=30) as http:
        session_id = await handshake(http, server)
        port = urlsplit(server.url).port
        assert port is not None
        other = port + 1 if port < 65535 else port - 1
        token = {"Authorization": f"Bearer {server.token}"}
        refused_with: list[tuple[dict[str, str], int]] = [
            ({"Host": f"evil.example:{port}"}, 421),
            ({"Host": "evil.example"}, 421),
            ({"Host": f"127.0.0.1:{other}"}, 421),
            ({"Host": f"localhost:{other}"}, 421),
            ({"Origin": "http://evil.example"}, 403),
            ({"Origin": f"http://localhost:{other}"}, 403),  # a page of another local server
            ({"Origin": "null"}, 403),
        ]
        answers: list[tuple[dict[str, str], int, httpx2.Response]] = []
        for forged, status in refused_with:
            for authorization in [token, {}]:  # refused before the token is looked at
                headers = {**mcp_headers(session_id), **authorization, **forged}
                answers.append(
                    (forged, status, await http.post(server.url, json=call, headers=headers))
                )
        assert not marker.exists()
        for forged, status, refused in answers:
            assert refused.status_code == status, forged
            assert refused.headers.get("content-type", "").startswith("text/plain"), forged
            assert "toolscript serve does not answer" in refused.text
        own = {"Host": f"localhost:{port}", "Origin": f"http://127.0.0.1:{port}"}
        allowed = await http.post(
            server.url, json=call, headers={**mcp_headers(session_id), **token, **own}
        )
        assert allowed.status_code == 200, allowed.text
        assert marker.read_text() == "ran\n"  # the same request with its own names does run


@pytest.mark.timeout(45)
async def test_an_allowed_host_name_and_origin_reach_the_server_and_others_do_not(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    call = _marker_call(marker)
    allow = ["--allow-host", "proxy.example", "--allow-origin", "https://app.example"]
    async with http_server(tmp_path, *allow) as server:
        proxied = {"Host": "proxy.example", "Origin": "https://app.example"}
        async with client(server.transport(headers=proxied)) as session:
            result = await run(session, "6 * 7")
            assert structured(result)["value"] == "42"
        async with httpx2.AsyncClient(timeout=30) as http:
            session_id = await handshake(http, server)
            token = {"Authorization": f"Bearer {server.token}"}
            for forged, status in [
                ({"Host": "other.example"}, 421),
                ({"Host": "proxy.example.evil.example"}, 421),
                ({"Host": "proxy.example", "Origin": "https://other.example"}, 403),
            ]:
                refused = await http.post(
                    server.url, json=call, headers={**mcp_headers(session_id), **token, **forged}
                )
                assert not marker.exists()
                assert refused.status_code == status, forged


# -- a signal ends the server cleanly ----------------------------------------------------------

STOP_BOUND = 20.0
"""Seconds a signalled server gets to exit: the runtime's grace (5 s) before a kill, and more."""

SLEEPER = "import time\ntime.sleep(60)"

SIGNALS = pytest.mark.parametrize(
    "signal_number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"]
)


def _working_folders(temp: Path) -> list[str]:
    return sorted(path.name for path in temp.iterdir() if path.name.startswith("toolscript-"))


def _assert_closed_journal(journal: Path, script_ids: list[str]) -> None:
    with contextlib.closing(sqlite3.connect(journal)) as database:
        hosts = database.execute("SELECT host_id, ended_at FROM hosts").fetchall()
        statuses = dict(database.execute("SELECT script_id, status FROM scripts").fetchall())
    assert hosts and all(ended_at is not None for _, ended_at in hosts), hosts
    for script_id in script_ids:
        assert statuses[script_id] == "cancelled", statuses


@SIGNALS
@pytest.mark.timeout(90)
async def test_a_signal_ends_serve_over_http_with_its_scripts_stopped_folder_removed_and_journal_closed(
    tmp_path: Path, signal_number: int
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    answers: dict[str, types.CallToolResult] = {}
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    async with http_server(tmp_path, env={"TMPDIR": str(temp)}) as server:
        assert len(_working_folders(temp)) == 1
        async with client(server.transport()) as session:
            background = await run(session, SLEEPER, background=True)

            async def foreground() -> None:
                answers["run"] = await session.call_tool(
                    "run_python", {"code": SLEEPER}, progress_callback=on_progress
                )

            async with anyio.create_task_group() as group:
                group.start_soon(foreground)
                with anyio.fail_after(30):
                    await progressed.wait()  # the run is under way
                server.process.send_signal(signal_number)
                with anyio.fail_after(STOP_BOUND):
                    returncode = await server.process.wait()
    assert returncode == 0
    assert _working_folders(temp) == []
    ran = structured(answers["run"])
    assert ran["status"] == "cancelled"  # the run in progress was answered, not dropped
    # Nobody cancelled it: the server stopped, and the note says so.
    assert ran["note"].startswith(
        "Stopped: the shell was closed because toolscript serve stopped."
    ), ran["note"]
    _assert_closed_journal(
        tmp_path / "journal.sqlite3", [ran["script_id"], structured(background)["script_id"]]
    )


class _Lines:
    """JSON-RPC messages read line by line from a server's stdout."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffered = b""

    async def next(self) -> dict[str, Any] | None:
        """The next message, or None at end of output."""
        while b"\n" not in self.buffered:
            try:
                self.buffered += await self.stream.receive()
            except anyio.EndOfStream:
                return None
        line, _, self.buffered = self.buffered.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    async def answer(self, request_id: int) -> dict[str, Any]:
        """The answer to request `request_id`, skipping notifications."""
        while True:
            message = await self.next()
            assert message is not None, f"the server ended without answering {request_id}"
            if message.get("id") == request_id:
                return message


@pytest.mark.parametrize(
    "signal_number", [signal.SIGTERM, signal.SIGINT, None], ids=["SIGTERM", "SIGINT", "stdin"]
)
@pytest.mark.timeout(90)
async def test_a_signal_ends_serve_over_stdio_with_its_scripts_stopped_folder_removed_and_journal_closed(
    tmp_path: Path, signal_number: int | None
) -> None:
    # The client keeps stdin open and idle: the server must end without its next line.
    # Or it closes stdin (`None`), which ends the server the same way (docs/serve.md).
    temp = tmp_path / "tmp"
    temp.mkdir()
    process = await anyio.open_process(
        [sys.executable, *serve_args(tmp_path)],
        env={**os.environ, **environment(tmp_path), "TMPDIR": str(temp)},
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        lines = _Lines(process.stdout)

        async def send(message: dict[str, Any]) -> None:
            assert process.stdin is not None
            await process.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

        def run_python(request_id: int, code: str, **more: Any) -> dict[str, Any]:
            arguments = {"code": code, **more}
            params = {"name": "run_python", "arguments": arguments, "_meta": {"progressToken": 1}}
            return {"id": request_id, "method": "tools/call", "params": params}

        with anyio.fail_after(30):
            await send(initialize_request(1))
            await lines.answer(1)
            await send({"method": "notifications/initialized"})
            assert len(_working_folders(temp)) == 1
            await send(run_python(2, SLEEPER, background=True))
            background = (await lines.answer(2))["result"]["structuredContent"]
            await send(run_python(3, SLEEPER))
            while (await lines.next() or {}).get("method") != "notifications/progress":
                pass  # the run is under way once it reports progress
        if signal_number is None:
            await process.stdin.aclose()
        else:
            process.send_signal(signal_number)
        with anyio.fail_after(STOP_BOUND):
            ran = (await lines.answer(3))["result"]["structuredContent"]
            while await lines.next() is not None:
                pass
            returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        with anyio.move_on_after(5):
            await process.aclose()  # its pipes too: an open transport warns when collected
    assert returncode == 0
    assert _working_folders(temp) == []
    assert ran["status"] == "cancelled"  # the run in progress was answered, not dropped
    # Nobody cancelled it: the server stopped, and the note says so.
    assert ran["note"].startswith(
        "Stopped: the shell was closed because toolscript serve stopped."
    ), ran["note"]
    _assert_closed_journal(
        tmp_path / "journal.sqlite3", [ran["script_id"], background["script_id"]]
    )


@pytest.mark.timeout(60)
def test_a_stdio_client_that_vanishes_mid_answer_ends_serve_cleanly(tmp_path: Path) -> None:
    # A killed client closes both pipes, here while the server writes an answer larger
    # than a pipe holds: the write meets a broken pipe. That is how a stdio session often
    # ends, not a crash: status 0, no traceback, nothing left behind.
    temp = tmp_path / "tmp"
    temp.mkdir()
    log = tmp_path / "stderr"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, *serve_args(tmp_path)],
            env={**os.environ, **environment(tmp_path), "TMPDIR": str(temp)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdin is not None and process.stdout is not None
    try:

        def send(message: dict[str, Any]) -> None:
            assert process.stdin is not None
            process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            process.stdin.flush()

        send(initialize_request(1))
        assert json.loads(process.stdout.readline())["id"] == 1
        send({"method": "notifications/initialized"})
        big = {"name": "run_python", "arguments": {"code": "'x' * 1_000_000"}}
        send({"id": 2, "method": "tools/call", "params": big})
        assert b"xxx" in os.read(process.stdout.fileno(), 65536)  # the rest waits
        process.stdout.close()
        process.stdin.close()
        returncode = process.wait(timeout=STOP_BOUND)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    errors = log.read_bytes()
    assert returncode == 0, errors.decode(errors="replace")[-3000:]
    assert b"Traceback" not in errors and b"BrokenPipe" not in errors, errors[-3000:]
    assert _working_folders(temp) == []


@SIGNALS
@pytest.mark.timeout(60)
async def test_a_signal_while_an_mcp_server_hangs_in_its_handshake_ends_serve_at_once(
    tmp_path: Path, signal_number: int
) -> None:
    # An MCP client that closes a server sends SIGTERM and, a few seconds on, SIGKILL: a
    # server that waits for its MCP servers' start timeout (30 s) first would leave them.
    temp = tmp_path / "tmp"
    temp.mkdir()
    args = serve_args(tmp_path)
    config = json.loads((tmp_path / "mcp.json").read_text())
    marker = tmp_path / "hangs.pid"
    hangs = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(1000)"
    config["mcpServers"]["hangs"] = {"command": sys.executable, "args": ["-c", hangs]}
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    process = await anyio.open_process(
        [sys.executable, *args],
        env={**os.environ, **environment(tmp_path), "TMPDIR": str(temp)},
    )
    try:
        with anyio.fail_after(30):  # the server has started the MCP server that hangs
            while not marker.exists() or not marker.read_text():
                await anyio.sleep(0.05)
        process.send_signal(signal_number)
        with anyio.fail_after(STOP_BOUND):
            returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        with anyio.move_on_after(5):
            await process.aclose()
    assert returncode == 0
    assert _working_folders(temp) == []
    pid = int(marker.read_text())
    with anyio.fail_after(5):
        while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
            await anyio.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
