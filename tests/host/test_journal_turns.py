"""The agent's turns in the journal: saved as they change, taken up again only by one process,
never once they ended; a journal of the first schema gains the table when opened."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolscript.host.journal import SCHEMA_VERSION, Journal

pytestmark = pytest.mark.timeout(60)


def _record(steps: int, **state: Any) -> dict[str, Any]:
    return {
        "steps": steps,
        "step_cap": 5,
        "elapsed": 1.5 * steps,
        "messages": [{"role": "user", "text": "the task"}],
        "state": state,
    }


def _begin(journal: Journal, turn_id: str = "t-1") -> None:
    journal.turns.begin(
        turn_id, task="the task", model="m", shell=f"turn-{turn_id}", **_record(0, phase="start")
    )


def test_a_saved_turn_is_read_back_as_last_saved_by_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        _begin(journal)
        journal.turns.save("t-1", **_record(2, phase="request"))

    with Journal.open(path) as journal:
        turn = journal.turns.take("t-1")

    assert turn is not None
    assert (turn.task, turn.shell, turn.steps, turn.step_cap, turn.elapsed) == (
        "the task",
        "turn-t-1",
        2,
        5,
        3.0,
    )
    assert turn.state == {"phase": "request"}
    assert turn.messages == [{"role": "user", "text": "the task"}]
    assert (turn.ended_at, turn.held_elsewhere) == (None, False)


def test_an_unknown_turn_is_none(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        assert journal.turns.take("nope") is None


def test_an_ended_turn_says_how_it_ended_and_is_not_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        _begin(journal)
        journal.turns.end("t-1", "end_turn", **_record(3, phase="between"))

    with Journal.open(path) as journal:
        turn = journal.turns.take("t-1")
        assert turn is not None and (turn.stop_reason, turn.steps) == ("end_turn", 3)
        assert turn.ended_at is not None
        journal.turns.save("t-1", **_record(9))  # not this process's turn: nothing changes
        again = journal.turns.take("t-1")
    assert again is not None and again.steps == 3


def test_a_turn_held_by_a_live_process_is_not_taken_and_its_saves_go_on(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as holder, Journal.open(path) as other:
        _begin(holder)
        turn = other.turns.take("t-1")
        assert turn is not None and turn.held_elsewhere
        holder.turns.save("t-1", **_record(1))
        again = other.turns.take("t-1")
        assert again is not None and again.steps == 1 and again.held_elsewhere


def test_a_turn_of_a_killed_process_is_taken_over_and_saved_by_the_next(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    code = (
        "import os, sys\n"
        "from toolscript.host.journal import Journal\n"
        "journal = Journal.open(sys.argv[1])\n"
        "journal.turns.begin('t-1', task='the task', model='m', shell='turn-t-1', steps=1, "
        "step_cap=5, elapsed=1.0, messages=[], state={})\n"
        "os.kill(os.getpid(), 9)\n"
    )
    killed = subprocess.run([sys.executable, "-c", code, str(path)], timeout=30, check=False)
    assert killed.returncode == -9

    with Journal.open(path) as journal:
        turn = journal.turns.take("t-1")
        assert turn is not None and not turn.held_elsewhere and turn.steps == 1
        journal.turns.save("t-1", **_record(2))
    with Journal.open(path) as journal:
        taken = journal.turns.take("t-1")
    assert taken is not None and taken.steps == 2


def test_a_journal_of_schema_version_1_gains_the_turns_table_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal.open(path).close()
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("DROP TABLE turns")
        raw.execute("UPDATE schema_version SET version = 1")
    raw.close()

    with Journal.open(path) as journal:
        _begin(journal)
        assert journal.turns.take("t-1") is not None
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    raw.close()
    assert SCHEMA_VERSION == 2
