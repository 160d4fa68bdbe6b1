"""What the sandbox costs: the same figures with `sandbox="required"` and `sandbox="off"`.

Measured in the same run, rounds interleaving the two configurations (medians of each
round's median, over `--rounds` rounds):

- **new shell, warm pool**: `await rt.shell(new).run("1")` with a warm interpreter ready
  (the pool refills between samples); target: within 10 ms with the sandbox on;
- **trivial run**: `await shell.run("1")` on a warm shell; target: within 10% of off;
- **tool call**: one sequential `await noop(x=i)` timed inside the script; target: within
  10% of off;
- **cold start**: a new shell's first run with no template and no pool (`fork=False,
  pool_size=0`), beside the floors measured in the same rounds: `python -I -S -c "import
  asyncio"` and `bwrap --ro-bind / / true`; target: at most 1.5 x the Python floor plus the
  bwrap floor;
- **memory per idle interpreter**: USS and PSS of an idle interpreter's processes (with the
  sandbox: its init and its kernel); target: within 2 MB of off.

    python bench/sandbox.py [--rounds 5]

Writes `bench/results/sandbox.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from tool_calls import SEQUENTIAL, noop

from toolscript import Runtime
from toolscript.host.sandbox import find_bwrap

MODES = ("required", "off")


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def warm_figures(mode: str, shells: int, runs: int, calls: int) -> dict[str, float]:
    async with Runtime(
        tools=[noop], journal=":memory:", sandbox=mode, pool_size=2, idle_timeout=None
    ) as rt:
        await rt.template_ready()
        await rt.run("1")
        new_shell = []
        for n in range(shells):
            while rt._pool is not None and rt._pool.warm < 1:  # a warm one is ready
                await asyncio.sleep(0.005)
            start = time.perf_counter()
            result = await rt.shell(f"s{n}").run("1")
            new_shell.append(time.perf_counter() - start)
            assert result.status == "ok", result.text
            await rt.shell(f"s{n}").close()
        shell = rt.shell("warm")
        await shell.run("1")
        trivial = []
        for _ in range(runs):
            start = time.perf_counter()
            await shell.run("1")
            trivial.append(time.perf_counter() - start)
        result = await shell.run(SEQUENTIAL.format(calls=calls))
        assert result.status == "ok", result.text
        tool_call = [float(t) for t in eval(result.value or "[]")][50:]
        memory = idle_memory(rt)
    return {
        "new_shell_warm_ms": median_ms(new_shell),
        "trivial_run_ms": median_ms(trivial),
        "tool_call_ms": median_ms(tool_call),
        **memory,
    }


def idle_memory(rt: Runtime) -> dict[str, float]:
    """USS and PSS (MB) of the warm shell's interpreter: all its processes."""
    interpreter = rt.shell("warm")._interpreter
    assert interpreter is not None and interpreter.pid is not None
    top = psutil.Process(interpreter.pid)
    processes = [top, *top.children(recursive=True)]
    uss = sum(process.memory_full_info().uss for process in processes)
    pss = sum(process.memory_full_info().pss for process in processes)
    return {"idle_uss_mb": uss / 2**20, "idle_pss_mb": pss / 2**20}


async def cold_start(mode: str, samples: int) -> float:
    times = []
    async with Runtime(journal=":memory:", sandbox=mode, fork=False, pool_size=0) as rt:
        for n in range(samples):
            start = time.perf_counter()
            result = await rt.shell(f"c{n}").run("1")
            times.append(time.perf_counter() - start)
            assert result.status == "ok", result.text
            await rt.shell(f"c{n}").close()
    return median_ms(times)


def command_ms(command: list[str], samples: int) -> float:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        subprocess.run(command, check=True)
        times.append(time.perf_counter() - start)
    return median_ms(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shells", type=int, default=20)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument(
        "--calls",
        type=int,
        default=1000,
        help="sequential calls a round, over 50 (the first 50 warm up and are not timed)",
    )
    parser.add_argument("--cold", type=int, default=8)
    args = parser.parse_args()
    if args.calls <= 50:
        parser.error(f"--calls must be over 50 (the first 50 warm up), not {args.calls}")
    bwrap = find_bwrap()
    assert bwrap is not None, "bubblewrap is needed"
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        row: dict[str, Any] = {
            "python_floor_ms": command_ms(
                [sys.executable, "-I", "-S", "-c", "import asyncio"], args.cold
            ),
            "bwrap_floor_ms": command_ms([bwrap, "--ro-bind", "/", "/", "true"], args.cold),
        }
        for mode in MODES:
            row[mode] = asyncio.run(warm_figures(mode, args.shells, args.runs, args.calls))
            row[mode]["cold_start_ms"] = asyncio.run(cold_start(mode, args.cold))
        rounds.append(row)
        print(f"round {number + 1}: {json.dumps(row)}", flush=True)
    figures = [*rounds[0]["off"]]
    report: dict[str, Any] = {
        "python_floor_ms": statistics.median(row["python_floor_ms"] for row in rounds),
        "bwrap_floor_ms": statistics.median(row["bwrap_floor_ms"] for row in rounds),
    }
    for mode in MODES:
        report[mode] = {
            figure: statistics.median(row[mode][figure] for row in rounds) for figure in figures
        }
    on, off = report["required"], report["off"]
    report["ratios_on_over_off"] = {
        figure: on[figure] / off[figure] for figure in ("trivial_run_ms", "tool_call_ms")
    }
    report["cold_start_over_floors"] = on["cold_start_ms"] / (
        1.5 * report["python_floor_ms"] + report["bwrap_floor_ms"]
    )
    report["idle_uss_mb_on_minus_off"] = on["idle_uss_mb"] - off["idle_uss_mb"]
    report["idle_pss_mb_on_minus_off"] = on["idle_pss_mb"] - off["idle_pss_mb"]
    report["rounds"] = rounds
    out = Path(__file__).parent / "results" / "sandbox.json"
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps({key: value for key, value in report.items() if key != "rounds"}, indent=2))


if __name__ == "__main__":
    main()
