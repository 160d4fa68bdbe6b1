"""The floor every toolscript round trip is compared with: a raw Python-to-Python round trip.

A child Python process (started the way the kernel is: the same interpreter, `-I`) echoes
length-prefixed frames over a socketpair; the parent times send-and-receive of one frame of
about the size of a tool call. No asyncio, no JSON: nothing toolscript does can be cheaper.
"""

from __future__ import annotations

import socket
import statistics
import struct
import subprocess
import sys
import time

_ECHO = r"""
import socket, struct, sys
s = socket.socket(fileno=int(sys.argv[1]))
while True:
    head = s.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        break
    (n,) = struct.unpack(">I", head)
    body = s.recv(n, socket.MSG_WAITALL)
    s.sendall(head + body)
"""


def raw_round_trips(count: int = 2000, size: int = 200) -> list[float]:
    """Seconds per round trip of a `size`-byte frame, `count` times, after a warm-up."""
    parent, child = socket.socketpair()
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", _ECHO, str(child.fileno())], pass_fds=(child.fileno(),)
    )
    child.close()
    frame = struct.pack(">I", size) + b"x" * size
    times: list[float] = []
    try:
        for i in range(count + 200):
            start = time.perf_counter()
            parent.sendall(frame)
            got = 0
            while got < len(frame):
                got += len(parent.recv(len(frame) - got))
            if i >= 200:
                times.append(time.perf_counter() - start)
    finally:
        parent.close()
        process.wait(timeout=10)
    return times


def summary(times: list[float]) -> dict[str, float]:
    """Median and p99 in milliseconds."""
    ordered = sorted(times)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "count": float(len(ordered)),
    }
