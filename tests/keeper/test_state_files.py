"""The state folder's files as a host finds them: a state folder outside /tmp (where the
sandbox's root is read-only), and a keeper's board that is damaged."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolscript import Runtime
from toolscript.host.keeper import Held

from ..conftest import processes_with, sandbox_knobs

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder outside /tmp (the sandbox gives every interpreter a private /tmp, where any
    path can be made; elsewhere its root is read-only)."""
    folder = Path(tempfile.mkdtemp(prefix="toolscript-test-", dir="/var/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_kept_interpreters_work_with_a_state_dir_outside_tmp(outside_tmp: Path) -> None:
    # No mount shows the state folder: the shell's folder must be put in place by itself.
    state = outside_tmp / "state"
    async with Runtime(
        state_dir=state,
        keep_interpreters=True,
        pool_size=0,
        journal=":memory:",
        **sandbox_knobs({}),
    ) as rt:
        first = await rt.shell("main").run(
            "import os\nopen('mine.txt', 'w').write('x')\nos.getcwd()"
        )
        assert (first.status, first.value) == ("ok", repr(str(state / "shells" / "main"))), (
            first.text
        )
        other = await rt.shell("other").run("import os\nsorted(os.listdir('..'))")
        assert other.status == "ok", other.text
    assert (state / "shells" / "main" / "mine.txt").read_text() == "x"
    if rt.sandbox == "namespaces+seccomp":
        assert other.value == "['other']"  # the shell "main"'s folder does not show
    assert processes_with(str(state)) == []


def test_a_damaged_board_gives_a_running_script_that_can_be_taken_back() -> None:
    # The board is a file the keeper keeps; random bytes over it gave a marker of U+FFFD
    # (the host's output capture then raised UnicodeEncodeError) and numbers that are not.
    held = Held(
        1,
        {
            "script": "main:1",
            "marker": "\ufffd_\x0c\ufffd",
            "deadline": float("nan"),
            "grace": "x",
            "time_limit": float("inf"),
        },
    )
    running = held.running(grace=5.0)
    assert running is not None
    assert running.marker.isascii() and running.marker.isalnum()
    assert (running.deadline, running.grace, running.time_limit) == (0.0, 5.0, 0.0)
