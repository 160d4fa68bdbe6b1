"""The `Journal`: opening it, the write calls (recorded ahead in the intent file, buffered for
SQLite) and the queries the runtime and the CLI ask.

One concept, though over 500 lines: the journal's one object: the writes every tool call
makes and the queries read from them, over the same tables and buffer.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..state import state_dir
from .buffer import MAX_UNWRITTEN, _WriteBehind
from .intents import (
    _answer_line,
    _call_line,
    _end_line,
    _fate_line,
    _intent_paths,
    _IntentLog,
    _remove_intents,
    _remove_stale_intents,
    _script_line,
)
from .liveness import _register_host, _sweep_gone_hosts
from .records import (
    AnswerRow,
    FateRow,
    JournalAccessError,
    JournalCall,
    JournalClosedError,
    JournalFileError,
    JournalOpenError,
    JournalScript,
    StartRow,
    TakenCall,
)
from .schema import _check_is_journal, _prepare_schema, _Transaction
from .serving import EVENTS_KEPT, _prune_serving, _ServeRecords
from .turns import TurnRecords

JOURNAL_FILE_NAME = "journal.sqlite3"
"""The journal's file name under the state directory."""

MEMORY = ":memory:"
"""Pass to `Journal.open` for a journal that lives only as long as the object."""

_BUSY_TIMEOUT_MS = 5000


_CALL_COLUMNS = (
    "call_id, script_id, shell, tool, args_brief, made_at, answered_at, is_error, "
    "answer_brief, fate, cause, uncertain_reason"
)


_log = logging.getLogger(__name__)


_NOT_GIVEN: Any = object()


class Journal(_ServeRecords, _WriteBehind):
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
    `pending`), and what is buffered (at most about `MAX_DEFER` worth of calls).
    """

    def __init__(self, connection: sqlite3.Connection, path: Path | None = _NOT_GIVEN) -> None:
        """Use `Journal.open`; this takes a connection whose schema is ready."""
        if not isinstance(connection, sqlite3.Connection) or path is _NOT_GIVEN:
            raise TypeError(
                "open a journal with Journal.open(path) (a file, ':memory:', or None for the "
                "one in the state folder); Journal(...) takes an open SQLite connection"
            )
        super().__init__(connection, path)
        self._stored_since_prune = 0
        with self._db_lock, _Transaction(self._db):
            self.host_id = _register_host(self._db, self._me)
            _sweep_gone_hosts(self._db, self.host_id, self._me, path)
            _prune_serving(self._db, time.time(), EVENTS_KEPT)
        self.turns = TurnRecords(self._db, self._db_lock, self.host_id, self._check_open)
        """The agent's turns, saved as they go (`toolscript.agent` resumes them)."""
        if path is not None:
            # Created after our `hosts` row is committed: another host that finds the file
            # also finds the row, and leaves the file alone while we live.
            self._intents = _IntentLog(_intent_paths(path, self.host_id))
            _remove_stale_intents(self._db, self._db_lock, path)

    @classmethod
    def open(cls, where: str | os.PathLike[str] | None) -> Journal:
        """Open (creating if needed) the journal at `where`.

        `where` is a file path, `":memory:"`, or `None` for `journal.sqlite3` under
        `state_dir()`. Missing directories are created. Raises `JournalVersionError` if the
        file was written by a newer toolscript, `JournalFileError` if it is not an SQLite
        database, `JournalAccessError` if it (or its folder) cannot be written.
        """
        path: Path | None
        if where is None:
            path = state_dir() / JOURNAL_FILE_NAME
        elif os.fspath(where) == MEMORY:
            path = None
        else:
            path = Path(where).expanduser()
        try:
            if path is not None:
                if path.is_dir():
                    raise IsADirectoryError(errno.EISDIR, "it is a folder")
                if path.parent.exists() and not path.parent.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, f"{path.parent} is not a folder")
                path.parent.mkdir(parents=True, exist_ok=True)
                # The intent files go beside the file itself, not beside a name for it (a
                # symlink): another host, opening it by any name, finds them.
                path = path.resolve()
            connection = sqlite3.connect(
                MEMORY if path is None else path,
                isolation_level=None,
                check_same_thread=False,
                timeout=_BUSY_TIMEOUT_MS / 1000,
            )
        except (OSError, sqlite3.OperationalError) as error:
            # A folder, an empty name, a parent that is a file, no permission: the caller's
            # to fix, as a file that is not a database is.
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise JournalOpenError(str(path), str(reason)) from None
        try:
            try:
                connection.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
                _check_is_journal(connection, str(path) if path is not None else MEMORY)
                _use_wal(connection)
                connection.execute("PRAGMA synchronous = NORMAL")
                _prepare_schema(connection, str(path) if path is not None else MEMORY)
            except sqlite3.DatabaseError as error:
                if isinstance(error, sqlite3.OperationalError):  # locked, I/O: not the file's
                    raise _access_error(path, error) from error
                raise JournalFileError(str(path), str(error)) from None
            try:
                return cls(connection, path)
            except sqlite3.OperationalError as error:
                raise _access_error(path, error) from error
            except sqlite3.DatabaseError as error:  # damaged past its first page
                raise JournalFileError(str(path), str(error)) from None
        except BaseException:
            connection.close()
            raise

    # -- scripts ---------------------------------------------------------------------------

    def begin_script(
        self, script_id: str, shell: str, generation: int, code: str, started_at: float
    ) -> None:
        """Record that a script is about to run, before it runs.

        In the intent file when this returns (it survives a kill of the host process), in
        SQLite when the buffer is next written (see `FLUSH_INTERVAL`). Script ids are unique;
        a repeated one is kept once.
        """
        script = (script_id, shell, generation, _storable(code), started_at)
        intents = self._intents
        line = b"" if intents is None else _script_line(next(self._sequence), script)
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            if self.failing is not None and len(self._unwritten) >= MAX_UNWRITTEN:
                # Nothing more waits for a file that takes no write: the script is refused
                # (`NotJournaled`), as its calls would be.
                raise OSError(
                    errno.EIO,
                    f"its file has not taken a write for {time.monotonic() - self.failing[1]:.0f}"
                    f" s (SQLite says: {self.failing[0]})",
                )
            if intents is not None:
                intents.append(line)
            self._running_scripts += 1
            self._buffer.scripts.append(script)
            if not self._filled:
                self._fill()

    def end_script(self, script_id: str, status: str, ended_at: float) -> None:
        """Record how a script ended (buffered; after its calls, answers and fates). With
        `durable_ends`, in the intent file too when this returns."""
        intents = self._intents if self.durable_ends else None
        line = (
            b"" if intents is None else _end_line(next(self._sequence), script_id, status, ended_at)
        )
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            if intents is not None:
                _append_after_the_fact(intents, line)  # the script has ended, whatever this says
            self._running_scripts = max(0, self._running_scripts - 1)
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

    def record_calls(self, rows: Sequence[StartRow]) -> None:
        """Record calls before any of them is acted on.

        Each call is a `CallStart`, or a plain tuple of its fields in that order (what the
        host passes). In the intent file when this returns (it survives a kill of the host
        process, not a power loss: see the package's docstring), in SQLite when the buffer is
        next written (see `FLUSH_INTERVAL`). A `call_id` that this journal holds for a call
        still open (not yet answered and settled) raises `ValueError`, and nothing of the
        batch is written.
        """
        if not rows:
            return
        intents = self._intents
        line = b"" if intents is None else _call_line(self._sequence, rows)
        unwritten = self._unwritten
        open_rows = self._open_rows
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            if self.failing is not None and len(unwritten) >= MAX_UNWRITTEN:
                raise OSError(
                    errno.EIO,
                    f"its file has not taken a write for {time.monotonic() - self.failing[1]:.0f}"
                    f" s (SQLite says: {self.failing[0]}) and {len(unwritten):,} calls wait to "
                    "be written",
                )
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
            self._buffer.add_starts(rows)
            if not self._filled:
                self._fill()

    def record_answers(self, answers: Sequence[AnswerRow]) -> None:
        """Record answers: in the intent file when this returns, like calls, and in SQLite
        when the buffer is next written (see `FLUSH_INTERVAL`).

        Each answer is a `CallAnswer`, or a plain tuple of its fields in that order. An
        answer to a call already settled `pending` is a late answer: the fate stays
        `pending`, as its result reported, but the answer is kept and the call is no longer
        uncertain, since its effect is known now. Answers to call ids this host never
        recorded are ignored.
        """
        intents = self._intents
        line = b"" if intents is None or not answers else _answer_line(self._sequence, answers)
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            if intents is not None and line:
                _append_after_the_fact(intents, line)
            self._buffer.add_answers(answers)
            if not self._filled:
                self._fill()

    def settle_calls(self, fates: Sequence[FateRow]) -> None:
        """Record the calls' fates: in the intent file when this returns, like calls, and in
        SQLite when the buffer is next written (see `FLUSH_INTERVAL`).

        Each fate is a `CallFate`, or a plain tuple of its fields in that order. A call
        settled `pending` with no answer becomes uncertain (`pending_at_settle`).
        """
        intents = self._intents
        line = b"" if intents is None or not fates else _fate_line(self._sequence, fates)
        with self._buffer_lock:
            if self._closed:
                raise JournalClosedError()
            if intents is not None and line:
                _append_after_the_fact(intents, line)
            self._buffer.add_fates(fates)
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
        unknown; `limit` keeps the most recent `limit` of them. Raises `ValueError` for a
        `limit` that is not a whole number of at least 1, or a `script_id` that is not text.
        """
        _check_limit(limit, "calls")
        conditions, parameters = _calls_of(script_id, uncertain)
        return self._select_calls(conditions, parameters, limit, sweep=uncertain)

    def count_calls(self, script_id: str | None = None, uncertain: bool = False) -> int:
        """How many calls `calls` with the same `script_id` and `uncertain` would list with
        no `limit`. Raises `ValueError` as `calls` does."""
        conditions, parameters = _calls_of(script_id, uncertain)
        query = "SELECT count(*) FROM calls"
        if conditions:
            query += " WHERE " + " AND ".join(conditions)
        with self._db_lock:
            self._check_open()
            self._commit(sweep=uncertain)
            row = self._db.execute(query, parameters).fetchone()
        return int(row[0])

    def uncertain(self, shell: str | None = None) -> list[JournalCall]:
        """Calls whose effect is unknown, oldest first, optionally of one shell name.

        Pending when their script was settled and never answered since, or left in flight
        by a host that is gone. Raises `ValueError` for a `shell` that is not text.
        """
        _check_text("shell", shell, "a shell's name")
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

    def take_over_calls(self, call_ids: Iterable[str]) -> dict[str, TakenCall]:
        """What the journal holds of these calls of a host that is gone (whose interpreter
        this host took back from a keeper), by call id, with the answers it kept whole.
        Those it finds unanswered become this host's to answer and settle, and those
        answered but not settled, this host's to settle. The gone host's intent files are
        read first."""
        wanted = list(call_ids)
        if not wanted:
            return {}
        found: dict[str, TakenCall] = {}
        with self._db_lock:
            self._check_open()
            self._commit(sweep=True)
            rows = self._db.execute(
                f"SELECT id, answer_frame, {_CALL_COLUMNS} FROM calls WHERE call_id IN "
                "(SELECT value FROM json_each(?))",
                (json.dumps(wanted),),
            ).fetchall()
            with self._buffer_lock:
                for row in rows:
                    call = _journal_call(row[2:])
                    found[call.call_id] = TakenCall(call, row[1])
                    if call.answered_at is None:
                        self._open_rows[call.call_id] = row[0]
                    elif call.fate is None:
                        self._open_rows[call.call_id] = row[0]
                        self._answered_unsettled.add(call.call_id)
        return found

    def mark_in_doubt(self, call_ids: Iterable[str]) -> None:
        """Record that these calls were in flight when their host restarted, and were not
        made again: uncertain, with the reason and the cause `in_doubt`."""
        rows = [(call_id,) for call_id in call_ids]
        with self._db_lock:
            self._check_open()
            self._commit()
            with _Transaction(self._db):
                self._db.executemany(
                    "UPDATE calls SET uncertain_reason = 'in_doubt', cause = 'in_doubt' "
                    "WHERE call_id = ? AND answered_at IS NULL",
                    rows,
                )

    def conclude_lost_scripts(self, followed: Iterable[str]) -> list[JournalScript]:
        """End, with the status `host_gone`, every script a host that is gone began and the
        journal never saw end, but those in `followed` (taken back from a keeper, and
        followed to their end by this host); return them, oldest first. Their interpreters
        are gone: nothing will end them otherwise, and they would look as if they still ran."""
        keep = set(followed)
        now = time.time()
        with self._db_lock:
            self._check_open()
            self._commit()
            rows = self._db.execute(
                # By `scripts_unended`: a look at the few scripts no host ended, not a scan.
                "SELECT script_id, shell, generation, started_at, violation FROM scripts "
                "WHERE ended_at IS NULL AND host_id IN "
                "(SELECT host_id FROM hosts WHERE ended_at IS NOT NULL AND host_id != ?) "
                "ORDER BY rowid",
                (self.host_id,),
            ).fetchall()
            lost = [row for row in rows if row[0] not in keep]
            with _Transaction(self._db):
                self._db.executemany(
                    "UPDATE scripts SET status = 'host_gone', ended_at = ? "
                    "WHERE script_id = ? AND ended_at IS NULL",
                    [(now, row[0]) for row in lost],
                )
        return [
            JournalScript(script_id, shell, generation, started_at, now, "host_gone", violation)
            for script_id, shell, generation, started_at, violation in lost
        ]

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
        """Scripts in the order they started, oldest first, optionally of one shell name;
        `limit` keeps the most recent. Raises `ValueError` for a `limit` that is not a whole
        number of at least 1, or a `shell` that is not text."""
        _check_limit(limit, "scripts")
        _check_text("shell", shell, "a shell's name")
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

    def has_script(self, script_id: str) -> bool:
        """Whether the journal knows a script of that id (`toolscript calls --script`)."""
        _check_text("script_id", script_id, "a script's id")
        with self._db_lock:
            self._check_open()
            self._commit()
            row = self._db.execute(
                "SELECT 1 FROM scripts WHERE script_id = ?", (script_id,)
            ).fetchone()
        return row is not None

    def generation_elsewhere(self, shell: str) -> int | None:
        """The latest generation another host (one that has ended, or shares the file) ran
        a script of shell name `shell` in; None if none did. Its interpreter is this host's
        only if taken back from a keeper."""
        with self._db_lock:
            self._check_open()
            row = self._db.execute(
                "SELECT max(generation) FROM scripts WHERE shell = ? AND host_id != ?",
                (shell, self.host_id),
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

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
            except sqlite3.Error as error:
                raise JournalAccessError(
                    str(self.path or MEMORY),
                    f"its last write failed: {error}; what it holds stays in its intent files, "
                    "which the next host to open it writes",
                ) from error
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


def _calls_of(script_id: str | None, uncertain: bool) -> tuple[list[str], list[object]]:
    """The conditions, and their parameters, that keep the calls of `script_id` (None: of
    every script), and only the uncertain ones if `uncertain`."""
    _check_text("script_id", script_id, "a script's id")
    if type(uncertain) is not bool:
        raise ValueError(f"uncertain must be True or False, not {uncertain!r}")
    conditions: list[str] = []
    parameters: list[object] = []
    if script_id is not None:
        # The script's calls lie in its rowid range; bounding the scan by it stands in for
        # an index that every insert would pay for.
        conditions.append(
            "id > coalesce((SELECT calls_after FROM scripts WHERE script_id = ?), 0) "
            "AND id <= coalesce((SELECT calls_up_to FROM scripts WHERE script_id = ?), "
            "9223372036854775807) AND script_id = ?"
        )
        parameters += [script_id, script_id, script_id]
    if uncertain:
        conditions.append("uncertain_reason IS NOT NULL")
    return conditions, parameters


def _append_after_the_fact(intents: _IntentLog, line: bytes) -> None:
    """Append an answer's or a fate's line. What it records has happened already (the
    answer was sent, the kernel said what became of the call), so a full disk must not
    fail it: the record stays in the buffer, as safe from a kill as before it had a line."""
    try:
        intents.append(line)
    except OSError:
        _log.exception("Could not write to the call journal's intent file.")


def _use_wal(connection: sqlite3.Connection) -> None:
    """Turn the journal to WAL, waiting as long as for any lock: SQLite does not call its
    busy handler for this change, so a host opening a new journal while another makes it
    (several `toolscript exec` at once, on first use) would be told "locked" at once."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def _access_error(path: Path | None, error: sqlite3.OperationalError) -> Exception:
    """A read-only, unopenable or locked file as a sentence; any other failure as it was."""
    words = str(error)
    if path is None or not any(
        part in words for part in ("readonly", "unable to open", "locked", "disk I/O")
    ):
        return error
    return JournalAccessError(str(path), f"SQLite says: {words}", locked="locked" in words)


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


def _storable(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate (a script may well hold one, from an
    escape in the JSON it came in) is kept as its escape, `\\ud800`, not refused."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _check_limit(limit: object, what: str) -> None:
    """Raise `ValueError` unless `limit` is None or a whole number of at least 1 (SQLite
    takes a negative one as no limit at all)."""
    if limit is not None and (type(limit) is not int or not 1 <= limit < 1 << 63):
        raise ValueError(f"limit must be a whole number of {what}, at least 1, not {limit!r}")


def _check_text(name: str, value: object, what: str) -> None:
    """Raise `ValueError` unless `value` is None or text (anything else matches nothing, and
    would read as an empty journal)."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} must be {what} (text), not {value!r}")
