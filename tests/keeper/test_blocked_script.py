"""A script that blocks its interpreter's main thread (a FIFO read) when its host is killed and
when the next host takes its shell back: the kernel cannot answer `held` until the script lets
go, and taking shells back never waits for that (docs/design.md: the keeper)."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import wait_for_file
from toolscript import Runtime

from .conftest import WAIT, Hosts, gate, interruptible, open_gate, signal_file
from .tools import count, effect_tools


def _runtime(hosts: Hosts) -> Runtime:
    # A bound on the answer to `held` longer than any wait of these tests: a host that waited
    # for a blocked script's answer before it went on would fail them on that bound.
    return hosts.runtime(tools=effect_tools(str(hosts.shared), hold=False), start_timeout=3 * WAIT)


async def _started(hosts: Hosts) -> Runtime:
    """A runtime on the state directory, started within `WAIT` (or closed, and the test fails)."""
    rt = _runtime(hosts)
    try:
        await asyncio.wait_for(rt.start(), WAIT)
    except BaseException:
        await asyncio.wait_for(rt.aclose(), WAIT)
        raise
    return rt


@pytest.mark.timeout(150)
async def test_a_script_blocked_through_two_restarts_holds_up_no_shell_and_finishes_ok_once(
    hosts: Hosts,
) -> None:
    code = signal_file(hosts, "started") + gate(hosts, "go") + "print('went on')\nx + 1\n"
    first = await hosts.start(
        [
            ["other", "y = 1", 30, True],
            ["main", "x = 41", 30, True],
            ["main", code, 90, False],
        ]
    )
    await first.line("kernel")
    await first.line("kernel")
    await wait_for_file(hosts.shared / "started", WAIT)
    await first.kill()  # the script is blocked on the FIFO: its kernel reads nothing

    # The next host takes both shells back and runs a script in the other one while this
    # one still blocks; it asks the kernel what it holds, and dies before any answer.
    second = await hosts.start([["other", "y + 1", 30, True]], start_timeout=3 * WAIT)
    await second.line("kernel")
    assert second.results["other"][0::2] == ("ok", "2"), second.results
    await second.kill()

    async with await _started(hosts) as rt:
        other = await asyncio.wait_for(rt.shell("other").run("y + 2"), WAIT)
        assert (other.status, other.value, other.generation) == ("ok", "3", 1), other.text
        assert rt.shell("main").busy

        await open_gate(hosts, "go")
        recovered = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert recovered is not None
        assert (recovered.status, recovered.value) == ("ok", "42"), recovered.text
        assert "went on" in recovered.stdout
        after = await asyncio.wait_for(rt.shell("main").run("x"), WAIT)
        assert (after.status, after.value, after.generation) == ("ok", "41", 1), after.text
        ended = [s for s in rt.journal.scripts(shell="main") if s.script_id == recovered.script_id]
        assert [s.status for s in ended] == ["ok"]


@pytest.mark.timeout(120)
async def test_a_call_held_by_a_thread_of_a_blocked_script_is_answered_in_doubt_once_it_lets_go(
    hosts: Hosts,
) -> None:
    # The thread's call is read by the killed host, which records its effect and never
    # answers; the script's main thread is blocked on a FIFO when that host dies and when
    # the next one takes the shell back.
    code = (
        "import asyncio, threading\n"
        "box = {}\n"
        "def worker():\n"
        "    try:\n"
        "        box['outcome'] = asyncio.run(transfer(key='t2'))\n"
        "    except ToolError as error:\n"
        "        box['outcome'] = ('ToolError', error.cause)\n"
        "thread = threading.Thread(target=worker)\n"
        "thread.start()\n"
        f"await asyncio.to_thread(lambda: {gate(hosts, 'called').strip()})\n"
        + signal_file(hosts, "blocking")
        + gate(hosts, "go")
        + "await asyncio.to_thread(thread.join)\n"
        "box['outcome']\n"
    )
    host = await hosts.start([["main", "x = 1", 30, True], ["main", code, 60, False]])
    await host.line("kernel")
    await wait_for_file(hosts.shared / "entered-t2", WAIT)  # read, effect done, no answer
    await open_gate(hosts, "called")
    await wait_for_file(hosts.shared / "blocking", WAIT)
    await host.kill()

    async with await _started(hosts) as rt:
        assert rt.shell("main").busy
        await open_gate(hosts, "go")
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value == "('ToolError', 'in_doubt')", result.text
        [record] = result.calls.records
        assert (record.tool, record.fate, record.cause) == ("transfer", "pending", "in_doubt")
        [uncertain] = rt.journal.uncertain()
        assert (uncertain.call_id, uncertain.uncertain_reason) == (record.id, "in_doubt")
    assert len(count(hosts.shared, "effects", "transfer", "t2")) == 1
    assert len(count(hosts.shared, "attempts", "transfer", "t2")) == 1


@pytest.mark.timeout(120)
async def test_a_blocked_script_whose_time_limit_passes_is_stopped_as_usual(
    hosts: Hosts,
) -> None:
    # Its gate never opens. The limit passes after the next host has taken the shell back,
    # as a rule (or, on a slow machine, while no host is attached: the keeper stops it
    # then, and the result is the same).
    code = signal_file(hosts, "started") + gate(hosts, "never") + "x = 2\n"
    await hosts.kill_when("started", code, 6.0)

    async with await _started(hosts) as rt:
        recovered = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert recovered is not None and recovered.status == "time_limit", recovered.text
        assert "variables are kept" in recovered.note, recovered.text
        after = await asyncio.wait_for(rt.shell("main").run("x"), WAIT)
        assert (after.status, after.value, after.generation) == ("ok", "1", 1), after.text
        ended = [s for s in rt.journal.scripts(shell="main") if s.script_id == recovered.script_id]
        assert [s.status for s in ended] == ["time_limit"]


@pytest.mark.timeout(120)
async def test_a_blocked_script_whose_time_limit_passes_while_no_host_is_attached_is_stopped(
    hosts: Hosts,
) -> None:
    stopped = hosts.shared / "stopped"
    code = interruptible(hosts, gate(hosts, "never"))
    # The host is killed as soon as the script has started, well within its limit.
    await hosts.kill_when("started", code, 3.0)
    await wait_for_file(stopped, WAIT)  # no host is attached: only the keeper can stop it

    async with await _started(hosts) as rt:
        recovered = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert recovered is not None and recovered.status == "time_limit", recovered.text
        after = await asyncio.wait_for(rt.shell("main").run("x"), WAIT)
        assert (after.status, after.value, after.generation) == ("ok", "1", 1), after.text
