"""The call journal: written before acted on, never lost, truthful after a host dies."""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from toolscript.host.journal import (
    SCHEMA_VERSION,
    CallAnswer,
    CallFate,
    CallStart,
    Journal,
    JournalClosedError,
    JournalVersionError,
    state_dir,
)

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


def start(call_id: str, script_id: str | None = "s-1", shell: str = "main") -> CallStart:
    return CallStart(call_id, script_id, shell, "send", "text='hi'", NOW)


@contextmanager
def host_process(path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real host process holding calls in flight in the journal at `path`."""
    ready_read, ready_write = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-c", HOST_PROCESS, str(path), str(ready_write)],
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


def test_a_recorded_call_is_visible_to_another_connection_as_soon_as_record_calls_returns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.record_calls([start("c-1")])
        reader = sqlite3.connect(path)
        try:
            rows = reader.execute("SELECT call_id, tool, args_brief FROM calls").fetchall()
        finally:
            reader.close()
        assert rows == [("c-1", "send", "text='hi'")]

        journal.record_calls([start("c-2"), start("c-3")])
        reader = sqlite3.connect(path)
        try:
            count = reader.execute("SELECT count(*) FROM calls").fetchone()[0]
        finally:
            reader.close()
        assert count == 3


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
def test_the_calls_in_flight_of_a_live_host_are_not_marked(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with host_process(path) as process, Journal.open(path) as journal:
        in_flight = [c for c in journal.calls() if c.call_id == "c-in-flight"]
        assert [(c.fate, c.uncertain) for c in in_flight] == [(None, False)]
        assert journal.untold_uncertain("main") == []
        assert [(c.call_id, c.uncertain_reason) for c in journal.uncertain()] == [
            ("c-pending", "pending_at_settle")
        ]

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
    earlier = Journal.open(path)
    earlier.record_calls([start("c-1")])
    # The earlier host had our pid, but its process started at another time: pid reuse.
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("UPDATE hosts SET process_start = '0' WHERE host_id = ?", (earlier.host_id,))
    raw.close()

    with Journal.open(path) as journal:
        assert [(c.call_id, c.uncertain_reason) for c in journal.uncertain()] == [
            ("c-1", "host_gone")
        ]
    earlier.close()


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
        journal.record_calls([start("c-1")])
        journal.settle_calls([CallFate("c-1", "pending", "stopped")])
        assert [c.uncertain_reason for c in journal.uncertain()] == ["pending_at_settle"]
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
