"""The journal's tables, the statements more than one part of it runs, and its transactions."""

from __future__ import annotations

import sqlite3

from .records import JournalFileError, JournalVersionError

SCHEMA_VERSION = 2
"""The journal schema this code writes and reads."""

# What each version adds to the one before it; a journal of an older version is brought up to
# this one when it is opened. Version 2: the agent's turns (`toolscript.host.journal.turns`).
_MIGRATIONS = {
    2: """
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY,
    host_id INTEGER NOT NULL,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    shell TEXT NOT NULL,
    started_at REAL NOT NULL,
    saved_at REAL NOT NULL,
    ended_at REAL,
    stop_reason TEXT,
    steps INTEGER NOT NULL,
    step_cap INTEGER NOT NULL,
    elapsed REAL NOT NULL,
    messages TEXT NOT NULL,
    state TEXT NOT NULL
)
""",
}

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
    told_at REAL,
    answer_frame BLOB
);
CREATE INDEX calls_uncertain ON calls (shell) WHERE uncertain_reason IS NOT NULL;
"""

# Columns added to version 1 without a new version: nullable, and older code neither reads
# nor writes them (it names the columns it reads and inserts), so both can keep sharing the
# file. A journal without them gains them when it is opened. `scripts.violation`: how a script
# broke the protocol. `calls.answer_frame`: an answer as sent to the kernel, kept while code
# in the kernel may still take it (`records.ANSWER_KEPT`, `batch._FRAME_NEEDED`).
_ADDED_COLUMNS = (("scripts", "violation", "TEXT"), ("calls", "answer_frame", "BLOB"))

# Added to version 1 without a new version, like `scripts.violation`: tables older code
# neither reads nor writes, so both can keep sharing the file. `toolscript serve` keeps in
# them what a restarted server needs: its clients' sessions, the events of their streams,
# and the results of background scripts. `scripts_unended` indexes the scripts no host has
# ended yet, which the next runtime looks for (`Journal.conclude_lost_scripts`).
_SERVE_SCHEMA = """
CREATE INDEX IF NOT EXISTS scripts_unended ON scripts (host_id) WHERE ended_at IS NULL;
CREATE TABLE IF NOT EXISTS stream_events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    stream TEXT NOT NULL,
    message TEXT,
    is_answer INTEGER NOT NULL,
    host_id INTEGER NOT NULL,
    stored_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS stream_events_by_stream ON stream_events (session, stream, event_id);
CREATE TABLE IF NOT EXISTS serve_sessions (
    session_id TEXT PRIMARY KEY,
    shell TEXT NOT NULL,
    protocol_version TEXT NOT NULL,
    client TEXT NOT NULL,
    opened_at REAL NOT NULL,
    used_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS script_results (
    script_id TEXT PRIMARY KEY,
    shell TEXT NOT NULL,
    status TEXT NOT NULL,
    text TEXT NOT NULL,
    data TEXT NOT NULL,
    ended_at REAL NOT NULL
);
"""

# Goal: journaling a call costs the host's hot path little, and a host killed at any moment
# after `record_calls` returned leaves its calls findable. What fails: a commit per call
# (file locks and writes for every INSERT), and indexes on `calls` (each adds a page to every
# commit); bench/README.md has the numbers. What we do: the hot path appends a line to an intent file with one `write` and
# the call to a buffer, under `_buffer_lock` only (never `_db_lock`, which the flush thread
# holds through a commit); the flush thread writes the buffer in one transaction and then
# drops the intent lines (see `_IntentLog`). `calls` has only its rowid, plus a partial
# index that holds only uncertain calls (rare). This host finds its own rows through
# `Journal._open_rows` (call id → rowid) while they can still change. A host's and a
# script's calls are found by rowid range: every row inserted after the host opened (or the
# script's row was inserted) has a larger rowid than `calls_after`, the largest rowid at
# that moment, read under the write lock. A flush inserts a batch's scripts before its calls
# and ends scripts after them, so a script's range covers its calls in the same batch too.

_LAST_CALL = "SELECT coalesce(max(id), 0) FROM calls"

_INSERT_CALL = (
    "INSERT INTO calls (host_id, call_id, script_id, shell, tool, args_brief, made_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)

# A script id begun twice is kept once: a failing row would fail every later flush.
_INSERT_SCRIPT = (
    "INSERT OR IGNORE INTO scripts (script_id, host_id, shell, generation, code, started_at, "
    f"calls_after) VALUES (?, ?, ?, ?, ?, ?, ({_LAST_CALL}))"
)

_IN_FLIGHT = "answered_at IS NULL AND (fate IS NULL OR fate = 'pending')"

_END_HOST = "UPDATE hosts SET ended_at = ? WHERE host_id = ?"


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


_TABLES = frozenset({"schema_version", "hosts", "scripts", "calls"})
"""Tables every journal has, of any version."""


def _check_is_journal(db: sqlite3.Connection, where: str) -> None:
    """Refuse, before anything is written to it, a database that holds tables but is not a
    journal: another program's database is not ours to add tables to, nor to turn to WAL."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return  # a new journal
    if not tables >= _TABLES:
        others = sorted(tables - _TABLES)
        why = (
            "it is an SQLite database with other tables: " + ", ".join(others[:5])
            if others
            else "it lacks tables every journal has: " + ", ".join(sorted(_TABLES - tables))
        )
        raise JournalFileError(where, why, from_sqlite=False)
    if db.execute("SELECT max(version) FROM schema_version").fetchone()[0] is None:
        raise JournalFileError(where, "its schema version is missing", from_sqlite=False)


def _prepare_schema(db: sqlite3.Connection, where: str) -> None:
    with _Transaction(db):
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = db.execute("SELECT max(version) FROM schema_version").fetchone()
        found = row[0] if row is not None else None
        if found is not None and (not isinstance(found, int) or found < 1):
            raise JournalFileError(
                where, f"its schema version is {found!r}, not a number from 1", from_sqlite=False
            )
        if found is None:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            for version in sorted(_MIGRATIONS):
                db.execute(_MIGRATIONS[version])
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        elif found > SCHEMA_VERSION:
            raise JournalVersionError(where, found, SCHEMA_VERSION)
        else:
            for version in range(found + 1, SCHEMA_VERSION + 1):
                db.execute(_MIGRATIONS[version])
            if found < SCHEMA_VERSION:
                db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
            for table, column, kind in _ADDED_COLUMNS:
                columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                if column not in columns:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        for statement in _SERVE_SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
