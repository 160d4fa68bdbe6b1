"""A relative state folder is the current folder's: the keeper, its socket and the kept
interpreters' shell folders are found at the same absolute place whoever asks."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolscript import Runtime

from ..conftest import processes_with, sandbox_knobs

pytestmark = pytest.mark.timeout(60)


async def test_a_relative_state_dir_works_with_kept_interpreters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    knobs = sandbox_knobs({"mounts": {str(tmp_path): "rw"}})
    async with Runtime(
        state_dir="st", keep_interpreters=True, pool_size=0, journal=":memory:", **knobs
    ) as rt:
        assert rt.state_dir == tmp_path / "st"
        result = await rt.shell("main").run("x = 6\nx * 7")
        assert (result.status, result.value) == ("ok", "42"), result.text
    assert processes_with(str(tmp_path / "st")) == []


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
