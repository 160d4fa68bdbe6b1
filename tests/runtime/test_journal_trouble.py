"""A journal file another process locks, that is damaged, or whose writes keep failing: the
host never stalls on it, never grows without bound, fails with the journal's own errors, and
lets go of everything it holds at its close."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import toolscript
from tests.conftest import MakeRuntime, eventually
from toolscript import Runtime, tool
from toolscript.host.journal import Journal, store

pytestmark = pytest.mark.timeout(90)


@tool
def ping(x: int) -> int:
    """Return x."""
    return x


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the journal's write lock from another connection, as another process would."""
    other = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        other.execute("BEGIN EXCLUSIVE")
        yield
        other.execute("COMMIT")
    finally:
        other.close()


async def test_a_locked_journal_stalls_no_other_shell_and_a_new_shells_run_still_answers(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "journal.sqlite3"
    runtime = await make_runtime(journal=path)
    await runtime.shell("a").run("1")
    with locked(path):
        started = time.monotonic()
        stopped, first = await asyncio.gather(
            runtime.shell("a").run("import time\ntime.sleep(30)", time_limit=1),
            runtime.shell("b").run("print('b ran')"),
        )
        # A new shell's first run looks the journal up for calls an earlier host left
        # uncertain: SQLite waits seconds for the lock, on a thread of its own, not the loop.
        assert stopped.status == "time_limit", stopped.text
        assert stopped.duration < 4.0, f"shell a waited for the lock: {stopped.duration:.1f} s"
        assert first.status == "ok" and first.stdout == "b ran\n", first.text
        assert "could not be read" in first.note and "locked" in first.note, first.note
        assert time.monotonic() - started < 15
    again = await runtime.shell("b").run("2")
    assert again.status == "ok" and "could not be read" not in again.note, again.text


def damaged_copies(good: Path, folder: Path) -> Iterator[Path]:
    """Copies of the journal `good`, each with one page past the first zeroed."""
    data = good.read_bytes()
    page = 4096
    for number in range(1, len(data) // page):
        copy = folder / f"page-{number}.sqlite3"
        copy.write_bytes(data[: number * page] + bytes(page) + data[(number + 1) * page :])
        yield copy


async def test_a_journal_damaged_anywhere_is_a_journal_error_to_the_runtime_and_the_command(
    tmp_path: Path,
) -> None:
    good = tmp_path / "good.sqlite3"
    async with Runtime(tools=[ping], journal=good, sandbox="off", pool_size=0) as runtime:
        for _ in range(20):
            await runtime.run(
                "import asyncio\nawait asyncio.gather(*[ping(x=i) for i in range(50)])"
            )
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    copies = list(damaged_copies(good, damaged))
    assert len(copies) >= 5
    refused = 0
    for copy in copies:
        try:
            journal = Journal.open(copy)
        except toolscript.JournalFileError:
            refused += 1
            continue
        with contextlib.suppress(toolscript.JournalFileError):
            journal.close()
        command = subprocess.run(
            [sys.executable, "-m", "toolscript.cli", "calls", "--json", "--journal", str(copy)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert command.returncode in (0, 2), (copy.name, command.stderr[-2000:])
        if command.returncode == 2:
            assert "Traceback" not in command.stderr and command.stderr.count("\n") == 1, (
                copy.name,
                command.stderr,
            )
    assert refused > 0  # some page that opening reads was damaged


async def test_writes_that_keep_failing_refuse_new_calls_past_a_bound_and_lose_none(
    make_runtime: MakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "_BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(store, "MAX_UNWRITTEN", 100)
    path = tmp_path / "journal.sqlite3"
    runtime = await make_runtime(tools=[ping], journal=path)
    gather = "import asyncio\nlen(await asyncio.gather(*[ping(x=i) for i in range(150)]))"
    with locked(path):
        first = await runtime.run(gather)
        assert (first.status, first.value) == ("ok", "150"), first.text
        await eventually(lambda: runtime.journal.failing is not None, 10, "no write failed")
        # Past the bound nothing more is kept for a file that takes no write: a script is
        # refused before it runs, as a call of one would be, with the reason.
        refused = await runtime.run("await ping(x=1)")
        assert refused.status == "refused" and refused.calls.made == 0, refused.text
        assert "has not taken a write" in refused.text and "locked" in refused.text, refused.text
    await eventually(lambda: runtime.journal.failing is None, 10, "the journal was not written")
    after = await runtime.run("await ping(x=2)")
    assert (after.status, after.value) == ("ok", "2"), after.text
    runtime.journal.flush()
    scripts = {call.script_id for call in runtime.journal.calls(limit=1000)}
    assert first.script_id in scripts
    assert len(runtime.journal.calls(script_id=first.script_id, limit=1000)) == 150


async def test_a_last_write_that_fails_at_close_still_lets_go_of_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "_BUSY_TIMEOUT_MS", 50)
    path = tmp_path / "journal.sqlite3"
    runtime = Runtime(tools=[ping], journal=path, pool_size=0)
    await runtime.start()
    await runtime.run("await ping(x=1)")
    workdir = runtime._workdir
    assert workdir is not None and workdir.exists()
    with locked(path), pytest.raises(toolscript.JournalAccessError) as failed:
        await runtime.aclose()
    assert "intent files" in str(failed.value)
    assert not workdir.exists()
    # What the failed write held stays in the intent files, for the next host to write.
    assert list(tmp_path.glob("journal.sqlite3*intent*")), sorted(
        p.name for p in tmp_path.iterdir()
    )
