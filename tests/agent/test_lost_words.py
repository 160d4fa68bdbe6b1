"""What a resumed turn tells the model of a script its dead process left: the calls it left
in flight, by name, since the model cannot look them up itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from toolscript.agent.checkpoint import lost_script_words
from toolscript.host.journal import CallAnswer, CallStart, Journal

pytestmark = pytest.mark.timeout(20)


class JournaledStandIn:
    """The part of a runtime that `lost_script_words` reads: its journal."""

    max_time_limit = 600.0

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def prompt(self) -> str:
        return ""

    def shell(self, name: str | None = None) -> object:
        raise AssertionError("not used")


@pytest.mark.parametrize("background", [False, True])
def test_a_lost_script_is_told_with_the_calls_it_left_in_flight_named(
    tmp_path: Path, background: bool
) -> None:
    path = tmp_path / "journal.sqlite3"
    since = time.time() - 1
    dead = Journal.open(path)  # the host that died, its script running
    dead.begin_script("turn-1:s", "turn-1", 1, "await write(tag='W')", time.time())
    dead.record_calls(
        [
            CallStart("c-1", "turn-1:s", "turn-1", "lookup", "key='a'", time.time()),
            CallStart("c-2", "turn-1:s", "turn-1", "write", "tag='W'", time.time()),
        ]
    )
    dead.record_answers([CallAnswer("c-1", time.time(), False, "'A'")])
    dead.close()  # its calls in flight are host_gone, as a sweep after a kill leaves them

    with Journal.open(path) as journal:
        words = lost_script_words(JournaledStandIn(journal), "turn-1", since, background=background)

    assert "write(tag='W')" in words, words
    assert "lookup" not in words, words  # answered: not in doubt
    assert "toolscript calls" not in words, words  # a command the model cannot run
