"""The journal waits to write to SQLite while a script runs (docs/design.md, "Why the journal's
flush waits while a script runs"): a script that never ends must not hold its calls out of the
journal's file for longer than `MAX_DEFER`."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime, tool
from toolscript.host.journal import buffer as journal_buffer


@tool
async def noop(x: int) -> int:
    """Return x."""
    return x


@pytest.mark.timeout(60)
async def test_a_script_that_never_ends_cannot_hold_its_calls_out_of_the_journal(
    make_runtime: MakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_buffer, "MAX_DEFER", 0.3)
    path = tmp_path / "journal.sqlite3"
    runtime: Runtime = await make_runtime(tools=[noop], journal=path)
    journal = runtime.journal
    committed = threading.Event()
    commit = journal._commit

    def watched_commit(sweep: bool = False, end_host: bool = False) -> None:
        commit(sweep, end_host)
        if threading.current_thread() is journal._flusher:
            committed.set()

    monkeypatch.setattr(journal, "_commit", watched_commit)
    handle = await runtime.shell("main").start(
        "i = 0\nwhile True:\n    i = await noop(x=i + 1)\n", time_limit=50
    )
    try:
        # Waited for off the event loop, which goes on answering the script's calls.
        assert await asyncio.to_thread(committed.wait, 20), "the flush waited past MAX_DEFER"
        assert not handle.done()
        with sqlite3.connect(path) as db:
            written = db.execute("SELECT count(*) FROM calls WHERE tool = 'noop'").fetchone()[0]
        assert written > 0
    finally:
        await handle.cancel()
