"""`check="warn"` (the default): the script runs, and its findings come first in the text."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime

from .conftest import catalogue_tools


@pytest.mark.timeout(60)
async def test_warn_runs_the_script_and_puts_the_findings_first(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("warn")
    code = "note = await add_note(text='kept')\nprint(note['text'])\nawait add_noet(text='x')\n"
    result = await runtime.run(code)
    assert made == ["add_note"]
    assert result.status == "error" and result.stdout == "kept\n"
    assert result.error is not None and "NameError" in result.error
    first, second, third = [line for line in result.text.splitlines() if line][:3]
    assert first == "exit 1 · error"
    assert second == "The check before running found 1 problem (the script ran anyway):"
    assert third == "<script>:3: `add_noet` is not defined: did you mean `add_note`?"


@pytest.mark.timeout(60)
async def test_warn_is_the_default(make_runtime: MakeRuntime, made: list[str]) -> None:
    runtime = await make_runtime(tools=catalogue_tools(made))
    assert runtime.check == "warn"
    result = await runtime.run("await search_notes('x')")
    assert "`search_notes` takes keyword arguments only" in result.text


@pytest.mark.timeout(60)
async def test_off_does_not_check(start_checked: Any, made: list[str]) -> None:
    runtime: Runtime = await start_checked("off")
    result = await runtime.run("add_note(text='x')")
    assert "check before running" not in result.text
    assert "never awaited" in result.note  # the kernel's own report, after the run


@pytest.mark.timeout(60)
async def test_a_script_with_no_finding_reads_as_before(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("warn")
    result = await runtime.run("print((await add_note(text='x'))['id'])")
    assert result.text == "exit 0 · ok\n\nstdout:\n1\n"


def test_a_check_mode_that_does_not_exist_is_refused_naming_the_knob() -> None:
    with pytest.raises(ValueError, match="check must be 'refuse', 'warn' or 'off'"):
        Runtime(check="strict")
