"""The floor every toolscript round trip is compared with: a raw Python-to-Python round trip.

A child Python process (started the way the kernel is: the same interpreter, `-I`) echoes
length-prefixed frames over a socketpair; the parent times send-and-receive of one frame of
about the size of a tool call. No asyncio, no JSON: nothing toolscript does can be cheaper.

`asyncio_round_trips` is the second floor, the same echo with asyncio's event loop on both
sides: what a host and a kernel that each run one pay before any work of their own.

`json_call_round_trips` is the third: the least any Python tool call between two processes
costs, with no event loop on either side. The caller encodes a call frame as JSON and blocks
on the answer; the other side decodes it, calls a Python function with its arguments and
sends back the JSON answer. No journal, no checks, no records, no loop.
"""

from __future__ import annotations

import asyncio
import json
import os
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


_ASYNCIO_ECHO = r"""
import asyncio, socket, sys

class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.data = transport, b""

    def data_received(self, data):
        self.data += data
        while len(self.data) >= 4:
            end = 4 + int.from_bytes(self.data[:4], "big")
            if len(self.data) < end:
                break
            self.transport.write(self.data[:end])
            self.data = self.data[end:]

    def connection_lost(self, exc):
        asyncio.get_running_loop().stop()

loop = asyncio.new_event_loop()
sock = socket.socket(fileno=int(sys.argv[1]))
loop.run_until_complete(loop.connect_accepted_socket(Echo, sock=sock))
loop.run_forever()
"""


class Answers(asyncio.Protocol):
    """The caller's end of a length-prefixed channel on asyncio's loop: each whole frame
    (its length prefix included) resolves `waiter`."""

    def __init__(self) -> None:
        self.data = b""
        self.waiter: asyncio.Future[bytes] | None = None

    def data_received(self, data: bytes) -> None:
        self.data += data
        end = 4 + int.from_bytes(self.data[:4], "big") if len(self.data) >= 4 else 0
        if end and len(self.data) >= end and self.waiter is not None:
            frame, self.data = self.data[:end], self.data[end:]
            self.waiter.set_result(frame)


def asyncio_round_trips(count: int = 2000, size: int = 200) -> tuple[list[float], float]:
    """The same echo with asyncio's own event loop on both sides (no JSON, no tasks of its
    own): seconds per round trip, and the echoing process's CPU seconds per round trip.

    What any two processes that talk through asyncio's loop pay on this machine: the floor
    of a design whose host and kernel each run one (toolscript's do).
    """
    parent, child = socket.socketpair()
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", _ASYNCIO_ECHO, str(child.fileno())],
        pass_fds=(child.fileno(),),
    )
    child.close()
    frame = struct.pack(">I", size) + b"x" * size

    async def run() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()
        transport, answers = await loop.connect_accepted_socket(Answers, sock=parent)
        times: list[float] = []
        cpu = 0.0
        for i in range(count + 200):
            if i == 200:
                cpu = cpu_seconds(process.pid)
            start = time.perf_counter()
            answers.waiter = loop.create_future()
            transport.write(frame)
            await answers.waiter
            if i >= 200:
                times.append(time.perf_counter() - start)
        cpu = cpu_seconds(process.pid) - cpu
        transport.close()
        return times, cpu / count

    try:
        return asyncio.run(run())
    finally:
        parent.close()
        process.wait(timeout=10)


_JSON_CALLEE = r"""
import json, socket, struct, sys

def noop(x):
    return x

tools = {"noop": noop}
s = socket.socket(fileno=int(sys.argv[1]))
while True:
    head = s.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        break
    (n,) = struct.unpack(">I", head)
    call = json.loads(s.recv(n, socket.MSG_WAITALL))
    value = tools[call["tool"]](**call["args"])
    body = json.dumps({"kind": "answer", "n": call["n"], "value": value}).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
"""


def json_call_round_trips(count: int = 2000) -> tuple[list[float], float]:
    """Seconds per call of a Python function in another process, both sides blocking, the
    frames JSON (the standard library's on both sides, as the kernel's): the least a tool
    call between two Python processes costs. Also the called side's CPU seconds per call."""
    parent, child = socket.socketpair()
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", _JSON_CALLEE, str(child.fileno())],
        pass_fds=(child.fileno(),),
    )
    child.close()
    times: list[float] = []
    cpu = 0.0
    try:
        for i in range(count + 200):
            if i == 200:
                cpu = cpu_seconds(process.pid)
            start = time.perf_counter()
            body = json.dumps({"kind": "call", "n": i, "tool": "noop", "args": {"x": i}}).encode()
            parent.sendall(struct.pack(">I", len(body)) + body)
            (n,) = struct.unpack(">I", parent.recv(4, socket.MSG_WAITALL))
            answer = json.loads(parent.recv(n, socket.MSG_WAITALL))
            assert answer["value"] == i
            if i >= 200:
                times.append(time.perf_counter() - start)
        cpu = cpu_seconds(process.pid) - cpu
    finally:
        parent.close()
        process.wait(timeout=10)
    return times, cpu / count


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(times: list[float]) -> dict[str, float]:
    """Median and p99 in milliseconds."""
    ordered = sorted(times)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "count": float(len(ordered)),
    }
