"""What a restarted `toolscript serve` answers for background scripts started before it, and
what a session it took back says of its shell's variables."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from toolscript.actions import Answer
from toolscript.host.journal import CallStart, Journal
from toolscript.serve.past import HOST_RESTARTED, recall_for
from toolscript.serve.session import KEPT_NOTE, RESTARTED_NOTE, Session

pytestmark = pytest.mark.timeout(30)

HOUR = 3600.0


def runtime_over(journal: Journal) -> Any:
    return cast(Any, SimpleNamespace(journal=journal))


def test_an_ended_script_is_answered_with_its_kept_result_in_its_own_session_only(
    tmp_path: Path,
) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        journal.record_result("mcp-a:bg-1", "mcp-a", "ok", "exit 0 · ok\n\n42", '{"value": "42"}')
        mine = recall_for(runtime_over(journal), "mcp-a", HOUR)
        theirs = recall_for(runtime_over(journal), "mcp-b", HOUR)

        answer = mine("mcp-a:bg-1")
        assert answer is not None
        assert (answer.text, answer.data, answer.is_error) == (
            "exit 0 · ok\n\n42",
            {"value": "42"},
            False,
        )
        assert theirs("mcp-a:bg-1") is None
        assert mine("mcp-a:bg-2") is None
        assert recall_for(runtime_over(journal), "mcp-a", 0.0)("mcp-a:bg-1") is None  # too old


def test_a_script_its_server_died_under_is_reported_so_with_its_uncertain_calls(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as before:
        before.begin_script("mcp-a:bg-2", "mcp-a", 1, "await send()", time.time())
        before.record_calls([CallStart("c-1", "mcp-a:bg-2", "mcp-a", "send", "", time.time())])
    with Journal.open(path) as after:
        answer = recall_for(runtime_over(after), "mcp-a", HOUR)("mcp-a:bg-2")
        assert answer is not None
        assert answer.is_error
        assert answer.data is not None
        assert answer.data["status"] == HOST_RESTARTED
        assert answer.data["uncertain_calls"] == 1
        assert "was running when toolscript serve stopped" in answer.text
        assert "1 of its tool calls may have taken effect" in answer.text


@pytest.mark.parametrize(
    ("generation_before", "run_generation", "note", "kept"),
    [
        (1, 1, KEPT_NOTE, True),  # the keeper kept the interpreter, and the run was in it
        (1, 2, RESTARTED_NOTE, False),  # kept, but it ended before the run (a new one ran it)
        (0, 1, RESTARTED_NOTE, False),  # not kept: the shell starts a new interpreter
    ],
)
def test_a_session_taken_back_says_its_variables_are_there_only_if_its_interpreter_is(
    generation_before: int, run_generation: int, note: str, kept: bool
) -> None:
    shell = SimpleNamespace(name="mcp-a", generation=generation_before)
    session = Session(cast(Any, shell), max_time_limit=60, keep_for=HOUR, keep_count=10)
    session.came_back()
    shell.generation = run_generation
    told = session.tell_restart(Answer("exit 0 · ok", {"generation": run_generation}))
    assert told.text == f"{note}\n\nexit 0 · ok"
    assert told.data == {
        "generation": run_generation,
        "server_restarted": True,
        "variables_kept": kept,
    }
    again = Answer("exit 0 · ok", {"generation": run_generation})
    assert session.tell_restart(again) is again
