"""What `toolscript serve` keeps in the journal so that a restarted server knows its past: its
clients' sessions, the events of their streams, and the results of background scripts.

Goal: a client that reconnects after the server process was killed and started again on the
same state directory finds its session, the events it missed and its scripts' results.
What fails: keeping them in the server's memory (gone with the process), or in the journal's
write-behind buffer (it reaches SQLite only within `FLUSH_INTERVAL` or `MAX_DEFER`, and a
stream event must be stored before it is sent, or a client could hold an id the next server
never heard of).
What we do: each of these is committed at once, under the journal's database lock. They are
few (a stream event per progress notification and answer, a row per session and background
result), so this costs the tool-call path nothing. Stream events are bounded: each store past
`EVENTS_KEPT` rows (every `_PRUNE_EVERY` stores), and every open, drops the oldest events and
those older than `EVENTS_KEPT_FOR`; sessions unused for as long are forgotten with them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import TYPE_CHECKING

from .records import ReplayedStream, ServeSession, StoredResult, StreamEvent
from .schema import _Transaction

EVENTS_KEPT = 10_000
"""Stream events the journal keeps at most (the oldest go first)."""

EVENTS_KEPT_FOR = 24 * 3600.0
"""Seconds a stream event, an unused session and a background result are kept."""

_PRUNE_EVERY = 100


class _ServeRecords:
    """The part of a `Journal` that `toolscript serve` writes and reads (see the module)."""

    host_id: int
    _db: sqlite3.Connection
    _db_lock: threading.Lock
    _stored_since_prune: int

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

    # -- stream events -----------------------------------------------------------------------

    def store_event(self, session: str, stream: str, message: str | None, is_answer: bool) -> int:
        """Store one event of a session's stream, committed when this returns; its event id.

        `message` is the JSON-RPC message as JSON (`None` for the event that only marks the
        stream's start); `is_answer` says it is the answer that ends the stream. Event ids
        grow with every event of the journal and are never reused, whatever is pruned.
        """
        now = time.time()
        with self._db_lock:
            self._check_open()
            with _Transaction(self._db):
                cursor = self._db.execute(
                    "INSERT INTO stream_events (session, stream, message, is_answer, host_id, "
                    "stored_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (session, stream, message, int(is_answer), self.host_id, now),
                )
                event_id = cursor.lastrowid
                self._stored_since_prune += 1
                if self._stored_since_prune >= _PRUNE_EVERY:
                    self._stored_since_prune = 0
                    _prune_serving(self._db, now, EVENTS_KEPT)
        assert event_id is not None
        return event_id

    def events_after(self, session: str, event_id: int) -> ReplayedStream | None:
        """The events of `session`'s stream that follow event `event_id`, oldest first.

        `None` when the journal holds no such event of that session (an unknown, pruned or
        foreign id): nothing is replayed from another session's streams.
        """
        with self._db_lock:
            self._check_open()
            row = self._db.execute(
                "SELECT stream FROM stream_events WHERE event_id = ? AND session = ?",
                (event_id, session),
            ).fetchone()
            if row is None:
                return None
            stream = str(row[0])
            rows = self._db.execute(
                "SELECT event_id, message, is_answer, host_id FROM stream_events "
                "WHERE session = ? AND stream = ? ORDER BY event_id",
                (session, stream),
            ).fetchall()
        events = [StreamEvent(number, message, bool(answer)) for number, message, answer, _ in rows]
        return ReplayedStream(
            session,
            stream,
            [event for event in events if event.event_id > event_id],
            answered=any(event.is_answer for event in events),
            by_this_host=any(host == self.host_id for *_, host in rows),
        )

    def prune_events(self, keep: int = EVENTS_KEPT, older_than: float | None = None) -> None:
        """Drop the stream events beyond the last `keep` and those stored before `older_than`
        (default: `EVENTS_KEPT_FOR` ago), with the sessions and results as old. A store
        does this now and then with the defaults."""
        now = time.time()
        with self._db_lock:
            self._check_open()
            with _Transaction(self._db):
                _prune_serving(self._db, now, keep, older_than)

    # -- sessions ----------------------------------------------------------------------------

    def remember_session(
        self, session_id: str, shell: str, protocol_version: str, client: str
    ) -> None:
        """Keep a client's session (its shell's name, protocol version and `initialize`
        parameters as JSON), so that a restarted server takes it back (committed). Keeping
        it again marks it used now."""
        now = time.time()
        with self._db_lock:
            self._check_open()
            with _Transaction(self._db):
                self._db.execute(
                    "INSERT INTO serve_sessions (session_id, shell, protocol_version, client, "
                    "opened_at, used_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) "
                    "DO UPDATE SET used_at = excluded.used_at",
                    (session_id, shell, protocol_version, client, now, now),
                )

    def serve_session(self, session_id: str) -> ServeSession | None:
        """The session kept under `session_id`, or `None`."""
        with self._db_lock:
            self._check_open()
            row = self._db.execute(
                "SELECT session_id, shell, protocol_version, client, opened_at FROM "
                "serve_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return None if row is None else ServeSession(*row)

    def forget_session(self, session_id: str) -> None:
        """Forget a session its client ended, and its stream events (committed)."""
        with self._db_lock:
            self._check_open()
            with _Transaction(self._db):
                self._db.execute("DELETE FROM serve_sessions WHERE session_id = ?", (session_id,))
                self._db.execute("DELETE FROM stream_events WHERE session = ?", (session_id,))

    # -- background results ------------------------------------------------------------------

    def record_result(self, script_id: str, shell: str, status: str, text: str, data: str) -> None:
        """Keep a background script's result as its client reads it: its status, its text
        and its data as JSON (committed)."""
        result = (script_id, shell, status, text, data, time.time())
        with self._db_lock:
            self._check_open()
            with _Transaction(self._db):
                self._db.execute(
                    "INSERT OR REPLACE INTO script_results (script_id, shell, status, text, "
                    "data, ended_at) VALUES (?, ?, ?, ?, ?, ?)",
                    result,
                )

    def stored_result(self, script_id: str) -> StoredResult | None:
        """The result kept for `script_id` by `record_result`, or `None`."""
        with self._db_lock:
            self._check_open()
            row = self._db.execute(
                "SELECT script_id, shell, status, text, data, ended_at FROM script_results "
                "WHERE script_id = ?",
                (script_id,),
            ).fetchone()
        return None if row is None else StoredResult(*row)


def _prune_serving(
    db: sqlite3.Connection, now: float, keep: int, older_than: float | None = None
) -> None:
    cutoff = now - EVENTS_KEPT_FOR if older_than is None else older_than
    db.execute("DELETE FROM stream_events WHERE stored_at < ?", (cutoff,))
    db.execute(
        "DELETE FROM stream_events WHERE event_id <= "
        "(SELECT coalesce(max(event_id), 0) FROM stream_events) - ?",
        (keep,),
    )
    db.execute("DELETE FROM serve_sessions WHERE used_at < ?", (cutoff,))
    db.execute("DELETE FROM script_results WHERE ended_at < ?", (cutoff,))
