"""Where no sandbox can be made, the runtime says so, or refuses when one is required."""

from __future__ import annotations

import pytest

from toolscript import Runtime
from toolscript.host import sandbox

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def no_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)


@pytest.mark.usefixtures("no_bubblewrap")
async def test_sandbox_required_refuses_to_start_saying_why() -> None:
    runtime = Runtime(journal=":memory:", sandbox="required")
    with pytest.raises(sandbox.SandboxError, match="bubblewrap was not found"):
        await runtime.start()


@pytest.mark.usefixtures("no_bubblewrap")
async def test_without_a_sandbox_auto_runs_and_each_interpreter_says_it_is_not_isolated() -> None:
    async with Runtime(journal=":memory:", sandbox="auto", pool_size=0) as runtime:
        assert runtime.sandbox == "process only"
        assert runtime.sandbox_failure is not None
        assert "bubblewrap was not found" in runtime.sandbox_failure
        first = await runtime.run("1")
        assert first.status == "ok", first.text
        assert "not sandboxed" in first.note and "bubblewrap" in first.note
        second = await runtime.run("2")
        assert "not sandboxed" not in second.note  # once per interpreter
        other = await runtime.shell("other").run("3")
        assert "not sandboxed" in other.note


async def test_sandbox_off_says_so_in_the_first_result() -> None:
    async with Runtime(journal=":memory:", sandbox="off", pool_size=0) as runtime:
        assert runtime.sandbox == "process only"
        result = await runtime.run("1")
        assert "not sandboxed" in result.note and "sandbox='off'" in result.note


async def test_the_default_runtime_is_sandboxed_here() -> None:
    async with Runtime(journal=":memory:", pool_size=0) as runtime:
        assert runtime.sandbox == "namespaces+seccomp", runtime.sandbox_failure
        result = await runtime.run("1")
        assert "not sandboxed" not in result.note


def test_a_bad_sandbox_knob_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="sandbox must be"):
        Runtime(sandbox="maybe")
    with pytest.raises(ValueError, match="mounts"):
        Runtime(mounts={"relative/path": "ro"})
    with pytest.raises(ValueError, match="mounts"):
        Runtime(mounts={"/": "sideways"})
