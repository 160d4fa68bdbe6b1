"""How long the `toolscript` command takes, whole process, beside `python -c 'import asyncio'`.

    python bench/cli_start.py [--runs 10] [--console-script] [--against SRC]

Rows, each one process timed from spawn to exit (`subprocess.run`), interleaved run by run so
that machine noise hits all alike, with the CPU time (user + system) it and every process it
waited for used, which a busy machine inflates less than the wall time:

- `exec`: `toolscript exec script.py --journal :memory:` where the script is `print(1)`, no
  tools, no MCP config, the default sandbox, run in a fresh temporary folder (the script's
  working folder). It starts the runtime, one interpreter, runs the script and closes.
- `help`: `toolscript --help`.
- `exec_help`: `toolscript exec --help`.
- `import_toolscript`: `python -c 'import toolscript'`, what every command pays first (the
  package's `__init__` imports the runtime).
- `import_asyncio_floor`: `python -I -S -c 'import asyncio'`, the peer.

`toolscript` is `python -m toolscript.cli` with this Python, or with `--console-script` the
`toolscript` script installed beside it; either imports the toolscript this Python finds
(the bench passes its folder on in `PYTHONPATH`).

With `--against SRC` (another toolscript's source folder, say a checkout's `src`), the
`exec` and `help` rows are also measured with that toolscript, in the same runs, as
`exec_against` and `help_against`: an A/B of a change.

Target: `exec` at most 2.5 times the floor (the ratio of the medians). Results go to
bench/results/cli_start.json and are printed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 2.5


def toolscript_command(console_script: bool) -> list[str]:
    """The `toolscript` command under test."""
    if console_script:
        beside = Path(sys.executable).with_name("toolscript")
        if not beside.exists():
            raise SystemExit(f"no console script at {beside}; install toolscript or drop the flag")
        return [str(beside)]
    return [sys.executable, "-m", "toolscript.cli"]


def source_folder() -> str:
    """The folder the toolscript this Python finds lives in, without importing it."""
    spec = importlib.util.find_spec("toolscript")
    if spec is None or spec.origin is None:
        raise SystemExit("toolscript is not importable by this Python")
    return str(Path(spec.origin).resolve().parents[1])


def cpu_of_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(
    command: list[str], folder: Path, env: dict[str, str], expect: str | None
) -> tuple[float, float]:
    """Seconds from spawn to exit, and CPU seconds; the command must succeed (and print
    `expect`)."""
    cpu = cpu_of_children()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or (expect is not None and expect not in done.stdout):
        raise SystemExit(f"{command} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed, cpu_of_children() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--console-script", action="store_true")
    parser.add_argument("--against", type=Path, help="another toolscript's source folder")
    options = parser.parse_args()
    if (
        options.against is not None
        and not (options.against / "toolscript" / "__init__.py").is_file()
    ):
        # Else the rows "with SRC" would quietly time the toolscript installed here.
        parser.error(
            f"--against {options.against}: no toolscript package there (give a checkout's src)"
        )

    toolscript = toolscript_command(options.console_script)
    with tempfile.TemporaryDirectory(prefix="cli_start_") as temporary:
        folder = Path(temporary)
        (folder / "script.py").write_text("print(1)\n")
        env = {
            **os.environ,
            "PYTHONPATH": source_folder(),
            "TOOLSCRIPT_STATE": str(folder / "state"),
        }
        rows: dict[str, tuple[str, list[str], str | None, dict[str, str]]] = {
            "exec": (
                "toolscript exec script.py --journal :memory: (script: print(1))",
                [*toolscript, "exec", "script.py", "--journal", ":memory:"],
                "exit 0 · ok",
                env,
            ),
            "help": ("toolscript --help", [*toolscript, "--help"], "exec", env),
            "exec_help": (
                "toolscript exec --help",
                [*toolscript, "exec", "--help"],
                "SCRIPT",
                env,
            ),
            "import_toolscript": (
                "python -c 'import toolscript'",
                [sys.executable, "-c", "import toolscript"],
                None,
                env,
            ),
            "import_asyncio_floor": (
                "python -I -S -c 'import asyncio'",
                [sys.executable, "-I", "-S", "-c", "import asyncio"],
                None,
                env,
            ),
        }
        if options.against is not None:
            other = {**env, "PYTHONPATH": str(options.against.resolve())}
            for name in ("exec", "help"):
                what, command, expect, _ = rows[name]
                rows[f"{name}_against"] = (f"{what} with {options.against}", command, expect, other)
        load_before = os.getloadavg()[0]
        for _, command, expect, environment in rows.values():  # warm the file cache, untimed
            timed(command, folder, environment, expect)
        samples: dict[str, list[float]] = {name: [] for name in rows}
        cpu: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(options.runs):
            for name, (_, command, expect, environment) in rows.items():
                elapsed, used = timed(command, folder, environment, expect)
                samples[name].append(elapsed)
                cpu[name].append(used)
        load_after = os.getloadavg()[0]

    medians = {name: statistics.median(times) for name, times in samples.items()}
    floor = medians["import_asyncio_floor"]
    ratio = medians["exec"] / floor
    report: dict[str, Any] = {
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1_min_before_after": [load_before, load_after],
        },
        "command": " ".join(toolscript),
        "runs": options.runs,
        "rows": {
            name: {
                "timed": f"spawn to exit of {what}",
                "median_ms": medians[name] * 1000,
                "min_ms": min(samples[name]) * 1000,
                "max_ms": max(samples[name]) * 1000,
                "over_floor": medians[name] / floor,
                "cpu_median_ms": statistics.median(cpu[name]) * 1000,
                "samples_ms": [value * 1000 for value in samples[name]],
            }
            for name, (what, _, _, _) in rows.items()
        },
        "exec_over_floor": ratio,
        "target": {"exec_over_floor_at_most": TARGET, "met": ratio <= TARGET},
    }
    for name, row in report["rows"].items():
        print(
            f"{name:22} median {row['median_ms']:7.1f} ms  ({row['over_floor']:4.1f} × floor)"
            f"   min {row['min_ms']:7.1f}  max {row['max_ms']:7.1f}"
            f"   CPU {row['cpu_median_ms']:7.1f} ms"
        )
    print(
        f"exec / floor: {ratio:.2f} (target ≤ {TARGET}: {'met' if ratio <= TARGET else 'MISSED'})"
    )
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "cli_start.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
