"""A relative state folder is the current folder's: the keeper, its socket and the kept
interpreters' shell folders are found at the same absolute place whoever asks."""

from __future__ import annotations

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
