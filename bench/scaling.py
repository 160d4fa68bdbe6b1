"""Total tool calls per second with 1, 10 and 50 shells busy at once (issue 5).

    python bench/scaling.py [--rounds 5] [--calls 10000] [--shells 1 10 50]

One `Runtime` per measurement (a trivial Python tool `noop`, the journal in a file as by
default, `pool_size=0`, `max_interpreters` above the number of shells). Its shells are started
and warmed up first (not timed); then every shell runs the same script at once, and the time
from launching them all to the last result is the measurement. The `--calls` calls are split
evenly among the shells, so each configuration does the same total work:

- `sequential`: `for i in range(n): await noop(x=i)`, one call in flight per shell;
- `gather`: `await asyncio.gather(*[noop(x=i) for i in range(n)])`, all of a shell's calls in
  flight at once.

Every result is checked: status ok, every call `seen`. Reported per configuration: total
calls per second (median over rounds), its ratio to one shell's, and the host process's CPU
time over wall time (1.0 is one core busy), and the machine's busy cores over the same time
(all processes, from the system's idle time). Rounds interleave every configuration so machine
noise hits all alike. Results go to bench/results/scaling.json, the plot to
bench/results/scaling.png.
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

import psutil

from toolscript import Runtime, tool

SCRIPTS = {
    "sequential": "for i in range({calls}):\n    await noop(x=i)\n{calls}\n",
    "gather": (
        "import asyncio\n"
        "results = await asyncio.gather(*[noop(x=i) for i in range({calls})])\n"
        "assert results == list(range({calls}))\n"
        "len(results)\n"
    ),
}


@tool
async def noop(x: int) -> int:
    """Return x."""
    return x


async def calls_per_second(variant: str, shells: int, total: int, state: Path) -> dict[str, float]:
    """Total calls per second of `shells` shells running `variant` at once, `total` calls in all."""
    per_shell = total // shells
    async with Runtime(
        tools=[noop], state_dir=state, pool_size=0, max_interpreters=shells + 8
    ) as rt:
        await rt.template_ready()
        busy = [rt.shell(f"busy-{index}") for index in range(shells)]
        for shell in busy:
            result = await shell.run(SCRIPTS[variant].format(calls=20))
            assert result.status == "ok", result.text
        script = SCRIPTS[variant].format(calls=per_shell)
        machine = psutil.cpu_times()
        cpu = time.process_time()
        start = time.perf_counter()
        results = await asyncio.gather(*(shell.run(script) for shell in busy))
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        idle = psutil.cpu_times().idle - machine.idle
        for result in results:
            assert result.status == "ok", result.text
            assert result.calls.by_fate == {"seen": per_shell}, result.calls.by_fate
    return {
        "calls": float(per_shell * shells),
        "seconds": elapsed,
        "calls_per_s": per_shell * shells / elapsed,
        "host_cpu_per_wall": cpu / elapsed,
        "machine_busy_cores": psutil.cpu_count() - idle / elapsed,
    }


def plot(rows: dict[str, dict[str, dict[str, float]]], shells: list[int], path: Path) -> None:
    """Calls per second against the number of busy shells, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    for variant, by_shells in rows.items():
        rates = [by_shells[str(count)]["calls_per_s"] for count in shells]
        axes.plot(shells, rates, marker="o", label=variant)
    axes.set_xscale("log")
    axes.set_xticks(shells, [str(count) for count in shells])
    axes.set_ylim(bottom=0)
    axes.set_xlabel("shells busy at once")
    axes.set_ylabel("tool calls per second (all shells)")
    axes.set_title("toolscript: total tool calls per second (median of rounds)")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--shells", type=int, nargs="+", default=[1, 10, 50])
    options = parser.parse_args()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for index in range(options.rounds):
            entry: dict[str, Any] = {}
            for variant in SCRIPTS:
                for shells in options.shells:
                    state = Path(folder) / f"{index}-{variant}-{shells}"
                    entry.setdefault(variant, {})[str(shells)] = asyncio.run(
                        calls_per_second(variant, shells, options.calls, state)
                    )
            rounds.append(entry)
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for variant in SCRIPTS:
        for shells in options.shells:
            key = str(shells)
            rows.setdefault(variant, {})[key] = {
                measure: statistics.median(entry[variant][key][measure] for entry in rounds)
                for measure in ("calls_per_s", "host_cpu_per_wall", "machine_busy_cores")
            }
        one = rows[variant][str(options.shells[0])]["calls_per_s"]
        for shells in options.shells:
            row = rows[variant][str(shells)]
            row["ratio_to_first"] = row["calls_per_s"] / one
    report = {"calls_per_configuration": options.calls, "rows": rows, "rounds": rounds}
    for variant, by_shells in rows.items():
        for key, row in by_shells.items():
            print(
                f"{variant:10} {key:>3} shells: {row['calls_per_s']:9,.0f} calls/s "
                f"(x{row['ratio_to_first']:.2f}), host CPU/wall {row['host_cpu_per_wall']:.2f}, "
                f"machine busy cores {row['machine_busy_cores']:.2f}"
            )
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "scaling.json").write_text(json.dumps(report, indent=2))
    plot(rows, options.shells, out / "scaling.png")


if __name__ == "__main__":
    main()
