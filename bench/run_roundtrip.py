"""A trivial run's round trip on a warm shell, beside the raw round trip (issue 2).

    python bench/run_roundtrip.py [--runs 2000] [--rounds 5]

Each round measures, interleaved so machine noise hits all alike:

- the raw Python-to-Python round trip (the floor, `floor.py`);
- `await shell.run("1")` with the default runtime (journal in a file, busy polling on): the
  row the targets apply to;
- the same with the journal in memory, and with busy polling off (`busy_poll=0`), to show
  what each costs or buys.

Targets: median under 0.5 ms, and within 4 times the raw round trip measured in the same run.
The report gives medians over rounds; results go to bench/results/run_roundtrip.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from floor import raw_round_trips, summary

from toolscript import Runtime


async def run_round_trips(runs: int, journal: str, **knobs: Any) -> list[float]:
    async with Runtime(journal=journal, **knobs) as rt:
        shell = rt.shell("bench")
        for _ in range(100):
            await shell.run("1")
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            result = await shell.run("1")
            times.append(time.perf_counter() - start)
            assert result.status == "ok", result.text
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="results/run_roundtrip.json", help="relative to bench/")
    options = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as folder:
        for index in range(options.rounds):
            raw = summary(raw_round_trips(options.runs))
            journal = str(Path(folder) / f"journal-{index}.sqlite3")
            run = summary(asyncio.run(run_round_trips(options.runs, journal)))
            memory = summary(asyncio.run(run_round_trips(options.runs, ":memory:")))
            still = summary(asyncio.run(run_round_trips(options.runs, journal, busy_poll=0)))
            rounds.append(
                {
                    "raw": raw,
                    "run": run,
                    "run_memory_journal": memory,
                    "run_busy_poll_off": still,
                    "ratio": run["median_ms"] / raw["median_ms"],
                }
            )

    def med(key: str, field: str = "median_ms") -> float:
        return statistics.median(r[key][field] for r in rounds)

    report = {
        "raw_median_ms": med("raw"),
        "run_median_ms": med("run"),
        "run_p99_ms": med("run", "p99_ms"),
        "ratio_median": statistics.median(r["ratio"] for r in rounds),
        "run_memory_journal_median_ms": med("run_memory_journal"),
        "run_busy_poll_off_median_ms": med("run_busy_poll_off"),
        "rounds": rounds,
    }
    print(f"raw Python-to-Python round trip: median {report['raw_median_ms']:.3f} ms")
    print(
        f"trivial run on a warm shell:     median {report['run_median_ms']:.3f} ms, "
        f"p99 {report['run_p99_ms']:.3f} ms"
    )
    print(f"ratio run/raw (median of rounds): {report['ratio_median']:.2f}")
    print(
        f"  with the journal in memory:    median {report['run_memory_journal_median_ms']:.3f} ms"
    )
    print(f"  with busy polling off:         median {report['run_busy_poll_off_median_ms']:.3f} ms")
    out = Path(__file__).parent / options.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
