"""The keeper's chaos run at the issue's size: 200 scripts through hosts SIGKILLed 30 times
at random points, restarted each time on the same state directory (`tests/keeper/chaos.py`
is the harness; the suite runs it small).

    python bench/chaos.py [--scripts 200] [--kills 30] [--shells 8] [--seed 15]

Prints and writes `bench/results/chaos.json`: the counts, and what failed of what must hold
(every script ends exactly once; no non-idempotent tool runs twice for one call; every call
in doubt is named in its result and in the journal; idempotent calls take effect once;
variables survive; no process is left).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.keeper.chaos import Chaos
from tests.processes import processes_with


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scripts", type=int, default=200)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--shells", type=int, default=8)
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        chaos = Chaos(
            Path(folder), scripts=args.scripts, kills=args.kills, shells=args.shells, seed=args.seed
        )
        began = time.perf_counter()
        asyncio.run(chaos.run(wait=120.0))
        took = time.perf_counter() - began
        problems = chaos.check()
        left = [p.pid for p in processes_with(folder)]
    if left:
        problems.append(f"processes left running: {left}")
    report = {**chaos.counts, "seconds": round(took, 1), "problems": problems}
    out = Path(__file__).parent / "results" / "chaos.json"
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 1 if problems else 0  # what must hold did not: a failure, not a figure


if __name__ == "__main__":
    sys.exit(main())
