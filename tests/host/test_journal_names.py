"""A journal opened by several names (a symlink to it, and its own) is one journal:
what a killed host left in its intent files is found whichever name the next host uses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolscript import __file__ as PACKAGE
from toolscript.host.journal import Journal

pytestmark = pytest.mark.timeout(30)

SOURCE = str(Path(PACKAGE).resolve().parents[1])

KILLED_HOST = """
import os, sys
from toolscript.host.journal import Journal
journal = Journal.open(sys.argv[1])
journal.begin_script("s-1", "main", 1, "send()", 1.0)
journal.record_calls([(f"c-{n}", "s-1", "main", "send", f"n={n}", 2.0) for n in range(5)])
os._exit(0)  # killed before the buffer reached SQLite: the calls are in the intent file only
"""


def test_calls_a_killed_host_left_in_its_intent_file_are_found_by_the_files_real_name(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real" / "journal.sqlite3"
    real.parent.mkdir()
    Journal.open(real).close()
    name = tmp_path / "link.sqlite3"
    name.symlink_to(real)
    env = {**os.environ, "PYTHONPATH": SOURCE}
    subprocess.run([sys.executable, "-c", KILLED_HOST, str(name)], check=True, env=env)

    with Journal.open(real) as journal:
        calls = journal.calls()
    assert [(call.call_id, call.uncertain_reason) for call in calls] == [
        (f"c-{n}", "host_gone") for n in range(5)
    ]


def test_a_new_journal_being_made_by_another_host_is_waited_for(tmp_path: Path) -> None:
    # Another host holds the new file's write lock (it makes the tables): turning the
    # journal to WAL does not call SQLite's busy handler, so without a wait of its own the
    # open failed at once, saying the lock was held "for longer than toolscript waits".
    import sqlite3
    import threading
    import time

    path = tmp_path / "journal.sqlite3"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE making (x)")
    release = threading.Timer(0.5, lambda: other.execute("ROLLBACK"))
    release.start()
    started = time.monotonic()
    try:
        Journal.open(path).close()
    finally:
        release.join()
        other.close()
    assert time.monotonic() - started >= 0.4
