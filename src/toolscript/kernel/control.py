"""Control messages: what the host, the keeper and the template say to each other.

One message is one JSON object in one packet of a SOCK_SEQPACKET socket, with the file
descriptors it hands over passed alongside (`SCM_RIGHTS`; see "The keeper" in
`docs/design.md`). The host imports this module too, so it stays standard library only.
"""

from __future__ import annotations

import array
import json
import socket
from typing import Any

__all__ = ["decode", "receive"]


def receive(sock: socket.socket, size: int, most_fds: int) -> tuple[bytes, list[int]]:
    """One packet of at most `size` bytes from `sock`, and the descriptors passed with it
    (room is made for `most_fds` of them); the caller owns, and closes, the descriptors."""
    fds = array.array("i")
    data, ancillary, _flags, _address = sock.recvmsg(
        size, socket.CMSG_SPACE(most_fds * fds.itemsize)
    )
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)


def decode(data: bytes) -> dict[str, Any] | None:
    """The JSON object in `data`; None when it holds anything else."""
    try:
        message = json.loads(data)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None
