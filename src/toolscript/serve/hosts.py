"""Which `Host` and `Origin` headers `toolscript serve --http` answers.

Goal: a web page the user happens to visit cannot use the server, whatever address it listens
on. What fails: the bearer token stops a page that lacks it, but a page on a name the attacker
controls can be rebound to the server's address (DNS rebinding), and the MCP SDK checks the
headers only for a loopback bind, and there admits any port (`localhost:*`), so a page of any
other local server passes. What we do: every request's `Host` must name the server as it was
bound, and an `Origin`, when a browser sends one, must be the server's own or one the user
allowed; otherwise the request is answered (421 for a `Host`, 403 for an `Origin`) before the
token is even looked at, so nothing runs.

The names a server answers to, with its port:

- bound to loopback: `127.0.0.1`, `localhost` and `[::1]`;
- bound to another address: that address, and the name it was given as (`--http NAME:PORT`);
- whatever the bind, the address a connection arrived at (so a server bound to `0.0.0.0`
  answers to each of the machine's addresses, and to the loopback names through loopback);
- and any name allowed with `--allow-host NAME[:PORT]` (without a port, on any port), for a
  server behind a proxy that forwards its own name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HostCheck", "HostGate", "Refusal", "parse_authority"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")

_DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_authority(text: str, default_port: int | None = None) -> tuple[str, int | None] | None:
    """`NAME`, `NAME:PORT`, `[IPv6]` or `[IPv6]:PORT` as (lowercased name, port); None if malformed.

    A name without a port gets `default_port`. IPv6 names come back without brackets.
    """
    text = text.strip().lower()
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:  # a bare IPv6 address: no port can be told apart
        name, port_text = text, None
    else:
        name, colon, port_text_found = text.partition(":")
        port_text = port_text_found if colon else None
    if not name or any(character in name for character in "/@?#\\ "):
        return None
    if port_text is None:
        return name, default_port
    if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        return None
    return name, int(port_text)


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: its HTTP status and a sentence for the client."""

    status: int
    message: str


@dataclass(frozen=True)
class HostCheck:
    """The `Host` and `Origin` values a server bound to (`host`, `port`) answers.

    Make one with `HostCheck.for_bind`; `refusal(...)` says whether a request is let in.
    """

    port: int
    hosts: frozenset[tuple[str, int | None]]
    """(name, port) pairs that `Host` may name; a port of None means any port."""
    origins: frozenset[str]
    """Origins allowed besides the server's own (`--allow-origin`), lowercased."""

    @classmethod
    def for_bind(
        cls,
        host: str,
        port: int,
        *,
        allow_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
    ) -> HostCheck:
        """The check for a server bound to `host` (an address or a name) on `port`.

        `allow_hosts` are extra `NAME[:PORT]` values for `Host` (without a port: any port);
        `allow_origins` extra `scheme://name[:port]` values for `Origin`. A malformed one
        raises ValueError.
        """
        name = host.strip("[]").lower()
        hosts: set[tuple[str, int | None]] = set()
        if _is_loopback(name):
            hosts.update((loopback, port) for loopback in LOOPBACK_NAMES)
        if not _is_unspecified(name):
            hosts.add((name, port))
        for allowed in allow_hosts:
            parsed = parse_authority(allowed)
            if parsed is None:
                raise ValueError(f"{allowed!r} is not a host name, NAME or NAME:PORT")
            hosts.add(parsed)
        origins: set[str] = set()
        for allowed in allow_origins:
            if _parse_origin(allowed) is None:
                raise ValueError(
                    f"{allowed!r} is not an origin, scheme://NAME or scheme://NAME:PORT "
                    "(for example https://app.example.com)"
                )
            origins.add(allowed.strip().lower().rstrip("/"))
        return cls(port, frozenset(hosts), frozenset(origins))

    def refusal(
        self, host: str | None, origin: str | None, arrived_at: str | None = None
    ) -> Refusal | None:
        """Why a request with these `Host` and `Origin` headers is refused, or None to let it in.

        `arrived_at` is the local address the connection arrived at (the ASGI `server`).
        """
        named = None if host is None else parse_authority(host, default_port=80)
        if named is None or not self._names_this_server(named, arrived_at):
            return Refusal(
                421,
                f"toolscript serve does not answer to Host {host!r}: it answers only to the "
                "address it listens on. Behind a proxy, start it with --allow-host NAME.",
            )
        if origin is None or origin.strip().lower().rstrip("/") in self.origins:
            return None
        page = _parse_origin(origin)
        if page is None or not self._names_this_server(page, arrived_at):
            return Refusal(
                403,
                f"toolscript serve does not answer requests from Origin {origin!r}. "
                "To allow a web page there, start it with --allow-origin ORIGIN.",
            )
        return None

    def _names_this_server(self, named: tuple[str, int | None], arrived_at: str | None) -> bool:
        name, port = named
        if (name, port) in self.hosts or (name, None) in self.hosts:
            return True
        if port != self.port or arrived_at is None:
            return False
        arrived = arrived_at.lower()
        return name == arrived or (_is_loopback(arrived) and name in LOOPBACK_NAMES)


class HostGate:
    """ASGI middleware: a request whose `Host` or `Origin` the `HostCheck` refuses is answered
    421 or 403 in plain text, and goes no further. Lifespan events pass through."""

    def __init__(self, app: ASGIApp, check: HostCheck) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = _header(scope, b"host")
        origins = _header(scope, b"origin")
        server = scope.get("server")
        arrived_at = str(server[0]) if server else None
        if len(hosts) != 1 or len(origins) > 1:
            refusal: Refusal | None = Refusal(
                400, "A request needs exactly one Host header and at most one Origin header."
            )
        else:
            refusal = self.check.refusal(hosts[0], origins[0] if origins else None, arrived_at)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = (refusal.message + "\n").encode()
        await send(
            {
                "type": "http.response.start",
                "status": refusal.status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope.get("headers", ()) if key == name]


def _parse_origin(origin: str) -> tuple[str, int | None] | None:
    scheme, separator, authority = origin.strip().lower().rstrip("/").partition("://")
    if not separator or scheme not in _DEFAULT_PORTS or "/" in authority:
        return None
    return parse_authority(authority, default_port=_DEFAULT_PORTS[scheme])


def _is_loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _is_unspecified(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_unspecified
    except ValueError:
        return name == ""
