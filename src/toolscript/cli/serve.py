"""`toolscript serve`: toolscript as an MCP server, over stdio or streamable HTTP.

Standard output belongs to the MCP protocol over stdio, so everything this command says goes
to standard error. The server (`toolscript.serve`), the MCP SDK and the runtime are imported
when the command runs, not when the command line starts.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from . import options
from .options import UsageError
from .terminal import for_terminal

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

LOOPBACK = "127.0.0.1"


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[IPv6]:PORT`, `:PORT` or `PORT` as (host, port); no host means loopback."""
    host, _, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(
            f"--http: {text!r} is not HOST:PORT (for example 127.0.0.1:8765)"
        ) from None
    if not 0 <= port <= 65535:
        raise UsageError(f"--http: port {port} is not between 0 and 65535")
    return host or LOOPBACK, port


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 lets the system choose."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as error:
        raise UsageError(f"--http: cannot resolve {host!r}: {error}") from None
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as error:
        listener.close()
        raise UsageError(f"--http: cannot listen on {host}:{port}: {error.strerror}") from None
    listener.listen(128)
    return listener


def _is_loopback(listener: socket.socket) -> bool:
    import ipaddress

    address = listener.getsockname()[0]
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `serve` command's arguments."""
    parser = options.command(commands, "serve", serve_command.__doc__)
    options.add_mcp_config(parser)
    options.add_tools(parser)
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="Serve streamable HTTP on HOST:PORT (path /mcp) instead of stdio. A bare "
        "PORT listens on 127.0.0.1 only; another host must be named.",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="With --http: the bearer token's file. Made (mode 0600) with a new token "
        "when it does not exist. Without it a token is made for this run and shown once.",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME[:PORT]",
        help="With --http: another name the server answers to in the Host header, as "
        "NAME or NAME:PORT (without a port, any port), for a proxy that forwards its own "
        "name. Repeatable. Without it, only the address it listens on is answered "
        "(127.0.0.1, localhost and [::1] for loopback); other requests get 421.",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="With --http: a web origin (scheme://NAME[:PORT]) whose pages may call the "
        "server. Repeatable. Without it, a request with an Origin header other than the "
        "server's own gets 403.",
    )
    options.add_journal(parser)
    options.add_sandbox(parser)
    options.add_check(parser)
    options.add_keep_interpreters(parser)
    parser.set_defaults(run=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    """Serve toolscript to an MCP client: one run_python tool in which every tool is Python."""
    import asyncio
    import logging

    from ..serve.auth import TokenFileError, load_or_create_token
    from ..serve.hosts import HostCheck

    knobs = options.sandbox_knobs(args)
    knobs |= {"check": args.check, "keep_interpreters": args.keep_interpreters}
    mcp_config = options.mcp_config(args.mcp_config)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="toolscript: %(message)s")
    specs = options.load_tools(args.tools)
    http, token_file, sandbox = args.http, args.token_file, args.sandbox
    allow_host, allow_origin = args.allow_host, args.allow_origin
    for name, given in (
        ("--token-file", token_file),
        ("--allow-host", allow_host),
        ("--allow-origin", allow_origin),
    ):
        if given and http is None:
            raise UsageError(f"{name} goes with --http")
    allowed_hosts, allowed_origins = list(allow_host or ()), list(allow_origin or ())
    listener: socket.socket | None = None
    token = ""
    bound_as = LOOPBACK
    if http is not None:
        host, port = parse_address(http)
        bound_as = host
        try:
            HostCheck.for_bind(host, port, allow_hosts=allowed_hosts, allow_origins=allowed_origins)
        except ValueError as error:
            raise UsageError(f"--allow-host/--allow-origin: {error}") from None
        # Bound first: an address that cannot be had leaves no new token file behind.
        listener = listen(host, port)
        try:
            found = load_or_create_token(None if token_file is None else Path(token_file))
        except TokenFileError as error:
            listener.close()
            raise UsageError(f"--token-file: {error}") from None
        token = found.value
        if found.created and found.path is not None:
            _say(f"wrote a new bearer token to {found.path} (mode 0600)")
        elif found.created:
            _say(f"the bearer token for this run (shown once): {token}")
        if found.loose:
            _say(f"warning: {found.path} can be read by other users; chmod 600 it")
        if not _is_loopback(listener):
            _say(
                f"warning: listening on {host}, which other machines can reach; anyone with "
                "the token can run code as you. Use 127.0.0.1 to keep it to this machine."
            )

    async def main() -> None:
        from ..runtime import Runtime
        from ..serve.server import ToolscriptServer

        served: ToolscriptServer | None = None
        signalled = False
        starting = asyncio.current_task()

        def stop() -> None:
            nonlocal signalled
            signalled = True
            if served is not None:
                served.stop()
            elif starting is not None:
                # The runtime is still starting (an MCP server's handshake can take its whole
                # start timeout): stop that at once; the runtime's start undoes what it began.
                starting.cancel()

        _stop_on_signals(stop)
        async with Runtime(tools=specs, mcp_config=mcp_config, journal=args.journal, **knobs) as rt:
            for server, reason in rt.mcp_failures.items():
                _say(f"MCP server {server!r} did not start: {reason}")
            if rt.sandbox_failure is not None and sandbox != "off":
                _say(f"scripts run without a sandbox: {rt.sandbox_failure}")
            served = ToolscriptServer(rt, transport="stdio" if listener is None else "http")
            if signalled:  # while the runtime was starting
                served.stop()
            if listener is None:
                await served.serve_stdio()
                return
            address, port = listener.getsockname()[:2]
            shown = f"[{address}]" if ":" in address else address
            _say(f"serving MCP at http://{shown}:{port}/mcp")
            await served.serve_http(
                listener,
                token,
                bound_as,
                allow_hosts=allowed_hosts,
                allow_origins=allowed_origins,
            )

    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main())
    return 0


def _stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT call `stop`: the server ends like at the end of its input, and
    `Runtime` closes (scripts stopped, journal closed, working folder removed) before the
    process exits with status 0. A second SIGINT interrupts that cleanup at once (Ctrl-C
    twice); another SIGTERM changes nothing, the cleanup being bounded already."""
    import asyncio
    import signal

    loop = asyncio.get_running_loop()

    def first() -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
        stop()

    for number in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(number, first)


def _say(text: str) -> None:
    print(for_terminal(f"toolscript: {text}", sys.stderr), file=sys.stderr, flush=True)
