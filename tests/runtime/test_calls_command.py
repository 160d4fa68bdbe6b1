"""`toolscript calls` reads the journal as it is, in bounded time and memory, whatever its size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from tests.conftest import on_a_terminal
from toolscript import __file__ as PACKAGE
from toolscript.cli import run

pytestmark = pytest.mark.timeout(60)

SOURCE = str(Path(PACKAGE).resolve().parents[1])


def a_host_gone_with_calls_in_flight(path: Path, count: int) -> None:
    """A host that journaled `count` calls and was gone before any was answered."""
    code = (
        "import os, sys\n"
        "from toolscript.host.journal import Journal\n"
        "journal = Journal.open(sys.argv[1])\n"
        "for batch in range(int(sys.argv[2]) // 1000):\n"
        "    journal.record_calls([(f'c-{batch}.{n}', 's-1', 'main', 'put', f'n={n}', 1.0)"
        " for n in range(1000)])\n"
        "journal.flush()\n"
        "os._exit(0)\n"
    )
    env = {**os.environ, "PYTHONPATH": SOURCE}
    subprocess.run([sys.executable, "-c", code, str(path), str(count)], check=True, env=env)


def test_uncertain_calls_are_read_only_as_far_as_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.sqlite3"
    a_host_gone_with_calls_in_flight(path, 50_000)
    assert run(["calls", "--journal", str(path), "--uncertain", "--json", "--limit", "1"]) == 0
    capsys.readouterr()  # the sweep that marks the gone host's calls is not what is measured

    tracemalloc.start()
    try:
        status = run(["calls", "--journal", str(path), "--uncertain", "--json", "--limit", "2"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert status == 0
    shown = json.loads(capsys.readouterr().out)
    assert [call["call_id"] for call in shown] == ["c-49.998", "c-49.999"]
    assert all(call["uncertain_reason"] == "host_gone" for call in shown)
    assert peak < 2_000_000, f"{peak} bytes to show two calls of 50,000"


def test_an_answered_call_with_no_fate_is_not_shown_in_flight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per call
    path = tmp_path / "journal.sqlite3"
    code = (
        "import os, sys\n"
        "from toolscript.host.journal import Journal\n"
        "journal = Journal.open(sys.argv[1])\n"
        "journal.record_calls([('c-1', 's-1', 'main', 'send', \"text='a'\", 1.0),"
        " ('c-2', 's-1', 'main', 'send', \"text='b'\", 1.0)])\n"
        "journal.record_answers([('c-1', 2.0, False, \"'sent a'\", None)])\n"
        "journal.flush()\n"
        "os._exit(0)\n"  # killed: the kernel's word on c-1 never came
    )
    env = {**os.environ, "PYTHONPATH": SOURCE}
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env)

    assert run(["calls", "--journal", str(path)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "send" in line]
    assert len(rows) == 2
    assert "answered, no fate told" in rows[0] and "in flight" not in rows[0], rows[0]
    assert "none: its host died" in rows[1], rows[1]
    assert "effect unknown: its host ended while it was in flight" in rows[1], rows[1]


def test_calls_read_by_a_program_folds_no_cell_across_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Captured, with no terminal to ask for a width: each call on one line, whole.
    monkeypatch.delenv("COLUMNS", raising=False)
    path = tmp_path / "journal.sqlite3"
    code = (
        "import os, sys\n"
        "from toolscript.host.journal import Journal\n"
        "journal = Journal.open(sys.argv[1])\n"
        "journal.record_calls([('c-1', 'main:0123456789', 'main', 'write_document_to_archive',"
        " \"path='/reports/2026/quarterly-summary-of-everything.md'\", 1.0)])\n"
        "journal.flush()\n"
        "os._exit(0)\n"
    )
    env = {**os.environ, "PYTHONPATH": SOURCE}
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env)

    assert run(["calls", "--journal", str(path), "--uncertain"]) == 0
    [row] = [
        line for line in capsys.readouterr().out.splitlines() if "c-1" in line or "main:" in line
    ]
    for whole in (
        "write_document_to_archive",
        "main:0123456789",
        "quarterly-summary-of-everything",
    ):
        assert whole in row, row


def test_an_in_memory_journal_is_refused_for_there_is_none_to_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["calls", "--journal", ":memory:"]) == 2
    assert "lives only inside the process that opened it" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"), [("--limit", str(1 << 64)), ("--script", "main:\udcff")]
)
def test_a_value_sqlite_cannot_take_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    path = tmp_path / "journal.sqlite3"
    a_host_gone_with_calls_in_flight(path, 1000)
    assert run(["calls", "--journal", str(path), option, value]) == 2
    assert f"toolscript calls: error: {option}:" in capsys.readouterr().err


def a_journal_with_a_hostile_call(path: Path) -> None:
    """A call whose tool name is rich markup and whose arguments hold a terminal's control
    sequences (repaint the line above, set the clipboard): what a script can send."""
    from toolscript.host.journal import CallAnswer, CallFate, CallStart, Journal

    with Journal.open(path) as journal:
        journal.begin_script("s-1", "main", 1, "a()", 1.0)
        journal.record_calls(
            [
                CallStart(
                    "c-1",
                    "s-1",
                    "main",
                    "t[bold red]x[/]",
                    "q='[link=https://example.invalid]here[/link]\x1b[1A\x1b]52;c;aGk=\x07'",
                    1.0,
                )
            ]
        )
        journal.record_answers([CallAnswer("c-1", 2.0, False, "'ok'")])
        journal.settle_calls([CallFate("c-1", "seen", None)])


def calls_on_a_terminal(path: Path) -> str:
    code, shown = on_a_terminal(
        [sys.executable, "-m", "toolscript.cli", "calls", "--journal", str(path)],
        env={**os.environ, "PYTHONPATH": SOURCE, "COLUMNS": "300"},
    )
    assert code == 0, shown
    return shown


def test_calls_shows_tool_names_and_arguments_as_plain_text_never_as_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    path = tmp_path / "journal.sqlite3"
    a_journal_with_a_hostile_call(path)
    assert run(["calls", "--journal", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "t[bold red]x[/]" in shown
    assert "[link=https://example.invalid]here[/link]" in shown


def test_calls_on_a_terminal_shows_control_sequences_escaped(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    a_journal_with_a_hostile_call(path)
    shown = calls_on_a_terminal(path)
    assert "\x07" not in shown and "]52;" not in shown.replace("\\x1b]52;", ""), shown
    assert "\\x1b[1A\\x1b]52;c;aGk=\\x07" in shown, shown


def test_a_call_answered_after_its_script_stopped_waiting_shows_its_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    from toolscript.host.journal import CallAnswer, CallFate, CallStart, Journal

    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as journal:
        journal.begin_script("s-1", "main", 1, "a()", 1.0)
        journal.record_calls([CallStart("c-1", "s-1", "main", "transfer", "amount=5", 1.0)])
        journal.settle_calls([CallFate("c-1", "pending", "tool_timeout")])
        journal.record_answers([CallAnswer("c-1", 2.0, False, "'moved 5'")])
    assert run(["calls", "--journal", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "effect known: an answer came after its script stopped waiting: 'moved 5'" in shown
    assert "effect unknown" not in shown


def test_the_json_shows_each_calls_idempotency_key_and_help_offers_no_memory_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolscript.host.journal import Journal

    path = tmp_path / "journal.sqlite3"
    a_host_gone_with_calls_in_flight(path, 1000)
    with Journal.open(path) as journal:
        keys = {call.call_id: call.idempotency_key for call in journal.calls(limit=3)}
    assert run(["calls", "--journal", str(path), "--json", "--limit", "3"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {call["call_id"]: call["idempotency_key"] for call in shown} == keys
    assert all(keys.values())

    with pytest.raises(SystemExit):
        run(["calls", "--help"])
    assert ":memory:" not in capsys.readouterr().out


def test_a_long_listing_is_one_line_a_call_and_says_how_many_are_not_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.sqlite3"
    a_host_gone_with_calls_in_flight(path, 5_000)

    assert run(["calls", "--journal", str(path)]) == 0
    out = capsys.readouterr().out
    assert "the newest 200 of 5,000 calls" in out, out[:300]

    # Past a table's size, plain columns, printed as they come: a table measured every cell
    # first (100,000 calls took 43 s and 800 MB).
    tracemalloc.start()
    try:
        status = run(["calls", "--journal", str(path), "--limit", "5000"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "5,000 call(s)", lines[0]
    assert lines[1].split() == [
        "when",
        "shell",
        "script",
        "tool",
        "arguments",
        "fate",
        "cause",
        "note",
    ]
    assert len(lines) == 5_002
    first, last = lines[2], lines[-1]
    assert "put" in first and "n=0" in first and "effect unknown" in first, first
    assert "n=999" in last, last
    assert peak < 40_000_000, f"{peak} bytes to list 5,000 calls"
