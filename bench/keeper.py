"""What the keeper costs, and how fast a new host takes shells back.

Measured in the same run, rounds interleaving `keep_interpreters=True` and `False` (medians of
each round's median, over `--rounds` rounds), both with the default sandbox:

- **trivial run**: `await shell.run("1")` on a warm shell; target: within 10% of no keeper;
- **tool call**: one sequential `await noop(x=i)` timed inside the script; target: within
  10% of no keeper;
- **reattach of N shells** (`--shells`, 50 by default): a host process makes N shells, each
  holding a variable, and is killed with SIGKILL; then a new host's `Runtime.start()` on the
  same state directory is timed, and, within it, taking the N shells back (from the keeper's
  hello to the last shell in place). Target: under 200 ms after the new host starts.

    python bench/keeper.py [--rounds 5] [--shells 50]

Writes `bench/results/keeper.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from tool_calls import SEQUENTIAL, noop

from toolscript import Runtime

_HOST = textwrap.dedent(
    """
    import asyncio, sys
    from toolscript import Runtime

    async def main():
        rt = await Runtime(
            state_dir=sys.argv[1], keep_interpreters=True, pool_size=0, max_interpreters=200
        ).start()
        shells = int(sys.argv[2])
        await asyncio.gather(*(rt.shell(f"s{n}").run(f"x = {n}") for n in range(shells)))
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def warm_figures(keep: bool, runs: int, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as state:
        async with Runtime(
            tools=[noop], state_dir=state, keep_interpreters=keep, pool_size=1, idle_timeout=None
        ) as rt:
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
    return {"trivial_run_ms": median_ms(trivial), "tool_call_ms": median_ms(tool_call)}


async def reattach(shells: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as state:
        host = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _HOST, state, str(shells), stdout=asyncio.subprocess.PIPE
        )
        assert host.stdout is not None
        line = await asyncio.wait_for(host.stdout.readline(), 120)
        assert line.strip() == b"ready", line
        host.send_signal(signal.SIGKILL)
        await host.wait()
        rt = Runtime(state_dir=state, keep_interpreters=True, pool_size=0, max_interpreters=200)
        taking: list[float] = []
        original = Runtime._reattach

        async def timed(self: Runtime, keeper: Any) -> None:
            began = time.perf_counter()
            await original(self, keeper)
            taking.append(time.perf_counter() - began)

        Runtime._reattach = timed  # type: ignore[method-assign]
        try:
            start = time.perf_counter()
            await rt.start()
            whole = time.perf_counter() - start
        finally:
            Runtime._reattach = original  # type: ignore[method-assign]
        try:
            check = await rt.shell(f"s{shells - 1}").run("x")
            assert (check.status, check.value) == ("ok", str(shells - 1)), check.text
            assert rt.shell("s0").generation == 1
        finally:
            await rt.aclose()
    return {"start_with_reattach_ms": whole * 1000, "reattach_ms": taking[0] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument(
        "--calls",
        type=int,
        default=1000,
        help="sequential calls a round, over 50 (the first 50 warm up and are not timed)",
    )
    parser.add_argument("--shells", type=int, default=50)
    args = parser.parse_args()
    if args.calls <= 50:
        parser.error(f"--calls must be over 50 (the first 50 warm up), not {args.calls}")
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        row: dict[str, Any] = {}
        for keep in (True, False):
            row["keeper" if keep else "no_keeper"] = asyncio.run(
                warm_figures(keep, args.runs, args.calls)
            )
        row["reattach"] = asyncio.run(reattach(args.shells))
        rounds.append(row)
        print(f"round {number + 1}: {json.dumps(row)}", flush=True)
    report: dict[str, Any] = {"shells": args.shells, "load": os.getloadavg()[0]}
    for part in ("keeper", "no_keeper", "reattach"):
        report[part] = {
            figure: statistics.median(row[part][figure] for row in rounds)
            for figure in rounds[0][part]
        }
    report["ratios_keeper_over_none"] = {
        figure: report["keeper"][figure] / report["no_keeper"][figure]
        for figure in ("trivial_run_ms", "tool_call_ms")
    }
    report["rounds"] = rounds
    out = Path(__file__).parent / "results" / "keeper.json"
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps({key: value for key, value in report.items() if key != "rounds"}, indent=2))


if __name__ == "__main__":
    main()
