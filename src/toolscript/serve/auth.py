"""The bearer token that guards `toolscript serve --http`, and the file that keeps it.

Anyone who can reach the HTTP endpoint with the token can run code as the user, so every
request must carry `Authorization: Bearer <token>`; one without it is answered 401 before it
reaches the MCP server, so nothing runs.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BearerTokenGate", "Token", "TokenFileError", "load_or_create_token"]


class TokenFileError(Exception):
    """The token file exists but cannot be used (unreadable, empty, not a file)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"token file {str(path)!r}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Token:
    """A bearer token and where it came from.

    `created` is True when it was generated for this run (and written to `path`, if any);
    `loose` is True when an existing file can be read by other users.
    """

    value: str
    path: Path | None
    created: bool
    loose: bool = False


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def load_or_create_token(path: Path | None) -> Token:
    """The token in `path`; or, when `path` does not exist, a new one written there (mode 0600).

    With `path` None a new token is made and kept nowhere: the caller prints it once.
    """
    if path is None:
        return Token(new_token(), None, created=True)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        value = new_token()
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # written by someone else meanwhile: use theirs
            return load_or_create_token(path)
        except OSError as error:
            raise TokenFileError(path, f"cannot create it ({error.strerror})") from None
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(value + "\n")
        return Token(value, path, created=True)
    except IsADirectoryError:
        raise TokenFileError(path, "it is a directory, not a file") from None
    except UnicodeDecodeError:
        raise TokenFileError(path, "it is not UTF-8 text") from None
    except OSError as error:
        raise TokenFileError(path, f"cannot read it ({error.strerror})") from None
    value = text.strip()
    if not value:
        raise TokenFileError(path, "it is empty; delete it to have a new token generated")
    if any(character.isspace() for character in value):
        raise TokenFileError(path, "the token must be one line without spaces")
    loose = bool(path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    return Token(value, path, created=False, loose=loose)


class BearerTokenGate:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401.

    The scheme's name is taken in any case, as HTTP says; the token's comparison takes the
    same time whatever the guess. Lifespan events pass through.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._admits(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps(
            {
                "error": "unauthorized",
                "error_description": "toolscript serve requires 'Authorization: Bearer <token>'; "
                "the token is in the file given to --token-file.",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="toolscript"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _admits(self, scope: Scope) -> bool:
        given = [value for key, value in scope.get("headers", ()) if key == b"authorization"]
        if len(given) != 1:
            return False
        # The scheme's name is case-insensitive (RFC 9110, 11.1): "bearer" is "Bearer".
        scheme, _, credentials = given[0].partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(
            credentials.lstrip(b" "), self._expected
        )
