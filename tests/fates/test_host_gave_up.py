"""`pending` because the host has no answer to give: `tool_timeout` and `source_gone`.

The host gave up on the handler, or lost what was behind it. Neither says anything about the
call's effect, so neither is ever reported as the tool's answer, error or not.
"""

from __future__ import annotations

import ast
import asyncio
import threading
from typing import Any

import pytest

import toolscript.tools.python
from tests.conftest import MakeRuntime, eventually
from toolscript import Runtime, tool
from toolscript.tools.spec import SourceGone, ToolOutcome, ToolSpec

from .conftest import call_line


def _never_answering_tool(entered: asyncio.Event, cancelled: asyncio.Event) -> Any:
    @tool(timeout=0.2)
    async def charge(amount: int) -> str:
        """Charge a card; this one never answers in time."""
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "charged"

    return charge


@pytest.mark.timeout(20)
async def test_a_handler_past_its_tool_timeout_is_cancelled_and_its_call_pending_tool_timeout(
    make_runtime: MakeRuntime,
) -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()
    runtime = await make_runtime(tools=[_never_answering_tool(entered, cancelled)])
    code = (
        "try:\n"
        "    await charge(amount=5)\n"
        "except ToolTimeout as error:\n"
        "    print(type(error).__name__, isinstance(error, TimeoutError), error)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert entered.is_set() and cancelled.is_set()
    assert result.stdout.startswith("ToolTimeout True charge did not answer within its timeout")
    assert "may still take effect" in result.stdout
    [record] = result.calls.records
    assert (record.tool, record.args_brief) == ("charge", "amount=5")
    assert (record.fate, record.cause) == ("pending", "tool_timeout")
    # Never an answered error: no answer, no answer's start, not an error.
    assert (record.answered_at, record.answer_brief, record.is_error) == (None, None, False)
    assert result.calls.by_fate == {"pending": 1}
    line = call_line(result.text, "charge", "amount=5")
    assert "pending" in line and "the tool's timeout" in line and "may still take effect" in line
    assert "error began" not in line
    [uncertain] = runtime.journal.uncertain()
    assert (uncertain.fate, uncertain.cause, uncertain.answered_at) == (
        "pending",
        "tool_timeout",
        None,
    )
    assert uncertain.is_error is None


@pytest.mark.timeout(20)
async def test_a_host_tool_timeout_left_unhandled_fails_the_script_and_stays_pending(
    make_runtime: MakeRuntime,
) -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()
    runtime = await make_runtime(tools=[_never_answering_tool(entered, cancelled)])
    result = await runtime.run("await charge(amount=7)")
    assert result.status == "error", result.text
    assert result.error is not None and "ToolTimeout" in result.error
    [record] = result.calls.records
    assert (record.fate, record.cause, record.is_error) == ("pending", "tool_timeout", False)


def _gone_source_tool(entered: asyncio.Event) -> ToolSpec:
    async def handler(args: dict[str, Any]) -> ToolOutcome:
        entered.set()
        raise SourceGone("the server process exited")

    return ToolSpec(
        name="create_issue",
        description="Create an issue.",
        input_schema={
            "type": "object",
            "properties": {"title": {"type": "string"}},
            "required": ["title"],
        },
        handler=handler,
        server="tracker",
    )


@pytest.mark.timeout(20)
async def test_a_call_whose_source_died_in_flight_is_pending_source_gone_not_an_error_answer(
    make_runtime: MakeRuntime,
) -> None:
    entered = asyncio.Event()
    runtime = await make_runtime(tools=[_gone_source_tool(entered)])
    code = (
        "try:\n"
        "    await tracker.create_issue(title='crash on save')\n"
        "except ToolError as error:\n"
        "    print(error)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    assert entered.is_set()
    assert "the server behind this tool stopped" in result.stdout
    assert "may have taken effect" in result.stdout
    [record] = result.calls.records
    assert record.tool == "tracker/create_issue"
    assert (record.fate, record.cause) == ("pending", "source_gone")
    assert (record.answered_at, record.answer_brief, record.is_error) == (None, None, False)
    line = call_line(result.text, "tracker/create_issue", record.args_brief)
    assert "the tool's server stopped" in line and "may still take effect" in line
    [uncertain] = runtime.journal.uncertain()
    assert (uncertain.fate, uncertain.cause) == ("pending", "source_gone")


# A synchronous tool cannot be stopped at its timeout: its thread runs on. When it ends, its
# effect is no longer in doubt, and the journal says so (its fate stays what the script's
# result said).


def _late_sync_tool(release: threading.Event, fails: bool = False) -> Any:
    @tool(timeout=0.2)
    def transfer(amount: int) -> str:
        """Move money; this one answers only once released, long past its timeout."""
        if not release.wait(20):
            return "never released"
        if fails:
            raise RuntimeError(f"the bank refused {amount}")
        return f"moved {amount}"

    return transfer


@pytest.mark.timeout(30)
@pytest.mark.parametrize("fails", [False, True], ids=["answers", "raises"])
async def test_a_sync_tool_that_ends_after_its_timeout_has_its_late_answer_journaled(
    make_runtime: MakeRuntime, fails: bool
) -> None:
    release = threading.Event()
    runtime = await make_runtime(tools=[_late_sync_tool(release, fails)])
    result = await runtime.run(
        "try:\n    await transfer(amount=5)\nexcept ToolTimeout as error:\n    print('gave up')\n"
    )
    assert result.status == "ok", result.text
    [record] = result.calls.records
    assert (record.fate, record.cause, record.answered_at) == ("pending", "tool_timeout", None)
    [uncertain] = runtime.journal.uncertain()
    assert uncertain.call_id == record.id

    release.set()
    await eventually(
        lambda: not runtime.journal.uncertain(), 10, "the late answer was not journaled"
    )
    [call] = runtime.journal.calls()
    assert call.call_id == record.id
    assert (call.fate, call.cause, call.uncertain) == ("pending", "tool_timeout", False)
    assert call.answered_at is not None and call.answered_at > record.made_at
    assert call.is_error is fails
    assert call.answer_brief is not None
    assert ("the bank refused 5" if fails else "moved 5") in call.answer_brief


@pytest.mark.timeout(30)
async def test_a_sync_tool_that_ends_after_its_timeout_but_before_its_script_is_not_uncertain(
    make_runtime: MakeRuntime,
) -> None:
    release = threading.Event()
    runtimes: list[Runtime] = []

    def answered() -> bool:
        return any(call.answered_at is not None for call in runtimes[0].journal.calls())

    @tool
    async def let_it_finish() -> None:
        """Release the late transfer, and answer once the host has its late answer."""
        release.set()
        await eventually(answered, 10, "the late answer did not reach the host")

    runtime = await make_runtime(tools=[_late_sync_tool(release), let_it_finish])
    runtimes.append(runtime)
    result = await runtime.run(
        "try:\n"
        "    await transfer(amount=9)\n"
        "except ToolTimeout as error:\n"
        "    print('gave up')\n"
        "await let_it_finish()\n"
    )
    assert result.status == "ok", result.text
    record = next(record for record in result.calls.records if record.tool == "transfer")
    # Still pending (the script never had the answer), but the report knows it happened.
    assert (record.fate, record.cause, record.is_error) == ("pending", "tool_timeout", False)
    assert record.answered_at is not None and record.answer_brief == "'moved 9'"
    line = call_line(result.text, "transfer", "amount=9")
    assert "the tool finished later, so it happened" in line, line
    assert "may still take effect" not in line, line
    assert not runtime.journal.uncertain()
    call = next(call for call in runtime.journal.calls() if call.call_id == record.id)
    assert (call.fate, call.cause, call.uncertain, call.is_error) == (
        "pending",
        "tool_timeout",
        False,
        False,
    )
    assert call.answer_brief is not None and "moved 9" in call.answer_brief


@pytest.mark.timeout(30)
async def test_a_sync_call_given_up_while_it_waited_for_a_thread_never_runs_and_says_so(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every tool thread is busy with a hung call (one thread here; 64 in use): the next
    # call waits in line past its timeout. Run later, it would take effect long after the
    # script was told it timed out.
    monkeypatch.setattr(
        toolscript.tools.python, "_threads", toolscript.tools.python._ToolThreads(1)
    )
    release, ran = threading.Event(), []

    @tool(timeout=0.2)
    def hold() -> str:
        """Hold the only tool thread until released."""
        release.wait(20)
        return "held"

    @tool(timeout=0.2)
    def record(x: int) -> str:
        """Record `x`."""
        ran.append(x)
        return "recorded"

    runtime = await make_runtime(tools=[hold, record])
    result = await runtime.run(
        "import asyncio\n"
        "held = asyncio.ensure_future(hold())\n"
        "await asyncio.sleep(0.05)  # its call takes the thread\n"
        "try:\n"
        "    await record(x=1)\n"
        "except ToolTimeout as error:\n"
        "    print('gave up')\n"
        "    told = str(error)\n"
        "try:\n"
        "    await held\n"
        "except ToolTimeout as error:\n"
        "    held_told = str(error)\n"
        "(told, held_told)\n"
    )
    assert result.status == "ok" and result.stdout == "gave up\n", result.text
    # The script is told as much: this call will never take effect; the one that began may.
    told, held_told = ast.literal_eval(result.value or "")
    assert "it never ran" in told.lower() and "may still take effect" not in told, told
    assert "may still take effect" in held_told, held_told
    calls = {record.tool: record for record in result.calls.records}
    assert (calls["record"].fate, calls["record"].cause) == ("pending", "tool_timeout")
    line = call_line(result.text, "record", "x=1")
    assert "it never ran" in line and "may still take effect" not in line, line
    assert [call.tool for call in runtime.journal.uncertain()] == ["hold"]
    release.set()
    await eventually(lambda: not runtime.journal.uncertain(), 10, "hold's answer never came")
    assert ran == []  # the thread came free, and the call given up did not run then either
