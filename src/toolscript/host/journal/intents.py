"""The intent files: what a host recorded and has not yet written to SQLite, safe from a kill.

Each host has two, beside the journal's file (`<journal>-host<N>-a.intents` and
`-b.intents`). A line is a JSON array of what one call of `record_calls`, `record_answers`,
`settle_calls` or `begin_script` recorded, `n` counting up per journal:
`[n, "c", call_id, script_id, shell, tool, args_brief, made_at]` per call made,
`[n, "a", call_id, answered_at, is_error, answer_brief, frame]` per answer (`frame` the
answer as sent to the kernel, as text, or null when it is not kept),
`[n, "f", call_id, fate, cause]` per fate, or `[n, "s", script_id, shell, generation, code,
started_at]`; with `durable_ends` (kept interpreters outlive their host, and so do their
scripts' ends), `end_script` writes `[n, "e", script_id, status, ended_at]` too.
Another host replays the files of a host that is gone into the database.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import mmap
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from .batch import _ANSWER_CALL, _SETTLE_CALL
from .records import ANSWER_KEPT, AnswerRow, FateRow, StartRow
from .schema import _INSERT_CALL, _INSERT_SCRIPT, _LAST_CALL

_log = logging.getLogger(__name__)


_MAPPED = 1 << 18
"""The size each intent file is allocated and mapped at (it grows while lines need it)."""


# Goal: an intent line costs the hot path next to nothing, and is as safe from a kill of the
# host as a `write` would make it. What fails: a `write` per line: three system calls per
# tool call (its call, its answer, its fate), a tenth of the host's CPU for a call answered
# at once. What we do: each file is allocated up front (`posix_fallocate`, so a full disk is
# told then, not by a SIGBUS on a page that has no block) and mapped shared, and a line is
# copied into the map: the pages are the operating system's page cache, as a `write`'s
# would be, and outlive the process however it ends. The bytes past the last line are zero,
# which no line holds (lines are JSON), so a reader ends there. A file system that cannot
# allocate or map keeps the `write` per line.
class _IntentLog:
    """A host's two intent files: a line per `record_calls`, `record_answers`,
    `settle_calls` or `begin_script`, before what it records is buffered.

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
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self._fds: list[int] = []
        self._maps: list[mmap.mmap] | None = None
        try:
            for path in paths:
                self._fds.append(os.open(path, flags, 0o600))
            self._maps = self._mapped()
        except BaseException:
            self.close()
            raise
        self._ends = [0, 0]  # where the next line goes in each map
        self._current = 0
        self._has_lines = [False, False]
        # Held while this host lives, and let go by the OS kernel however it ends: another
        # host asks the lock, not the pid, whether we live (`liveness.py`).
        with contextlib.suppress(OSError):  # a file system without locks: pids decide
            fcntl.flock(self._fds[0], fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _mapped(self) -> list[mmap.mmap] | None:
        """Both files allocated and mapped, or None (and both empty) where that fails."""
        maps: list[mmap.mmap] = []
        try:
            for fd in self._fds:
                os.posix_fallocate(fd, 0, _MAPPED)
                maps.append(mmap.mmap(fd, _MAPPED))
        except (OSError, ValueError, AttributeError):  # full, or no allocating or mapping
            for made in maps:
                made.close()
            for fd in self._fds:
                os.ftruncate(fd, 0)
            return None
        return maps

    def append(self, data: bytes) -> None:
        """Append whole lines at once. Hold `_buffer_lock`."""
        current = self._current
        maps = self._maps
        if maps is None:
            self._write(current, data)
            return
        start = self._ends[current]
        end = start + len(data)
        if end > len(maps[current]):
            self._grow(current, end)
        maps[current][start:end] = data
        self._ends[current] = end
        self._has_lines[current] = True

    def _write(self, current: int, data: bytes) -> None:
        self._has_lines[current] = True
        written = os.write(self._fds[current], data)
        if written != len(data):
            # A short write (a full disk): end the torn line, so the next one starts whole.
            os.write(self._fds[current], b"\n")
            raise OSError(errno.ENOSPC, "Could not write to the call journal's intent file.")

    def _grow(self, current: int, end: int) -> None:
        """Make the current file's map hold `end` bytes; OSError (ENOSPC) if the disk is full."""
        assert self._maps is not None
        mapped = self._maps[current]
        size = max(2 * len(mapped), -(-end // _MAPPED) * _MAPPED)
        try:
            os.posix_fallocate(self._fds[current], len(mapped), size - len(mapped))
        except OSError as error:
            raise OSError(
                error.errno, "Could not write to the call journal's intent file."
            ) from error
        mapped.resize(size)

    def taken(self) -> None:
        """The buffer was taken for writing. Hold `_buffer_lock`."""
        self._current = 1 - self._current

    def written(self) -> None:
        """The last take is committed: empty the file that is not current. Hold `_db_lock`."""
        other = 1 - self._current
        if not self._has_lines[other]:
            return
        maps = self._maps
        if maps is None:
            os.ftruncate(self._fds[other], 0)
        else:
            mapped = maps[other]
            if len(mapped) > _MAPPED:
                mapped.resize(_MAPPED)  # gives back what a burst of lines took
            # Zeroed from the start: a kill midway leaves whole lines that are in SQLite
            # (replaying them adds nothing) behind a run of zeros.
            end = min(self._ends[other], _MAPPED)
            mapped[:end] = bytes(end)
            self._ends[other] = 0
        self._has_lines[other] = False

    def close(self) -> None:
        for mapped in self._maps or ():
            mapped.close()
        self._maps = None
        for fd in self._fds:
            os.close(fd)
        self._fds = []


_LINE = orjson.OPT_APPEND_NEWLINE

_CALL_INTENT = (str, (str, type(None)), str, str, str, (int, float))
_ANSWER_INTENT = (str, (int, float), bool, str, (str, type(None)))
_FATE_INTENT = (str, str, (str, type(None)))
_SCRIPT_INTENT = (str, str, int, str, (int, float))
_END_INTENT = (str, str, (int, float))

# A gone host's script end, unless the host wrote one itself.
_REPLAY_END = (
    f"UPDATE scripts SET status = ?, ended_at = ?, calls_up_to = ({_LAST_CALL}) "
    "WHERE script_id = ? AND status IS NULL"
)


def _intent_paths(path: Path, host_id: int) -> tuple[Path, Path]:
    """A host's two intent files, beside the journal's file."""
    return (
        path.with_name(f"{path.name}-host{host_id}-a.intents"),
        path.with_name(f"{path.name}-host{host_id}-b.intents"),
    )


def _holds_its_lock(path: Path, host_id: int) -> bool:
    """Whether host `host_id`'s process (whatever its pid namespace) holds its intent file's
    lock, so lives. False also when it cannot be told: no file (yet), or no locks."""
    try:
        fd = os.open(_intent_paths(path, host_id)[0], os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # and with it the shared lock, if it was taken
    return False


def _remove_intents(path: Path, host_id: int) -> None:
    for intents in _intent_paths(path, host_id):
        try:
            intents.unlink(missing_ok=True)
        except OSError:
            _log.exception("Could not remove the intent file %s.", intents)


def _call_line(sequence: Iterator[int], rows: Sequence[StartRow]) -> bytes:
    # One `orjson.dumps` per line, not per call: a result per call costs more to allocate
    # than to encode.
    return orjson.dumps([(next(sequence), "c", *row) for row in rows], option=_LINE)


def _answer_line(sequence: Iterator[int], rows: Sequence[AnswerRow]) -> bytes:
    return orjson.dumps(
        [
            (next(sequence), "a", call_id, answered_at, bool(is_error), brief, _frame_text(frame))
            for call_id, answered_at, is_error, brief, frame in rows
        ],
        option=_LINE,
    )


def _frame_text(frame: bytes | None) -> str | None:
    """An answer's frame as the intent line keeps it: its JSON text, or None when the
    journal does not keep it (over `ANSWER_KEPT`)."""
    if frame is None or len(frame) > ANSWER_KEPT:
        return None
    try:
        return frame.decode()
    except UnicodeDecodeError:  # the host's frames are JSON, so UTF-8; kept only if so
        return None


def _fate_line(sequence: Iterator[int], rows: Sequence[FateRow]) -> bytes:
    return orjson.dumps(
        [(next(sequence), "f", call_id, fate, cause) for call_id, fate, cause in rows],
        option=_LINE,
    )


def _script_line(n: int, script: tuple[str, str, int, str, float]) -> bytes:
    return orjson.dumps([(n, "s", *script)], option=_LINE)


def _end_line(n: int, script_id: str, status: str, ended_at: float) -> bytes:
    return orjson.dumps([(n, "e", script_id, status, ended_at)], option=_LINE)


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
    kinds = {
        "c": _CALL_INTENT,
        "a": _ANSWER_INTENT,
        "f": _FATE_INTENT,
        "s": _SCRIPT_INTENT,
        "e": _END_INTENT,
    }.get(entry[1])
    fields = entry[2:]
    return (
        kinds is not None
        and len(fields) == len(kinds)
        and all(isinstance(value, kind) for value, kind in zip(fields, kinds, strict=True))
    )


def _replay_intents(db: sqlite3.Connection, path: Path, host_id: int, calls_after: int) -> None:
    """Insert what a gone host recorded in its intent files and never wrote to SQLite."""
    scripts: list[tuple[int, list[Any]]] = []
    calls: list[tuple[int, list[Any]]] = []
    ends: list[tuple[int, list[Any]]] = []
    outcomes: list[tuple[int, str, list[Any]]] = []  # answers and fates, in order
    for intents in _intent_paths(path, host_id):
        try:
            data = intents.read_bytes()
        except FileNotFoundError:
            continue
        except OSError:
            _log.exception("Could not read the intent file %s of a host that is gone.", intents)
            continue
        for line in data.split(b"\n"):
            for intent in _parse_intents(line):
                kind = intent[1]
                if kind in ("a", "f"):
                    outcomes.append((intent[0], kind, intent[2:]))
                    continue
                found = scripts if kind == "s" else ends if kind == "e" else calls
                found.append((intent[0], intent[2:]))
    if scripts:
        scripts.sort(key=lambda intent: intent[0])
        db.executemany(_INSERT_SCRIPT, [(fields[0], host_id, *fields[1:]) for _, fields in scripts])
    if calls:
        # A host writes its buffer in the order recorded, so what it committed is a
        # prefix of its intents; a call id is unique per host.
        calls.sort(key=lambda intent: intent[0])
        known = {
            row[0]
            for row in db.execute(
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
        db.executemany(_INSERT_CALL, rows)
    if outcomes:
        outcomes.sort(key=lambda intent: intent[0])
        _replay_outcomes(db, host_id, calls_after, outcomes)
    if ends:
        db.executemany(_REPLAY_END, [(status, at, script) for _, (script, status, at) in ends])


def _replay_outcomes(
    db: sqlite3.Connection,
    host_id: int,
    calls_after: int,
    outcomes: list[tuple[int, str, list[Any]]],
) -> None:
    """Apply a gone host's answers and fates, in the order it recorded them, to its calls'
    rows, and to the rows of calls it took over from a host before it (a kernel taken back
    from a keeper: the call was recorded by the host that made it), by the rules its own
    flush follows for a call written earlier: nothing changes a call once it is settled
    for good; an answer comes once."""
    ids = sorted({fields[0] for _, _, fields in outcomes})
    state: dict[str, list[Any]] = {
        call_id: [row_id, answered, fate]
        for row_id, call_id, answered, fate in db.execute(
            "SELECT id, call_id, answered_at IS NOT NULL, fate FROM calls "
            "WHERE id > ? AND host_id = ? AND call_id IN (SELECT value FROM json_each(?))",
            (calls_after, host_id, json.dumps(ids)),
        )
    }
    taken_over = [call_id for call_id in ids if call_id not in state]
    if taken_over:
        # A call id names one interpreter's call: its row is the one host that made it.
        for row_id, call_id, answered, fate in db.execute(
            "SELECT id, call_id, answered_at IS NOT NULL, fate FROM calls "
            "WHERE host_id != ? AND call_id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (host_id, json.dumps(taken_over)),
        ):
            state[call_id] = [row_id, answered, fate]
    for _, kind, fields in outcomes:
        found = state.get(fields[0])
        if found is None:
            continue  # a call no host recorded, or one of this host's before `calls_after`
        row_id, answered, fate = found
        if fate is not None and (fate != "pending" or answered):
            continue  # settled for good
        if kind == "a":
            if not answered:
                _, answered_at, is_error, brief, frame = fields
                kept = None if frame is None else frame.encode()
                db.execute(_ANSWER_CALL, (answered_at, is_error, brief, kept, row_id))
                found[1] = True
        else:
            db.execute(_SETTLE_CALL, {"fate": fields[1], "cause": fields[2], "rows": row_id})
            found[2] = fields[1]


def _remove_stale_intents(db: sqlite3.Connection, db_lock: threading.Lock, path: Path) -> None:
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
    with db_lock:
        living = {row[0] for row in db.execute("SELECT host_id FROM hosts WHERE ended_at IS NULL")}
    for name, host_id in found:
        if host_id not in living:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.parent / name)
