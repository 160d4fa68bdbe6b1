"""A tool call's cost, beside the raw floor measured in the same run (issues 3 and 4).

    python bench/tool_calls.py [--rounds 5] [--calls 2000] [--gather 1000]

Measures, in each round (rounds interleave everything so machine noise hits all alike):

- the raw Python-to-Python round trip of a 200-byte frame (the floor): a bare
  length-prefixed echo over a socket pair between two Python processes (`floor.py`);
- the same echo with asyncio's event loop on both sides, and the CPU its echoing side spends
  per round trip: the floor of any host and kernel that each run one (`floor.py`);
- the least any Python tool call between two processes costs: a JSON call frame, a Python
  function called with its arguments, a JSON answer, both sides blocking, no event loop,
  no checks and no journal (`floor.py`);
- a trivial Python tool's round trip from the script: `await noop(x=i)` in a loop, each call
  timed inside the script (median, p99);
- calls per second from one script through `asyncio.gather` over `--gather` calls: the
  median of ten gathers, and the sustained rate (all their calls over all their time);
- the same throughput with the journal in a file (the default), in memory, and off (a journal
  that does nothing, for comparison only: toolscript itself never runs without one);
- the round trip and throughput with busy polling off (`busy_poll=0`), and the CPU each
  sequential call costs the host process and the kernel process, with polling on and off:
  what busy polling buys, and what it costs.

Targets (issue 16): a sequential call's median at most 3 times the bare echo's, and its p99
at most 3 times its median; the host's CPU per sequential call at most 50 µs with busy polling
off, and polling costing no more CPU than the wake-ups it saves; at least 39,000 calls per
second through gather with the file journal, which costs at most 25% of throughput against
no journal.
Results go to bench/results/tool_calls.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from floor import (
    asyncio_round_trips,
    cpu_seconds,
    json_call_round_trips,
    raw_round_trips,
    summary,
)

from toolscript import Runtime, tool
from toolscript.host.journal import Journal


@tool
async def noop(x: int) -> int:
    """Return x."""
    return x


class NullJournal:
    """A journal that records nothing: the 'journal off' baseline of this benchmark only."""

    def __getattr__(self, name: str) -> Any:
        if name in ("untold_uncertain", "uncertain", "calls", "scripts"):
            return lambda *args, **kwargs: []
        return lambda *args, **kwargs: None


@contextmanager
def journal_off() -> Iterator[None]:
    with mock.patch.object(Journal, "open", classmethod(lambda cls, where: NullJournal())):
        yield


SEQUENTIAL = """
import time
times = []
for i in range({calls}):
    start = time.perf_counter()
    await noop(x=i)
    times.append(time.perf_counter() - start)
times
"""

GATHER = """
import asyncio, time
start = time.perf_counter()
results = await asyncio.gather(*[noop(x=i) for i in range({calls})])
assert results == list(range({calls}))
{calls} / (time.perf_counter() - start)
"""


async def measure(
    journal: str, calls: int, gather: int, repeats: int = 10, **knobs: Any
) -> dict[str, Any]:
    async with Runtime(tools=[noop], journal=journal, **knobs) as rt:
        shell = rt.shell("bench")
        await shell.run(GATHER.format(calls=gather))  # warm up
        interpreter = shell._interpreter
        pid = (interpreter.kernel_pid() if interpreter is not None else None) or 0
        host_cpu, kernel_cpu = time.process_time(), cpu_seconds(pid)
        sequential = await shell.run(SEQUENTIAL.format(calls=calls))
        # The journal writes a script's records once the script has ended: counted here.
        rt.journal.flush()
        host_cpu, kernel_cpu = time.process_time() - host_cpu, cpu_seconds(pid) - kernel_cpu
        assert sequential.status == "ok", sequential.text
        times = [float(t) for t in eval(sequential.value or "[]")][100:]
        rates = []
        for _ in range(repeats):
            result = await shell.run(GATHER.format(calls=gather))
            assert result.status == "ok" and result.calls.by_fate == {"seen": gather}, result.text
            rates.append(float(result.value or 0))
    return {
        "round_trip": summary(times),
        "gather_calls_per_s": statistics.median(rates),
        # Total calls over total time: the journal's flush, which runs between scripts where
        # it can, falls into some gathers and not others, so the median gather can miss the
        # flush that the total pays for.
        "gather_sustained_calls_per_s": statistics.harmonic_mean(rates),
        "host_cpu_us_per_call": host_cpu / calls * 1e6,
        "kernel_cpu_us_per_call": kernel_cpu / calls * 1e6,
        "sandbox": rt.sandbox,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--calls",
        type=int,
        default=2000,
        help="sequential calls a round, over 100 (the first 100 warm up and are not timed)",
    )
    parser.add_argument("--gather", type=int, default=1000)
    parser.add_argument("--out", default="results/tool_calls.json", help="relative to bench/")
    options = parser.parse_args()
    if options.calls <= 100:
        parser.error(f"--calls must be over 100 (the first 100 warm up), not {options.calls}")
    rounds = []
    with tempfile.TemporaryDirectory() as folder:
        for index in range(options.rounds):
            raw = summary(raw_round_trips(options.calls))
            asyncio_times, asyncio_cpu = asyncio_round_trips(options.calls)
            raw["asyncio"] = {**summary(asyncio_times), "echo_cpu_us": asyncio_cpu * 1e6}
            json_times, json_cpu = json_call_round_trips(options.calls)
            raw["json_call"] = {**summary(json_times), "callee_cpu_us": json_cpu * 1e6}
            file_journal = str(Path(folder) / f"journal-{index}.sqlite3")
            on = asyncio.run(measure(file_journal, options.calls, options.gather))
            memory = asyncio.run(measure(":memory:", options.calls, options.gather))
            with journal_off():
                off = asyncio.run(measure(":memory:", options.calls, options.gather))
            still = asyncio.run(measure(file_journal, options.calls, options.gather, busy_poll=0))
            rounds.append({"raw": raw, "file": on, "memory": memory, "off": off, "still": still})

    def med(path: list[str]) -> float:
        values = []
        for entry in rounds:
            value: Any = entry
            for key in path:
                value = value[key]
            values.append(float(value))
        return statistics.median(values)

    raw_ms = med(["raw", "median_ms"])
    asyncio_ms = med(["raw", "asyncio", "median_ms"])
    call_ms = med(["file", "round_trip", "median_ms"])
    report = {
        "raw_round_trip_median_ms": raw_ms,
        "tool_round_trip_median_ms": call_ms,
        "tool_round_trip_p99_ms": med(["file", "round_trip", "p99_ms"]),
        "round_trip_ratio": call_ms / raw_ms,
        "gather_calls_per_s_file_journal": med(["file", "gather_calls_per_s"]),
        "gather_calls_per_s_memory_journal": med(["memory", "gather_calls_per_s"]),
        "gather_calls_per_s_journal_off": med(["off", "gather_calls_per_s"]),
        "gather_sustained_calls_per_s": {
            key: med([key, "gather_sustained_calls_per_s"]) for key in ("file", "memory", "off")
        },
        "rounds": rounds,
    }
    report["asyncio_echo"] = {
        "round_trip_median_ms": asyncio_ms,
        "echo_cpu_us": med(["raw", "asyncio", "echo_cpu_us"]),
        "tool_call_over_asyncio_echo": call_ms / asyncio_ms,
    }
    json_call_ms = med(["raw", "json_call", "median_ms"])
    report["json_call"] = {
        "round_trip_median_ms": json_call_ms,
        "over_echo": json_call_ms / raw_ms,
        "callee_cpu_us": med(["raw", "json_call", "callee_cpu_us"]),
        "tool_call_over_json_call": call_ms / json_call_ms,
    }
    report["tool_round_trip_p99_over_median"] = med(["file", "round_trip", "p99_ms"]) / call_ms
    report["busy_poll_off"] = {
        "tool_round_trip_median_ms": med(["still", "round_trip", "median_ms"]),
        "tool_round_trip_p99_ms": med(["still", "round_trip", "p99_ms"]),
        "round_trip_ratio": med(["still", "round_trip", "median_ms"]) / raw_ms,
        "gather_calls_per_s": med(["still", "gather_calls_per_s"]),
    }
    report["cpu_us_per_sequential_call"] = {
        "busy_poll_on": {
            "host": med(["file", "host_cpu_us_per_call"]),
            "kernel": med(["file", "kernel_cpu_us_per_call"]),
        },
        "busy_poll_off": {
            "host": med(["still", "host_cpu_us_per_call"]),
            "kernel": med(["still", "kernel_cpu_us_per_call"]),
        },
    }
    report["measured"] = {
        "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "sandbox": sorted({entry[key]["sandbox"] for entry in rounds for key in ("file", "still")}),
    }
    sustained = report["gather_sustained_calls_per_s"]
    report["file_journal_cost"] = 1 - sustained["file"] / sustained["off"]
    report["file_journal_cost_median_gather"] = (
        1 - report["gather_calls_per_s_file_journal"] / report["gather_calls_per_s_journal_off"]
    )
    print(f"bare socket echo (the floor):  median {raw_ms:.3f} ms")
    print(
        f"asyncio echo (an event loop on each side): median {asyncio_ms:.3f} ms, "
        f"the echoing side's CPU {report['asyncio_echo']['echo_cpu_us']:.0f} µs per round trip"
    )
    print(
        f"least Python tool call (JSON, blocking, no loop): median {json_call_ms:.3f} ms, "
        f"{report['json_call']['over_echo']:.1f} x the echo, the called side's CPU "
        f"{report['json_call']['callee_cpu_us']:.0f} µs per call"
    )
    print(
        f"tool call round trip (file journal): median {call_ms:.3f} ms, "
        f"p99 {report['tool_round_trip_p99_ms']:.3f} ms "
        f"({report['tool_round_trip_p99_over_median']:.1f} x the median), "
        f"{report['round_trip_ratio']:.1f} x the echo"
    )
    for key, short in (
        ("file_journal", "file"),
        ("memory_journal", "memory"),
        ("journal_off", "off"),
    ):
        print(
            f"calls/s through gather, {key:15}: {report['gather_calls_per_s_' + key]:,.0f} "
            f"(median gather), {sustained[short]:,.0f} sustained"
        )
    print(
        f"throughput cost of the file journal: {report['file_journal_cost']:.1%} sustained, "
        f"{report['file_journal_cost_median_gather']:.1%} by median gathers"
    )
    still = report["busy_poll_off"]
    print(
        f"busy polling off: round trip {still['tool_round_trip_median_ms']:.3f} ms "
        f"(ratio {still['round_trip_ratio']:.1f}), gather {still['gather_calls_per_s']:,.0f} calls/s"
    )
    for key, cpu in report["cpu_us_per_sequential_call"].items():
        print(
            f"CPU per sequential call, {key}: host {cpu['host']:.0f} µs, kernel {cpu['kernel']:.0f} µs"
        )
    # Issue 16's targets, each against its floor as measured in this run.
    cpu = report["cpu_us_per_sequential_call"]
    polled, slept = sum(cpu["busy_poll_on"].values()), sum(cpu["busy_poll_off"].values())
    targets = [
        (
            "a sequential call at most 3 x the bare echo",
            report["round_trip_ratio"] <= 3,
            f"{report['round_trip_ratio']:.2f} x",
        ),
        (
            "its p99 at most 3 x its median",
            report["tool_round_trip_p99_over_median"] <= 3,
            f"{report['tool_round_trip_p99_over_median']:.2f} x",
        ),
        (
            "host CPU per call at most 50 µs, polling off",
            cpu["busy_poll_off"]["host"] <= 50,
            f"{cpu['busy_poll_off']['host']:.0f} µs",
        ),
        (
            "polling costs no more CPU than the wake-ups it saves",
            polled <= slept,
            f"host and kernel {polled:.0f} µs a call polling, {slept:.0f} µs not",
        ),
        (
            "gather at least 39,000 calls/s, file journal",
            report["gather_calls_per_s_file_journal"] >= 39_000,
            f"{report['gather_calls_per_s_file_journal']:,.0f}",
        ),
        (
            "the file journal costs at most 25%",
            report["file_journal_cost"] <= 0.25,
            f"{report['file_journal_cost']:.1%}",
        ),
    ]
    report["targets"] = {name: {"met": met, "figure": said} for name, met, said in targets}
    print(f"sandbox: {', '.join(report['measured']['sandbox'])}")
    for name, met, said in targets:
        print(f"target, {name}: {'met' if met else 'not met'} ({said})")
    out = Path(__file__).parent / options.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
