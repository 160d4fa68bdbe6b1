"""Control messages: what the host, the keeper and the template say to each other.

One message is one JSON object in one packet of a SOCK_SEQPACKET socket, with the file
descriptors it hands over passed alongside (`SCM_RIGHTS`; see "The keeper" in
`docs/design.md`). The host imports this module too, so it stays standard library only.
"""

from __future__ import annotations

import array
import json
from _socket import CMSG_SPACE, SCM_RIGHTS, SOL_SOCKET
from _socket import socket as Socket
from collections.abc import Sequence
from typing import Any

__all__ = ["confined", "decode", "fork_request", "receive", "send"]

# `_socket`, not `socket`: the command line's head start sends a fork request before it has
# imported `socket` (`toolscript.host.headstart`).


def receive(sock: Socket, size: int, most_fds: int) -> tuple[bytes, list[int]]:
    """One packet of at most `size` bytes from `sock`, and the descriptors passed with it
    (room is made for `most_fds` of them); the caller owns, and closes, the descriptors."""
    fds = array.array("i")
    data, ancillary, _flags, _address = sock.recvmsg(size, CMSG_SPACE(most_fds * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == SOL_SOCKET and kind == SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)


def send(sock: Socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    """Send `message` in one packet, with `fds` passed alongside; raises `OSError`."""
    data = [json.dumps(message).encode("ascii")]
    if fds:
        sock.sendmsg(data, [(SOL_SOCKET, SCM_RIGHTS, array.array("i", fds).tobytes())])
    else:
        sock.sendmsg(data)


def fork_request(
    number: int,
    cwd: str | None,
    env: dict[str, str],
    limits: dict[str, int | None],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The host's request that a template fork kernel `number`, working in `cwd`, with `env`
    as its environment and `limits`; `extra` goes in as it is (a sandboxed kernel's cgroup,
    process count and preload). The kernel's channel, stdout and stderr go with it, in that
    order (`send`)."""
    return {"id": number, "cwd": cwd, "env": env, "limits": limits, **(extra or {})}


def decode(data: bytes) -> dict[str, Any] | None:
    """The JSON object in `data`; None when it holds anything else."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):  # what a script wrote can be nested past the stack
        return None
    return message if isinstance(message, dict) else None


def confined(
    cgroup: str | None, limits: dict[str, int | None], preload: Sequence[str]
) -> dict[str, Any]:
    """A sandboxed kernel's part of its fork request (`fork_request`'s `extra`): its cgroup,
    the process count that cgroup holds it to (the kernel and what it starts: the init stays
    out of it), and the modules it preloads."""
    return {"cgroup": cgroup, "processes": limits.get("processes"), "preload": list(preload)}
