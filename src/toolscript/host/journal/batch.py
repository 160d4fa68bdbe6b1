"""A batch: what was recorded and is not yet in SQLite, how one transaction writes it, and
what that changes in the journal's memory of its calls."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

from .records import ANSWER_KEPT, AnswerRow, FateRow, StartRow
from .schema import _INSERT_SCRIPT, _LAST_CALL

_RECORD_VIOLATION = "UPDATE scripts SET violation = ? WHERE script_id = ?"

_END_SCRIPT = (
    f"UPDATE scripts SET status = ?, ended_at = ?, calls_up_to = ({_LAST_CALL}) WHERE script_id = ?"
)

# A call inserted whole: its start, and its answer and fate when the same flush has them.
_INSERT_WHOLE_CALL = (
    "INSERT INTO calls (host_id, call_id, script_id, shell, tool, args_brief, made_at, "
    "answered_at, is_error, answer_brief, answer_frame, fate, cause, uncertain_reason) VALUES "
)

# Goal: a flush of a `gather`'s thousand calls costs the event loop as little as it can.
# What fails: `executemany`, one statement step per row. The sqlite3 module lets go of the
# GIL around every step, and the event loop, busy in the same process, takes it each time:
# a thousand hand-overs per flush, each a wake-up of one thread and a wait of the other,
# which on two busy cores doubled the flush thread's CPU per call and made the loop wait.
# What we do: insert many rows per statement, the rest in statements of 8, 4, ... 1 rows: a
# step per statement, each prepared once and cached. Not too many: binding a statement's
# variables holds the GIL, so a call that arrives meanwhile waits for the whole binding; at
# 64 rows that wait (a few hundred µs here) was what set a sequential call's p99, at 3.3-3.6
# times its median, against 2.7-2.9 at 16 rows, with the same `gather` throughput
# (bench/README.md, "The journal flush and the p99").
_ROWS_PER_INSERT = (16, 8, 4, 2, 1)
_first = itemgetter(0)
_NO_END = (None, None, None, None, None, None, None)
"""The columns after `made_at` of a call neither answered nor settled: `answered_at`,
`is_error`, `answer_brief`, `answer_frame`, `fate`, `cause`, `uncertain_reason`."""

# Goal: the journal keeps an answer's frame (up to `ANSWER_KEPT`) only while a host that
# takes the interpreter back might have to deliver it: while code in the kernel may still
# wait for that answer. What fails: keeping it until the call is `seen`: a call whose code
# stopped waiting (`late`, `unread` or `pending` with a cause) is never seen, and its frame,
# up to 1 MiB, stayed in the file for good. What we do: keep it while the call has no fate,
# or a fate with no cause that leaves code able to take it later (`unread`: never awaited
# yet; `pending`: the script ended while it was in flight). (A call answered and seen within
# one flush, the common case, never stores it.)
_FRAME_NEEDED = "fate IS NULL OR (cause IS NULL AND fate IN ('unread', 'pending'))"

_ANSWER_CALL = (
    "UPDATE calls SET answered_at = ?, is_error = ?, answer_brief = ?, "
    f"answer_frame = CASE WHEN {_FRAME_NEEDED} THEN ? END, "
    "uncertain_reason = NULL WHERE id = ?"
)

# A call settled `pending` becomes uncertain only if no answer has come; an answer that came
# first (or comes later, see _ANSWER_CALL) clears it, so the order of the two writes in a
# flush does not matter. Its frame goes as `_FRAME_NEEDED` says.
# Fates are written one statement per (fate, cause), the rowids passed as one JSON array:
# cheaper than a statement per call.
# Named placeholders, bound from a dict: numbered ones (`?1`) bound from a tuple are
# deprecated from Python 3.12 and an error from 3.14.
_SETTLE = (
    "UPDATE calls SET fate = :fate, cause = :cause, "
    "answer_frame = CASE WHEN :cause IS NULL AND :fate IN ('unread', 'pending') "
    "THEN answer_frame END, "
    "uncertain_reason = CASE "
    "WHEN :fate = 'pending' AND answered_at IS NULL AND :cause = 'in_doubt' THEN 'in_doubt' "
    "WHEN :fate = 'pending' AND answered_at IS NULL THEN 'pending_at_settle' END "
)
_SETTLE_CALL = _SETTLE + "WHERE id = :rows"
_SETTLE_CALLS = _SETTLE + "WHERE id IN (SELECT value FROM json_each(:rows))"

# Where a call of this host stands, as far as its row may still change.
_OPEN, _ANSWERED, _PENDING, _CLOSED = range(4)


WholeRow = tuple[Any, ...]
"""A call as it is inserted: its `StartRow`, then `_NO_END`'s columns, filled in as far as the
call has come (its answer, its fate)."""


def _frame_needed(fate: str | None, cause: str | None) -> bool:
    """`_FRAME_NEEDED`, for a row still in the buffer."""
    return fate is None or (cause is None and fate in ("unread", "pending"))


# Goal: a flush holds the GIL as little as it can, since a call that arrives meanwhile waits
# for it (up to the interpreter's switch interval, 5 ms). What fails: merging each call's
# start, answer and fate in the flush thread: a few Python steps per call, a millisecond and
# more of a flush, unbroken, which is what set a sequential call's p99 (bench/README.md, "The
# journal flush and the p99"). What we do: a call's answer and fate are written into its
# row in the buffer as they are recorded, while the buffer still holds the row (most calls
# are made, answered and settled within one flush); the flush inserts the rows as they are.
# Answers and fates of calls whose rows went out with an earlier flush are kept apart, and
# update those rows.
def _answered(row: WholeRow, answer: AnswerRow) -> WholeRow:
    """`row` with `answer` in it: its frame kept while `_frame_needed`, and no longer
    uncertain (its effect is known). A second answer changes nothing."""
    if row[6] is not None:
        return row
    _, answered_at, is_error, answer_brief, frame = answer
    fate, cause = row[10], row[11]
    kept = (
        frame
        if frame is not None and len(frame) <= ANSWER_KEPT and _frame_needed(fate, cause)
        else None
    )
    return (*row[:6], answered_at, is_error, answer_brief, kept, fate, cause, None)


def _settled(row: WholeRow, fate: str, cause: str | None) -> WholeRow:
    """`row` with its fate: uncertain if settled `pending` before any answer, its answer's
    frame let go unless still `_frame_needed`. A call settled other than `pending` is
    settled for good."""
    if row[10] is not None and row[10] != "pending":
        return row
    uncertain = "pending_at_settle" if fate == "pending" and row[6] is None else None
    kept = row[9] if _frame_needed(fate, cause) else None
    return (*row[:9], kept, fate, cause, uncertain)


def _closed(row: WholeRow) -> bool:
    """Whether nothing more can change the row of this call: settled, and answered unless
    it was settled other than `pending`."""
    return row[10] is not None and (row[10] != "pending" or row[6] is not None)


@dataclass(slots=True)
class _Buffer:
    """What was recorded and is not yet in SQLite, in order within each kind.

    `starts` holds whole rows (`WholeRow`), `where` each one's index by call id; `answers`
    and `fates` hold only those of calls whose rows are not in `starts`.
    """

    scripts: list[tuple[str, str, int, str, float]] = field(default_factory=list)
    starts: list[WholeRow] = field(default_factory=list)
    answers: list[AnswerRow] = field(default_factory=list)
    fates: list[FateRow] = field(default_factory=list)
    ends: list[tuple[str, float, str]] = field(default_factory=list)
    violations: list[tuple[str, str]] = field(default_factory=list)
    where: dict[str, int] = field(default_factory=dict)

    def add_starts(self, rows: Sequence[StartRow]) -> None:
        starts, where = self.starts, self.where
        for row in rows:
            where[row[0]] = len(starts)
            starts.append((*row, *_NO_END))

    def add_answers(self, answers: Sequence[AnswerRow]) -> None:
        starts, where = self.starts, self.where
        for answer in answers:
            i = where.get(answer[0])
            if i is None:
                self.answers.append(answer)
            else:
                starts[i] = _answered(starts[i], answer)

    def add_fates(self, fates: Sequence[FateRow]) -> None:
        starts, where = self.starts, self.where
        for call_id, fate, cause in fates:
            i = where.get(call_id)
            if i is None:
                self.fates.append((call_id, fate, cause))
            else:
                starts[i] = _settled(starts[i], fate, cause)

    def after(self, later: _Buffer) -> _Buffer:
        """This buffer, which was taken and not written, with `later` recorded after it."""
        joined = _Buffer(
            self.scripts + later.scripts,
            self.starts + later.starts,
            list(self.answers),
            list(self.fates),
            self.ends + later.ends,
            self.violations + later.violations,
        )
        joined.where = {row[0]: i for i, row in enumerate(joined.starts)}
        joined.add_answers(later.answers)
        joined.add_fates(later.fates)
        return joined


class _Written(NamedTuple):
    """What a committed batch changes in the journal's own memory of its calls."""

    new_rows: dict[str, int]  # the calls inserted and still open after the batch
    states: dict[str, int]  # what became of calls, but those inserted and closed at once
    flushed: list[str]  # every call inserted


def _write_batch(
    db: sqlite3.Connection,
    host_id: int,
    taken: _Buffer,
    open_rows: dict[str, int],
    answered: set[str],
    pending: set[str],
) -> _Written:
    """Write a batch in the open transaction; change nothing in memory (it may roll back).

    The calls made in this batch are inserted whole, as far as they have come (see
    `_answered`). Answers and fates of calls written earlier update their rows.
    """
    if taken.scripts:
        db.executemany(
            _INSERT_SCRIPT, [(script[0], host_id, *script[1:]) for script in taken.scripts]
        )
    starts = taken.starts
    first = db.execute(_LAST_CALL).fetchone()[0] + 1 if starts else 0
    # What became of calls written earlier, in this batch.
    states: dict[str, int] = {}
    answer_rows = []

    def state_of(call_id: str) -> int:
        state = states.get(call_id)
        if state is None:
            return _ANSWERED if call_id in answered else _PENDING if call_id in pending else _OPEN
        return state

    for call_id, answered_at, is_error, answer_brief, frame in taken.answers:
        state = state_of(call_id)
        row = open_rows.get(call_id)
        if state == _CLOSED or row is None:
            continue
        kept = frame if frame is not None and len(frame) <= ANSWER_KEPT else None
        answer_rows.append((answered_at, is_error, answer_brief, kept, row))
        states[call_id] = _CLOSED if state == _PENDING else _ANSWERED
    rows_by_fate: dict[tuple[str, str | None], list[int]] = {}
    for call_id, fate, cause in taken.fates:
        state = state_of(call_id)
        row = open_rows.get(call_id)
        if state == _CLOSED or row is None:
            continue
        rows_by_fate.setdefault((fate, cause), []).append(row)
        states[call_id] = _CLOSED if state == _ANSWERED or fate != "pending" else _PENDING
    if starts:
        _insert_whole_calls(db, host_id, starts)
    if answer_rows:
        db.executemany(_ANSWER_CALL, answer_rows)
    for (fate, cause), rows in rows_by_fate.items():
        if len(rows) == 1:
            db.execute(_SETTLE_CALL, {"fate": fate, "cause": cause, "rows": rows[0]})
        else:
            db.execute(_SETTLE_CALLS, {"fate": fate, "cause": cause, "rows": json.dumps(rows)})
    if taken.ends:
        db.executemany(_END_SCRIPT, taken.ends)
    if taken.violations:
        db.executemany(_RECORD_VIOLATION, taken.violations)
    # The calls inserted and still open (most were inserted closed, and the journal's memory
    # never holds them), and where each open one stands.
    new_rows: dict[str, int] = {}
    for i, call in enumerate(starts):
        if _closed(call):
            continue
        new_rows[call[0]] = first + i
        if call[6] is not None:
            states[call[0]] = _ANSWERED
        elif call[10] == "pending":
            states[call[0]] = _PENDING
    return _Written(new_rows, states, list(map(_first, starts)))


def _insert_whole_calls(db: sqlite3.Connection, host_id: int, rows: list[WholeRow]) -> None:
    """Insert calls whole, many rows per statement. They take the ids after the largest so
    far, in order: SQLite gives a row without one the largest id plus one, and the batch's
    transaction keeps other writers out until it ends."""
    done = 0
    for size in _ROWS_PER_INSERT:
        statement = _insert_whole_calls_statement(size, host_id)
        while len(rows) - done >= size:
            db.execute(statement, list(chain.from_iterable(rows[done : done + size])))
            done += size


@functools.cache
def _insert_whole_calls_statement(size: int, host_id: int) -> str:
    """The INSERT of `size` whole calls of host `host_id` (an integer, written into the
    statement, so that the rows are bound as they are)."""
    row = f"({int(host_id)}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    return _INSERT_WHOLE_CALL + ", ".join([row] * size)
