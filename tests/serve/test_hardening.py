"""`toolscript serve --http` answers only to its own names, and stops cleanly on a signal.

The servers here bind 127.0.0.1 only; what a server bound elsewhere answers to is checked on
`HostCheck` itself, which is what the server asks for every request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest

from toolscript.serve.hosts import HostCheck

from .conftest import client, handshake, http_server, mcp_headers, run, structured

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
