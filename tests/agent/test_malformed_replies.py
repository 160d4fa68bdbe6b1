"""Replies no model should send, from a server that sends them anyway: nothing of them runs
that the model did not ask for, and the turn says what was wrong."""

from __future__ import annotations

import pytest

from .fake_runtime import FakeRuntime
from .helpers import agent_for
from .standins import Reply, StandIn

pytestmark = pytest.mark.timeout(20)


async def test_a_tool_call_streamed_after_the_terminal_event_is_not_run(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(
        Reply(text="All done.", late_calls=[("run_python", {"code": "print('late')"})]),
        Reply(calls=[("finish", {"summary": "should not be asked for"})]),
    )
    turn = await agent_for(standin, fake).run("do nothing")

    assert (turn.stop_reason, turn.steps, turn.error) == ("end_turn", 1, None)
    assert fake.the_shell.runs == []
    assert len(standin.requests) == 1


async def test_two_tool_calls_under_one_id_run_neither_and_say_why(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(
        Reply(
            calls=[("run_python", {"code": "print('one')"}), ("run_python", {"code": "print(2)"})],
            ids=["same", "same"],
        ),
        Reply(calls=[("finish", {"summary": "should not be asked for"})]),
    )
    turn = await agent_for(standin, fake).run("print twice")

    assert turn.stop_reason == "error", turn
    assert fake.the_shell.runs == []
    assert turn.error is not None
    assert "'same'" in turn.error and "none of its 2 tool calls was run" in turn.error
    assert len(standin.requests) == 1


async def test_an_event_that_is_not_json_is_said_as_such_not_as_a_broken_connection(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(text="Some words before the garbage.", garbled=True))
    turn = await agent_for(standin, fake).run("say something")

    assert turn.stop_reason == "truncated", turn
    assert turn.error is not None
    assert "not valid JSON" in turn.error and "connection broke" not in turn.error, turn.error
