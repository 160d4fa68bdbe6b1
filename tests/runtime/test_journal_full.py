"""A journal that cannot be written (a full disk) is the host's trouble, said as such: a
call it cannot record is not made and the script is told why, a script whose start it
cannot record does not run, and neither is blamed on the script or ends its interpreter."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.conftest import MakeRuntime
from toolscript import tool
from toolscript.host.journal import Journal
from toolscript.host.journal.intents import _IntentLog

pytestmark = pytest.mark.timeout(60)


def disk_full(*args: Any, **kwargs: Any) -> NoReturn:
    raise OSError(errno.ENOSPC, "No space left on device")


async def test_a_call_the_journal_cannot_record_is_not_made_and_the_script_is_told(
    make_runtime: MakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    @tool
    def send(text: str) -> str:
        """Send a message."""
        made.append(text)
        return "sent"

    runtime = await make_runtime(tools=[send], journal=tmp_path / "journal.sqlite3")
    first = await runtime.run("x = 1")
    monkeypatch.setattr(Journal, "record_calls", disk_full)
    result = await runtime.run(
        "try:\n    await send(text='hi')\nexcept ToolError as error:\n    said = str(error)\nsaid"
    )
    monkeypatch.undo()
    assert result.status == "ok", result.text
    assert "could not record the call in its journal" in (result.value or ""), result.value
    assert "No space left on device" in (result.value or "")
    assert made == []
    [record] = result.calls.records
    assert record.fate == "refused", result.text
    assert "broke the protocol" not in result.text
    after = await runtime.run("x")
    assert (after.value, after.generation) == ("1", first.generation), after.text
    assert (await runtime.run("await send(text='again')")).status == "ok"
    assert made == ["again"]


async def test_a_script_whose_start_the_journal_cannot_record_is_refused_and_nothing_runs(
    make_runtime: MakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await make_runtime(journal=tmp_path / "journal.sqlite3", mounts={tmp_path: "rw"})
    first = await runtime.run("x = 1")
    monkeypatch.setattr(_IntentLog, "append", disk_full)
    marker = tmp_path / "ran"
    result = await runtime.run(f"open({str(marker)!r}, 'w').close()")
    monkeypatch.undo()
    assert result.status == "refused", result.text
    assert "could not record the script in its journal" in result.note, result.note
    assert not marker.exists()
    after = await runtime.run("x")
    assert (after.value, after.generation) == ("1", first.generation), after.text
