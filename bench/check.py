"""The check before running: its cost on a 50-line and a 300-line script (issue 14).

    python bench/check.py [--checks 60] [--runs 1000] [--rounds 5]

Each round, in one runtime with ten typed Python tools (`check="warn"`, the default):

- the trivial run `await shell.run("1")` on a warm shell, the floor: it names no tool, so
  its check is skipped after the cheap test, and the same run with `check="off"`, to show
  what the skip costs (the two alternate which goes first from round to round);
- the check alone (the runtime's checker, as `Shell.run` calls it) on a 50-line and on a
  300-line script that call tools in loops, comprehensions, helpers and `gather`, each
  check a new text (a number in it changes), so nothing is served from a cache of the text;
- a whole run of the 50-line script with the check on and off, so the check's share of a
  real run shows.

Target: the 300-line check at most 50 ms (median). The first check of a runtime starts the
type server; it is reported apart (`first_check_ms`) and left out of the medians. The report
gives medians over rounds and their ratio to the trivial run; it goes to
bench/results/check.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any, TypedDict

from floor import summary

from toolscript import Runtime, tool


class Row(TypedDict):
    id: int
    name: str
    score: float


def make_tools() -> list[Any]:
    made: list[Any] = []
    for index in range(10):

        async def fetch(query: str, limit: int = 10, tags: list[str] | None = None) -> list[Row]:
            """Rows matching a query."""
            return [{"id": i, "name": query, "score": i / 2} for i in range(min(limit, 3))]

        fetch.__name__ = f"fetch_{index}"
        made.append(tool(fetch))
    return made


BLOCK = """\
rows = await fetch_{a}(query="q{n}", limit=5)
names = [row["name"] for row in rows if row["score"] > 0]
def best(items):
    return max(items, key=lambda item: item["score"]) if items else None
top = best(await fetch_{b}(query="top", tags=["x"]))
for row in rows:
    total = total + row["id"] if "total" in globals() else row["id"]
pairs = await asyncio.gather(fetch_{c}(query="a"), fetch_{d}(query="b", limit=2))
summary = {{"count": len(rows), "top": top, "pairs": len(pairs)}}
print(summary)
"""


def script(lines: int, variant: int) -> str:
    """A valid script of `lines` lines that calls tools; `variant` changes its text."""
    parts = ["import asyncio"]
    block = 0
    while sum(part.count("\n") + 1 for part in parts) < lines:
        a, b, c, d = ((block + k) % 10 for k in range(4))
        parts.append(BLOCK.format(a=a, b=b, c=c, d=d, n=variant * 1000 + block).rstrip("\n"))
        block += 1
    text = "\n".join(parts)
    return "\n".join(text.split("\n")[:lines]) + "\n"


async def trivial_runs(runs: int, check: str) -> list[float]:
    async with Runtime(tools=make_tools(), journal=":memory:", check=check) as rt:
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


async def checks(count: int, round_index: int) -> dict[str, Any]:
    async with Runtime(tools=make_tools(), journal=":memory:") as rt:
        checker = rt._checker  # the one `Shell.run` uses
        assert checker is not None
        start = time.perf_counter()
        first = await checker.check(rt.catalogue, script(50, -1), frozenset(), None)
        first_ms = (time.perf_counter() - start) * 1000
        assert first.ran and first.findings == [], first
        timed: dict[str, list[float]] = {"check_50": [], "check_300": []}
        for index in range(count):
            for lines in (50, 300):
                code = script(lines, round_index * count + index)
                start = time.perf_counter()
                outcome = await checker.check(rt.catalogue, code, frozenset(), None)
                timed[f"check_{lines}"].append(time.perf_counter() - start)
                assert outcome.ran and outcome.findings == [], outcome
        runs: dict[str, list[float]] = {"run_50_check_on": [], "run_50_check_off": []}
        for check in ("warn", "off"):
            async with Runtime(tools=make_tools(), journal=":memory:", check=check) as other:
                shell = other.shell("bench")
                await shell.run(script(50, -2))
                for index in range(count // 2):
                    start = time.perf_counter()
                    result = await shell.run(script(50, round_index * count + index))
                    runs[f"run_50_check_{'on' if check == 'warn' else 'off'}"].append(
                        time.perf_counter() - start
                    )
                    assert result.status == "ok" and "check" not in result.note, result.text
        return {"first_check_ms": first_ms, **{k: summary(v) for k, v in {**timed, **runs}.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checks", type=int, default=60)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    assert len(script(50, 0).splitlines()) == 50 and len(script(300, 0).splitlines()) == 300
    rounds = []
    for index in range(options.rounds):
        trivial: dict[str, Any] = {}
        for check in ("warn", "off") if index % 2 == 0 else ("off", "warn"):  # order alternates
            trivial[check] = summary(asyncio.run(trivial_runs(options.runs, check)))
        trivial, trivial_off = trivial["warn"], trivial["off"]
        measured = asyncio.run(checks(options.checks, index))
        rounds.append({"trivial": trivial, "trivial_check_off": trivial_off, **measured})

    def med(key: str) -> float:
        return statistics.median(
            r[key]["median_ms"] if isinstance(r[key], dict) else r[key] for r in rounds
        )

    report: dict[str, Any] = {
        key: med(key)
        for key in (
            "trivial",
            "trivial_check_off",
            "check_50",
            "check_300",
            "run_50_check_on",
            "run_50_check_off",
            "first_check_ms",
        )
    }
    report["check_50_per_trivial"] = report["check_50"] / report["trivial"]
    report["check_300_per_trivial"] = report["check_300"] / report["trivial"]
    report["rounds"] = rounds
    for key, value in report.items():
        if key != "rounds":
            print(f"{key:>24}: {value:9.3f}{'' if 'per' in key else ' ms'}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "check.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
