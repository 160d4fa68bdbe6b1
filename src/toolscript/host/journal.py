"""The call journal: every script and every tool call, written down before it is acted on.

The host's call table decides each call's fate; this module only keeps the record, durably,
and answers questions about it. It is SQLite (standard library `sqlite3`) in WAL mode, in a
file under the state directory by default, or in memory when the caller asks.

What is durable, and when:

- `begin_script`, `end_script` and `record_calls` commit before they return. With WAL and
  `synchronous=NORMAL` a commit survives the host process being killed (even by SIGKILL):
  the data is in the operating system's hands. It does not survive a power loss or a kernel
  crash; that would need an fsync per commit, which the hot path cannot afford.
- `record_answers` and `settle_calls` are buffered and written by a flush thread within
  `FLUSH_INTERVAL` seconds, and at once on `flush()`, `end_script()`, any query and `close()`.
  An answer lost to a crash leaves its call uncertain, which is the truthful state: the host
  cannot prove the effect happened.

Uncertain calls are those whose effect is unknown: settled `pending` when their script ended
and never answered since (reason `pending_at_settle`), or left in flight (no answer and no
fate, or settled `pending`) by a host that is gone (reason `host_gone`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class CallAnswer:
    """The answer a call got from its handler: when, whether an error, and its start."""

    call_id: str
    answered_at: float
    is_error: bool
    answer_brief: str


@dataclass(frozen=True, slots=True)
class CallFate:
    """A call's fate when its script's result was settled (DESIGN §3.3).

    `fate` is one of `seen`, `unread`, `late`, `pending`, `refused`; `cause` one of
    `timeout`, `cancelled`, `stopped`, `interpreter_gone`, `tool_timeout`, `source_gone`,
    or `None`.
    """

    call_id: str
    fate: str
    cause: str | None


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
    """One script as the journal knows it. `status` and `ended_at` are `None` until it ends."""

    script_id: str
    shell: str
    generation: int
    started_at: float
    ended_at: float | None
    status: str | None


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
    calls_up_to INTEGER
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

# Goal: journaling a call costs little more than appending its row, since each commit is on the
# hot path of a tool call. What fails: indexes on `calls`; each one adds a page to every
# commit (measured ~8-10 µs per index for a one-call commit). What we do: `calls` has only
# its rowid, plus a partial index that holds only uncertain calls (rare). This host finds its
# own rows through `Journal._open_rows` (call id → rowid) while they can still change. A
# host's and a script's calls are found by rowid range: every row inserted after the host
# opened (or the script began) has a larger rowid than `calls_after`, which is the largest
# rowid at that moment, read under the write lock.

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


class Journal:
    """The durable record of scripts and tool calls, and the queries the runtime and CLI ask.

    Open one with `Journal.open(...)`. Each open journal is one host: it writes a `hosts`
    row, and on opening it marks the calls left in flight by hosts whose process is gone as
    uncertain (`host_gone`). Several hosts may share one journal file; a host never touches
    the calls of another host that is still alive.

    Calls come from one thread (the host's asyncio thread); a flush thread writes buffered
    answers and fates. Another process (the `toolscript calls` command) may read the same
    file at the same time.

    Memory: the journal keeps one small entry per call of this host whose row may still
    change (not yet both answered and settled, and not settled with a fate other than
    `pending`).
    """

    def __init__(self, connection: sqlite3.Connection, path: Path | None) -> None:
        """Use `Journal.open`; this takes a connection whose schema is ready."""
        self.path = path
        """The journal's file, or `None` for an in-memory journal."""
        self._db = connection
        self._db_lock = threading.Lock()
        self._buffer_lock = threading.Lock()
        self._buffer_filled = threading.Condition(self._buffer_lock)
        self._answers: list[CallAnswer] = []
        self._fates: list[CallFate] = []
        self._open_rows: dict[str, int] = {}
        self._answered_unsettled: set[str] = set()
        self._pending_unanswered: set[str] = set()
        self._closing = threading.Event()
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._me = _this_process()
        with self._db_lock, self._transaction():
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
        """Record that a script is about to run. Committed when this returns."""
        # One statement commits by itself (autocommit mode): no BEGIN/COMMIT around it.
        with self._db_lock:
            self._check_open()
            self._db.execute(
                "INSERT INTO scripts (script_id, host_id, shell, generation, code, started_at, "
                f"calls_after) VALUES (?, ?, ?, ?, ?, ?, ({_LAST_CALL}))",
                (script_id, self.host_id, shell, generation, code, started_at),
            )

    def end_script(self, script_id: str, status: str, ended_at: float) -> None:
        """Record how a script ended, with every buffered answer and fate before it."""
        with self._db_lock:
            self._check_open()
            with self._buffer_lock:
                buffered = bool(self._answers or self._fates)
            if buffered:
                with self._transaction():
                    self._write_buffered()
                    self._end_script(script_id, status, ended_at)
            else:
                self._end_script(script_id, status, ended_at)

    def _end_script(self, script_id: str, status: str, ended_at: float) -> None:
        self._db.execute(
            f"UPDATE scripts SET status = ?, ended_at = ?, calls_up_to = ({_LAST_CALL}) "
            "WHERE script_id = ?",
            (status, ended_at, script_id),
        )

    # -- calls -----------------------------------------------------------------------------

    def record_calls(self, calls: Sequence[CallStart]) -> None:
        """Record calls before any of them is acted on. Committed when this returns.

        The commit survives a kill of the host process, not a power loss (see the module's
        docstring). A `call_id` that this journal holds for a call still open (not yet
        answered and settled) raises `ValueError`, and nothing of the batch is written.
        """
        if not calls:
            return
        host_id = self.host_id
        open_rows = self._open_rows
        with self._db_lock:
            self._check_open()
            if len(calls) == 1:
                (call,) = calls
                if call.call_id in open_rows:
                    raise _repeated_call_id()
                cursor = self._db.execute(
                    _INSERT_CALL,
                    (
                        host_id,
                        call.call_id,
                        call.script_id,
                        call.shell,
                        call.tool,
                        call.args_brief,
                        call.made_at,
                    ),
                )
                assert cursor.lastrowid is not None
                open_rows[call.call_id] = cursor.lastrowid
                return
            with _Transaction(self._db):
                first = self._db.execute(_LAST_CALL).fetchone()[0] + 1
                new_rows = {c.call_id: first + i for i, c in enumerate(calls)}
                if len(new_rows) != len(calls) or not open_rows.keys().isdisjoint(new_rows):
                    raise _repeated_call_id()
                self._db.executemany(
                    _INSERT_NUMBERED_CALL,
                    [
                        (
                            first + i,
                            host_id,
                            c.call_id,
                            c.script_id,
                            c.shell,
                            c.tool,
                            c.args_brief,
                            c.made_at,
                        )
                        for i, c in enumerate(calls)
                    ],
                )
            open_rows.update(new_rows)

    def record_answers(self, answers: Sequence[CallAnswer]) -> None:
        """Record answers (buffered; written within `FLUSH_INTERVAL`).

        An answer to a call already settled `pending` is a late answer: the fate stays
        `pending`, as its result reported, but the answer is kept and the call is no longer
        uncertain, since its effect is known now. Answers to call ids this host never
        recorded are ignored.
        """
        self._check_open()
        with self._buffer_lock:
            was_empty = not self._answers and not self._fates
            self._answers.extend(answers)
            if was_empty:
                self._wake_flusher()

    def settle_calls(self, fates: Sequence[CallFate]) -> None:
        """Record the calls' fates (buffered; written within `FLUSH_INTERVAL`).

        A call settled `pending` with no answer becomes uncertain (`pending_at_settle`).
        """
        self._check_open()
        with self._buffer_lock:
            was_empty = not self._answers and not self._fates
            self._fates.extend(fates)
            if was_empty:
                self._wake_flusher()

    def flush(self) -> None:
        """Write every buffered answer and fate now."""
        with self._db_lock, self._transaction():
            self._write_buffered()

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
        with self._db_lock, self._transaction():
            self._db.executemany(
                "UPDATE calls SET told_at = ? WHERE call_id = ? "
                "AND uncertain_reason = 'host_gone' AND told_at IS NULL",
                rows,
            )

    def scripts(self, shell: str | None = None, limit: int | None = None) -> list[JournalScript]:
        """Scripts in the order they started, oldest first; `limit` keeps the most recent."""
        query = "SELECT script_id, shell, generation, started_at, ended_at, status FROM scripts"
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
            rows = self._db.execute(query, parameters).fetchall()
        return [JournalScript(*row) for row in reversed(rows)]

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Write what is buffered and close. Calls still in flight become uncertain.

        Safe to call more than once.
        """
        if self._closed:
            return
        self._closing.set()
        with self._buffer_lock:
            self._buffer_filled.notify()
        if self._flusher is not None:
            self._flusher.join()
        with self._db_lock:
            if self._closed:
                return
            with self._transaction():
                self._write_buffered()
                self._db.executemany(
                    f"UPDATE calls SET uncertain_reason = 'host_gone' WHERE id = ? AND {_IN_FLIGHT}",
                    [(row,) for row in self._open_rows.values()],
                )
                self._db.execute(
                    "UPDATE hosts SET ended_at = ? WHERE host_id = ?", (time.time(), self.host_id)
                )
            self._closed = True
            self._db.close()

    def __enter__(self) -> Journal:
        """Use the journal as a context manager that closes it."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close the journal."""
        self.close()

    # -- inside ----------------------------------------------------------------------------

    def _transaction(self) -> _Transaction:
        self._check_open()
        return _Transaction(self._db)

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError()

    def _wake_flusher(self) -> None:
        """Start or wake the flush thread. Hold `_buffer_lock`; call when the buffer fills."""
        # Goal: the host's hot path pays only for a list append, yet nothing waits in the
        # buffer for long. What fails: flushing only when the host next calls us (it may go
        # idle) or on a size threshold (a slow trickle would wait forever). What we do: a
        # daemon thread writes the buffer FLUSH_INTERVAL after it becomes non-empty; SQLite
        # releases the GIL while it writes, so that work leaves the event loop's thread.
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=self._flush_loop, name="toolscript-journal-flush", daemon=True
            )
            self._flusher.start()
        self._buffer_filled.notify()

    def _flush_loop(self) -> None:
        while True:
            with self._buffer_lock:
                while not self._answers and not self._fates and not self._closing.is_set():
                    self._buffer_filled.wait()
            if self._closing.wait(FLUSH_INTERVAL):
                return
            with self._db_lock:
                if self._closed:
                    return
                try:
                    with _Transaction(self._db):
                        self._write_buffered()
                except sqlite3.Error:
                    # What was written stays true (those calls read as unanswered or
                    # unsettled); the thread lives on for the next batch.
                    _log.exception("Could not write answers and fates to the call journal.")

    def _write_buffered(self) -> None:
        """Write the buffer in the open transaction. Hold `_db_lock`, so batches keep order."""
        with self._buffer_lock:
            answers, self._answers = self._answers, []
            fates, self._fates = self._fates, []
        open_rows = self._open_rows
        if answers:
            answer_rows = []
            for answer in answers:
                call_id = answer.call_id
                row = open_rows.get(call_id)
                if row is None:
                    continue
                answer_rows.append((answer.answered_at, answer.is_error, answer.answer_brief, row))
                if call_id in self._pending_unanswered:
                    self._pending_unanswered.discard(call_id)
                    del open_rows[call_id]
                else:
                    self._answered_unsettled.add(call_id)
            self._db.executemany(_ANSWER_CALL, answer_rows)
        if fates:
            rows_by_fate: dict[tuple[str, str | None], list[int]] = {}
            for settled in fates:
                call_id = settled.call_id
                row = open_rows.get(call_id)
                if row is None:
                    continue
                key = (settled.fate, settled.cause)
                same_fate = rows_by_fate.get(key)
                if same_fate is None:
                    rows_by_fate[key] = [row]
                else:
                    same_fate.append(row)
                if call_id in self._answered_unsettled:
                    self._answered_unsettled.discard(call_id)
                    del open_rows[call_id]
                elif settled.fate == "pending":
                    self._pending_unanswered.add(call_id)
                else:
                    del open_rows[call_id]
            for (fate, cause), rows in rows_by_fate.items():
                if len(rows) == 1:
                    self._db.execute(_SETTLE_CALL, {"fate": fate, "cause": cause, "rows": rows[0]})
                else:
                    self._db.execute(
                        _SETTLE_CALLS, {"fate": fate, "cause": cause, "rows": json.dumps(rows)}
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
            with self._transaction():
                self._write_buffered()
                if sweep:
                    self._sweep_gone_hosts()
            rows = self._db.execute(query, parameters).fetchall()
        return [_journal_call(row) for row in reversed(rows)]

    def _sweep_gone_hosts(self) -> None:
        """Mark the in-flight calls of every host whose process is gone. In a transaction."""
        hosts = self._db.execute(
            "SELECT host_id, calls_after, pid, machine, boot_id, process_start FROM hosts "
            "WHERE ended_at IS NULL AND host_id != ?",
            (self.host_id,),
        ).fetchall()
        now = time.time()
        for host_id, calls_after, pid, machine, boot_id, process_start in hosts:
            if _is_gone(_ProcessIdentity(pid, machine, boot_id, process_start), self._me):
                self._db.execute(
                    "UPDATE calls SET uncertain_reason = 'host_gone' "
                    f"WHERE id > ? AND host_id = ? AND {_IN_FLIGHT}",
                    (calls_after, host_id),
                )
                self._db.execute("UPDATE hosts SET ended_at = ? WHERE host_id = ?", (now, host_id))


class _Transaction:
    """`BEGIN IMMEDIATE` … `COMMIT`, or `ROLLBACK` when the block raises."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")


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
