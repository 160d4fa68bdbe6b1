"""Background scripts are checked before they run, as foreground ones are."""

from __future__ import annotations

from typing import Any

import pytest

from toolscript import Runtime

from .conftest import journaled_calls


@pytest.mark.timeout(60)
async def test_a_background_script_with_a_finding_is_refused_under_refuse(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("refuse")
    handle = await runtime.shell("bg").start("await add_note(text='a')\nawait add_note(txt='b')")
    result = await handle.result()
    assert result.status == "refused", result.text
    assert "<script>:2: `add_note` has no parameter `txt`: did you mean `text`?" in result.note
    assert made == [] and journaled_calls(runtime, result.script_id) == 0


@pytest.mark.timeout(60)
async def test_a_background_script_runs_under_warn_with_the_findings_first(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("warn")
    handle = await runtime.shell("bg").start("await add_note(text='a')\nadd_note(text='b')")
    result = await handle.result()
    assert result.status == "ok", result.text
    assert made == ["add_note"]
    assert result.note.startswith("The check before running found 1 problem")
