"""A batch: what was recorded and is not yet in SQLite, how one transaction writes it, and
what that changes in the journal's memory of its calls."""

from __future__ import annotations

import json
import sqlite3
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
    "INSERT INTO calls (id, host_id, call_id, script_id, shell, tool, args_brief, made_at, "
    "answered_at, is_error, answer_brief, answer_frame, fate, cause, uncertain_reason) VALUES "
)
_WHOLE_CALL_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

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
_INSERT_WHOLE_CALLS = {
    size: _INSERT_WHOLE_CALL + ", ".join([_WHOLE_CALL_ROW] * size) for size in _ROWS_PER_INSERT
}
_first = itemgetter(0)
_NO_END = (None, None, None, None, None, None, None)
"""The columns after `made_at` of a call neither answered nor settled: `answered_at`,
`is_error`, `answer_brief`, `answer_frame`, `fate`, `cause`, `uncertain_reason`."""

_ANSWER_CALL = (
    "UPDATE calls SET answered_at = ?, is_error = ?, answer_brief = ?, answer_frame = ?, "
    "uncertain_reason = NULL WHERE id = ?"
)

# A call settled `pending` becomes uncertain only if no answer has come; an answer that came
# first (or comes later, see _ANSWER_CALL) clears it, so the order of the two writes in a
# flush does not matter. An answer's frame is kept until its call is settled `seen`: until
# the script's code has the answer, a host that takes the interpreter back may have to
# deliver it. (A call answered and seen within one flush, the common case, never stores it.)
# Fates are written one statement per (fate, cause), the rowids passed as one JSON array:
# cheaper than a statement per call.
# Named placeholders, bound from a dict: numbered ones (`?1`) bound from a tuple are
# deprecated from Python 3.12 and an error from 3.14.
_SETTLE = (
    "UPDATE calls SET fate = :fate, cause = :cause, "
    "answer_frame = CASE WHEN :fate = 'seen' THEN NULL ELSE answer_frame END, "
    "uncertain_reason = CASE "
    "WHEN :fate = 'pending' AND answered_at IS NULL AND :cause = 'in_doubt' THEN 'in_doubt' "
    "WHEN :fate = 'pending' AND answered_at IS NULL THEN 'pending_at_settle' END "
)
_SETTLE_CALL = _SETTLE + "WHERE id = :rows"
_SETTLE_CALLS = _SETTLE + "WHERE id IN (SELECT value FROM json_each(:rows))"

# Where a call of this host stands, as far as its row may still change.
_OPEN, _ANSWERED, _PENDING, _CLOSED = range(4)


@dataclass(slots=True)
class _Buffer:
    """What was recorded and is not yet in SQLite, in order within each kind."""

    scripts: list[tuple[str, str, int, str, float]] = field(default_factory=list)
    starts: list[StartRow] = field(default_factory=list)
    answers: list[AnswerRow] = field(default_factory=list)
    fates: list[FateRow] = field(default_factory=list)
    ends: list[tuple[str, float, str]] = field(default_factory=list)
    violations: list[tuple[str, str]] = field(default_factory=list)


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

    A call made in this batch is inserted once, with its answer and fate when they are
    in the batch too (most calls start and end within one flush): one row write instead
    of an insert and two updates of the same row, which cost the flush thread (and,
    through the GIL, the event loop) dearly. Answers and fates of calls written earlier
    update their rows.
    """
    if taken.scripts:
        db.executemany(
            _INSERT_SCRIPT, [(script[0], host_id, *script[1:]) for script in taken.scripts]
        )
    # Call id -> the columns after `made_at` of a call made in this batch, replaced as
    # its answer and fate come (tuples of strings and numbers, which the collector
    # stops tracking, where lists would be walked by its older generations). Most calls
    # are made, answered and settled within one flush: those are inserted whole and never
    # enter the journal's memory.
    ids = list(map(_first, taken.starts))
    fresh: dict[str, tuple[Any, ...]] = dict.fromkeys(ids, _NO_END)
    first = db.execute(_LAST_CALL).fetchone()[0] + 1 if ids else 0
    # What became of calls in this batch. A call made in it is in none of the journal's
    # memories (its id was checked when recorded), so one lookup serves both kinds.
    states: dict[str, int] = {}
    answer_rows = []

    def state_of(call_id: str) -> int:
        state = states.get(call_id)
        if state is None:
            return _ANSWERED if call_id in answered else _PENDING if call_id in pending else _OPEN
        return state

    for call_id, answered_at, is_error, answer_brief, frame in taken.answers:
        state = state_of(call_id)
        if state == _CLOSED:
            continue
        kept = frame if frame is not None and len(frame) <= ANSWER_KEPT else None
        whole = fresh.get(call_id)
        if whole is not None:
            fresh[call_id] = (answered_at, is_error, answer_brief, kept, whole[4], whole[5], None)
        else:
            row = open_rows.get(call_id)
            if row is None:
                continue
            answer_rows.append((answered_at, is_error, answer_brief, kept, row))
        states[call_id] = _CLOSED if state == _PENDING else _ANSWERED
    rows_by_fate: dict[tuple[str, str | None], list[int]] = {}
    for call_id, fate, cause in taken.fates:
        state = state_of(call_id)
        if state == _CLOSED:
            continue
        whole = fresh.get(call_id)
        if whole is not None:
            # As _SETTLE_CALL would: uncertain only if settled pending with no answer.
            unanswered = fate == "pending" and whole[0] is None
            uncertain = "pending_at_settle" if unanswered else None
            kept = None if fate == "seen" else whole[3]
            fresh[call_id] = (*whole[:3], kept, fate, cause, uncertain)
        else:
            row = open_rows.get(call_id)
            if row is None:
                continue
            rows_by_fate.setdefault((fate, cause), []).append(row)
        states[call_id] = _CLOSED if state == _ANSWERED or fate != "pending" else _PENDING
    if fresh:
        _insert_whole_calls(
            db,
            [(first + i, host_id, *call, *fresh[call[0]]) for i, call in enumerate(taken.starts)],
        )
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
    new_rows: dict[str, int] = {}
    for i, call_id in enumerate(ids):
        if states.get(call_id) == _CLOSED:
            del states[call_id]  # inserted closed: the journal's memory never held it
        else:
            new_rows[call_id] = first + i
    return _Written(new_rows, states, ids)


def _insert_whole_calls(db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert calls whole (`_INSERT_WHOLE_CALL`'s columns), many rows per statement."""
    done = 0
    for size in _ROWS_PER_INSERT:
        statement = _INSERT_WHOLE_CALLS[size]
        while len(rows) - done >= size:
            db.execute(statement, list(chain.from_iterable(rows[done : done + size])))
            done += size
