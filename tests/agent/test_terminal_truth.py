"""Every turn ends with a true stop reason."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from toolscript.agent import AgentEvent

from .fake_runtime import FakeResult, FakeRuntime
from .helpers import agent_for, said_to_model
from .standins import Reply, StandIn

pytestmark = pytest.mark.timeout(20)


@pytest.mark.parametrize("cut", ["abrupt", "clean"])
async def test_a_stream_cut_before_its_terminal_event_ends_truncated_without_running_its_calls(
    standin: StandIn, fake: FakeRuntime, cut: Literal["abrupt", "clean"]
) -> None:
    standin.queue(
        Reply(text="Running it.", calls=[("run_python", {"code": "send_payment()"})], cut=cut)
    )
    agent = agent_for(standin, fake)

    turn = await agent.run("pay")

    assert (turn.stop_reason, turn.steps) == ("truncated", 1)
    assert fake.the_shell.runs == []
    assert turn.error is not None
    assert "ended before its terminal event" in turn.error
    assert "1 tool call(s) were not run: run_python" in turn.error
    assert len(standin.requests) == 1
    partial = [entry for entry in turn.transcript if entry["role"] == "assistant_partial"]
    assert partial[0]["text"] == "Running it."


async def test_an_abort_on_the_first_content_chunk_ends_the_turn_aborted(
    standin: StandIn, fake: FakeRuntime
) -> None:
    never = asyncio.Event()
    standin.queue(Reply(text="Thinking about it", hold=never))
    agent = agent_for(standin, fake)
    task = asyncio.create_task(agent.run("go"))

    await asyncio.wait_for(standin.first_content_sent.wait(), 10)
    task.cancel()
    turn = await asyncio.wait_for(task, 10)

    assert (turn.stop_reason, turn.steps) == ("aborted", 1)
    assert turn.error is not None and "cancelled" in turn.error
    assert not task.cancelled()


async def test_an_abort_after_the_model_ended_its_turn_keeps_end_turn(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(text="All done."))
    cancels: list[bool] = []

    def abort_when_the_reply_is_in(event: AgentEvent) -> None:
        if event.kind == "reply":
            cancels.append(task.cancel())

    agent = agent_for(standin, fake, on_event=abort_when_the_reply_is_in)
    task = asyncio.create_task(agent.run("go"))

    turn = await asyncio.wait_for(task, 10)

    assert cancels == [True]
    assert (turn.stop_reason, turn.error) == ("end_turn", None)


async def test_an_abort_after_a_stream_that_did_not_end_the_turn_is_an_abort(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(calls=[("run_python", {"code": "x = 1"})]), Reply(text="never asked"))
    cancels: list[bool] = []

    def abort_when_the_reply_is_in(event: AgentEvent) -> None:
        if event.kind == "reply":
            cancels.append(task.cancel())

    agent = agent_for(standin, fake, on_event=abort_when_the_reply_is_in)
    task = asyncio.create_task(agent.run("go"))

    turn = await asyncio.wait_for(task, 10)

    assert cancels == [True]
    assert turn.stop_reason == "aborted"
    assert len(standin.requests) <= 2


async def test_an_abort_while_a_script_runs_says_the_script_was_cancelled_with_the_turn(
    standin: StandIn, fake: FakeRuntime
) -> None:
    started = held_script(fake, "work()")
    standin.queue(Reply(calls=[("run_python", {"code": "work()"})]))
    agent = agent_for(standin, fake)
    task = asyncio.create_task(agent.run("go"))

    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    turn = await asyncio.wait_for(task, 10)

    assert turn.stop_reason == "aborted"
    assert turn.error is not None and "while the script of run_python call" in turn.error


async def test_a_lifetime_timeout_ends_a_turn_whose_model_stalls(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(text="Let me think", hold=asyncio.Event()))
    agent = agent_for(standin, fake, request_timeout=30.0, lifetime_timeout=0.5)

    turn = await asyncio.wait_for(agent.run("go"), 10)

    assert (turn.stop_reason, turn.steps) == ("time_limit", 1)
    assert turn.error is not None and "lifetime_timeout (0.5 s)" in turn.error
    assert turn.elapsed < 5


async def test_a_lifetime_timeout_that_passes_during_a_script_stops_the_script_and_the_turn(
    standin: StandIn, fake: FakeRuntime
) -> None:
    fake.the_shell.gate("wait_forever()", asyncio.Event())
    standin.queue(Reply(calls=[("run_python", {"code": "wait_forever()"})]))
    agent = agent_for(standin, fake, lifetime_timeout=1.0)

    turn = await asyncio.wait_for(agent.run("go"), 10)

    assert turn.stop_reason == "time_limit"
    assert turn.error is not None and "passed while the model's run_python call ran" in turn.error
    (_code, limit, _background) = fake.the_shell.runs[0]
    assert limit is not None and limit <= 1.0
    scripts = [entry for entry in turn.transcript if entry["role"] == "script"]
    assert scripts[0]["status"] == "time_limit"
    assert len(standin.requests) == 1


async def test_a_request_timeout_ends_the_turn_without_a_retry(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(text="Let me think", hold=asyncio.Event()))
    agent = agent_for(standin, fake, request_timeout=0.5, lifetime_timeout=30.0)

    turn = await asyncio.wait_for(agent.run("go"), 10)

    assert (turn.stop_reason, turn.steps) == ("time_limit", 1)
    assert turn.error is not None and "request_timeout (0.5 s)" in turn.error
    assert len(standin.requests) == 1


async def test_a_rate_limit_before_any_output_is_retried(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(status=429, retry_after="0"), Reply(text="Here."))
    agent = agent_for(standin, fake)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("end_turn", 1)
    assert len(standin.requests) == 2
    assert [e["event"] for e in turn.transcript if e["role"] == "loop"] == ["retry"]


async def test_an_error_after_output_streamed_is_not_retried(
    standin: StandIn, fake: FakeRuntime
) -> None:
    error_type = "overloaded_error" if standin.provider == "anthropic" else "server_error"
    standin.queue(Reply(text="Partial answer", error_type=error_type), Reply(text="never"))
    agent = agent_for(standin, fake)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("error", 1)
    assert len(standin.requests) == 1
    # Said as what it was: an error inside an answer, not the answer's status (200).
    assert turn.error is not None and "error in the stream" in turn.error, turn.error
    assert "200" not in turn.error


async def test_a_request_the_api_refuses_is_not_retried(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(status=400), Reply(text="never"))
    agent = agent_for(standin, fake)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("error", 1)
    assert turn.error is not None and "400" in turn.error
    assert len(standin.requests) == 1


async def test_the_step_cap_ends_the_turn_before_the_next_request(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(calls=[("run_python", {"code": "x = 1"})]), Reply(text="never"))
    agent = agent_for(standin, fake, max_steps=1)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("step_cap", 1)
    assert len(standin.requests) == 1
    unsent = [e for e in turn.transcript if e["role"] == "tool_results"]
    assert unsent[0]["sent"] is False
    assert "ran 'x = 1'" in unsent[0]["results"][0]["text"]
    assert "ran 'x = 1'" not in said_to_model(standin.requests[0])


async def test_an_abort_mid_reply_says_which_of_its_calls_were_not_run(
    standin: StandIn, fake: FakeRuntime
) -> None:
    # Three scripts and a finish in one reply; the turn is aborted while the second runs.
    # As a lifetime's stop does, the record names the third and the finish as not run.
    started = held_script(fake, "work()")
    standin.queue(
        Reply(
            calls=[
                ("run_python", {"code": "x = 1"}),
                ("run_python", {"code": "work()"}),
                ("run_python", {"code": "y = 2"}),
                ("finish", {"summary": "all three"}),
            ]
        )
    )
    agent = agent_for(standin, fake)
    task = asyncio.create_task(agent.run("go"))

    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    turn = await asyncio.wait_for(task, 10)

    assert turn.stop_reason == "aborted"
    assert [run[0] for run in fake.the_shell.runs] == ["x = 1", "work()"]
    [unsent] = [
        e for e in turn.transcript if e["role"] == "tool_results" and e.get("sent") is False
    ]
    said = {
        result["name"] + ":" + result["call_id"]: result["text"] for result in unsent["results"]
    }
    calls = next(e for e in turn.transcript if e["role"] == "assistant")["tool_calls"]
    first, second, third, finish = (call["name"] + ":" + call["id"] for call in calls)
    assert second not in said  # its end is the abandoned script's, in the turn's error
    assert said[third] == "run_python was not run: the caller cancelled the turn before it."
    assert said[finish] == "finish was not run: the caller cancelled the turn before it."
    assert first in said


async def test_an_on_event_listener_raising_cancelled_does_not_abort_the_turn(
    standin: StandIn, fake: FakeRuntime
) -> None:
    def listener(event: AgentEvent) -> None:
        raise asyncio.CancelledError("from the listener")

    standin.queue(Reply(calls=[("run_python", {"code": "x = 1"})]), Reply(text="done"))
    turn = await agent_for(standin, fake, on_event=listener).run("go")

    assert (turn.stop_reason, turn.steps) == ("end_turn", 2), turn.error


def held_script(fake: FakeRuntime, code: str) -> asyncio.Event:
    """Make `code` a script that runs until it is stopped; the event it sets as it starts."""
    started, gate = asyncio.Event(), asyncio.Event()

    async def held(limit: float | None) -> FakeResult:
        started.set()
        await gate.wait()
        return FakeResult("ok", "done")

    fake.the_shell.behaviours[code] = held
    return started
