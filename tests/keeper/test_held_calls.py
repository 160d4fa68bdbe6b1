"""Every call a killed host held gets exactly one truthful answer from the next host: a call
never read is dispatched as usual, a call read but not answered is in doubt, made again only
when its tool says a repeat is safe (docs/design.md: the keeper)."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import GRACE, SANDBOX, wait_for_file
from toolscript import Runtime

from .conftest import WAIT, Hosts, gate, open_gate, signal_file
from .tools import count, effect_tools


def _runtime(hosts: Hosts) -> Runtime:
    return Runtime(
        tools=effect_tools(str(hosts.shared), hold=False),
        state_dir=hosts.state_dir,
        keep_interpreters=True,
        sandbox=SANDBOX,
        mounts={str(hosts.shared): "rw"},
        pool_size=0,
        grace=GRACE,
    )


_CATCH = (
    "try:\n"
    "    outcome = await {call}\n"
    "except ToolError as error:\n"
    "    outcome = ('ToolError', error.cause, str(error))\n"
    "outcome\n"
)


@pytest.mark.timeout(90)
async def test_a_call_in_doubt_is_not_made_again_and_reaches_the_script_as_in_doubt(
    hosts: Hosts,
) -> None:
    code = _CATCH.format(call="transfer(key='t1')")
    host = await hosts.start([["main", "x = 1", 30, True], ["main", code, 30, False]])
    await host.line("kernel")
    await wait_for_file(hosts.shared / "entered-t1", WAIT)  # read, effect done, no answer
    await host.kill()

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value is not None and "'ToolError', 'in_doubt'" in result.value
        assert "may have taken effect" in result.value
        [record] = result.calls.records
        assert (record.tool, record.fate, record.cause) == ("transfer", "pending", "in_doubt")
        [uncertain] = rt.journal.uncertain()
        assert (uncertain.tool, uncertain.uncertain_reason) == ("transfer", "in_doubt")
        assert uncertain.call_id == record.id
        again = await rt.shell("main").run("x")
        assert (again.status, again.value) == ("ok", "1"), again.text
    assert len(count(hosts.shared, "effects", "transfer", "t1")) == 1
    assert len(count(hosts.shared, "attempts", "transfer", "t1")) == 1


@pytest.mark.timeout(90)
async def test_an_idempotent_call_in_doubt_is_made_again_with_the_same_key_and_takes_effect_once(
    hosts: Hosts,
) -> None:
    code = _CATCH.format(call="put(key='p1')")
    host = await hosts.start([["main", "x = 1", 30, True], ["main", code, 30, False]])
    await host.line("kernel")
    await wait_for_file(hosts.shared / "entered-p1", WAIT)
    await host.kill()

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and (result.status, result.value) == ("ok", "'put p1'"), (
            result and result.text
        )
        [record] = result.calls.records
        assert (record.tool, record.fate) == ("put", "seen")
        assert rt.journal.uncertain() == []
    attempts = count(hosts.shared, "attempts", "put", "p1")
    assert len(attempts) == 2 and attempts[0] == attempts[1], attempts
    assert attempts[0].startswith(result.script_id)
    assert count(hosts.shared, "effects", "put", "p1") == attempts[:1]


@pytest.mark.timeout(90)
async def test_a_call_the_killed_host_never_read_is_dispatched_once_by_the_next(
    hosts: Hosts,
) -> None:
    code = signal_file(hosts, "started") + gate(hosts, "go") + "await record(key='r1')\n"
    host = await hosts.start([["main", "x = 1", 30, True], ["main", code, 30, False]])
    await host.line("kernel")
    await wait_for_file(hosts.shared / "started", WAIT)
    await host.kill()
    await open_gate(hosts, "go")  # the call is made while no host is attached

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and (result.status, result.value) == ("ok", "'recorded r1'"), (
            result and result.text
        )
        assert [r.fate for r in result.calls.records] == ["seen"]
        assert rt.journal.uncertain() == []
    assert len(count(hosts.shared, "effects", "record", "r1")) == 1
