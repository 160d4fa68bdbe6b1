"""Bounds: however many calls a script makes and whatever their arguments, the report and the
host's memory stay bounded and the host stays up (docs/design.md: call fates, the promises)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import toolscript.host.calls
from tests.conftest import MakeRuntime
from toolscript import Runtime, tool

from .conftest import Desk

RECORD_FIELDS = {
    "id",
    "tool",
    "args_brief",
    "fate",
    "cause",
    "answer_brief",
    "is_error",
    "made_at",
    "answered_at",
}
"""The fields docs/design.md#call-fates names for every call record."""


@pytest.mark.timeout(60)
async def test_a_script_of_5000_calls_lists_1000_and_counts_the_rest_by_tool(
    runtime: Runtime,
) -> None:
    code = (
        "import asyncio\n"
        "await asyncio.gather(*(fast(x=i) for i in range(3000)))\n"
        "await asyncio.gather(*(fails(x=i) for i in range(2000)), return_exceptions=True)\n"
        "'done'"
    )
    result = await runtime.run(code, time_limit=50)
    assert result.status == "ok", result.text
    calls = result.calls
    assert (calls.made, calls.made_before_start) == (5000, 0)
    assert calls.by_fate == {"seen": 5000}
    assert len(calls.records) == toolscript.host.calls.MAX_RECORDS == 1000
    assert {record.tool for record in calls.records} == {"fast"}
    assert calls.unlisted == {"fast": 2000, "fails": 2000}
    assert "calls:" not in result.text
    as_dict = result.to_dict()["calls"]
    assert len(as_dict["records"]) == 1000 and as_dict["unlisted"] == calls.unlisted
    # Nothing of a settled call is kept in the host once its script's report is built.
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None and len(interpreter.ledger._calls) == 0


@pytest.mark.timeout(30)
async def test_not_seen_calls_beyond_the_bound_are_counted_by_tool_in_report_and_text(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(toolscript.host.calls, "MAX_RECORDS", 20)
    # 30 tasks nobody awaits (unread), then 15 errors that are seen.
    code = (
        "import asyncio\n"
        "tasks = [asyncio.create_task(fast(x=i)) for i in range(30)]\n"
        "await asyncio.wait(tasks)\n"
        "more = [asyncio.create_task(fast(x=i)) for i in range(30, 40)]\n"
        "await asyncio.wait(more)\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    calls = result.calls
    assert calls.made == 40 and calls.by_fate == {"unread": 40}
    assert len(calls.records) == 20 and calls.unlisted == {"fast": 20}
    assert calls.unlisted_not_seen == {"fast": 20}
    named = [line for line in result.text.splitlines() if line.startswith("- fast(")]
    assert len(named) == 10
    assert all("unread" in line for line in named)
    assert "- and more, not named here: fast ×30" in result.text
    assert "calls: 40 made (40 unread)" in result.text


@pytest.mark.timeout(30)
async def test_the_text_names_ten_not_seen_calls_and_counts_the_rest_by_tool(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio\n"
        "tasks = [asyncio.create_task(fast(x=i)) for i in range(12)]\n"
        "tasks += [asyncio.create_task(fails(x=i)) for i in range(3)]\n"
        "await asyncio.wait(tasks)\n"
        "seen = await fast(x=99)\n"
        "[task.exception() for task in tasks[12:]] and None\n"
    )
    result = await runtime.run(code)
    assert result.status == "ok", result.text
    calls = result.calls
    assert calls.made == 16 and calls.by_fate == {"seen": 4, "unread": 12}
    lines = result.text.splitlines()
    assert "calls: 16 made (4 seen, 12 unread)" in lines
    named = [line for line in lines if line.startswith("- fast(")]
    assert len(named) == 10 and all("unread" in line for line in named)
    assert "- and more, not named here: fast ×2" in lines
    assert not any("fast(x=99)" in line or "fails(" in line for line in lines)
    dict_records = result.to_dict()["calls"]["records"]
    assert [r["fate"] for r in dict_records].count("unread") == 12
    assert {(r["tool"], r["fate"]) for r in dict_records} == {
        ("fast", "unread"),
        ("fast", "seen"),
        ("fails", "seen"),
    }
    assert all(set(r) >= RECORD_FIELDS for r in dict_records)
    as_dict = result.to_dict()
    assert as_dict["calls"] == calls.to_dict()
    assert json.loads(json.dumps(as_dict))["calls"] == as_dict["calls"]
    assert as_dict["calls"]["by_fate"] == {"seen": 4, "unread": 12}


def _echo_tool(received: list[int]) -> Any:
    @tool
    async def echo(value: Any) -> str:
        """Take any value; answer with its size when it is a string."""
        received.append(len(value) if isinstance(value, str) else -1)
        return f"got {len(value) if isinstance(value, str) else type(value).__name__}"

    return echo


@pytest.mark.timeout(30)
async def test_a_100000_level_nested_argument_is_refused_with_a_short_brief_and_the_host_stays_up(
    make_runtime: MakeRuntime,
) -> None:
    # JSON cannot carry 100,000 levels (the encoder's recursion bound): the kernel refuses
    # the call with a brief of the argument, without sending anything.
    received: list[int] = []
    runtime = await make_runtime(tools=[_echo_tool(received)])
    code = (
        "import time\n"
        "deep = []\n"
        "for _ in range(100_000):\n"
        "    deep = [deep]\n"
        "started = time.perf_counter()\n"
        "try:\n"
        "    await echo(value=deep)\n"
        "except ToolError as error:\n"
        "    print('refused:', error)\n"
        "print('seconds:', time.perf_counter() - started)\n"
    )
    started = time.monotonic()
    result = await runtime.run(code)
    assert time.monotonic() - started < 10
    assert result.status == "ok", result.text
    assert "refused: echo: the call was not sent" in result.stdout
    assert "RecursionError" in result.stdout
    seconds = float(result.stdout.split("seconds:")[1])
    assert seconds < 1.0
    assert received == []
    [record] = result.calls.records
    assert (record.fate, record.cause) == ("refused", None)
    assert record.args_brief.startswith("value=[[[[") and len(record.args_brief) <= 130
    after = await runtime.run("await echo(value='still here')")
    assert after.status == "ok" and after.value == "'got 10'", after.text


@pytest.mark.timeout(30)
async def test_a_50_mb_argument_goes_through_with_a_short_brief_and_the_host_stays_up(
    make_runtime: MakeRuntime,
) -> None:
    received: list[int] = []
    runtime = await make_runtime(tools=[_echo_tool(received)])
    started = time.monotonic()
    result = await runtime.run(
        "import asyncio\n"
        "task = asyncio.create_task(echo(value='x' * 50_000_000))\n"
        "await asyncio.wait([task])\n"
    )
    assert time.monotonic() - started < 15
    assert result.status == "ok", result.text
    assert received == [50_000_000]
    [record] = result.calls.records
    assert record.fate == "unread"
    assert record.args_brief.startswith("value='xxxx") and "50,000,000" in record.args_brief
    assert len(record.args_brief) <= 130
    assert record.answer_brief == "'got 50000000'"
    line = [line for line in result.text.splitlines() if line.startswith("- echo(")]
    assert len(line) == 1 and len(line[0]) < 400
    other = await runtime.shell("other").run("await echo(value='ok')")
    assert other.status == "ok" and other.value == "'got 2'", other.text


@pytest.mark.timeout(60)
async def test_calls_not_seen_after_the_first_1000_are_still_named_in_the_text(
    runtime: Runtime, desk: Desk
) -> None:
    code = (
        "import asyncio\n"
        "await asyncio.gather(*(fast(x=i) for i in range(1100)))\n"
        "left = [asyncio.create_task(fast(x=5000 + i)) for i in range(12)]\n"
        "await asyncio.wait(left)\n"  # answered, and no code takes the answers
    )
    result = await runtime.run(code, time_limit=50)
    assert result.status == "ok", result.text
    calls = result.calls
    assert calls.by_fate == {"seen": 1100, "unread": 12}
    assert len(calls.records) == 1000
    assert sorted(r.args_brief for r in calls.not_seen) == sorted(
        f"x={5000 + i}" for i in range(12)
    )
    assert calls.unlisted == {"fast": 112} and calls.unlisted_not_seen == {}
    named = [line for line in result.text.splitlines() if line.startswith("- fast(x=50")]
    assert len(named) == 10 and all("unread" in line for line in named)
    # The 112 unlisted calls were seen: only the two unread ones past the ten named are told.
    assert "\n- and more, not named here: fast ×2\n" in result.text, result.text
