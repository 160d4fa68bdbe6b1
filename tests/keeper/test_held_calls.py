"""Every call a killed host held gets exactly one truthful answer from the next host: a call
never read is dispatched as usual, a call answered but whose answer was never sent gets that
answer from the journal, a call read but not answered is in doubt, made again only when its
tool says a repeat is safe (docs/design.md: the keeper)."""

from __future__ import annotations

import asyncio
import signal

import pytest

from tests.conftest import wait_for_file
from toolscript import Runtime
from toolscript.host.journal import ANSWER_KEPT

from .conftest import WAIT, Hosts, gate, open_gate, signal_file
from .tools import count, effect_tools


def _runtime(hosts: Hosts) -> Runtime:
    return hosts.runtime(tools=effect_tools(str(hosts.shared), hold=False))


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
    await hosts.kill_when("entered-t1", code, 30)

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
async def test_the_recovered_result_lists_the_calls_a_killed_host_answered_with_their_fates(
    hosts: Hosts,
) -> None:
    # `record` answered, and the script read it, under the killed host; `transfer` was held.
    # The result of the script, concluded by the next host, must list both, and the journal
    # must leave neither in flight.
    code = (
        "import asyncio\n"
        "first = await record(key='r1')\n"
        "both = await asyncio.gather(record(key='r2'), transfer(key='t1'), "
        "return_exceptions=True)\n"
        "first, [str(item)[:20] for item in both]\n"
    )
    await hosts.kill_when("entered-t1", code, 30)

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        fates = {
            (record.tool, record.args_brief): (record.fate, record.cause)
            for record in result.calls.records
        }
        assert fates == {
            ("record", "key='r1'"): ("seen", None),
            ("record", "key='r2'"): ("seen", None),
            ("transfer", "key='t1'"): ("pending", "in_doubt"),
        }, result.text
        assert result.calls.made == 3
        journaled = {call.args_brief: call.fate for call in rt.journal.calls(result.script_id)}
        assert journaled == {"key='r1'": "seen", "key='r2'": "seen", "key='t1'": "pending"}


@pytest.mark.timeout(90)
async def test_a_call_in_flight_when_the_keeper_stopped_the_script_is_in_its_recovered_result(
    hosts: Hosts,
) -> None:
    # The script's time limit passes while no host is attached: the keeper stops it, and the
    # call it was waiting on, made under the killed host, is reported by the next.
    stopped = hosts.shared / "stopped"
    code = f"try:\n    await transfer(key='t1')\nfinally:\n    open({str(stopped)!r}, 'w')\n"
    await hosts.kill_when("entered-t1", code, 1.0)
    await wait_for_file(stopped, WAIT)

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "time_limit", result and result.text
        [record] = result.calls.records
        assert (record.tool, record.fate) == ("transfer", "pending"), result.text
        assert [call.call_id for call in rt.journal.uncertain()] == [record.id]
    assert len(count(hosts.shared, "effects", "transfer", "t1")) == 1


@pytest.mark.timeout(90)
async def test_with_a_journal_in_memory_a_held_call_is_in_doubt_not_made_again(
    hosts: Hosts,
) -> None:
    # The next host's journal began with it: a call missing from it may well have been
    # dispatched by the host before, whose journal died with it.
    code = _CATCH.format(call="transfer(key='t1')")
    await hosts.kill_when("entered-t1", code, 30, journal=":memory:")

    async with hosts.runtime(
        tools=effect_tools(str(hosts.shared), hold=False), journal=":memory:"
    ) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value is not None and "'ToolError', 'in_doubt'" in result.value
        assert "journal is in memory" in result.value
        [record] = result.calls.records
        assert (record.tool, record.fate, record.cause) == ("transfer", "pending", "in_doubt")
    assert len(count(hosts.shared, "effects", "transfer", "t1")) == 1
    assert len(count(hosts.shared, "attempts", "transfer", "t1")) == 1


@pytest.mark.timeout(90)
async def test_an_idempotent_call_in_doubt_is_made_again_with_the_same_key_and_takes_effect_once(
    hosts: Hosts,
) -> None:
    code = _CATCH.format(call="put(key='p1')")
    await hosts.kill_when("entered-p1", code, 30)

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and (result.status, result.value) == ("ok", "'put p1'"), (
            result and result.text
        )
        [record] = result.calls.records
        assert (record.tool, record.fate) == ("put", "seen")
        assert rt.journal.uncertain() == []
        [journaled] = rt.journal.calls(result.script_id)
    attempts = count(hosts.shared, "attempts", "put", "p1")
    assert len(attempts) == 2 and attempts[0] == attempts[1], attempts
    assert attempts[0].startswith(result.script_id)
    assert journaled.idempotency_key == attempts[0]  # the journal says which key it was
    assert count(hosts.shared, "effects", "put", "p1") == attempts[:1]


@pytest.mark.timeout(90)
async def test_a_call_the_killed_host_never_read_is_dispatched_once_by_the_next(
    hosts: Hosts,
) -> None:
    code = signal_file(hosts, "started") + gate(hosts, "go") + "await record(key='r1')\n"
    await hosts.kill_when("started", code, 30)
    await open_gate(hosts, "go")  # the call is made while no host is attached

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and (result.status, result.value) == ("ok", "'recorded r1'"), (
            result and result.text
        )
        assert [r.fate for r in result.calls.records] == ["seen"]
        assert rt.journal.uncertain() == []
    assert len(count(hosts.shared, "effects", "record", "r1")) == 1


async def _journal_an_answer_and_die(hosts: Hosts, call: str) -> None:
    """A host runs `call` in a script, journals its answer, and is killed before sending it."""
    code = _CATCH.format(call=call)
    host = await hosts.start(
        [["main", "x = 1", 30, True], ["main", code, 30, False]], die_at=["answer_journaled", 1]
    )
    await host.line("kernel")
    assert await asyncio.wait_for(host.process.wait(), WAIT) == -signal.SIGKILL


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("key", "outcome", "is_error"),
    [
        ("a1", "{'key': 'a1', 'balance': 12.5, 'tags': ['new', None], 'note': ''}", False),
        ("taken-a2", repr(("ToolError", None, "KeyError: 'taken-a2 is taken'")), True),
    ],
    ids=["value", "tool_error"],
)
async def test_an_answer_the_killed_host_journaled_but_never_sent_reaches_the_script_as_it_was(
    hosts: Hosts, key: str, outcome: str, is_error: bool
) -> None:
    await _journal_an_answer_and_die(hosts, f"open_account(key={key!r})")

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value == outcome
        [record] = result.calls.records
        assert (record.tool, record.fate, record.is_error) == ("open_account", "seen", is_error)
        assert record.answered_from_journal
        [journaled] = rt.journal.calls(result.script_id)
        assert (journaled.call_id, journaled.fate) == (record.id, "seen")
        assert rt.journal.uncertain() == []
        again = await rt.shell("main").run("x")
        assert again.value == "1", again.text
        # What the script would have seen had the host not been killed:
        unbroken = await rt.shell("main").run(_CATCH.format(call=f"open_account(key='{key}-b')"))
        assert unbroken.value == outcome.replace(key, f"{key}-b")
    assert len(count(hosts.shared, "effects", "open_account", key)) == 1


@pytest.mark.timeout(90)
async def test_a_call_whose_seen_the_killed_host_read_and_never_recorded_is_reported_seen(
    hosts: Hosts,
) -> None:
    # The script's end flushes the kernel's word that code took the answer, then its `done`:
    # the host reads the first and dies before it records it.
    code = "account = await open_account(key='s1')\naccount['key']\n"
    host = await hosts.start(
        [["main", "x = 1", 30, True], ["main", code, 30, False]], die_at=["seen_read", 1]
    )
    await host.line("kernel")
    assert await asyncio.wait_for(host.process.wait(), WAIT) == -signal.SIGKILL

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value == "'s1'"
        [record] = result.calls.records
        assert (record.tool, record.fate) == ("open_account", "seen"), result.text
        [journaled] = rt.journal.calls(result.script_id)
        assert journaled.fate == "seen"
        assert rt.journal.uncertain() == []
    assert len(count(hosts.shared, "effects", "open_account", "s1")) == 1


@pytest.mark.timeout(90)
async def test_an_answer_the_killed_host_sent_and_never_journaled_is_taken_as_the_kernel_says(
    hosts: Hosts,
) -> None:
    # The journal has the call and no answer; the kernel has the answer, and the script takes
    # it only after the next host took the kernel back. Its word that the answer arrived is
    # all there is to go on: no protocol violation, and the call is seen.
    code = (
        "import asyncio\n"
        "task = asyncio.ensure_future(record(key='s2'))\n"
        "await asyncio.sleep(0)  # the call goes out\n"
        + signal_file(hosts, "waiting")
        + gate(hosts, "go")
        + "await asyncio.sleep(0.5)  # the next host takes the kernel back meanwhile\n"
        "await task\n"
    )
    host = await hosts.start(
        [["main", "x = 1", 30, True], ["main", code, 30, False]], die_at=["answer_sent", 1]
    )
    await host.line("kernel")
    assert await asyncio.wait_for(host.process.wait(), WAIT) == -signal.SIGKILL
    await wait_for_file(hosts.shared / "waiting", WAIT)

    async with _runtime(hosts) as rt:
        await open_gate(hosts, "go")
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value == "'recorded s2'", result.text
        [record] = result.calls.records
        assert (record.tool, record.fate) == ("record", "seen"), result.text
        again = await rt.shell("main").run("x")
        assert (again.value, again.generation) == ("1", result.generation), again.text
    assert len(count(hosts.shared, "effects", "record", "s2")) == 1


@pytest.mark.timeout(90)
async def test_a_held_call_the_script_gave_up_on_while_no_host_was_attached_keeps_its_cause(
    hosts: Hosts,
) -> None:
    # The kernel's word that the code stopped waiting goes out while no host is attached;
    # the next host reads it before it knows of the call, and hears it again in `holding`.
    code = (
        "import asyncio\n"
        "task = asyncio.ensure_future(transfer(key='w1'))\n"
        "await asyncio.sleep(0)  # the call goes out\n" + gate(hosts, "go") + "task.cancel()\n"
        "try:\n"
        "    await task\n"
        "except asyncio.CancelledError:\n"
        "    pass\n"
        "'gave up'\n"
    )
    await hosts.kill_when("entered-w1", code, 30)  # held by the host, then killed
    await open_gate(hosts, "go")

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.value == "'gave up'", result and result.text
        [record] = result.calls.records
        assert (record.tool, record.fate, record.cause) == ("transfer", "pending", "cancelled")
    assert len(count(hosts.shared, "effects", "transfer", "w1")) == 1


@pytest.mark.timeout(90)
async def test_an_answer_too_large_for_the_journal_to_keep_reaches_the_script_as_an_error_saying_so(
    hosts: Hosts,
) -> None:
    await _journal_an_answer_and_die(hosts, f"open_account(key='a3', padding={ANSWER_KEPT})")

    async with _runtime(hosts) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value is not None and result.value.startswith("('ToolError', None, ")
        assert "too large for the journal to keep (over 1 MiB)" in result.value
        start = await rt.shell("main").run("outcome[2].split('it kept only its start: ')[1][:22]")
        assert start.value == repr("key='a3', balance=12.5"), start.text
        [record] = result.calls.records
        assert (record.fate, record.is_error, record.answered_from_journal) == ("seen", True, True)
    assert len(count(hosts.shared, "effects", "open_account", "a3")) == 1


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "call", ["transfer(key='g1')", "put(key='g1')"], ids=["plain", "idempotent"]
)
async def test_a_call_in_doubt_whose_tool_the_next_host_lacks_stays_in_doubt_not_refused(
    hosts: Hosts, call: str
) -> None:
    # Refused would say it never ran; it ran, and the next host cannot make it again.
    tool = call.partition("(")[0]
    await hosts.kill_when("entered-g1", _CATCH.format(call=call), 30)

    async with hosts.runtime(tools=[]) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value is not None and "'ToolError', 'in_doubt'" in result.value
        assert "may have taken effect" in result.value
        assert f"could not be made again on this host (there is no tool '{tool}')" in result.value
        [record] = result.calls.records
        assert (record.tool, record.fate, record.cause) == (tool, "pending", "in_doubt")
        [uncertain] = rt.journal.uncertain()
        assert (uncertain.tool, uncertain.call_id) == (tool, record.id)
    assert len(count(hosts.shared, "attempts", tool, "g1")) == 1
    assert len(count(hosts.shared, "effects", tool, "g1")) == 1


@pytest.mark.timeout(90)
async def test_an_answer_journaled_for_a_tool_the_next_host_lacks_still_reaches_the_script(
    hosts: Hosts,
) -> None:
    await _journal_an_answer_and_die(hosts, "open_account(key='a4')")

    async with hosts.runtime(tools=[]) as rt:
        result = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert result is not None and result.status == "ok", result and result.text
        assert result.value == "{'key': 'a4', 'balance': 12.5, 'tags': ['new', None], 'note': ''}"
        [record] = result.calls.records
        assert (record.fate, record.answered_from_journal) == ("seen", True)
        assert rt.journal.uncertain() == []
    assert len(count(hosts.shared, "effects", "open_account", "a4")) == 1
