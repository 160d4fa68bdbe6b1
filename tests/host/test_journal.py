"""The call journal: written before acted on, never lost, truthful after a host dies."""

from __future__ import annotations

import errno
import os
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest

from toolscript.host.journal import (
    ANSWER_KEPT,
    SCHEMA_VERSION,
    CallAnswer,
    CallFate,
    CallStart,
    Journal,
    JournalClosedError,
    JournalVersionError,
    state_dir,
)
from toolscript.host.journal import buffer as journal_buffer
from toolscript.host.journal.intents import _MAPPED

NOW = 1_700_000_000.0

# A host that journals three calls (one answered and seen, one in flight, one settled
# pending), says it is ready on the fd it was given, then waits until it is killed.
HOST_PROCESS = """
import os, sys
from toolscript.host.journal import CallAnswer, CallFate, CallStart, Journal

journal = Journal.open(sys.argv[1])
journal.begin_script("s-1", "main", 1, "await send(text='a')", 1.0)
journal.record_calls([
    CallStart("c-answered", "s-1", "main", "send", "text='a'", 2.0),
    CallStart("c-in-flight", "s-1", "main", "send", "text='b'", 3.0),
    CallStart("c-pending", "s-1", "main", "send", "text='c'", 4.0),
])
journal.record_answers([CallAnswer("c-answered", 5.0, False, "'sent'")])
journal.settle_calls([
    CallFate("c-answered", "seen", None),
    CallFate("c-pending", "pending", "tool_timeout"),
])
journal.flush()
os.write(int(sys.argv[2]), b"ready")
sys.stdin.read()
"""


# A host that begins a script and records three calls, says it is ready at once, then waits
# until it is killed. Its flush thread waits an hour, so what reaches SQLite depends on the
# mode: "unflushed", nothing; "failed-commit", nothing (a commit fails: another connection
# holds the write lock) and a fourth call is recorded after that; "mid-commit", the first
# three calls, and a fourth call is recorded while they are being committed.
UNFLUSHED_HOST_PROCESS = """
import os, sqlite3, sys, threading, time
from toolscript.host.journal import buffer as journal_buffer, store as journal_store
from toolscript.host.journal import CallStart, Journal

mode = sys.argv[3]
journal_buffer.FLUSH_INTERVAL = 3600
if mode == "failed-commit":
    journal_store._BUSY_TIMEOUT_MS = 20
journal = Journal.open(sys.argv[1])
journal.begin_script("s-1", "main", 1, "await send(text='a')", 1.0)
journal.record_calls([CallStart("c-1", "s-1", "main", "send", "text='a'", 2.0)])
journal.record_calls([
    CallStart("c-2", "s-1", "main", "send", "text='b'", 3.0),
    CallStart("c-3", None, "main", "send", "text='c'", 4.0),
])
fourth = CallStart("c-4", "s-1", "main", "send", "text='d'", 5.0)
blocker = sqlite3.connect(sys.argv[1], isolation_level=None)
if mode == "failed-commit":
    blocker.execute("BEGIN IMMEDIATE")
    try:
        journal.flush()
    except sqlite3.OperationalError:
        pass
    else:
        raise AssertionError("the commit did not fail")
    journal.record_calls([fourth])
    blocker.execute("ROLLBACK")
elif mode == "mid-commit":
    blocker.execute("BEGIN IMMEDIATE")
    flusher = threading.Thread(target=journal.flush)
    flusher.start()
    deadline = time.monotonic() + 10
    while journal._buffer.starts and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not journal._buffer.starts, "the flush did not take the buffer"
    journal.record_calls([fourth])
    blocker.execute("ROLLBACK")
    flusher.join()
    assert blocker.execute("SELECT count(*) FROM calls").fetchone()[0] == 3
blocker.close()
os.write(int(sys.argv[2]), b"ready")
sys.stdin.read()
"""


# A host that records four calls, and answers and fates for three of them, then waits until
# it is killed, its flush thread held for an hour: with mode "unflushed" nothing reaches
# SQLite; with "calls-flushed" the calls do, and their answers and fates do not.
ANSWERED_UNFLUSHED_HOST_PROCESS = """
import os, sys
from toolscript.host.journal import buffer as journal_buffer
from toolscript.host.journal import CallAnswer, CallFate, CallStart, Journal

journal_buffer.FLUSH_INTERVAL = 3600
journal = Journal.open(sys.argv[1])
journal.begin_script("s-1", "main", 1, "await send(text='a')", 1.0)
journal.record_calls([
    CallStart(f"c-{i}", "s-1", "main", "send", f"text='{i}'", 2.0) for i in range(1, 5)
])
if sys.argv[3] == "calls-flushed":
    journal.flush()
journal.record_answers([
    CallAnswer("c-1", 3.0, False, "'one'", b'{"n":1}'),
    CallAnswer("c-2", 3.5, True, "'two'", b'{"n":2}'),
])
journal.settle_calls([CallFate("c-1", "seen", None), CallFate("c-3", "pending", "tool_timeout")])
os.write(int(sys.argv[2]), b"ready")
sys.stdin.read()
"""


# A host whose intent lines outgrow the space its files start with: a call and an answer of
# 600 kB (more than `_MAPPED`) each time; with mode "grown" it is killed with those lines
# in the file that grew; with "shrunk" that file is committed, given back its space and
# written again (the flush thread waits an hour: each flush is asked for).
GROWING_HOST_PROCESS = """
import os, sys
from toolscript.host.journal import buffer as journal_buffer
from toolscript.host.journal import CallAnswer, CallStart, Journal

journal_buffer.FLUSH_INTERVAL = 3600
journal = Journal.open(sys.argv[1])
journal.begin_script("s-1", "main", 1, "await send(text='a')", 1.0)

def call(i):
    journal.record_calls([CallStart(f"c-{i}", "s-1", "main", "send", f"text='{i}'", 2.0)])
    frame = b'{"n":%d,"v":"' % i + b"x" * 600_000 + b'"}'
    journal.record_answers([CallAnswer(f"c-{i}", 3.0, False, f"'{i}'", frame)])

call(1)
if sys.argv[3] == "shrunk":
    journal.flush()  # c-1 to SQLite; its file is emptied, lines go to the other one
    call(2)
    journal.flush()  # c-2 too; the file of c-2 is emptied and given back its space
    call(3)  # in the file of c-1, emptied and given back its space by the first flush
os.write(int(sys.argv[2]), b"ready")
sys.stdin.read()
"""

TAKING_OVER_HOST_PROCESS = """
import os, sys
from toolscript.host.journal import buffer as journal_buffer
from toolscript.host.journal import CallAnswer, CallFate, CallStart, Journal

journal_buffer.FLUSH_INTERVAL = 3600
journal = Journal.open(sys.argv[1])
if sys.argv[3] == "first":
    journal.begin_script("s-1", "main", 1, "await send(text='a')", 1.0)
    journal.record_calls([CallStart("c-1", "s-1", "main", "send", "text='a'", 2.0)])
    journal.flush()
else:  # a second host takes the interpreter back, makes the call again and answers it
    journal.take_over_calls(["c-1"])
    journal.record_answers([CallAnswer("c-1", 3.0, False, "'again'", b'{"n":1}')])
    journal.settle_calls([CallFate("c-1", "seen", None)])
os.write(int(sys.argv[2]), b"ready")
sys.stdin.read()
"""


def start(call_id: str, script_id: str | None = "s-1", shell: str = "main") -> CallStart:
    return CallStart(call_id, script_id, shell, "send", "text='hi'", NOW)


def intent_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}-host*.intents"))


def held(intents: Path) -> bytes:
    """The lines an intent file holds: what precedes the zeros of its unused space."""
    return intents.read_bytes().rstrip(b"\0")


@contextmanager
def host_process(
    path: Path, code: str = HOST_PROCESS, *args: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A real host process holding calls in flight in the journal at `path`."""
    ready_read, ready_write = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(path), str(ready_write), *args],
        stdin=subprocess.PIPE,
        pass_fds=[ready_write],
    )
    os.close(ready_write)
    try:
        readable, _, _ = select.select([ready_read], [], [], 20)
        assert readable, "the host process did not get ready within 20 s"
        assert os.read(ready_read, 5) == b"ready", "the host process died before it was ready"
        yield process
    finally:
        os.close(ready_read)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        assert process.stdin is not None
        process.stdin.close()


def kill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=10) == -signal.SIGKILL


def read_calls(path: Path) -> list[tuple[str, str, str]]:
    reader = sqlite3.connect(path)
    try:
        return reader.execute("SELECT call_id, tool, args_brief FROM calls ORDER BY id").fetchall()
    finally:
        reader.close()


def test_a_recorded_call_is_visible_to_another_connection_after_a_flush(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.record_calls([start("c-1")])
        journal.flush()
        assert read_calls(path) == [("c-1", "send", "text='hi'")]

        journal.record_calls([start("c-2"), start("c-3")])
        journal.flush()
        assert [row[0] for row in read_calls(path)] == ["c-1", "c-2", "c-3"]


@pytest.mark.timeout(30)
def test_a_recorded_call_reaches_another_connection_without_a_flush(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.begin_script("s-1", "main", 1, "a()", NOW)
        journal.record_calls([start("c-1")])
        deadline = time.monotonic() + 5
        rows = read_calls(path)
        while not rows and time.monotonic() < deadline:
            time.sleep(0.01)
            rows = read_calls(path)
        assert rows == [("c-1", "send", "text='hi'")]


@pytest.mark.timeout(30)
def test_recording_never_waits_for_a_commit_in_progress(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        # The flush thread holds this lock through a commit; the event loop must not wait.
        with journal._db_lock:
            journal.begin_script("s-1", "main", 1, "a()", NOW)
            journal.record_calls([start("c-1")])
            journal.record_calls([start("c-2"), start("c-3")])
            journal.record_answers([CallAnswer("c-1", NOW + 1, False, "'ok'")])
            journal.settle_calls([CallFate("c-1", "seen", None)])
            journal.end_script("s-1", "ok", NOW + 2)
        assert [(c.call_id, c.fate) for c in journal.calls(script_id="s-1")] == [
            ("c-1", "seen"),
            ("c-2", None),
            ("c-3", None),
        ]
        assert [(s.script_id, s.status) for s in journal.scripts()] == [("s-1", "ok")]


@pytest.mark.timeout(30)
def test_answers_and_fates_find_their_calls_in_a_batch_put_back_after_a_failed_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call's answer and fate are written into its buffered row while the buffer holds it.
    # A batch whose commit failed goes back in front of what came since: answers and fates
    # recorded meanwhile (kept apart, since the batch was taken) must reach its rows.
    monkeypatch.setattr("toolscript.host.journal.store._BUSY_TIMEOUT_MS", 300)
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.begin_script("s-1", "main", 1, "a()", NOW)
        journal.record_calls([start("c-1"), start("c-2"), start("c-3")])
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        failed: list[BaseException] = []

        def flush() -> None:
            try:
                journal.flush()
            except sqlite3.OperationalError as error:
                failed.append(error)

        flusher = threading.Thread(target=flush)
        flusher.start()
        deadline = time.monotonic() + 10
        while journal._buffer.starts and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not journal._buffer.starts, "the flush did not take the buffer"
        # Recorded while the batch is taken: kept apart, then joined to it when it comes back.
        journal.record_answers([CallAnswer("c-1", NOW + 1, False, "'one'", b"frame-1")])
        flusher.join()
        assert failed, "the commit did not fail"
        # Recorded after the failed commit: into the rows put back.
        journal.settle_calls([CallFate("c-1", "seen", None), CallFate("c-2", "pending", None)])
        journal.record_answers([CallAnswer("c-2", NOW + 2, True, "'late'", b"frame-2")])
        journal.record_calls([start("c-4")])
        journal.record_answers([CallAnswer("c-4", NOW + 3, False, "'four'", b"frame-4")])
        blocker.execute("ROLLBACK")
        blocker.close()
        journal.flush()
        # Flushed earlier: these update the rows.
        journal.settle_calls([CallFate("c-3", "pending", "stopped"), CallFate("c-4", "seen", None)])
        journal.flush()
        by_id = {call.call_id: call for call in journal.calls(script_id="s-1")}
    assert list(by_id) == ["c-1", "c-2", "c-3", "c-4"]
    one, two, three, four = by_id.values()
    assert (one.fate, one.answer_brief, one.uncertain) == ("seen", "'one'", False)
    assert (two.fate, two.cause, two.answer_brief, two.is_error) == (
        "pending",
        None,
        "'late'",
        True,
    )
    assert not two.uncertain  # its answer came: its effect is known
    assert (three.fate, three.cause, three.answered_at) == ("pending", "stopped", None)
    assert three.uncertain_reason == "pending_at_settle"
    assert (four.fate, four.answer_brief) == ("seen", "'four'")
    with sqlite3.connect(path) as db:
        frames = dict(db.execute("SELECT call_id, answer_frame FROM calls").fetchall())
    # A frame is kept while code may still take it: only the answer of the call whose script
    # ended while it was in flight.
    assert frames == {"c-1": None, "c-2": b"frame-2", "c-3": None, "c-4": None}


# Which frames a host that takes the interpreter back may still have to deliver: those of
# calls that code in the kernel may still take. A call seen, or one whose code stopped
# waiting (a cause), never will be.
_FRAME_KEPT_BY_FATE = {
    ("seen", None): False,
    ("late", "timeout"): False,
    ("late", "interpreter_gone"): False,
    ("unread", "cancelled"): False,
    ("unread", None): True,
    ("pending", "timeout"): False,
    ("pending", "stopped"): False,
    ("pending", None): True,
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("order", ["answer-then-fate", "fate-then-answer"])
@pytest.mark.parametrize("flushes", ["one-flush", "a-flush-between"])
def test_an_answer_frame_is_kept_only_while_code_may_still_take_the_answer(
    tmp_path: Path, order: str, flushes: str
) -> None:
    # Only a call settled `pending` can be answered after its fate; every other fate is
    # given to an answered call.
    path = tmp_path / "journal.sqlite3"
    ids = {fate: f"c-{i}" for i, fate in enumerate(_FRAME_KEPT_BY_FATE, 1)}

    def answer(call_id: str) -> CallAnswer:
        return CallAnswer(call_id, NOW + 1, False, "'big'", b"frame-" + call_id.encode())

    def then_flush(journal: Journal) -> None:
        if flushes == "a-flush-between":
            journal.flush()

    with Journal.open(path) as journal:
        journal.begin_script("s-1", "main", 1, "a()", NOW)
        journal.record_calls([start(call_id) for call_id in ids.values()])
        then_flush(journal)
        for (fate, cause), call_id in ids.items():
            if fate != "pending" or order == "answer-then-fate":
                journal.record_answers([answer(call_id)])
                then_flush(journal)
            journal.settle_calls([CallFate(call_id, fate, cause)])
            then_flush(journal)
            if fate == "pending" and order == "fate-then-answer":
                journal.record_answers([answer(call_id)])
        journal.flush()
    with sqlite3.connect(path) as db:
        frames = dict(db.execute("SELECT call_id, answer_frame FROM calls").fetchall())
    assert {fate: frames[call_id] is not None for fate, call_id in ids.items()} == (
        _FRAME_KEPT_BY_FATE
    )


@pytest.mark.timeout(30)
def test_a_host_killed_mid_call_leaves_its_calls_in_flight_uncertain_as_host_gone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path) as process:
        kill(process)

    with Journal.open(path) as journal:
        by_id = {call.call_id: call for call in journal.calls()}
        assert by_id["c-in-flight"].uncertain
        assert by_id["c-in-flight"].uncertain_reason == "host_gone"
        assert by_id["c-in-flight"].fate is None
        assert by_id["c-pending"].uncertain_reason == "host_gone"
        assert by_id["c-pending"].fate == "pending"
        assert by_id["c-pending"].cause == "tool_timeout"
        answered = by_id["c-answered"]
        assert not answered.uncertain
        assert (answered.fate, answered.answer_brief, answered.is_error) == (
            "seen",
            "'sent'",
            False,
        )
        assert [c.call_id for c in journal.uncertain()] == ["c-in-flight", "c-pending"]
        assert [c.call_id for c in journal.uncertain(shell="other")] == []

        untold = journal.untold_uncertain("main")
        assert [c.call_id for c in untold] == ["c-in-flight", "c-pending"]
        assert journal.untold_uncertain("other") == []
        journal.mark_told(c.call_id for c in untold)
        assert journal.untold_uncertain("main") == []

    with Journal.open(path) as journal:
        assert journal.untold_uncertain("main") == []
        assert [c.call_id for c in journal.uncertain()] == ["c-in-flight", "c-pending"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["unflushed", "failed-commit", "mid-commit"])
def test_a_host_killed_right_after_recording_leaves_its_script_and_calls_findable(
    tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path, UNFLUSHED_HOST_PROCESS, mode) as process:
        committed = ["c-1", "c-2", "c-3"] if mode == "mid-commit" else []
        assert [row[0] for row in read_calls(path)] == committed
        kill(process)
    assert intent_files(path) != []

    recorded = ["c-1", "c-2", "c-3"] + (["c-4"] if mode != "unflushed" else [])
    with Journal.open(path) as journal:
        calls = journal.calls()
        assert [(c.call_id, c.uncertain_reason) for c in calls] == [
            (call_id, "host_gone") for call_id in recorded
        ]
        assert (calls[1].script_id, calls[1].args_brief, calls[1].made_at) == (
            "s-1",
            "text='b'",
            3.0,
        )
        assert calls[2].script_id is None
        assert [c.call_id for c in journal.calls(script_id="s-1")] == [
            call_id for call_id in recorded if call_id != "c-3"
        ]
        [script] = journal.scripts()
        assert (script.script_id, script.shell, script.started_at, script.status) == (
            "s-1",
            "main",
            1.0,
            None,
        )
        assert [c.call_id for c in journal.untold_uncertain("main")] == recorded
        # Only this host's own files are left.
        assert [f.name for f in intent_files(path)] == [
            f"journal.sqlite3-host{journal.host_id}-a.intents",
            f"journal.sqlite3-host{journal.host_id}-b.intents",
        ]

    assert intent_files(path) == []
    with Journal.open(path) as journal:  # replayed once, not again
        assert len(journal.calls()) == len(recorded)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["unflushed", "calls-flushed"])
def test_answers_and_fates_a_killed_host_never_flushed_are_replayed_from_its_intent_file(
    tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path, ANSWERED_UNFLUSHED_HOST_PROCESS, mode) as process:
        kill(process)

    with Journal.open(path) as journal:
        by_id = {c.call_id: c for c in journal.calls()}
        one, two, three, four = (by_id[f"c-{i}"] for i in range(1, 5))
        # Answered and seen: settled for good, not uncertain.
        assert (one.fate, one.answer_brief, one.is_error, one.uncertain) == (
            "seen",
            "'one'",
            False,
            False,
        )
        # Answered, its fate never came: the answer is known, so not in flight.
        assert (two.fate, two.answer_brief, two.is_error, two.uncertain) == (
            None,
            "'two'",
            True,
            False,
        )
        # Settled pending without an answer, and never answered: uncertain.
        assert (three.fate, three.cause, three.uncertain_reason) == (
            "pending",
            "tool_timeout",
            "host_gone",
        )
        assert (four.fate, four.answer_brief, four.uncertain_reason) == (None, None, "host_gone")
        assert [c.call_id for c in journal.uncertain()] == ["c-3", "c-4"]
    with sqlite3.connect(path) as db:
        frames = dict(db.execute("SELECT call_id, answer_frame FROM calls").fetchall())
    # The frame of the answer not yet seen is kept, for a host that takes the script back.
    assert frames == {"c-1": None, "c-2": b'{"n":2}', "c-3": None, "c-4": None}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["grown", "shrunk"])
def test_intent_lines_longer_than_an_intent_files_space_survive_a_kill(
    tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path, GROWING_HOST_PROCESS, mode) as process:
        if mode == "shrunk":  # the file of c-2 gave its space back; c-3's grew again
            assert sorted(f.stat().st_size > _MAPPED for f in intent_files(path)) == [
                False,
                True,
            ]
        kill(process)

    made = ["c-1"] if mode == "grown" else ["c-1", "c-2", "c-3"]
    with Journal.open(path) as journal:
        calls = journal.calls()
        assert [c.call_id for c in calls] == made
        assert all(c.answer_brief == f"'{c.call_id[2:]}'" for c in calls)
    db = sqlite3.connect(path)
    try:
        frames = dict(db.execute("SELECT call_id, length(answer_frame) FROM calls").fetchall())
    finally:
        db.close()
    # Each answer's whole frame, kept for a host that would take the script back.
    assert frames == dict.fromkeys(made, 600_000 + len(b'{"n":1,"v":""}'))


@pytest.mark.timeout(30)
def test_an_answer_a_killed_host_gave_a_call_it_took_over_is_replayed_onto_that_calls_row(
    tmp_path: Path,
) -> None:
    # Two kills in a row: the first host made the call; the second took its interpreter back
    # from a keeper, answered the call and was killed before its flush. The row is the
    # first host's; the answer and the fate are in the second's intent file.
    path = tmp_path / "journal.sqlite3"
    with host_process(path, TAKING_OVER_HOST_PROCESS, "first") as process:
        kill(process)
    with host_process(path, TAKING_OVER_HOST_PROCESS, "second") as process:
        kill(process)

    with Journal.open(path) as journal:
        [call] = journal.calls()
        assert (call.call_id, call.fate, call.answer_brief) == ("c-1", "seen", "'again'")
        assert not call.uncertain
        assert journal.uncertain() == []


def test_an_answer_or_fate_whose_intent_line_cannot_be_written_is_still_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The answer went out and the kernel said what it did with it: a full disk must not
    # turn either into an error; the record waits in the buffer, as before it had a line.
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.record_calls([start("c-1")])
        intents = journal._intents
        assert intents is not None

        def full(data: bytes) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(intents, "append", full)
        journal.record_answers([CallAnswer("c-1", NOW + 1, False, "'ok'")])
        journal.settle_calls([CallFate("c-1", "seen", None)])
        [call] = journal.calls()
        assert (call.answer_brief, call.fate, call.uncertain) == ("'ok'", "seen", False)


class _Watched:
    """A journal's flush thread, watched: `waited` counts its waits on the journal's closing
    event (each a round of its wait before a flush), `committed` is set by a flush."""

    def __init__(self, journal: Journal) -> None:
        self.waited = threading.Semaphore(0)
        self.committed = threading.Event()
        wait, commit = journal._closing.wait, journal._commit

        def counted_wait(timeout: float | None = None) -> bool:
            self.waited.release()
            return wait(timeout)

        def watched_commit(sweep: bool = False, end_host: bool = False) -> None:
            commit(sweep, end_host)
            if threading.current_thread() is journal._flusher:
                self.committed.set()

        journal._closing.wait = counted_wait  # type: ignore[method-assign]
        journal._commit = watched_commit  # type: ignore[method-assign]


@contextmanager
def a_script_running(
    path: Path, monkeypatch: pytest.MonkeyPatch, max_defer: float
) -> Iterator[tuple[Journal, _Watched]]:
    """A journal at `path` whose flush thread is watched and would write every 2 ms, with
    script "s-1" running and call "c-1" recorded."""
    monkeypatch.setattr(journal_buffer, "FLUSH_INTERVAL", 0.002)
    monkeypatch.setattr(journal_buffer, "MAX_DEFER", max_defer)
    with Journal.open(path) as journal:
        flusher = _Watched(journal)
        journal.begin_script("s-1", "main", 1, "await send(text='hi')", NOW)
        journal.record_calls([start("c-1")])
        yield journal, flusher


@pytest.mark.timeout(30)
def test_the_flush_waits_while_a_script_runs_and_writes_once_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.sqlite3"
    with a_script_running(path, monkeypatch, max_defer=3600.0) as (journal, flusher):
        journal.record_answers([CallAnswer("c-1", NOW + 1, False, "'ok'")])
        for _ in range(10):  # ten rounds of the flush thread's wait, each past FLUSH_INTERVAL
            assert flusher.waited.acquire(timeout=10)
        assert not flusher.committed.is_set()
        assert read_calls(path) == []
        journal.end_script("s-1", "ok", NOW + 2)
        assert flusher.committed.wait(timeout=10)
        assert read_calls(path) == [("c-1", "send", "text='hi'")]


@pytest.mark.timeout(30)
def test_a_script_that_runs_on_holds_the_flush_back_no_longer_than_max_defer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.sqlite3"
    with a_script_running(path, monkeypatch, max_defer=0.05) as (_, flusher):
        assert flusher.committed.wait(timeout=10)  # the script has not ended
        assert read_calls(path) == [("c-1", "send", "text='hi'")]


@pytest.mark.timeout(30)
def test_a_torn_last_intent_line_is_ignored_and_the_lines_before_it_recovered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path, UNFLUSHED_HOST_PROCESS, "unflushed") as process:
        kill(process)
    [written] = [f for f in intent_files(path) if held(f)]
    with written.open("r+b") as intents:
        intents.seek(len(held(written)))  # right after the last whole line
        intents.write(b'[[99,"c","c-torn","s-1","main","send","text=')  # cut by the kill

    with Journal.open(path) as journal:
        assert [c.call_id for c in journal.calls()] == ["c-1", "c-2", "c-3"]
        assert [s.script_id for s in journal.scripts()] == ["s-1"]
    assert intent_files(path) == []


def test_intent_files_stay_small_and_are_removed_on_close(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    journal = Journal.open(path)
    journal.begin_script("s-1", "main", 1, "many()", NOW)
    largest = 0
    for i in range(10_000):
        call_id = f"c-{i}"
        journal.record_calls([start(call_id)])
        journal.record_answers([CallAnswer(call_id, NOW + 1, False, "'ok'")])
        journal.settle_calls([CallFate(call_id, "seen", None)])
        if i % 500 == 499:
            largest = max(largest, sum(len(held(f)) for f in intent_files(path)))
            journal.flush()
    line = len(  # a call's three lines: made, answered, settled
        b'[[1,"c","c-9999","s-1","main","send","text=\'hi\'",1700000000.0]]\n'
        b'[[2,"a","c-9999",1700000001.0,false,"\'ok\'",null]]\n'
        b'[[3,"f","c-9999","seen",null]]\n'
    )
    # At most the lines of the batch last written and of the one being recorded: the size of
    # a thousand calls' lines, not of ten thousand.
    assert 0 < largest <= 1000 * (line + 12)
    assert sum(len(held(f)) for f in intent_files(path)) <= 1000 * (line + 12)
    # What holds them is allocated at its least size, or grown for a burst and given back.
    assert all(f.stat().st_size <= _MAPPED for f in intent_files(path))
    journal.end_script("s-1", "ok", NOW + 2)
    assert len(journal.calls(script_id="s-1")) == 10_000
    journal.close()
    assert intent_files(path) == []


def test_intent_files_of_hosts_that_ended_are_removed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as ended:
        pass
    leftover = tmp_path / f"journal.sqlite3-host{ended.host_id}-a.intents"
    leftover.write_bytes(b'[[0,"c","c-1",null,"main","send","",1.0]]\n')
    unknown = tmp_path / "journal.sqlite3-host999-b.intents"
    unknown.write_bytes(b"")
    other_journal = tmp_path / "other.sqlite3-host1-a.intents"
    other_journal.write_bytes(b"")

    with Journal.open(path) as journal:
        assert not leftover.exists() and not unknown.exists()
        assert other_journal.exists()
        assert journal.calls() == []  # a host that ended cleanly is not replayed


@pytest.mark.timeout(30)
def test_the_calls_in_flight_of_a_live_host_are_not_marked(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path) as process, Journal.open(path) as journal:
        in_flight = [c for c in journal.calls() if c.call_id == "c-in-flight"]
        assert [(c.fate, c.uncertain) for c in in_flight] == [(None, False)]
        assert journal.untold_uncertain("main") == []
        assert [(c.call_id, c.uncertain_reason) for c in journal.uncertain()] == [
            ("c-pending", "pending_at_settle")
        ]
        assert len(intent_files(path)) == 4  # the live host's two, and this one's

        kill(process)
        assert [(c.call_id, c.uncertain_reason) for c in journal.uncertain()] == [
            ("c-in-flight", "host_gone"),
            ("c-pending", "host_gone"),
        ]


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs os.waitid to wait without reaping")
def test_a_host_that_died_but_is_not_yet_reaped_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path) as process:
        process.send_signal(signal.SIGKILL)
        # Wait for the death without reaping it: the pid stays, as a zombie.
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        with Journal.open(path) as journal:
            assert [(c.call_id, c.uncertain_reason) for c in journal.uncertain()] == [
                ("c-in-flight", "host_gone"),
                ("c-pending", "host_gone"),
            ]


def test_another_journal_of_the_same_process_is_a_live_host(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as first:
        first.record_calls([start("c-1")])
        with Journal.open(path) as second:
            assert second.uncertain() == []
            assert second.untold_uncertain("main") == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process start times need /proc")
def test_a_host_whose_pid_now_belongs_to_another_process_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path) as process:
        kill(process)
    # The killed host had our pid, but its process started at another time: pid reuse.
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("UPDATE hosts SET pid = ?, process_start = '0'", (os.getpid(),))
    raw.close()

    with Journal.open(path) as journal:
        assert [(c.call_id, c.uncertain_reason) for c in journal.uncertain()] == [
            ("c-in-flight", "host_gone"),
            ("c-pending", "host_gone"),
        ]


def unused_pid() -> int:
    """A pid no process here has: how a host in a sibling PID namespace looks from this one."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(pid_max - 1, 1, -1):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            continue
    raise AssertionError("no unused pid")


@pytest.mark.timeout(30)
@pytest.mark.skipif(not Path("/proc/sys/kernel/pid_max").exists(), reason="pid_max needs /proc")
def test_a_live_host_whose_pid_this_process_cannot_see_is_not_taken_for_gone(
    tmp_path: Path,
) -> None:
    # A host in a sibling container shares the journal, the hostname and the boot, but its
    # pid means nothing here (or names another process): only its lock says it lives.
    path = tmp_path / "journal.sqlite3"
    with host_process(path) as process:
        raw = sqlite3.connect(path)
        with raw:
            raw.execute("UPDATE hosts SET pid = ?", (unused_pid(),))
        raw.close()
        with Journal.open(path) as journal:
            reasons = {c.call_id: c.uncertain_reason for c in journal.uncertain()}
            assert "host_gone" not in reasons.values(), reasons
        raw = sqlite3.connect(path)
        [(ended,)] = raw.execute("SELECT ended_at FROM hosts WHERE host_id = 1")
        raw.close()
        assert ended is None
        kill(process)

    with Journal.open(path) as journal:  # and once it has died, it is gone
        assert [(c.call_id, c.uncertain_reason) for c in journal.uncertain()] == [
            ("c-in-flight", "host_gone"),
            ("c-pending", "host_gone"),
        ]


def test_a_call_settled_pending_and_answered_later_keeps_its_fate_and_leaves_the_uncertain_list(
    tmp_path: Path,
) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journal.record_calls([start("c-1")])
        journal.settle_calls([CallFate("c-1", "pending", "stopped")])
        assert [(c.call_id, c.uncertain_reason) for c in journal.uncertain()] == [
            ("c-1", "pending_at_settle")
        ]

        journal.record_answers([CallAnswer("c-1", NOW + 3, True, "'no such channel'")])
        assert journal.uncertain() == []
        (call,) = journal.calls()
        assert (call.fate, call.cause, call.uncertain) == ("pending", "stopped", False)
        assert (call.answered_at, call.is_error, call.answer_brief) == (
            NOW + 3,
            True,
            "'no such channel'",
        )


def test_a_call_answered_before_it_is_settled_pending_is_not_uncertain(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journal.record_calls([start("c-1")])
        journal.record_answers([CallAnswer("c-1", NOW + 1, False, "'ok'")])
        journal.settle_calls([CallFate("c-1", "pending", "stopped")])
        assert journal.uncertain() == []


def test_buffered_answers_and_fates_reach_the_file_without_a_flush(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.record_calls([start("c-1")])
        journal.record_answers([CallAnswer("c-1", NOW + 1, False, "'ok'")])
        journal.settle_calls([CallFate("c-1", "seen", None)])
        reader = sqlite3.connect(path)
        try:
            deadline = time.monotonic() + 5
            row = None
            while time.monotonic() < deadline:
                row = reader.execute("SELECT answer_brief, fate FROM calls").fetchone()
                if row == ("'ok'", "seen"):
                    break
                time.sleep(0.01)
        finally:
            reader.close()
        assert row == ("'ok'", "seen")


def test_closing_writes_what_is_buffered_and_leaves_calls_in_flight_uncertain(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    journal = Journal.open(path)
    journal.record_calls([start("c-done"), start("c-in-flight")])
    journal.record_answers([CallAnswer("c-done", NOW + 1, False, "'ok'")])
    journal.settle_calls([CallFate("c-done", "seen", None)])
    journal.close()
    journal.close()
    with pytest.raises(JournalClosedError):
        journal.record_calls([start("c-later")])

    with Journal.open(path) as reopened:
        by_id = {c.call_id: c for c in reopened.calls()}
        assert (by_id["c-done"].fate, by_id["c-done"].uncertain) == ("seen", False)
        assert by_id["c-in-flight"].uncertain_reason == "host_gone"
        assert [c.call_id for c in reopened.untold_uncertain("main")] == ["c-in-flight"]


def test_a_repeated_call_id_is_refused_and_nothing_of_its_batch_is_written(
    tmp_path: Path,
) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journal.record_calls([start("c-1")])
        with pytest.raises(ValueError, match="unique"):
            journal.record_calls([start("c-2"), start("c-1")])
        with pytest.raises(ValueError, match="unique"):
            journal.record_calls([start("c-3"), start("c-3")])
        with pytest.raises(ValueError, match="unique"):
            journal.record_calls([start("c-1")])
        assert [c.call_id for c in journal.calls()] == ["c-1"]


def test_calls_of_one_script_are_found_among_interleaved_scripts(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journal.record_calls([start("c-before", script_id=None)])
        journal.begin_script("s-a", "main", 1, "a()", NOW)
        journal.record_calls([start("a-1", "s-a")])
        journal.begin_script("s-b", "bg", 1, "b()", NOW)
        journal.record_calls([start("b-1", "s-b", "bg"), start("a-2", "s-a")])
        journal.end_script("s-a", "ok", NOW + 1)
        journal.record_calls([start("b-2", "s-b", "bg")])

        assert [c.call_id for c in journal.calls(script_id="s-a")] == ["a-1", "a-2"]
        assert [c.call_id for c in journal.calls(script_id="s-b")] == ["b-1", "b-2"]
        assert journal.calls(script_id="s-unknown") == []
        assert [c.call_id for c in journal.calls(limit=2)] == ["a-2", "b-2"]
        scripts = journal.scripts()
        assert [(s.script_id, s.shell, s.status) for s in scripts] == [
            ("s-a", "main", "ok"),
            ("s-b", "bg", None),
        ]
        assert [s.script_id for s in journal.scripts(shell="bg")] == ["s-b"]


def test_an_in_memory_journal_keeps_calls_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLSCRIPT_STATE", str(tmp_path / "state"))
    with Journal.open(":memory:") as journal:
        assert journal.path is None
        journal.begin_script("s-1", "main", 1, "a()", NOW)
        journal.record_calls([start("c-1")])
        journal.settle_calls([CallFate("c-1", "pending", "stopped")])
        journal.end_script("s-1", "ok", NOW + 1)
        assert [c.uncertain_reason for c in journal.uncertain()] == ["pending_at_settle"]
        assert [(s.script_id, s.status) for s in journal.scripts()] == [("s-1", "ok")]
    assert list(tmp_path.iterdir()) == []


def test_the_default_journal_lives_under_toolscript_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "deep" / "state"
    monkeypatch.setenv("TOOLSCRIPT_STATE", str(state))
    assert state_dir() == state
    with Journal.open(None) as journal:
        assert journal.path == state / "journal.sqlite3"
        journal.record_calls([start("c-1")])
    assert (state / "journal.sqlite3").is_file()


def test_a_journal_of_a_newer_schema_is_refused_with_a_sentence(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal.open(path).close()
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    raw.close()

    with pytest.raises(JournalVersionError) as refused:
        Journal.open(path)
    assert refused.value.found == SCHEMA_VERSION + 1
    assert refused.value.known == SCHEMA_VERSION
    message = str(refused.value)
    assert str(path) in message
    assert "newer toolscript" in message
    assert "Upgrade toolscript" in message


def test_ten_thousand_calls_journaled_in_batches_of_a_thousand_are_all_kept(
    tmp_path: Path,
) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journal.begin_script("s-1", "main", 1, "many()", NOW)
        for batch in range(10):
            ids = [f"c-{batch}-{i}" for i in range(1000)]
            journal.record_calls([start(call_id) for call_id in ids])
            journal.record_answers(
                [
                    CallAnswer(call_id, NOW + 1, i % 2 == 1, f"'{call_id}'")
                    for i, call_id in enumerate(ids[:-1])
                ]
            )
            journal.settle_calls(
                [CallFate(call_id, "seen", None) for call_id in ids[:-1]]
                + [CallFate(ids[-1], "pending", "stopped")]
            )
        journal.end_script("s-1", "ok", NOW + 2)

        calls = journal.calls(script_id="s-1")
        assert len(calls) == 10_000
        assert [c.call_id for c in calls[:2]] == ["c-0-0", "c-0-1"]
        assert calls[-1].call_id == "c-9-999"
        assert sum(c.fate == "seen" for c in calls) == 9_990
        assert sum(c.is_error is True for c in calls) == 4_990
        assert all(c.answer_brief == f"'{c.call_id}'" for c in calls if c.fate == "seen")
        assert [c.call_id for c in journal.uncertain()] == [f"c-{b}-999" for b in range(10)]
        assert len(journal.calls(uncertain=True, limit=3)) == 3


@pytest.mark.parametrize("flush_between", [False, True])
def test_a_call_made_answered_and_settled_in_one_flush_reads_as_in_many(
    tmp_path: Path, flush_between: bool
) -> None:
    # A call whose start, answer and fate share a flush is inserted whole; one whose parts
    # are flushed apart is inserted, then updated. Both must read the same.
    with Journal.open(tmp_path / "journal.sqlite3") as journal:

        def maybe_flush() -> None:
            if flush_between:
                journal.flush()

        journal.record_calls([start("seen"), start("late"), start("pending"), start("open")])
        maybe_flush()
        journal.record_answers([CallAnswer("seen", NOW + 1, False, "'a'")])
        journal.record_answers([CallAnswer("late", NOW + 2, True, "'b'")])
        maybe_flush()
        journal.settle_calls(
            [
                CallFate("seen", "seen", None),
                CallFate("late", "late", "timeout"),
                CallFate("pending", "pending", "stopped"),
            ]
        )
        maybe_flush()
        by_id = {call.call_id: call for call in journal.calls()}
        assert (by_id["seen"].fate, by_id["seen"].answer_brief, by_id["seen"].uncertain) == (
            "seen",
            "'a'",
            False,
        )
        late = by_id["late"]
        assert (late.fate, late.cause, late.is_error, late.answered_at) == (
            "late",
            "timeout",
            True,
            NOW + 2,
        )
        pending = by_id["pending"]
        assert (pending.fate, pending.uncertain_reason) == ("pending", "pending_at_settle")
        assert by_id["open"].fate is None and not by_id["open"].uncertain
        # An answer after a pending fate takes the call out of the uncertain list.
        journal.record_answers([CallAnswer("pending", NOW + 3, False, "'c'")])
        assert [call.call_id for call in journal.uncertain()] == []
        assert {call.call_id for call in journal.calls()} == {"seen", "late", "pending", "open"}


@pytest.mark.parametrize("count", [1, 2, 63, 64, 65, 127, 200])
def test_a_flush_of_any_size_writes_every_call_whole_and_in_order(
    tmp_path: Path, count: int
) -> None:
    # A flush inserts its whole calls many rows per statement (64, then 32, 16, ... 1): every
    # row must land, in order, with every column in its place.
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journal.begin_script("s-1", "main", 1, "many()", NOW)
        ids = [f"c-{i}" for i in range(count)]
        journal.record_calls(
            [
                CallStart(call_id, "s-1", "main", f"tool{i}", f"x={i}", NOW + i)
                for i, call_id in enumerate(ids)
            ]
        )
        journal.record_answers(
            [
                CallAnswer(call_id, NOW + 10_000 + i, i % 3 == 0, f"'{i}'")
                for i, call_id in enumerate(ids)
            ]
        )
        journal.settle_calls(
            [
                CallFate(call_id, "seen" if i % 2 else "late", None if i % 2 else "timeout")
                for i, call_id in enumerate(ids)
            ]
        )
        journal.flush()
        calls = journal.calls(script_id="s-1")
        assert [call.call_id for call in calls] == ids
        for i, call in enumerate(calls):
            assert (call.tool, call.args_brief, call.made_at) == (f"tool{i}", f"x={i}", NOW + i)
            assert (call.answered_at, call.is_error, call.answer_brief) == (
                NOW + 10_000 + i,
                i % 3 == 0,
                f"'{i}'",
            )
            assert (call.fate, call.cause) == (("seen", None) if i % 2 else ("late", "timeout"))
            assert (call.shell, call.script_id, call.uncertain) == ("main", "s-1", False)


@pytest.mark.parametrize("flush_between", [False, True])
def test_an_answer_is_kept_whole_until_its_call_is_seen(
    tmp_path: Path, flush_between: bool
) -> None:
    # Until the script's code has the answer, a host taking the interpreter back may have to
    # deliver it; once seen, nobody will. Kept alike whether the call is inserted whole or
    # updated flush by flush.
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.record_calls([start("seen"), start("unread"), start("unsettled")])
        if flush_between:
            journal.flush()
        journal.record_answers(
            [
                CallAnswer(call_id, NOW + 1, False, "'a'", b"frame of " + call_id.encode())
                for call_id in ("seen", "unread", "unsettled")
            ]
        )
        if flush_between:
            journal.flush()
        journal.settle_calls([CallFate("seen", "seen", None), CallFate("unread", "unread", None)])
    with Journal.open(path) as journal:
        taken = journal.take_over_calls(["seen", "unread", "unsettled"])
    assert {call_id: call.answer_frame for call_id, call in taken.items()} == {
        "seen": None,
        "unread": b"frame of unread",
        "unsettled": b"frame of unsettled",
    }
    assert taken["unsettled"].call.answer_brief == "'a'"


def test_an_answer_over_the_bound_is_kept_only_by_its_start(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.record_calls([start("at-the-bound"), start("over-it")])
        journal.record_answers(
            [
                CallAnswer("at-the-bound", NOW + 1, False, "'x...'", b"x" * ANSWER_KEPT),
                CallAnswer("over-it", NOW + 1, False, "'y...'", b"y" * (ANSWER_KEPT + 1)),
            ]
        )
    with Journal.open(path) as journal:
        taken = journal.take_over_calls(["at-the-bound", "over-it"])
    assert taken["at-the-bound"].answer_frame == b"x" * ANSWER_KEPT
    assert taken["over-it"].answer_frame is None
    assert taken["over-it"].call.answer_brief == "'y...'"


def test_a_call_answered_by_a_host_that_is_gone_is_settled_by_the_host_that_took_it_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.record_calls([start("c-1")])
        journal.record_answers([CallAnswer("c-1", NOW + 1, False, "'a'", b"frame")])
    with Journal.open(path) as journal:
        journal.take_over_calls(["c-1"])
        journal.settle_calls([CallFate("c-1", "seen", None)])
        [call] = journal.calls()
        assert (call.fate, call.answered_at, call.answer_brief) == ("seen", NOW + 1, "'a'")
        assert journal.take_over_calls(["c-1"])["c-1"].answer_frame is None


def test_a_journal_written_before_answers_were_kept_gains_the_column_when_opened(
    tmp_path: Path,
) -> None:
    # Added without a new schema version, like `scripts.violation`: older code names the
    # columns it reads and writes, so it can keep sharing the file.
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.record_calls([start("before")])
        journal.record_answers([CallAnswer("before", NOW + 1, False, "'old'")])
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("ALTER TABLE calls DROP COLUMN answer_frame")
    raw.close()

    with Journal.open(path) as journal:
        journal.record_calls([start("after")])
        journal.record_answers([CallAnswer("after", NOW + 2, False, "'new'", b"frame")])
        taken = journal.take_over_calls(["before", "after"])
        assert (taken["before"].call.answer_brief, taken["before"].answer_frame) == ("'old'", None)
        assert taken["after"].answer_frame == b"frame"
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    raw.close()


@pytest.mark.parametrize("limit", [0, -1, "10", 1.5, 1 << 63])
def test_a_limit_that_is_no_number_of_calls_is_refused_naming_it(
    tmp_path: Path, limit: object
) -> None:
    with (
        Journal.open(tmp_path / "journal.sqlite3") as journal,
        pytest.raises(ValueError, match=r"^limit must be"),
    ):
        journal.calls(limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [0, -1, "10", 1.5])
def test_a_limit_that_is_no_number_of_scripts_is_refused_naming_it(
    tmp_path: Path, limit: object
) -> None:
    # SQLite reads a negative LIMIT as none at all: -1 gave every script.
    with (
        Journal.open(tmp_path / "journal.sqlite3") as journal,
        pytest.raises(ValueError, match=r"^limit must be a whole number of scripts"),
    ):
        journal.scripts(limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        (lambda journal: journal.uncertain(shell=5), "shell must be a shell's name"),
        (lambda journal: journal.scripts(shell=b"main"), "shell must be a shell's name"),
        (lambda journal: journal.calls(uncertain="yes"), "uncertain must be True or False"),
    ],
    ids=["uncertain shell=5", "scripts shell=bytes", "calls uncertain='yes'"],
)
def test_a_query_of_the_wrong_kind_is_refused_not_answered_empty(
    tmp_path: Path, query: Any, named: str
) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journal.begin_script("s-1", "main", 1, "a()", NOW)
        journal.record_calls([start("c-1")])
        with pytest.raises(ValueError, match=named):
            query(journal)


def test_a_journal_made_from_a_path_says_to_open_it(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"open a journal with Journal\.open\(path\)"):
        Journal(tmp_path / "journal.sqlite3")  # type: ignore[call-arg, arg-type]
    with pytest.raises(TypeError, match=r"Journal\.open\(path\)"):
        Journal(str(tmp_path / "journal.sqlite3"), None)  # type: ignore[arg-type]
    assert not (tmp_path / "journal.sqlite3").exists()


@pytest.mark.parametrize("refusal", [errno.EOPNOTSUPP, errno.ENOSPC])
def test_intent_files_that_cannot_be_allocated_take_each_line_by_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: int
) -> None:
    # A file system that cannot allocate ahead (or a disk too full to, at open): the lines
    # are written one `write` each, and the files hold just them.
    def cannot(*args: object) -> None:
        raise OSError(refusal, os.strerror(refusal))

    monkeypatch.setattr(os, "posix_fallocate", cannot)
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.begin_script("s-1", "main", 1, "a()", NOW)
        journal.record_calls([start("c-1")])
        journal.record_answers([CallAnswer("c-1", NOW + 1, False, "'ok'")])
        lines = b"".join(f.read_bytes() for f in intent_files(path))
        assert b"\0" not in lines
        assert [line.split(b",")[1] for line in lines.splitlines()] == [b'"s"', b'"c"', b'"a"']
        journal.flush()
        assert all(f.stat().st_size == 0 for f in intent_files(path))
        assert [(c.call_id, c.answer_brief) for c in journal.calls()] == [("c-1", "'ok'")]


def test_a_line_an_intent_file_cannot_grow_for_on_a_full_disk_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.begin_script("s-1", "main", 1, "a()", NOW)
        monkeypatch.setattr(os, "posix_fallocate", disk_full)
        with pytest.raises(OSError) as raised:
            journal.record_calls([CallStart("c-big", "s-1", "main", "send", "x" * _MAPPED, NOW)])
        assert raised.value.errno == errno.ENOSPC
        journal.record_calls([start("c-1")])  # one that fits is recorded as ever
        monkeypatch.undo()
        assert [c.call_id for c in journal.calls()] == ["c-1"]


def disk_full(*args: object) -> NoReturn:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
