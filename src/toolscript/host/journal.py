"""The call journal: every script and every tool call, written down before it is acted on.

The host's call table decides each call's fate; this module only keeps the record, durably,
and answers questions about it. It is SQLite (standard library `sqlite3`) in WAL mode, in a
file under the state directory by default, or in memory when the caller asks.

What is durable, and when:

- When `record_calls` or `begin_script` returns, the calls or the script are in this host's
  intent file, an append-only file beside the database (`<journal>-host<N>-a.intents` and
  `-b.intents`): written with one `write`, so in the operating system's hands, and a kill of
  the host process (even by SIGKILL) cannot lose them. The next `Journal.open` of the same
  file (or the next query for uncertain calls) by another host replays the intent files of a
  host that is gone into the database, then marks its calls left in flight `host_gone`.
- Everything reaches SQLite through one buffer, in the order it was recorded: scripts begun,
  calls made, answers (`record_answers`), fates (`settle_calls`) and scripts ended
  (`end_script`). A flush thread writes it in one transaction within `FLUSH_INTERVAL`
  seconds; `flush()`, every query and `close()` write it at once, so this process always
  reads its own writes. Other processes (the `toolscript calls` command) see a call within
  `FLUSH_INTERVAL`. Once written, the intent file's lines are dropped, so it stays small.
- An answer, a fate or a script's end lost to a kill (it was only in the buffer) leaves its
  call uncertain or its script without a status, which is the truthful state: the host cannot
  prove the effect happened.
- Nothing here survives a power loss or a kernel crash: that would need an fsync per call,
  which the hot path cannot afford. SQLite runs with WAL and `synchronous=NORMAL`.

An in-memory journal (`":memory:"`) has no intent files: it lives as long as the object.

Uncertain calls are those whose effect is unknown: settled `pending` when their script ended
and never answered since (reason `pending_at_settle`), or left in flight (no answer and no
fate, or settled `pending`) by a host that is gone (reason `host_gone`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, count
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson
import platformdirs

SCHEMA_VERSION = 1
"""The journal schema this code writes and reads."""

FLUSH_INTERVAL = 0.05
"""Seconds within which buffered answers and fates reach the journal file."""

JOURNAL_FILE_NAME = "journal.sqlite3"
"""The journal's file name under the state directory."""

MEMORY = ":memory:"
"""Pass to `Journal.open` for a journal that lives only as long as the object."""

_BUSY_TIMEOUT_MS = 5000

_log = logging.getLogger(__name__)


def state_dir() -> Path:
    """The directory where toolscript keeps its state (the journal, logs).

    `$TOOLSCRIPT_STATE` when set and not empty, else the platform's user state directory
    for "toolscript". The directory is not created here.
    """
    configured = os.environ.get("TOOLSCRIPT_STATE")
    if configured:
        return Path(configured).expanduser()
    return platformdirs.user_state_path("toolscript")


class JournalVersionError(Exception):
    """The journal was written by a newer toolscript, with a schema this one does not know."""

    def __init__(self, path: str, found: int, known: int) -> None:
        self.path = path
        self.found = found
        self.known = known
        super().__init__(
            f"The journal at {path} has schema version {found}, but this toolscript knows "
            f"versions up to {known}: it was written by a newer toolscript. Upgrade toolscript, "
            f"or point it at another journal (TOOLSCRIPT_STATE, or the journal argument)."
        )


class JournalClosedError(Exception):
    """The journal was used after `close()`."""

    def __init__(self) -> None:
        super().__init__("The journal is closed; open a new one with Journal.open().")


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, once per call
class CallStart:
    """A tool call as the host received it, before anything is done with it.

    `call_id` is unique within one `Journal` (one host); `script_id` is `None` for a call
    made while no script ran. Times are seconds since the epoch.
    """

    call_id: str
    script_id: str | None
    shell: str
    tool: str
    args_brief: str
    made_at: float


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, once per call
class CallAnswer:
    """The answer a call got from its handler: when, whether an error, and its start."""

    call_id: str
    answered_at: float
    is_error: bool
    answer_brief: str


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, once per call
class CallFate:
    """A call's fate when its script's result was settled (docs/design.md#call-fates).

    `fate` is one of `seen`, `unread`, `late`, `pending`, `refused`; `cause` one of
    `timeout`, `cancelled`, `stopped`, `interpreter_gone`, `tool_timeout`, `source_gone`,
    or `None`.
    """

    call_id: str
    fate: str
    cause: str | None


StartRow = tuple[str, "str | None", str, str, str, float]
"""A `CallStart`'s fields in order: what the host's hot path records (see `record_call_rows`)."""
AnswerRow = tuple[str, float, bool, str]
"""A `CallAnswer`'s fields in order."""
FateRow = tuple[str, str, "str | None"]
"""A `CallFate`'s fields in order."""

# Goal: journaling costs the host's event loop as little as it can, and the buffer holds up
# to FLUSH_INTERVAL worth of calls. What fails: an object per record (a slotted dataclass,
# 0.5 µs to make, three per call), which the collector also tracks: a gather's thousand
# calls leave three thousand in the buffer, old enough by the flush to be walked by the
# collector's older generations, and their count brings its full collections sooner (tens
# of ms each in a host with a big heap). What we do: the host records plain tuples of
# strings and numbers (`record_call_rows` and the two like it), which the collector stops
# tracking at its first look; the dataclasses stay the public way in.


@dataclass(frozen=True, slots=True)
class JournalCall:
    """One call as the journal knows it.

    `fate` is `None` while the call is in flight. `uncertain` says its effect is unknown;
    `uncertain_reason` is then `"pending_at_settle"` (no answer had come when its script was
    settled) or `"host_gone"` (the host that made it ended with the call in flight).
    A call settled `pending` that is answered later keeps the fate `pending` (what its
    result reported) but carries the answer and is no longer uncertain.
    """

    call_id: str
    script_id: str | None
    shell: str
    tool: str
    args_brief: str
    made_at: float
    answered_at: float | None
    is_error: bool | None
    answer_brief: str | None
    fate: str | None
    cause: str | None
    uncertain: bool
    uncertain_reason: str | None


@dataclass(frozen=True, slots=True)
class JournalScript:
    """One script as the journal knows it. `status` and `ended_at` are `None` until it ends.

    `violation` says how the script broke the protocol between its interpreter and the host
    (a frame it forged), which got its interpreter killed; `None` if it did not.
    """

    script_id: str
    shell: str
    generation: int
    started_at: float
    ended_at: float | None
    status: str | None
    violation: str | None = None


_SCHEMA = """
CREATE TABLE hosts (
    host_id INTEGER PRIMARY KEY,
    pid INTEGER NOT NULL,
    machine TEXT NOT NULL,
    boot_id TEXT,
    process_start TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    calls_after INTEGER NOT NULL
);
CREATE TABLE scripts (
    script_id TEXT PRIMARY KEY,
    host_id INTEGER NOT NULL,
    shell TEXT NOT NULL,
    generation INTEGER NOT NULL,
    code TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    status TEXT,
    calls_after INTEGER NOT NULL,
    calls_up_to INTEGER,
    violation TEXT
);
CREATE TABLE calls (
    id INTEGER PRIMARY KEY,
    host_id INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    script_id TEXT,
    shell TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_brief TEXT NOT NULL,
    made_at REAL NOT NULL,
    answered_at REAL,
    is_error INTEGER,
    answer_brief TEXT,
    fate TEXT,
    cause TEXT,
    uncertain_reason TEXT,
    told_at REAL
);
CREATE INDEX calls_uncertain ON calls (shell) WHERE uncertain_reason IS NOT NULL;
"""

# Goal: journaling a call costs a few µs on the host's hot path, and a host killed at any
# moment after `record_calls` returned leaves its calls findable. What fails: a commit per
# call (one autocommitted INSERT: ~15-28 µs on a file, 6 fcntl locks and 2 pwrites), and
# indexes on `calls` (each adds a page to every commit, ~8-10 µs per index for a one-call
# commit). What we do: the hot path appends a line to an intent file with one `write` and
# the call to a buffer, under `_buffer_lock` only (never `_db_lock`, which the flush thread
# holds through a commit); the flush thread writes the buffer in one transaction and then
# drops the intent lines (see `_IntentLog`). `calls` has only its rowid, plus a partial
# index that holds only uncertain calls (rare). This host finds its own rows through
# `Journal._open_rows` (call id → rowid) while they can still change. A host's and a
# script's calls are found by rowid range: every row inserted after the host opened (or the
# script's row was inserted) has a larger rowid than `calls_after`, the largest rowid at
# that moment, read under the write lock. A flush inserts a batch's scripts before its calls
# and ends scripts after them, so a script's range covers its calls in the same batch too.

_CALL_COLUMNS = (
    "call_id, script_id, shell, tool, args_brief, made_at, answered_at, is_error, "
    "answer_brief, fate, cause, uncertain_reason"
)

_LAST_CALL = "SELECT coalesce(max(id), 0) FROM calls"

_INSERT_CALL = (
    "INSERT INTO calls (host_id, call_id, script_id, shell, tool, args_brief, made_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)

_INSERT_NUMBERED_CALL = (
    "INSERT INTO calls (id, host_id, call_id, script_id, shell, tool, args_brief, made_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

# A script id begun twice is kept once: a failing row would fail every later flush.
_INSERT_SCRIPT = (
    "INSERT OR IGNORE INTO scripts (script_id, host_id, shell, generation, code, started_at, "
    f"calls_after) VALUES (?, ?, ?, ?, ?, ?, ({_LAST_CALL}))"
)

_RECORD_VIOLATION = "UPDATE scripts SET violation = ? WHERE script_id = ?"

_END_SCRIPT = (
    f"UPDATE scripts SET status = ?, ended_at = ?, calls_up_to = ({_LAST_CALL}) WHERE script_id = ?"
)

# A call inserted whole: its start, and its answer and fate when the same flush has them.
_INSERT_WHOLE_CALL = (
    "INSERT INTO calls (id, host_id, call_id, script_id, shell, tool, args_brief, made_at, "
    "answered_at, is_error, answer_brief, fate, cause, uncertain_reason) VALUES "
)
_WHOLE_CALL_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

# Goal: a flush of a `gather`'s thousand calls costs the event loop as little as it can.
# What fails: `executemany`, one statement step per row. The sqlite3 module lets go of the
# GIL around every step, and the event loop, busy in the same process, takes it each time:
# a thousand hand-overs per flush, each a wake-up of one thread and a wait of the other. On
# two busy cores that doubled the flush thread's CPU per call (5.6 to 12 µs) and made the
# loop wait. What we do: insert up to 64 rows per statement (64 * 14 variables stays under
# the 999 that older SQLite builds allow), the rest in statements of 32, 16, ... 1 rows: a
# step per statement, and a handful of statements, each prepared once and cached.
_ROWS_PER_INSERT = (64, 32, 16, 8, 4, 2, 1)
_INSERT_WHOLE_CALLS = {
    size: _INSERT_WHOLE_CALL + ", ".join([_WHOLE_CALL_ROW] * size) for size in _ROWS_PER_INSERT
}
_first = itemgetter(0)
_NO_END = (None, None, None, None, None, None)
"""The columns after `made_at` of a call neither answered nor settled: `answered_at`,
`is_error`, `answer_brief`, `fate`, `cause`, `uncertain_reason`."""

_ANSWER_CALL = (
    "UPDATE calls SET answered_at = ?, is_error = ?, answer_brief = ?, uncertain_reason = NULL "
    "WHERE id = ?"
)

# A call settled `pending` becomes uncertain only if no answer has come; an answer that came
# first (or comes later, see _ANSWER_CALL) clears it, so the order of the two writes in a
# flush does not matter. Fates are written one statement per (fate, cause), the rowids passed
# as one JSON array: about half the cost of a statement per call.
# Named placeholders, bound from a dict: numbered ones (`?1`) bound from a tuple are
# deprecated from Python 3.12 and an error from 3.14.
_SETTLE_CALL = (
    "UPDATE calls SET fate = :fate, cause = :cause, uncertain_reason = CASE "
    "WHEN :fate = 'pending' AND answered_at IS NULL THEN 'pending_at_settle' END "
    "WHERE id = :rows"
)

_SETTLE_CALLS = (
    "UPDATE calls SET fate = :fate, cause = :cause, uncertain_reason = CASE "
    "WHEN :fate = 'pending' AND answered_at IS NULL THEN 'pending_at_settle' END "
    "WHERE id IN (SELECT value FROM json_each(:rows))"
)

_IN_FLIGHT = "answered_at IS NULL AND (fate IS NULL OR fate = 'pending')"

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


@dataclass(slots=True)
class _Written:
    """What a committed batch changes in the journal's own memory of its calls."""

    new_rows: dict[str, int]  # the calls inserted and still open after the batch
    states: dict[str, int]  # what became of calls, but those inserted and closed at once
    flushed: list[str]  # every call inserted


class Journal:
    """The durable record of scripts and tool calls, and the queries the runtime and CLI ask.

    Open one with `Journal.open(...)`. Each open journal is one host: it writes a `hosts`
    row, and on opening it marks the calls left in flight by hosts whose process is gone as
    uncertain (`host_gone`). Several hosts may share one journal file; a host never touches
    the calls of another host that is still alive.

    Calls come from one thread (the host's asyncio thread); recording them only appends to
    the intent file and a buffer, and a flush thread writes the buffer to SQLite. Another
    process (the `toolscript calls` command) may read the same file at the same time.

    Memory: the journal keeps one small entry per call of this host whose row may still
    change (not yet both answered and settled, and not settled with a fate other than
    `pending`), and what is buffered (at most about `FLUSH_INTERVAL` worth of calls).
    """

    def __init__(self, connection: sqlite3.Connection, path: Path | None) -> None:
        """Use `Journal.open`; this takes a connection whose schema is ready."""
        self.path = path
        """The journal's file, or `None` for an in-memory journal."""
        self._db = connection
        self._db_lock = threading.Lock()
        self._buffer_lock = threading.Lock()
        self._buffer_filled = threading.Condition(self._buffer_lock)
        # Under _buffer_lock: the buffer, whether it holds anything, the call ids recorded
        # and not yet in _open_rows, and _closed. _open_rows changes under both locks.
        self._buffer = _Buffer()
        self._filled = False
        self._unwritten: set[str] = set()
        self._closed = False
        self._open_rows: dict[str, int] = {}
        self._answered_unsettled: set[str] = set()
        self._pending_unanswered: set[str] = set()
        self._closing = threading.Event()
        self._flusher: threading.Thread | None = None
        self._sequence = count()
        self._intents: _IntentLog | None = None
        self._me = _this_process()
        with self._db_lock, _Transaction(self._db):
            cursor = self._db.execute(
                "INSERT INTO hosts (pid, machine, boot_id, process_start, started_at, "
                f"calls_after) VALUES (?, ?, ?, ?, ?, ({_LAST_CALL}))",
                (
                    self._me.pid,
                    self._me.machine,
                    self._me.boot_id,
                    self._me.process_start,
                    time.time(),
                ),
            )
            host_id = cursor.lastrowid
            assert host_id is not None
            self.host_id: int = host_id
            """This host's id in the journal's `hosts` table."""
            self._sweep_gone_hosts()
        if path is not None:
            # Created after our `hosts` row is committed: another host that finds the file
            # also finds the row, and leaves the file alone while we live.
            self._intents = _IntentLog(_intent_paths(path, host_id))
            self._remove_stale_intents(path)

    @classmethod
    def open(cls, where: str | os.PathLike[str] | None) -> Journal:
        """Open (creating if needed) the journal at `where`.

        `where` is a file path, `":memory:"`, or `None` for `journal.sqlite3` under
        `state_dir()`. Missing directories are created. Raises `JournalVersionError` if the
        file was written by a newer toolscript.
        """
        path: Path | None
        if where is None:
            path = state_dir() / JOURNAL_FILE_NAME
        elif os.fspath(where) == MEMORY:
            path = None
        else:
            path = Path(where).expanduser()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            MEMORY if path is None else path,
            isolation_level=None,
            check_same_thread=False,
            timeout=_BUSY_TIMEOUT_MS / 1000,
        )
        try:
            connection.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
            _prepare_schema(connection, str(path) if path is not None else MEMORY)
            return cls(connection, path)
        except BaseException:
            connection.close()
            raise

    # -- scripts ---------------------------------------------------------------------------

    def begin_script(
        self, script_id: str, shell: str, generation: int, code: str, started_at: float
    ) -> None:
        """Record that a script is about to run, before it runs.

        In the intent file when this returns (it survives a kill of the host process), in
        SQLite within `FLUSH_INTERVAL`. Script ids are unique; a repeated one is kept once.
        """
        script = (script_id, shell, generation, _storable(code), started_at)
        intents = self._intents
        line = b"" if intents is None else _script_line(next(self._sequence), script)
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            if intents is not None:
                intents.append(line)
            self._buffer.scripts.append(script)
            if not self._filled:
                self._fill()

    def end_script(self, script_id: str, status: str, ended_at: float) -> None:
        """Record how a script ended (buffered; after its calls, answers and fates)."""
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            self._buffer.ends.append((status, ended_at, script_id))
            if not self._filled:
                self._fill()

    def record_violation(self, script_id: str, violation: str) -> None:
        """Record that a script broke the protocol, and how (buffered, like `end_script`)."""
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            self._buffer.violations.append((_storable(violation), script_id))
            if not self._filled:
                self._fill()

    # -- calls -----------------------------------------------------------------------------

    def record_calls(self, calls: Sequence[CallStart]) -> None:
        """Record calls before any of them is acted on.

        In the intent file when this returns (it survives a kill of the host process, not a
        power loss: see the module's docstring), in SQLite within `FLUSH_INTERVAL`. A
        `call_id` that this journal holds for a call still open (not yet answered and
        settled) raises `ValueError`, and nothing of the batch is written.
        """
        self.record_call_rows([_call_fields(call) for call in calls])

    def record_call_rows(self, rows: Sequence[StartRow]) -> None:
        """`record_calls`, each call given as its fields in `CallStart`'s order."""
        if not rows:
            return
        intents = self._intents
        line = b"" if intents is None else _call_line(self._sequence, rows)
        unwritten = self._unwritten
        open_rows = self._open_rows
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            if len(rows) == 1:
                call_id = rows[0][0]
                if call_id in unwritten or call_id in open_rows:
                    raise _repeated_call_id()
                if intents is not None:
                    intents.append(line)
                unwritten.add(call_id)
            else:
                ids = {row[0] for row in rows}
                if (
                    len(ids) != len(rows)
                    or not unwritten.isdisjoint(ids)
                    or not open_rows.keys().isdisjoint(ids)
                ):
                    raise _repeated_call_id()
                if intents is not None:
                    intents.append(line)
                unwritten.update(ids)
            self._buffer.starts.extend(rows)
            if not self._filled:
                self._fill()

    def record_answers(self, answers: Sequence[CallAnswer]) -> None:
        """Record answers (buffered; written within `FLUSH_INTERVAL`).

        An answer to a call already settled `pending` is a late answer: the fate stays
        `pending`, as its result reported, but the answer is kept and the call is no longer
        uncertain, since its effect is known now. Answers to call ids this host never
        recorded are ignored.
        """
        self.record_answer_rows(
            [(a.call_id, a.answered_at, a.is_error, a.answer_brief) for a in answers]
        )

    def record_answer_rows(self, answers: Sequence[AnswerRow]) -> None:
        """`record_answers`, each answer given as its fields in `CallAnswer`'s order."""
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            self._buffer.answers.extend(answers)
            if not self._filled:
                self._fill()

    def settle_calls(self, fates: Sequence[CallFate]) -> None:
        """Record the calls' fates (buffered; written within `FLUSH_INTERVAL`).

        A call settled `pending` with no answer becomes uncertain (`pending_at_settle`).
        """
        self.settle_call_rows([(f.call_id, f.fate, f.cause) for f in fates])

    def settle_call_rows(self, fates: Sequence[FateRow]) -> None:
        """`settle_calls`, each fate given as its fields in `CallFate`'s order."""
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            self._buffer.fates.extend(fates)
            if not self._filled:
                self._fill()

    def flush(self) -> None:
        """Write everything buffered to SQLite now."""
        with self._db_lock:
            self._check_open()
            self._commit()

    # -- queries ---------------------------------------------------------------------------

    def calls(
        self, script_id: str | None = None, uncertain: bool = False, limit: int | None = None
    ) -> list[JournalCall]:
        """Calls in the order they were journaled, oldest first.

        `script_id` keeps one script's calls; `uncertain=True` keeps those whose effect is
        unknown; `limit` keeps the most recent `limit` of them.
        """
        conditions: list[str] = []
        parameters: list[object] = []
        if script_id is not None:
            # The script's calls lie in its rowid range; bounding the scan by it stands in
            # for an index that every insert would pay for.
            conditions.append(
                "id > coalesce((SELECT calls_after FROM scripts WHERE script_id = ?), 0) "
                "AND id <= coalesce((SELECT calls_up_to FROM scripts WHERE script_id = ?), "
                "9223372036854775807) AND script_id = ?"
            )
            parameters += [script_id, script_id, script_id]
        if uncertain:
            conditions.append("uncertain_reason IS NOT NULL")
        return self._select_calls(conditions, parameters, limit, sweep=uncertain)

    def uncertain(self, shell: str | None = None) -> list[JournalCall]:
        """Calls whose effect is unknown, oldest first, optionally of one shell name.

        Pending when their script was settled and never answered since, or left in flight
        by a host that is gone.
        """
        conditions = ["uncertain_reason IS NOT NULL"]
        parameters: list[object] = []
        if shell is not None:
            conditions.append("shell = ?")
            parameters.append(shell)
        return self._select_calls(conditions, parameters, None, sweep=True)

    def untold_uncertain(self, shell: str) -> list[JournalCall]:
        """Calls of shell name `shell` left uncertain by a host that is gone, not yet told.

        The runtime puts them in a note of the next result of a shell opened with that name,
        then calls `mark_told` so the note appears once.
        """
        conditions = ["uncertain_reason = 'host_gone'", "shell = ?", "told_at IS NULL"]
        return self._select_calls(conditions, [shell], None, sweep=True)

    def mark_told(self, call_ids: Iterable[str]) -> None:
        """Record that these uncertain calls of gone hosts were reported in a result."""
        now = time.time()
        rows = [(now, call_id) for call_id in call_ids]
        with self._db_lock:
            self._check_open()
            with _Transaction(self._db):
                self._db.executemany(
                    "UPDATE calls SET told_at = ? WHERE call_id = ? "
                    "AND uncertain_reason = 'host_gone' AND told_at IS NULL",
                    rows,
                )

    def scripts(self, shell: str | None = None, limit: int | None = None) -> list[JournalScript]:
        """Scripts in the order they started, oldest first; `limit` keeps the most recent."""
        query = (
            "SELECT script_id, shell, generation, started_at, ended_at, status, violation "
            "FROM scripts"
        )
        parameters: list[object] = []
        if shell is not None:
            query += " WHERE shell = ?"
            parameters.append(shell)
        query += " ORDER BY rowid DESC"
        if limit is not None:
            query += " LIMIT ?"
            parameters.append(limit)
        with self._db_lock:
            self._check_open()
            self._commit()
            rows = self._db.execute(query, parameters).fetchall()
        return [JournalScript(*row) for row in reversed(rows)]

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Write what is buffered and close. Calls still in flight become uncertain.

        The intent files are removed once everything is committed; if that last commit
        fails, they stay for the next host to replay, and the error is raised. Safe to call
        more than once.
        """
        with self._buffer_lock:
            if self._closed:
                return
            self._closed = True  # from here on, nothing more is recorded
            self._buffer_filled.notify()
        self._closing.set()
        if self._flusher is not None:
            self._flusher.join()
        with self._db_lock:
            try:
                self._commit(end_host=True)
            finally:
                self._db.close()
                if self._intents is not None:
                    self._intents.close()
            if self.path is not None:
                _remove_intents(self.path, self.host_id)

    def __enter__(self) -> Journal:
        """Use the journal as a context manager that closes it."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close the journal."""
        self.close()

    # -- inside ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError()

    def _fill(self) -> None:
        """The buffer just got its first entry: wake the flusher. Hold `_buffer_lock`."""
        # Goal: the host's hot path pays only for a write and a list append, yet nothing
        # waits in the buffer for long. What fails: flushing only when the host next calls
        # us (it may go idle) or on a size threshold (a slow trickle would wait forever).
        # What we do: a daemon thread writes the buffer FLUSH_INTERVAL after it becomes
        # non-empty; SQLite releases the GIL while it writes, so that work leaves the event
        # loop's thread.
        self._filled = True
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=self._flush_loop, name="toolscript-journal-flush", daemon=True
            )
            self._flusher.start()
        self._buffer_filled.notify()

    def _flush_loop(self) -> None:
        while True:
            with self._buffer_lock:
                while not self._filled and not self._closed:
                    self._buffer_filled.wait()
            if self._closing.wait(FLUSH_INTERVAL):
                return  # close() writes what is left
            with self._db_lock:
                if self._closed:
                    return
                try:
                    self._commit()
                except sqlite3.Error:
                    # The batch went back to the buffer and its intent lines stay: the next
                    # round tries again.
                    _log.exception("Could not write to the call journal; will retry.")

    def _commit(self, sweep: bool = False, end_host: bool = False) -> None:
        """Write the buffer in one transaction, with the sweep of gone hosts or this host's
        end if asked. Hold `_db_lock`, so batches keep their order."""
        taken = self._take()
        if taken is None and not sweep and not end_host:
            return
        written = _Written({}, {}, [])
        gone: list[int] = []
        try:
            with _Transaction(self._db):
                if taken is not None:
                    written = self._write(taken)
                if sweep:
                    gone = self._sweep_gone_hosts()
                if end_host:
                    self._end_host(written)
        except BaseException:
            if taken is not None:
                self._put_back(taken)
            raise
        if taken is not None:
            self._apply(written)
        if self.path is not None:
            for host_id in gone:
                _remove_intents(self.path, host_id)

    def _take(self) -> _Buffer | None:
        with self._buffer_lock:
            if not self._filled:
                return None
            taken, self._buffer = self._buffer, _Buffer()
            self._filled = False
            if self._intents is not None:
                self._intents.taken()
        return taken

    def _put_back(self, taken: _Buffer) -> None:
        """A batch that was not committed goes back to the front of the buffer."""
        with self._buffer_lock:
            later = self._buffer
            self._buffer = _Buffer(
                taken.scripts + later.scripts,
                taken.starts + later.starts,
                taken.answers + later.answers,
                taken.fates + later.fates,
                taken.ends + later.ends,
                taken.violations + later.violations,
            )
            if self._closed:
                self._filled = True
            elif not self._filled:
                self._fill()

    def _write(self, taken: _Buffer) -> _Written:
        """Write a batch in the open transaction; change nothing in memory (it may roll back).

        A call made in this batch is inserted once, with its answer and fate when they are
        in the batch too (most calls start and end within one flush): one row write instead
        of an insert and two updates of the same row, which cost the flush thread (and,
        through the GIL, the event loop) about a third of the journal's time. Answers and
        fates of calls written earlier update their rows.
        """
        db = self._db
        host_id = self.host_id
        if taken.scripts:
            db.executemany(
                _INSERT_SCRIPT, [(script[0], host_id, *script[1:]) for script in taken.scripts]
            )
        # Call id -> the columns after `made_at` of a call made in this batch, replaced as
        # its answer and fate come (tuples of strings and numbers, which the collector
        # stops tracking, where lists would be walked by its older generations), and what
        # became of it in this batch. Most calls are made, answered and settled within one
        # flush: those are inserted whole and never enter the journal's memory.
        ids = list(map(_first, taken.starts))
        fresh: dict[str, tuple[Any, ...]] = dict.fromkeys(ids, _NO_END)
        fresh_states: dict[str, int] = {}
        first = db.execute(_LAST_CALL).fetchone()[0] + 1 if ids else 0
        open_rows = self._open_rows
        states: dict[str, int] = {}  # calls written in earlier batches
        answer_rows = []
        for call_id, answered_at, is_error, answer_brief in taken.answers:
            whole = fresh.get(call_id)
            if whole is not None:  # made in this batch: known to this batch alone
                state = fresh_states.get(call_id, _OPEN)
                if state == _CLOSED:
                    continue
                fresh[call_id] = (answered_at, is_error, answer_brief, whole[3], whole[4], None)
                fresh_states[call_id] = _CLOSED if state == _PENDING else _ANSWERED
            else:
                row = open_rows.get(call_id)
                state = self._state(states, call_id)
                if row is None or state == _CLOSED:
                    continue
                answer_rows.append((answered_at, is_error, answer_brief, row))
                states[call_id] = _CLOSED if state == _PENDING else _ANSWERED
        rows_by_fate: dict[tuple[str, str | None], list[int]] = {}
        for call_id, fate, cause in taken.fates:
            whole = fresh.get(call_id)
            if whole is not None:
                state = fresh_states.get(call_id, _OPEN)
                if state == _CLOSED:
                    continue
                # As _SETTLE_CALL would: uncertain only if settled pending with no answer.
                unanswered = fate == "pending" and whole[0] is None
                uncertain = "pending_at_settle" if unanswered else None
                fresh[call_id] = (*whole[:3], fate, cause, uncertain)
                after = fresh_states
            else:
                row = open_rows.get(call_id)
                state = self._state(states, call_id)
                if row is None or state == _CLOSED:
                    continue
                rows_by_fate.setdefault((fate, cause), []).append(row)
                after = states
            after[call_id] = _CLOSED if state == _ANSWERED or fate != "pending" else _PENDING
        if fresh:
            _insert_whole_calls(
                db,
                [
                    (first + i, host_id, *call, *fresh[call[0]])
                    for i, call in enumerate(taken.starts)
                ],
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
            state = fresh_states.get(call_id, _OPEN)
            if state != _CLOSED:
                new_rows[call_id] = first + i
                if state != _OPEN:
                    states[call_id] = state
        return _Written(new_rows, states, ids)

    def _state(self, states: dict[str, int], call_id: str) -> int:
        state = states.get(call_id)
        if state is not None:
            return state
        if call_id in self._answered_unsettled:
            return _ANSWERED
        if call_id in self._pending_unanswered:
            return _PENDING
        return _OPEN

    def _apply(self, written: _Written) -> None:
        """A batch was committed: remember its rows, forget closed calls, drop its intents."""
        open_rows = self._open_rows
        closed = [call_id for call_id, state in written.states.items() if state == _CLOSED]
        with self._buffer_lock:
            # In one step, so a repeated call id is always found in one or the other.
            open_rows.update(written.new_rows)
            self._unwritten.difference_update(written.flushed)
            for call_id in closed:
                del open_rows[call_id]
        answered = self._answered_unsettled
        pending = self._pending_unanswered
        for call_id, state in written.states.items():
            if state == _ANSWERED:
                answered.add(call_id)
            elif state == _PENDING:
                pending.add(call_id)
            else:
                answered.discard(call_id)
                pending.discard(call_id)
        if self._intents is not None:
            try:
                self._intents.written()
            except OSError:
                # The file keeps lines already committed: replaying them adds nothing.
                _log.exception("Could not empty the call journal's intent file.")

    def _end_host(self, written: _Written) -> None:
        """Leave this host's calls in flight uncertain and mark it ended. In a transaction."""
        rows = [*self._open_rows.values(), *written.new_rows.values()]
        self._db.executemany(
            f"UPDATE calls SET uncertain_reason = 'host_gone' WHERE id = ? AND {_IN_FLIGHT}",
            [(row,) for row in rows],
        )
        self._db.execute(
            "UPDATE hosts SET ended_at = ? WHERE host_id = ?", (time.time(), self.host_id)
        )

    def _select_calls(
        self, conditions: list[str], parameters: list[object], limit: int | None, sweep: bool
    ) -> list[JournalCall]:
        query = f"SELECT {_CALL_COLUMNS} FROM calls"
        if conditions:
            query += " WHERE " + " AND ".join(conditions)
        query += " ORDER BY id DESC"
        if limit is not None:
            query += " LIMIT ?"
            parameters = [*parameters, limit]
        with self._db_lock:
            self._check_open()
            self._commit(sweep=sweep)
            rows = self._db.execute(query, parameters).fetchall()
        return [_journal_call(row) for row in reversed(rows)]

    def _sweep_gone_hosts(self) -> list[int]:
        """Replay the intents and mark the in-flight calls of every host whose process is
        gone. In a transaction; returns their ids, whose intent files go once it commits."""
        hosts = self._db.execute(
            "SELECT host_id, calls_after, pid, machine, boot_id, process_start FROM hosts "
            "WHERE ended_at IS NULL AND host_id != ?",
            (self.host_id,),
        ).fetchall()
        now = time.time()
        gone = []
        for host_id, calls_after, pid, machine, boot_id, process_start in hosts:
            if _is_gone(_ProcessIdentity(pid, machine, boot_id, process_start), self._me):
                if self.path is not None:
                    self._replay_intents(host_id, calls_after)
                self._db.execute(
                    "UPDATE calls SET uncertain_reason = 'host_gone' "
                    f"WHERE id > ? AND host_id = ? AND {_IN_FLIGHT}",
                    (calls_after, host_id),
                )
                self._db.execute("UPDATE hosts SET ended_at = ? WHERE host_id = ?", (now, host_id))
                gone.append(host_id)
        return gone

    def _replay_intents(self, host_id: int, calls_after: int) -> None:
        """Insert what a gone host recorded in its intent files and never wrote to SQLite."""
        assert self.path is not None
        scripts: list[tuple[int, list[Any]]] = []
        calls: list[tuple[int, list[Any]]] = []
        for path in _intent_paths(self.path, host_id):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError:
                _log.exception("Could not read the intent file %s of a host that is gone.", path)
                continue
            for line in data.split(b"\n"):
                for intent in _parse_intents(line):
                    (scripts if intent[1] == "s" else calls).append((intent[0], intent[2:]))
        if scripts:
            scripts.sort(key=lambda intent: intent[0])
            self._db.executemany(
                _INSERT_SCRIPT, [(fields[0], host_id, *fields[1:]) for _, fields in scripts]
            )
        if calls:
            # A host writes its buffer in the order recorded, so what it committed is a
            # prefix of its intents; a call id is unique per host.
            calls.sort(key=lambda intent: intent[0])
            known = {
                row[0]
                for row in self._db.execute(
                    "SELECT call_id FROM calls WHERE id > ? AND host_id = ? "
                    "AND call_id IN (SELECT value FROM json_each(?))",
                    (calls_after, host_id, json.dumps([fields[0] for _, fields in calls])),
                )
            }
            rows = []
            for _, fields in calls:
                if fields[0] not in known:
                    known.add(fields[0])
                    rows.append((host_id, *fields))
            self._db.executemany(_INSERT_CALL, rows)

    def _remove_stale_intents(self, path: Path) -> None:
        """Remove the intent files of hosts that have ended (or are unknown to the journal)."""
        pattern = re.compile(re.escape(path.name) + r"-host(\d+)-[ab]\.intents")
        try:
            names = os.listdir(path.parent)
        except OSError:
            return
        found = [(name, int(m.group(1))) for name in names if (m := pattern.fullmatch(name))]
        if not found:
            return
        # Listed before reading which hosts live: a host creates its files after its row.
        with self._db_lock:
            living = {
                row[0]
                for row in self._db.execute("SELECT host_id FROM hosts WHERE ended_at IS NULL")
            }
        for name, host_id in found:
            if host_id not in living:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path.parent / name)


class _IntentLog:
    """A host's two intent files: a line per `record_calls` or `begin_script`, before the
    calls or the script are buffered.

    Invariant: lines are appended only to the current file, and every take of the buffer
    (the whole buffer, under `_buffer_lock`) switches appends to the other file. So once the
    commit of a take succeeds, every line in the file that is no longer current was appended
    before that take and is in SQLite: that file is emptied. A failed commit empties nothing
    (its entries go back to the buffer and are in the next take), so a line stays until a
    commit that includes its entry has succeeded.
    """

    def __init__(self, paths: tuple[Path, Path]) -> None:
        self.paths = paths
        # O_TRUNC: a file left under our name by an older journal file is not ours.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self._fds: list[int] = []
        try:
            for path in paths:
                self._fds.append(os.open(path, flags, 0o600))
        except BaseException:
            self.close()
            raise
        self._current = 0
        self._has_lines = [False, False]

    def append(self, data: bytes) -> None:
        """Append whole lines with one write. Hold `_buffer_lock`."""
        current = self._current
        self._has_lines[current] = True
        written = os.write(self._fds[current], data)
        if written != len(data):
            # A short write (a full disk): end the torn line, so the next one starts whole.
            os.write(self._fds[current], b"\n")
            raise OSError(errno.ENOSPC, "Could not write to the call journal's intent file.")

    def taken(self) -> None:
        """The buffer was taken for writing. Hold `_buffer_lock`."""
        self._current = 1 - self._current

    def written(self) -> None:
        """The last take is committed: empty the file that is not current. Hold `_db_lock`."""
        other = 1 - self._current
        if self._has_lines[other]:
            os.ftruncate(self._fds[other], 0)
            self._has_lines[other] = False

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


class _Transaction:
    """`BEGIN IMMEDIATE` … `COMMIT`, or `ROLLBACK` when the block (or the commit) raises."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        elif self._db.in_transaction:
            self._db.execute("ROLLBACK")


def _prepare_schema(db: sqlite3.Connection, where: str) -> None:
    with _Transaction(db):
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = db.execute("SELECT max(version) FROM schema_version").fetchone()
        found = row[0] if row is not None else None
        if found is None:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        elif found > SCHEMA_VERSION:
            raise JournalVersionError(where, found, SCHEMA_VERSION)
        else:
            columns = {row[1] for row in db.execute("PRAGMA table_info(scripts)")}
            if "violation" not in columns:
                # Added to version 1 without a new version: a nullable column that older
                # code neither reads nor writes, so both can keep sharing the file.
                db.execute("ALTER TABLE scripts ADD COLUMN violation TEXT")


def _repeated_call_id() -> ValueError:
    return ValueError(
        "A call id in this batch is already open in this journal (or repeated in the batch); "
        "call ids must be unique per host. Nothing of the batch was written."
    )


def _journal_call(row: Any) -> JournalCall:
    (call_id, script_id, shell, tool, args_brief, made_at, answered_at, is_error) = row[:8]
    (answer_brief, fate, cause, reason) = row[8:]
    return JournalCall(
        call_id,
        script_id,
        shell,
        tool,
        args_brief,
        made_at,
        answered_at,
        is_error=None if is_error is None else bool(is_error),
        answer_brief=answer_brief,
        fate=fate,
        cause=cause,
        uncertain=reason is not None,
        uncertain_reason=reason,
    )


# -- intent files ------------------------------------------------------------------------------

_LINE = orjson.OPT_APPEND_NEWLINE

_CALL_INTENT = (str, (str, type(None)), str, str, str, (int, float))
_SCRIPT_INTENT = (str, str, int, str, (int, float))


def _intent_paths(path: Path, host_id: int) -> tuple[Path, Path]:
    """A host's two intent files, beside the journal's file."""
    return (
        path.with_name(f"{path.name}-host{host_id}-a.intents"),
        path.with_name(f"{path.name}-host{host_id}-b.intents"),
    )


def _remove_intents(path: Path, host_id: int) -> None:
    for intents in _intent_paths(path, host_id):
        try:
            intents.unlink(missing_ok=True)
        except OSError:
            _log.exception("Could not remove the intent file %s.", intents)


def _storable(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate (a script may well hold one, from an
    escape in the JSON it came in) is kept as its escape, `\\ud800`, not refused."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _call_fields(call: CallStart) -> StartRow:
    """A call's columns after `host_id`, as `_INSERT_CALL` takes them and intent lines hold them."""
    return (call.call_id, call.script_id, call.shell, call.tool, call.args_brief, call.made_at)


# An intent line is a JSON array of what one call of `record_calls` or `begin_script`
# recorded: `[n, "c", call_id, script_id, shell, tool, args_brief, made_at]` per call, or
# `[n, "s", script_id, shell, generation, code, started_at]`, `n` counting up per journal.
# One `orjson.dumps` per line, not per call: a thousand small results kept alive cost ~2.5 µs
# each in allocation (measured), ten times the encoding.


def _call_line(sequence: Iterator[int], rows: Sequence[StartRow]) -> bytes:
    return orjson.dumps([(next(sequence), "c", *row) for row in rows], option=_LINE)


def _script_line(n: int, script: tuple[str, str, int, str, float]) -> bytes:
    return orjson.dumps([(n, "s", *script)], option=_LINE)


def _parse_intents(line: bytes) -> list[list[Any]]:
    """The entries of an intent line, none for a line torn by a kill (or not ours)."""
    try:
        entries = orjson.loads(line)
    except orjson.JSONDecodeError:
        return []
    if type(entries) is not list:
        return []
    return [entry for entry in entries if _is_intent(entry)]


def _is_intent(entry: Any) -> bool:
    if type(entry) is not list or len(entry) < 2 or type(entry[0]) is not int:
        return False
    kinds = {"c": _CALL_INTENT, "s": _SCRIPT_INTENT}.get(entry[1])
    fields = entry[2:]
    return (
        kinds is not None
        and len(fields) == len(kinds)
        and all(isinstance(value, kind) for value, kind in zip(fields, kinds, strict=True))
    )


# -- is a host still alive? -------------------------------------------------------------------
#
# Goal: mark a host's in-flight calls as uncertain once its process is gone, and never while it
# lives (two runtimes may share a journal). What fails: "is the pid alive" alone, because pids
# are reused: after a restart (a container's host is often pid 1 every time) the new process
# has the dead host's pid. What we do: record the boot id and the process's start time (Linux
# /proc, cheap); a pid that is alive but started at another time, or on another boot, is
# another process. A zombie is gone. A host on another machine is left alone: we cannot tell.
# Where the OS does not say (no /proc), only the pid's existence is checked.


@dataclass(frozen=True, slots=True)
class _ProcessIdentity:
    pid: int
    machine: str
    boot_id: str | None
    process_start: str | None


def _this_process() -> _ProcessIdentity:
    pid = os.getpid()
    stat = _proc_stat(pid)
    return _ProcessIdentity(
        pid, socket.gethostname(), _boot_id(), stat[1] if stat is not None else None
    )


def _is_gone(host: _ProcessIdentity, me: _ProcessIdentity) -> bool:
    if host.machine != me.machine:
        return False
    if host.boot_id is not None and me.boot_id is not None and host.boot_id != me.boot_id:
        return True
    try:
        os.kill(host.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    stat = _proc_stat(host.pid)
    if stat is None:
        return False
    state, started = stat
    if state == "Z":
        return True
    return host.process_start is not None and started != host.process_start


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """The process's state letter and start time (clock ticks after boot), from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces and ")".
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _insert_whole_calls(db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert calls whole (`_INSERT_WHOLE_CALL`'s columns), many rows per statement."""
    done = 0
    for size in _ROWS_PER_INSERT:
        statement = _INSERT_WHOLE_CALLS[size]
        while len(rows) - done >= size:
            db.execute(statement, list(chain.from_iterable(rows[done : done + size])))
            done += size
