"""Many shells at once: every call of every shell settled and accounted for."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import MakeRuntime
from toolscript import tool

answered: list[int] = []


@tool
async def record(shell: int, i: int) -> int:
    """Remember one call and answer its number."""
    answered.append(shell * 1000 + i)
    await asyncio.sleep(0)
    return i


@pytest.mark.timeout(180)
async def test_fifty_shells_each_making_a_hundred_calls_all_settle_with_every_call_accounted_for(
    make_runtime: MakeRuntime,
) -> None:
    answered.clear()
    rt = await make_runtime(record, max_interpreters=60, pool_size=4, start_timeout=60)
    code = (
        "import asyncio\n"
        "firsts = await asyncio.gather(*[record(shell={n}, i=i) for i in range(50)])\n"
        "rest = [await record(shell={n}, i=i) for i in range(50, 100)]\n"
        "sum(firsts) + sum(rest)"
    )
    results = await asyncio.gather(
        *(rt.shell(f"s{n}").run(code.format(n=n), time_limit=120) for n in range(50))
    )
    for n, result in enumerate(results):
        assert result.status == "ok", (n, result.text)
        assert result.value == str(sum(range(100)))
        assert result.calls.made == 100
        assert result.calls.by_fate == {"seen": 100}
        assert len(result.calls.records) == 100
        assert {record.fate for record in result.calls.records} == {"seen"}
    assert sorted(answered) == sorted(n * 1000 + i for n in range(50) for i in range(100))
    journaled = rt.journal.calls()
    assert len(journaled) == 5000
    assert {call.fate for call in journaled} == {"seen"}
    assert rt.journal.uncertain() == []
