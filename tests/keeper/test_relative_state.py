"""A relative state folder is the current folder's: the keeper, its socket and the kept
interpreters' shell folders are found at the same absolute place whoever asks. A folder too
deep for a Unix socket's address works all the same."""

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


async def test_a_state_dir_deeper_than_a_socket_address_holds_works_with_kept_interpreters(
    tmp_path: Path,
) -> None:
    state = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(str(state / "keeper.sock")) > 108  # past any Unix socket's address
    knobs = sandbox_knobs({"mounts": {str(tmp_path): "rw"}})
    async with Runtime(
        state_dir=state, keep_interpreters=True, pool_size=0, journal=":memory:", **knobs
    ) as rt:
        result = await rt.shell("main").run("x = 6\nx * 7")
        assert (result.status, result.value) == ("ok", "42"), result.text
    assert (state / "keeper.sock").exists() is False
    assert processes_with(str(state)) == []
