"""Resident memory per idle interpreter, RSS and USS, forked and spawned (issue 5).

    python bench/memory.py [--rounds 3] [--interpreters 6]

For each configuration a `Runtime` (no tools, journal in memory, `pool_size=0` so every
interpreter measured belongs to a shell) starts `--interpreters` shells, runs "1" in each,
then reads each kernel's memory with psutil (`memory_full_info()`: RSS, USS, PSS):

- `forked`: forked from the template (`fork=True`, the template ready);
- `spawned`: started afresh (`fork=False`);
- `forked_pandas`, `spawned_pandas`: the same with `preload=["pandas"]`.

Then each shell runs `import gc; gc.collect()` and is measured again: a full collection
writes to every tracked object's header, so a forked kernel copies the template's pages it
touches (copy-on-write) and its USS grows towards what it would be alone.

RSS counts every page a process has resident, including those a forked kernel still shares
with the template (and with its siblings), so for forked kernels RSS overstates what each one
costs. USS (pages only this process has) is the honest per-interpreter cost; PSS splits each
shared page among the processes sharing it. The template's own memory is reported once per
runtime. Peers in the same rounds, measured idle the same way: `python -I -S` that imported
asyncio, and `python -I` that imported pandas.

Target: RSS under 25 MB per idle interpreter without preload (an idle Jupyter kernel is about
52 MB); with pandas preloaded the rows are for scale (pandas alone is far over 25 MB).
Medians are over the interpreters of a round, then over rounds. Results go to
bench/results/memory.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

from toolscript import Runtime

MB = 1024 * 1024

CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "forked": {"fork": True},
    "spawned": {"fork": False},
    "forked_pandas": {"fork": True, "preload": ["pandas"]},
    "spawned_pandas": {"fork": False, "preload": ["pandas"]},
}

PEERS = {
    "python_import_asyncio": ["-I", "-S", "-c", "import asyncio, sys; print(1, flush=True); "],
    "python_import_pandas": ["-I", "-c", "import pandas, sys; print(1, flush=True); "],
}


def memory_of(pid: int) -> dict[str, float]:
    """RSS, USS and PSS of the Python process `pid` is, or started (a sandbox's `bwrap` and
    its init are not the interpreter: the kernel is their child), in MB."""
    process = psutil.Process(pid)
    if not process.name().startswith("python"):
        found = [
            child for child in process.children(recursive=True) if child.name().startswith("python")
        ]
        if not found:
            raise RuntimeError(f"no Python process in {pid}'s tree: {process.name()}")
        process = found[0]
    info = process.memory_full_info()
    return {"rss_mb": info.rss / MB, "uss_mb": info.uss / MB, "pss_mb": info.pss / MB}


def medians(measures: list[dict[str, float]]) -> dict[str, float]:
    """The median of each measure over processes."""
    return {key: statistics.median(m[key] for m in measures) for key in measures[0]}


async def idle_interpreters(knobs: dict[str, Any], count: int, state: Path) -> dict[str, Any]:
    """Median memory of `count` idle kernels (after run "1", then after a full collection)."""
    async with Runtime(journal=":memory:", state_dir=state, pool_size=0, **knobs) as rt:
        forks = await rt.template_ready()
        if forks != knobs["fork"]:
            raise RuntimeError(f"{knobs}: forks={forks}, failure: {rt.template_failure}")
        shells = [rt.shell(f"idle-{index}") for index in range(count)]
        pids = []
        for shell in shells:
            result = await shell.run("1")
            assert result.status == "ok", result.text
            assert shell._interpreter is not None and shell._interpreter.pid is not None
            assert shell._interpreter.forked == knobs["fork"]
            pids.append(shell._interpreter.kernel_pid() or shell._interpreter.pid)
        idle = medians([memory_of(pid) for pid in pids])
        for shell in shells:
            result = await shell.run("import gc; gc.collect()")
            assert result.status == "ok", result.text
        after_gc = medians([memory_of(pid) for pid in pids])
        report: dict[str, Any] = {"idle": idle, "after_gc_collect": after_gc}
        template = rt._template
        if template is not None:
            report["template"] = memory_of(template._process.pid)
        return report


def idle_peer(arguments: list[str], count: int) -> dict[str, float]:
    """Median memory of `count` idle Python processes that ran `arguments` and wait on stdin."""
    measures = []
    for _ in range(count):
        with subprocess.Popen(
            [sys.executable, *arguments[:-1], arguments[-1] + "sys.stdin.read()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        ) as process:
            assert process.stdout is not None and process.stdin is not None
            process.stdout.readline()
            measures.append(memory_of(process.pid))
            process.stdin.close()
            process.wait(timeout=10)
    return medians(measures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interpreters", type=int, default=6)
    options = parser.parse_args()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(options.rounds):
            entry: dict[str, Any] = {}
            for name, knobs in CONFIGURATIONS.items():
                entry[name] = asyncio.run(
                    idle_interpreters(knobs, options.interpreters, Path(folder))
                )
            for name, arguments in PEERS.items():
                entry[name] = {"idle": idle_peer(arguments, options.interpreters)}
            rounds.append(entry)

    def med(name: str, state: str, key: str) -> float:
        return float(statistics.median(entry[name][state][key] for entry in rounds))

    rows: dict[str, dict[str, float]] = {}
    for name in [*CONFIGURATIONS, *PEERS]:
        row = {key: med(name, "idle", key) for key in ("rss_mb", "uss_mb", "pss_mb")}
        if name in CONFIGURATIONS:
            for key in ("rss_mb", "uss_mb", "pss_mb"):
                row[f"{key}_after_gc"] = med(name, "after_gc_collect", key)
        if name.startswith("forked"):
            for key in ("rss_mb", "uss_mb"):
                row[f"template_{key}"] = med(name, "template", key)
        rows[name] = row
    report = {
        "interpreters_per_round": options.interpreters,
        "rows": rows,
        "targets": {
            "rss_under_25_mb": {name: rows[name]["rss_mb"] < 25 for name in ("forked", "spawned")}
        },
        "rounds": rounds,
    }
    print(f"{'':24}{'RSS':>8}{'USS':>8}{'PSS':>8}   after gc.collect(): RSS, USS")
    for name, row in rows.items():
        line = f"{name:24}{row['rss_mb']:8.1f}{row['uss_mb']:8.1f}{row['pss_mb']:8.1f}"
        if "rss_mb_after_gc" in row:
            line += f"   {row['rss_mb_after_gc']:8.1f}{row['uss_mb_after_gc']:8.1f}"
        if "template_rss_mb" in row:
            line += (
                f"   (template RSS {row['template_rss_mb']:.1f}, USS {row['template_uss_mb']:.1f})"
            )
        print(line)
    for name, met in report["targets"]["rss_under_25_mb"].items():
        print(f"target RSS under 25 MB, {name}: {'met' if met else 'MISSED'}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "memory.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
