"""finish and block end the turn only with every result of the turn in view."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .fake_runtime import FakeRuntime
from .helpers import agent_for, said_to_model
from .standins import Reply, StandIn

pytestmark = pytest.mark.timeout(20)


async def test_finish_is_refused_while_a_background_script_runs_then_accepted_once_its_result_was_seen(
    standin: StandIn, fake: FakeRuntime
) -> None:
    gate = asyncio.Event()
    fake.the_shell.gate("await deploy()", gate, text="deployed v2")

    async def release_after_the_refusal(body: dict[str, Any]) -> Reply:
        sent = said_to_model(body)
        assert "finish was refused" in sent
        assert "Still running, so their effects may still come: background script s1" in sent
        gate.set()
        await asyncio.wait_for(fake.the_shell.handles[0].done.wait(), 5)
        return Reply(
            text="The deploy is still going; I'll check.",
            calls=[("run_python", {"code": "print('checking')"})],
        )

    def finish_once_the_result_is_in(body: dict[str, Any]) -> Reply:
        sent = said_to_model(body)
        assert "Background script s1 ended." in sent
        assert "deployed v2" in sent
        return Reply(calls=[("finish", {"summary": "deployed"})])

    standin.queue(
        Reply(calls=[("run_python", {"code": "await deploy()", "background": True})]),
        Reply(calls=[("finish", {"summary": "too early"})]),
        release_after_the_refusal,
        finish_once_the_result_is_in,
    )
    agent = agent_for(standin, fake, terminal_wait=0.2)

    turn = await agent.run("deploy")

    assert (turn.stop_reason, turn.steps, turn.summary) == ("end_turn", 4, "deployed")
    assert fake.the_shell.runs[0] == ("await deploy()", 60.0, True)
    refusals = [e for e in turn.transcript if e.get("event") == "terminal_refused"]
    assert len(refusals) == 1


async def test_finish_right_after_a_background_script_ended_is_refused_until_its_result_is_read(
    standin: StandIn, fake: FakeRuntime
) -> None:
    gate = asyncio.Event()
    fake.the_shell.gate("await migrate()", gate, text="migrated 3 tables")

    async def finish_after_the_script_ended(body: dict[str, Any]) -> Reply:
        gate.set()
        await asyncio.wait_for(fake.the_shell.handles[0].done.wait(), 5)
        return Reply(calls=[("finish", {"summary": "migrated"})])

    def finish_again(body: dict[str, Any]) -> Reply:
        sent = said_to_model(body)
        assert "Returned since you last looked" in sent
        assert "migrated 3 tables" in sent
        return Reply(calls=[("finish", {"summary": "migrated, result read"})])

    standin.queue(
        Reply(calls=[("run_python", {"code": "await migrate()", "background": True})]),
        finish_after_the_script_ended,
        finish_again,
    )
    agent = agent_for(standin, fake)

    turn = await agent.run("migrate")

    assert (turn.stop_reason, turn.steps) == ("end_turn", 3)
    assert turn.summary == "migrated, result read"


async def test_finish_in_the_same_reply_as_a_script_is_refused_because_its_result_is_unread(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"code": "delete_rows()"}), ("finish", {"summary": "done"})]),
        Reply(calls=[("finish", {"summary": "done, checked"})]),
    )
    agent = agent_for(standin, fake)

    turn = await agent.run("clean up")

    assert (turn.stop_reason, turn.steps, turn.summary) == ("end_turn", 2, "done, checked")
    sent = said_to_model(standin.requests[1])
    assert "finish was refused" in sent
    assert "ran 'delete_rows()'" in sent


async def test_a_background_script_that_ends_reaches_the_model_at_the_next_step(
    standin: StandIn, fake: FakeRuntime
) -> None:
    gate = asyncio.Event()
    fake.the_shell.gate("await crawl()", gate, text="crawled 12 pages")

    async def end_the_script(body: dict[str, Any]) -> Reply:
        assert "Started background script s1" in said_to_model(body)
        gate.set()
        await asyncio.wait_for(fake.the_shell.handles[0].done.wait(), 5)
        return Reply(calls=[("run_python", {"code": "x = 1"})])

    standin.queue(
        Reply(calls=[("run_python", {"code": "await crawl()", "background": True})]),
        end_the_script,
        Reply(text="Read it."),
    )
    agent = agent_for(standin, fake)

    turn = await agent.run("crawl")

    assert turn.stop_reason == "end_turn"
    last = standin.requests[2]["messages"][-1]
    note = "Background script s1 ended.\nexit 0 · ok\ncrawled 12 pages"
    if standin.provider == "anthropic":
        assert last["role"] == "user"
        assert last["content"][0]["type"] == "tool_result"
        assert last["content"][-1] == {"type": "text", "text": note}
    else:
        assert last == {"role": "user", "content": note}


async def test_cancel_script_stops_a_background_script_and_shows_its_result(
    standin: StandIn, fake: FakeRuntime
) -> None:
    fake.the_shell.gate("await forever()", asyncio.Event())
    standin.queue(
        Reply(calls=[("run_python", {"code": "await forever()", "background": True})]),
        Reply(calls=[("cancel_script", {"script_id": "s1"})]),
        Reply(calls=[("finish", {"summary": "cancelled it"})]),
    )
    agent = agent_for(standin, fake)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.summary) == ("end_turn", "cancelled it")
    assert "cancelled by the caller" in said_to_model(standin.requests[2])


async def test_a_background_script_still_running_when_the_turn_ends_is_cancelled_and_said(
    standin: StandIn, fake: FakeRuntime
) -> None:
    fake.the_shell.gate("await forever()", asyncio.Event())
    standin.queue(
        Reply(calls=[("run_python", {"code": "await forever()", "background": True})]),
        Reply(text="I will stop here."),
    )
    agent = agent_for(standin, fake)

    turn = await agent.run("go")

    assert turn.stop_reason == "end_turn"
    cancelled = [e for e in turn.transcript if e.get("event") == "background_cancelled_at_turn_end"]
    assert [(e["script_id"], e["result"]["status"]) for e in cancelled] == [("s1", "cancelled")]
    assert fake.the_shell.handles[0].status() == "cancelled"
