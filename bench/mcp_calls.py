"""An MCP tool call through toolscript, beside the official client calling the same server.

    python bench/mcp_calls.py [--rounds 5] [--calls 500] [--burst 200] [--bursts 5]

The server is the stdio demo server of the tests (`tests/mcp_servers/demo_server.py`, on the
SDK's low-level server); its `echo` tool answers at once. In each round, alternating which
goes first (rounds interleave everything so machine noise hits all alike):

- **direct**: the official `mcp` client (`ClientSession` over `stdio_client`) in this process
  awaits `session.call_tool("echo", ...)` `--calls` times in a loop, each call timed; then
  `asyncio.gather` over `--burst` calls, `--bursts` times (calls per second of each burst);
- **toolscript**: a runtime configured with the same server; a script awaits
  `await demo.echo(text=...)` in a loop, each call timed inside the script (so the time
  includes the kernel's side of the call), then `asyncio.gather` over the same bursts. The
  host talks to the server through the SDK's `ClientSession` too, over toolscript's own
  stdio plumbing (`toolscript.tools.mcp.stdio`, without `stdio_client`'s two pipe tasks).

- **relay** (the floor of a hop): the same official client in a second process that does
  nothing but relay: it reads a JSON call frame from a socket, awaits
  `session.call_tool` in a task of its own and writes the answer back. This process is the
  caller, awaiting each answer on asyncio's loop as a script does (`relay`), and blocking in
  `recv` (`relay_blocking`, less than any script can do). No journal, no checks, no records:
  what any design that keeps the server's session out of the script's process pays.

Each side starts its own server process for the round, and warms up before it is timed.
Reported: medians (of each round's median) and p99s of the sequential call, the ratios
toolscript / direct and relay / direct per round and their medians, and the bursts' calls
per second.

Target (issue 16): a sequential MCP call through toolscript at most 1.10 times the direct
call, measured in the same run. Results go to bench/results/mcp_calls.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from floor import Answers, cpu_seconds, summary
from mcp import ClientSession, StdioServerParameters, stdio_client

from toolscript import Runtime

SERVER = Path(__file__).resolve().parents[1] / "tests" / "mcp_servers" / "demo_server.py"
WARM_UP = 50

SEQUENTIAL = """
import time
for i in range({warm}):
    await demo.echo(text="warm")
times = []
for i in range({calls}):
    start = time.perf_counter()
    await demo.echo(text="hello")
    times.append(time.perf_counter() - start)
times
"""

BURSTS = """
import asyncio, time
rates = []
for _ in range({bursts}):
    start = time.perf_counter()
    results = await asyncio.gather(*[demo.echo(text=str(i)) for i in range({burst})])
    rates.append({burst} / (time.perf_counter() - start))
    assert results == [str(i) for i in range({burst})], results[:3]
rates
"""


async def direct(calls: int, burst: int, bursts: int) -> dict[str, Any]:
    """The official client, straight to the server."""
    parameters = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(parameters, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for _ in range(WARM_UP):
                await session.call_tool("echo", {"text": "warm"})
            times = []
            cpu = time.process_time()
            for _ in range(calls):
                start = time.perf_counter()
                result = await session.call_tool("echo", {"text": "hello"})
                times.append(time.perf_counter() - start)
            cpu = time.process_time() - cpu
            assert result.content[0].text == "hello"  # type: ignore[union-attr]
            rates = []
            for _ in range(bursts):
                start = time.perf_counter()
                results = await asyncio.gather(
                    *(session.call_tool("echo", {"text": str(i)}) for i in range(burst))
                )
                rates.append(burst / (time.perf_counter() - start))
                assert [r.content[0].text for r in results] == [str(i) for i in range(burst)]  # type: ignore[union-attr]
    return {
        "sequential": summary(times),
        "burst_calls_per_s": statistics.median(rates),
        "host_cpu_us_per_call": cpu / calls * 1e6,
    }


_RELAY = r"""
import asyncio, json, os, socket, struct, sys
from mcp import ClientSession, StdioServerParameters, stdio_client

async def main():
    parameters = StdioServerParameters(command=sys.executable, args=[sys.argv[2]])
    loop = asyncio.get_running_loop()
    closed = loop.create_future()

    class Relay(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.data, self.tasks = transport, b"", set()

        def data_received(self, data):
            self.data += data
            while len(self.data) >= 4:
                end = 4 + int.from_bytes(self.data[:4], "big")
                if len(self.data) < end:
                    break
                call, self.data = json.loads(self.data[4:end]), self.data[end:]
                task = loop.create_task(self.answer(call))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

        async def answer(self, call):
            result = await session.call_tool(call["tool"], call["args"])
            body = json.dumps({"n": call["n"], "value": result.content[0].text}).encode()
            self.transport.write(struct.pack(">I", len(body)) + body)

        def connection_lost(self, exc):
            closed.set_result(None)

    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(parameters, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            sock = socket.socket(fileno=int(sys.argv[1]))
            await loop.connect_accepted_socket(Relay, sock=sock)
            await closed

asyncio.run(main())
"""


def relayed(calls: int, blocking: bool = False) -> dict[str, Any]:
    """The official client in a relay process, called from this one over a socket pair:
    awaiting each answer on asyncio's loop, or blocking in `recv` when `blocking`."""
    mine, theirs = socket.socketpair()
    relay = subprocess.Popen(
        [sys.executable, "-c", _RELAY, str(theirs.fileno()), str(SERVER)],
        pass_fds=(theirs.fileno(),),
    )
    theirs.close()

    def frame(i: int) -> bytes:
        body = json.dumps({"n": i, "tool": "echo", "args": {"text": "hello"}}).encode()
        return struct.pack(">I", len(body)) + body

    def blocking_calls() -> list[float]:
        times = []
        for i in range(WARM_UP + calls):
            start = time.perf_counter()
            mine.sendall(frame(i))
            (n,) = struct.unpack(">I", mine.recv(4, socket.MSG_WAITALL))
            answer = json.loads(mine.recv(n, socket.MSG_WAITALL))
            if i >= WARM_UP:
                times.append(time.perf_counter() - start)
        assert answer["value"] == "hello", answer
        return times

    async def awaited_calls() -> list[float]:
        loop = asyncio.get_running_loop()
        transport, answers = await loop.connect_accepted_socket(Answers, sock=mine)
        times = []
        for i in range(WARM_UP + calls):
            start = time.perf_counter()
            answers.waiter = loop.create_future()
            transport.write(frame(i))
            answer = json.loads((await answers.waiter)[4:])
            if i >= WARM_UP:
                times.append(time.perf_counter() - start)
        assert answer["value"] == "hello", answer
        transport.close()
        return times

    try:
        times = blocking_calls() if blocking else asyncio.run(awaited_calls())
    finally:
        mine.close()
        relay.wait(timeout=30)
    return {"sequential": summary(times)}


async def through_toolscript(calls: int, burst: int, bursts: int, **knobs: Any) -> dict[str, Any]:
    """A script in a toolscript shell calling the same server's tool."""
    config = {"mcpServers": {"demo": {"command": sys.executable, "args": [str(SERVER)]}}}
    with tempfile.TemporaryDirectory() as folder:
        return await _through_toolscript(config, folder, calls, burst, bursts, **knobs)


async def _through_toolscript(
    config: dict[str, Any], folder: str, calls: int, burst: int, bursts: int, **knobs: Any
) -> dict[str, Any]:
    async with Runtime(mcp_config=config, state_dir=folder, **knobs) as rt:  # journal in a file
        shell = rt.shell("bench")
        warm = await shell.run(SEQUENTIAL.format(warm=0, calls=WARM_UP))
        assert warm.status == "ok", warm.text
        interpreter = shell._interpreter
        pid = (interpreter.kernel_pid() if interpreter is not None else None) or 0
        host_cpu, kernel_cpu = time.process_time(), cpu_seconds(pid)
        sequential = await shell.run(SEQUENTIAL.format(warm=0, calls=calls))
        host_cpu, kernel_cpu = time.process_time() - host_cpu, cpu_seconds(pid) - kernel_cpu
        assert sequential.status == "ok", sequential.text
        times = [float(t) for t in eval(sequential.value or "[]")]
        result = await shell.run(BURSTS.format(burst=burst, bursts=bursts))
        assert result.status == "ok", result.text
        assert result.calls.by_fate == {"seen": burst * bursts}, result.text
        rates = [float(r) for r in eval(result.value or "[]")]
    return {
        "sequential": summary(times),
        "burst_calls_per_s": statistics.median(rates),
        "host_cpu_us_per_call": host_cpu / calls * 1e6,
        "kernel_cpu_us_per_call": kernel_cpu / calls * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--out", default="results/mcp_calls.json", help="relative to bench/")
    options = parser.parse_args()
    arguments = (options.calls, options.burst, options.bursts)
    rounds = []
    for index in range(options.rounds):
        load = os.getloadavg()[0]
        sides: list[tuple[str, Any]] = [
            ("direct", lambda: asyncio.run(direct(*arguments))),
            ("toolscript", lambda: asyncio.run(through_toolscript(*arguments))),
            ("relay", lambda: relayed(options.calls)),
            ("relay_blocking", lambda: relayed(options.calls, blocking=True)),
        ]
        got = {name: run() for name, run in (sides if index % 2 == 0 else sides[::-1])}
        theirs, ours = got["direct"], got["toolscript"]
        base = theirs["sequential"]["median_ms"]
        ratio = ours["sequential"]["median_ms"] / base
        rounds.append(
            {
                **got,
                "ratio": ratio,
                "relay_ratio": got["relay"]["sequential"]["median_ms"] / base,
                "relay_blocking_ratio": got["relay_blocking"]["sequential"]["median_ms"] / base,
                "load": load,
            }
        )
        print(
            f"round {index + 1}: direct {base:.3f} ms, "
            f"toolscript {ours['sequential']['median_ms']:.3f} ms, ratio {ratio:.3f}; "
            f"relay {rounds[-1]['relay_ratio']:.3f}, "
            f"relay to a blocking caller {rounds[-1]['relay_blocking_ratio']:.3f}; "
            f"bursts {theirs['burst_calls_per_s']:,.0f} / {ours['burst_calls_per_s']:,.0f} "
            f"calls/s (load {load:.2f})",
            flush=True,
        )

    def med(side: str, *path: str) -> float:
        values = []
        for entry in rounds:
            value: Any = entry[side]
            for key in path:
                value = value[key]
            values.append(float(value))
        return statistics.median(values)

    report: dict[str, Any] = {
        side: {
            "sequential_median_ms": med(side, "sequential", "median_ms"),
            "sequential_p99_ms": med(side, "sequential", "p99_ms"),
            "burst_calls_per_s": med(side, "burst_calls_per_s"),
            "host_cpu_us_per_call": med(side, "host_cpu_us_per_call"),
        }
        for side in ("direct", "toolscript")
    }
    report["toolscript"]["kernel_cpu_us_per_call"] = med("toolscript", "kernel_cpu_us_per_call")
    report["ratio"] = statistics.median(entry["ratio"] for entry in rounds)
    report["relay"] = {
        "sequential_median_ms": med("relay", "sequential", "median_ms"),
        "ratio": statistics.median(entry["relay_ratio"] for entry in rounds),
        "blocking_caller_sequential_median_ms": med("relay_blocking", "sequential", "median_ms"),
        "blocking_caller_ratio": statistics.median(
            entry["relay_blocking_ratio"] for entry in rounds
        ),
    }
    report["burst_ratio"] = statistics.median(
        entry["toolscript"]["burst_calls_per_s"] / entry["direct"]["burst_calls_per_s"]
        for entry in rounds
    )
    report["load"] = [entry["load"] for entry in rounds]
    report["rounds"] = rounds
    for side in ("direct", "toolscript"):
        figures = report[side]
        print(
            f"{side:10}: sequential median {figures['sequential_median_ms']:.3f} ms, "
            f"p99 {figures['sequential_p99_ms']:.3f} ms; burst {figures['burst_calls_per_s']:,.0f}"
            f" calls/s; host CPU {figures['host_cpu_us_per_call']:.0f} µs per call"
        )
    relay = report["relay"]
    print(
        f"relay (the floor of a hop) / direct: {relay['ratio']:.3f} awaited as a script "
        f"awaits, {relay['blocking_caller_ratio']:.3f} to a caller blocking in recv"
    )
    print(
        f"toolscript / direct: sequential {report['ratio']:.3f} (target at most 1.10), "
        f"burst throughput {report['burst_ratio']:.2f}"
    )
    out = Path(__file__).parent / options.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
