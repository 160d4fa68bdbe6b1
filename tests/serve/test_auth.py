"""The token file, the bearer-token gate and the --http address, without a server process."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from toolscript.cli.options import UsageError
from toolscript.cli.serve import parse_address
from toolscript.serve.auth import BearerTokenGate, TokenFileError, load_or_create_token


def test_a_missing_token_file_is_created_private_and_then_read_back(tmp_path: Path) -> None:
    path = tmp_path / "token"
    made = load_or_create_token(path)
    assert made.created and len(made.value) >= 40
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = load_or_create_token(path)
    assert (again.value, again.created, again.loose) == (made.value, False, False)


def test_a_token_file_others_can_read_is_used_but_flagged(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    path.chmod(0o644)
    found = load_or_create_token(path)
    assert (found.value, found.loose) == ("s3cret", True)


@pytest.mark.parametrize("content", ["", "  \n", "two words\n"])
def test_an_empty_or_spaced_token_file_is_refused_with_the_reason(
    tmp_path: Path, content: str
) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(TokenFileError) as raised:
        load_or_create_token(path)
    assert str(path) in str(raised.value)


def test_without_a_token_file_a_token_is_made_for_the_run_only() -> None:
    first, second = load_or_create_token(None), load_or_create_token(None)
    assert first.created and first.path is None and first.value != second.value


async def _through_gate(headers: list[tuple[bytes, bytes]]) -> tuple[int | None, bool]:
    reached: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    gate = BearerTokenGate(app, "right")
    await gate({"type": "http", "headers": headers}, receive, send)
    status = sent[0]["status"] if sent else None
    return status, bool(reached)


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer wrong")],
        [(b"authorization", b"Bearer right "), (b"authorization", b"Bearer right")],
        [(b"authorization", b"Bearer right"), (b"authorization", b"Bearer right")],
        [(b"authorization", b"Basic right")],
        [(b"authorization", b"Bearerright")],
        [(b"authorization", b"right")],
    ],
)
async def test_the_gate_answers_401_and_never_reaches_the_app_without_the_token(
    headers: list[tuple[bytes, bytes]],
) -> None:
    assert await _through_gate(headers) == (401, False)


@pytest.mark.parametrize("given", [b"Bearer right", b"bearer right", b"BEARER  right"])
async def test_the_gate_lets_the_right_token_through_whatever_the_schemes_case(
    given: bytes,
) -> None:
    # HTTP's scheme names are case-insensitive: clients that send "bearer" are not refused.
    assert await _through_gate([(b"authorization", given)]) == (None, True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8765", ("127.0.0.1", 8765)),
        (":0", ("127.0.0.1", 0)),
        ("localhost:9", ("localhost", 9)),
        ("[::1]:80", ("::1", 80)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
    ],
)
def test_an_http_address_without_a_host_means_loopback(
    text: str, expected: tuple[str, int]
) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["host", "host:port", "1:70000"])
def test_a_bad_http_address_is_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_address(text)
