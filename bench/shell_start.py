"""A new shell's first trivial run: from the warm pool, forked from the template, and cold (issue 5).

    python bench/shell_start.py [--rounds 5] [--shells 30] [--slow-shells 10]

Each sample is `await rt.shell(new_name).run("1")`, timed from the call to the result, on a
shell that has never run. Configurations, each with its own `Runtime` (no tools, journal in
memory), measured in every round:

- `warm_pool`: default knobs, the template ready and the pool full (`pool_size` warm
  interpreters) before each sample. Timed: take a started kernel from the pool, hand it to
  the shell (one `setup` round trip: its folder), run "1". The pool's refill (a fork) starts
  during the sample, as it would in use.
- `template`: `pool_size=0`, the template ready. Timed: the template forks a kernel, the
  kernel says `ready`, `setup`, run "1".
- `cold`: `fork=False, pool_size=0`. Timed: spawn `python -I` with the kernel's bootstrap,
  the kernel's imports (asyncio) and `ready`, `setup`, run "1".
- `warm_pool_pandas`, `template_pandas`, `cold_pandas`: the same with `preload=["pandas"]`;
  cold, the kernel imports pandas itself before it says `ready`.

Peers, in the same rounds, each process timed twice: from spawn to exit (the whole command, as
a shell would time it: it includes the interpreter's teardown, which the rows above do not),
and from spawn to the line it writes once its import is done (`*_to_imported`: no teardown).
The rows above include a handshake and one run, which the peers do not.

- `python -I -S -c pass` (a bare interpreter), `python -I -S -c 'import asyncio'` (the floor
  for an asyncio-based kernel), `python -I -c 'import asyncio'` (the same with `site`, as the
  kernel is started), `python -I -c 'import pandas'`.

Every interpreter is `sys.executable` (never a PATH shim). Shells are closed between samples,
outside the timing. `--shells` samples per round for each configuration, `--slow-shells` for
the two that import pandas from scratch (`cold_pandas` and the pandas peer).

Targets: warm pool and template medians under 10 ms, also with pandas preloaded; cold at most
1.5 times the `import asyncio` floor (the ratio of medians, computed per round; the report gives
the median of rounds), against the floor to exit and, stricter, to the import's end. Results go to bench/results/shell_start.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolscript import Runtime


@dataclass(frozen=True)
class Configuration:
    """One way of giving a new shell its interpreter, and what a sample of it times."""

    name: str
    timed: str
    knobs: dict[str, Any] = field(default_factory=dict)
    forked: bool = True
    slow: bool = False


CONFIGURATIONS = [
    Configuration(
        "warm_pool",
        "pool hand-out + setup round trip + run '1' (pool full before the sample)",
        {},
    ),
    Configuration(
        "template",
        "template fork + kernel ready + setup + run '1' (pool_size=0)",
        {"pool_size": 0},
    ),
    Configuration(
        "cold",
        "spawn python -I + kernel imports + ready + setup + run '1' (fork=False, pool_size=0)",
        {"fork": False, "pool_size": 0},
        forked=False,
    ),
    Configuration(
        "warm_pool_pandas",
        "as warm_pool, with preload=['pandas'] (imported once, in the template)",
        {"preload": ["pandas"]},
    ),
    Configuration(
        "template_pandas",
        "as template, with preload=['pandas'] (imported once, in the template)",
        {"preload": ["pandas"], "pool_size": 0},
    ),
    Configuration(
        "cold_pandas",
        "as cold, with preload=['pandas'] (each kernel imports pandas before ready)",
        {"preload": ["pandas"], "fork": False, "pool_size": 0},
        forked=False,
        slow=True,
    ),
]

PEERS = {
    "python_bare": ["-I", "-S", "-c", "pass"],
    "import_asyncio_floor": ["-I", "-S", "-c", "import asyncio"],
    "import_asyncio_with_site": ["-I", "-c", "import asyncio"],
    "import_pandas": ["-I", "-c", "import pandas"],
}
IMPORTED = "\nimport os; os.write(1, b'.')"
SLOW_PEERS = {"import_pandas"}
WARM_WAIT = 30.0


async def wait_warm(rt: Runtime) -> None:
    """Wait (bounded) until the runtime's pool holds `pool_size` started interpreters."""
    pool = rt._pool
    assert pool is not None
    deadline = time.monotonic() + WARM_WAIT
    while pool.warm < rt.pool_size:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pool did not refill within {WARM_WAIT:g} s")
        await asyncio.sleep(0.002)


async def new_shell_starts(
    config: Configuration, count: int, state: Path
) -> tuple[list[float], float]:
    """Seconds of each new shell's first run "1", and seconds until the template was ready."""
    started = time.perf_counter()
    async with Runtime(journal=":memory:", state_dir=state, **config.knobs) as rt:
        forks = await rt.template_ready()
        template_ready = time.perf_counter() - started
        if forks != config.forked:
            raise RuntimeError(f"{config.name}: forks={forks}, failure: {rt.template_failure}")
        times = []
        for index in range(count + 1):  # the first is a warm-up, not counted
            if rt.pool_size:
                await wait_warm(rt)
            shell = rt.shell(f"{config.name}-{index}")
            start = time.perf_counter()
            result = await shell.run("1")
            elapsed = time.perf_counter() - start
            interpreter = shell._interpreter
            assert result.status == "ok" and result.value == "1", result.text
            assert interpreter is not None and interpreter.forked == config.forked
            await shell.close()
            if index:
                times.append(elapsed)
        return times, template_ready


def process_times(arguments: list[str], count: int) -> tuple[list[float], list[float]]:
    """Seconds from spawn to the end of the code, and to exit, of `sys.executable arguments`.

    `count` times after a warm-up. The code's end is a byte it writes on stdout last.
    """
    imported, exited = [], []
    command = [sys.executable, *arguments[:-1], arguments[-1] + IMPORTED]
    for index in range(count + 1):
        start = time.perf_counter()
        with subprocess.Popen(command, stdout=subprocess.PIPE) as process:
            assert process.stdout is not None
            assert process.stdout.read(1) == b"."
            done = time.perf_counter()
            assert process.wait() == 0
        end = time.perf_counter()
        if index:
            imported.append(done - start)
            exited.append(end - start)
    return imported, exited


def percentile(values: list[float], fraction: float) -> float:
    """The value at `fraction` of the sorted values (nearest rank below)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shells", type=int, default=30)
    parser.add_argument("--slow-shells", type=int, default=10)
    options = parser.parse_args()
    samples: dict[str, list[float]] = {}
    round_medians: dict[str, list[float]] = {}
    template_ready: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(options.rounds):
            for config in CONFIGURATIONS:
                count = options.slow_shells if config.slow else options.shells
                times, ready = asyncio.run(new_shell_starts(config, count, Path(folder)))
                samples.setdefault(config.name, []).extend(times)
                round_medians.setdefault(config.name, []).append(statistics.median(times))
                template_ready.setdefault(config.name, []).append(ready)
            for name, arguments in PEERS.items():
                count = options.slow_shells if name in SLOW_PEERS else options.shells
                imported, exited = process_times(arguments, count)
                for key, times in ((f"{name}_to_imported", imported), (name, exited)):
                    samples.setdefault(key, []).extend(times)
                    round_medians.setdefault(key, []).append(statistics.median(times))

    def ratio(top: str, bottom: str) -> float:
        return statistics.median(
            a / b for a, b in zip(round_medians[top], round_medians[bottom], strict=True)
        )

    rows: dict[str, dict[str, Any]] = {}
    for config in CONFIGURATIONS:
        rows[config.name] = {"timed": config.timed, "knobs": config.knobs}
    for name, arguments in PEERS.items():
        command = f"python {' '.join(arguments[:-1])} '{arguments[-1]}'"
        rows[f"{name}_to_imported"] = {"timed": f"spawn to the code's end of {command}"}
        rows[name] = {"timed": f"spawn to exit of {command}"}
    for name, row in rows.items():
        row["median_ms"] = statistics.median(round_medians[name]) * 1000
        row["p99_ms"] = percentile(samples[name], 0.99) * 1000
        row["samples"] = len(samples[name])
        row["round_medians_ms"] = [value * 1000 for value in round_medians[name]]
    for config in CONFIGURATIONS:
        if config.forked:
            rows[config.name]["template_ready_s"] = statistics.median(template_ready[config.name])
    report: dict[str, Any] = {
        "rows": rows,
        "ratios": {
            "cold_over_import_asyncio_floor": ratio("cold", "import_asyncio_floor"),
            "cold_over_import_asyncio_floor_to_imported": ratio(
                "cold", "import_asyncio_floor_to_imported"
            ),
            "cold_over_import_asyncio_with_site": ratio("cold", "import_asyncio_with_site"),
            "cold_pandas_over_import_pandas": ratio("cold_pandas", "import_pandas"),
            "cold_pandas_over_import_pandas_to_imported": ratio(
                "cold_pandas", "import_pandas_to_imported"
            ),
            "cold_over_template": ratio("cold", "template"),
            "cold_pandas_over_template_pandas": ratio("cold_pandas", "template_pandas"),
        },
        "targets": {
            "warm_and_template_median_under_10_ms": all(
                rows[name]["median_ms"] < 10
                for name in ("warm_pool", "template", "warm_pool_pandas", "template_pandas")
            ),
            "cold_at_most_1_5_times_floor": ratio("cold", "import_asyncio_floor") <= 1.5,
            "cold_at_most_1_5_times_floor_to_imported": ratio(
                "cold", "import_asyncio_floor_to_imported"
            )
            <= 1.5,
        },
    }
    for name, row in rows.items():
        print(f"{name:36} median {row['median_ms']:8.2f} ms   p99 {row['p99_ms']:8.2f} ms")
    for name, value in report["ratios"].items():
        print(f"{name:44} {value:6.2f}")
    for name, met in report["targets"].items():
        print(f"target {name}: {'met' if met else 'MISSED'}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "shell_start.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
