"""How much the call journal costs per tool call.

Not a test: run it by hand, `python bench/journal_bench.py [--calls N] [--repeat R]`, and read
the medians. For each batch size (how many calls the host journals in one go) and each store (a
file in a temporary directory, and `:memory:`), it runs rounds of: `record_calls` of a batch,
then `record_answers` and `settle_calls` of the same calls, as the host would, with the
journal's flush thread writing answers and fates in the background. Per call, in microseconds:

- `records`: building the rows the three methods take, plain tuples as the host builds them
  (the host pays this whatever the store does); median over rounds;
- `hot path`: the time the caller spends in the three journal methods (everything is
  buffered, so this is mostly the write of the batch's line to the intent file); median over
  rounds;
- `wall`: the whole run's time, up to the last answer and fate written, over its calls;
- `cpu`: the process's CPU time (every thread) over the run, over its calls: what the journal
  takes from the machine, wherever it runs.

Each configuration runs `--repeat` times and the median of each column is printed; the machine
is shared, so compare rows of one run, not runs of different days.

Budget for scale: a whole tool call costs ~50 µs at 20,000 calls/s, and the journal may cost
at most 25% of throughput, so about 12-16 µs per call.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from toolscript.host.journal import AnswerRow, FateRow, Journal, StartRow

BATCH_SIZES = (1, 10, 100, 1000)


def make_batch(
    round_number: int, size: int
) -> tuple[list[StartRow], list[AnswerRow], list[FateRow]]:
    """One round's rows: `size` calls of one script, each answered and settled `seen`."""
    now = time.time()
    ids = [f"g1:{round_number}:{i}" for i in range(size)]
    starts: list[StartRow] = [
        (call_id, "script-1", "main", "send_message", "channel_id='c1', text='hi'", now)
        for call_id in ids
    ]
    frame = b'\x00\x00\x00\x2d{"t":"answer","n":1,"ok":true,"value":"sent"}'
    answers: list[AnswerRow] = [(call_id, now, False, "'sent'", frame) for call_id in ids]
    fates: list[FateRow] = [(call_id, "seen", None) for call_id in ids]
    return starts, answers, fates


def measure(where: str, size: int, total_calls: int) -> dict[str, float]:
    """Microseconds per call of each column, over rounds of `size` calls."""
    rounds = max(20, total_calls // size)
    journal = Journal.open(where)
    journal.begin_script("script-1", "main", 1, "pass", time.time())
    building: list[float] = []
    hot: list[float] = []
    try:
        wall_start = time.perf_counter()
        cpu_start = time.process_time()
        for round_number in range(rounds):
            t0 = time.perf_counter()
            starts, answers, fates = make_batch(round_number, size)
            t1 = time.perf_counter()
            journal.record_calls(starts)
            journal.record_answers(answers)
            journal.settle_calls(fates)
            t2 = time.perf_counter()
            building.append((t1 - t0) / size * 1e6)
            hot.append((t2 - t1) / size * 1e6)
        journal.flush()
        wall = time.perf_counter() - wall_start - sum(building) / 1e6 * size
        cpu = time.process_time() - cpu_start - sum(building) / 1e6 * size
    finally:
        journal.close()
    calls = rounds * size
    return {
        "records": statistics.median(building),
        "hot path": statistics.median(hot),
        "wall": wall / calls * 1e6,
        "cpu": cpu / calls * 1e6,
    }


def main() -> None:
    """Run every batch size against a file and memory, and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per configuration")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration")
    options = parser.parse_args()
    columns = ("records", "hot path", "wall", "cpu")
    print(f"{'store':<8} {'batch':>6} " + " ".join(f"{c:>9}" for c in columns))
    with tempfile.TemporaryDirectory() as directory:
        for size in BATCH_SIZES:
            for store in ("file", "memory"):
                runs = []
                for run in range(options.repeat):
                    where = (
                        str(Path(directory) / f"journal-{size}-{run}.sqlite3")
                        if store == "file"
                        else ":memory:"
                    )
                    runs.append(measure(where, size, options.calls))
                medians = {c: statistics.median(r[c] for r in runs) for c in columns}
                print(f"{store:<8} {size:>6} " + " ".join(f"{medians[c]:>9.2f}" for c in columns))
    print("(microseconds per call; see the docstring for what each column measures)")


if __name__ == "__main__":
    main()
