"""`toolscript calls` reads the journal as it is, in bounded time and memory, whatever its size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

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
