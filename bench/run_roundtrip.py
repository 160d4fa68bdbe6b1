"""A trivial run's round trip on a warm shell, beside the raw round trip (issue 2).

    python bench/run_roundtrip.py [--runs 2000] [--rounds 5]

Targets: median under 0.5 ms, and within 4 times the raw round trip measured in the same run.
Each round measures both, interleaved, so machine noise hits both alike; the report gives
medians over rounds. Results are also written to bench/results/run_roundtrip.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from floor import raw_round_trips, summary

from toolscript import Runtime


async def run_round_trips(runs: int) -> list[float]:
    async with Runtime(journal=":memory:") as rt:
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
    options = parser.parse_args()
    rounds = []
    for _ in range(options.rounds):
        raw = summary(raw_round_trips(options.runs))
        run = summary(asyncio.run(run_round_trips(options.runs)))
        rounds.append({"raw": raw, "run": run, "ratio": run["median_ms"] / raw["median_ms"]})
    report = {
        "raw_median_ms": statistics.median(r["raw"]["median_ms"] for r in rounds),
        "run_median_ms": statistics.median(r["run"]["median_ms"] for r in rounds),
        "run_p99_ms": statistics.median(r["run"]["p99_ms"] for r in rounds),
        "ratio_median": statistics.median(r["ratio"] for r in rounds),
        "rounds": rounds,
    }
    print(f"raw Python-to-Python round trip: median {report['raw_median_ms']:.3f} ms")
    print(
        f"trivial run on a warm shell:     median {report['run_median_ms']:.3f} ms, "
        f"p99 {report['run_p99_ms']:.3f} ms"
    )
    print(f"ratio run/raw (median of rounds): {report['ratio_median']:.2f}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "run_roundtrip.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
