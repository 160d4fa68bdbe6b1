"""The journal's write-behind: what is recorded waits in a buffer, and a flush thread writes it
to SQLite in one transaction, then remembers what became of this host's calls."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from itertools import count
from pathlib import Path

from .batch import _ANSWERED, _CLOSED, _PENDING, _Buffer, _write_batch, _Written
from .intents import _IntentLog, _remove_intents
from .liveness import _end_host, _sweep_gone_hosts, _this_process
from .records import JournalClosedError
from .schema import _Transaction

FLUSH_INTERVAL = 0.05
"""Seconds within which what is buffered reaches SQLite while no script of this journal runs
(a script's end reaches it within this after the script ends)."""

MAX_DEFER = 1.0
"""Seconds within which what is buffered reaches SQLite while a script runs (see
`_WriteBehind._flush_loop`)."""

MAX_UNWRITTEN = 50_000
"""Calls that may wait in the buffer while its writes to SQLite fail: past this, new calls
are refused (not made), with the reason, until a write succeeds. Memory and the intent
files stay bounded however long SQLite fails (a damaged file, a lock held for good)."""

RETRY_MOST = 2.0
"""Seconds at most between tries to write the buffer while its writes fail."""

_log = logging.getLogger(__name__)


class _WriteBehind:
    """The part of a `Journal` that moves what it records into SQLite.

    Records come from one thread (the host's asyncio thread) and only append to the intent
    file and the buffer, under `_buffer_lock`; the flush thread takes the buffer and commits
    it under `_db_lock`, which queries and `close()` take too.
    """

    host_id: int
    """This host's id in the journal's `hosts` table."""

    def __init__(self, connection: sqlite3.Connection, path: Path | None) -> None:
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
        self._running_scripts = 0  # begun and not ended, under _buffer_lock
        self._filled_at = 0.0  # when the buffer got its first entry
        self._flusher: threading.Thread | None = None
        self._sequence = count()
        self._intents: _IntentLog | None = None
        self._me = _this_process()
        self.failing: tuple[str, float] | None = None
        """While writes to SQLite fail: the last error, and when the first of them came."""
        self.durable_ends = False
        """Whether `end_script` also writes to the intent file, so that a script's end
        survives a kill of the host (set when kept interpreters outlive their host)."""

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
        self._filled_at = time.monotonic()
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=self._flush_loop, name="toolscript-journal-flush", daemon=True
            )
            self._flusher.start()
        self._buffer_filled.notify()

    # Goal: a script's calls cost what they cost with no journal beside them, and nothing
    # recorded is lost to a kill. What fails: writing the buffer every FLUSH_INTERVAL while
    # a script makes calls: each flush's inserts (several milliseconds of CPU for a few
    # hundred calls) run beside the calls on the same cores, and the calls that meet one are
    # the slow ones: a sequential call's p99 was 3.0-3.3 times its median with the flush,
    # 1.7 times with none during the run (bench/README.md, sixth pass). What we do: while a
    # script of this journal runs, the flush waits, up to MAX_DEFER after the buffer filled;
    # once none runs, it writes within FLUSH_INTERVAL as before. Nothing waits unprotected
    # meanwhile: calls, answers and fates are in the intent file when recorded (with a file
    # journal), so a kill loses none of them.
    def _flush_loop(self) -> None:
        while True:
            with self._buffer_lock:
                while not self._filled and not self._closed:
                    self._buffer_filled.wait()
            if self._closing.wait(FLUSH_INTERVAL):
                return  # close() writes what is left
            while self._running_scripts > 0:
                left = MAX_DEFER - (time.monotonic() - self._filled_at)
                if left <= 0:
                    break
                if self._closing.wait(min(left, FLUSH_INTERVAL)):
                    return
            with self._db_lock:
                if self._closed:
                    return
                try:
                    self._commit()
                except sqlite3.Error as error:
                    # The batch went back to the buffer and its intent lines stay: the next
                    # round tries again, later each time, and new calls are refused once
                    # MAX_UNWRITTEN wait (see `record_calls`).
                    failing = self.failing
                    if failing is None or failing[0] != str(error):
                        _log.exception("Could not write to the call journal; will retry.")
                    since = time.monotonic() if failing is None else failing[1]
                    self.failing = (str(error), since)
                else:
                    if self.failing is not None:
                        _log.warning("The call journal is written again.")
                    self.failing = None
            failing = self.failing
            if failing is not None:
                waited = time.monotonic() - failing[1]
                if self._closing.wait(min(RETRY_MOST, max(FLUSH_INTERVAL, waited / 4))):
                    return

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
                    written = _write_batch(
                        self._db,
                        self.host_id,
                        taken,
                        self._open_rows,
                        self._answered_unsettled,
                        self._pending_unanswered,
                    )
                if sweep:
                    gone = _sweep_gone_hosts(self._db, self.host_id, self._me, self.path)
                if end_host:
                    rows = [*self._open_rows.values(), *written.new_rows.values()]
                    _end_host(self._db, self.host_id, rows)
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
            self._buffer = taken.after(self._buffer)
            if self._closed:
                self._filled = True
            elif not self._filled:
                self._fill()

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
