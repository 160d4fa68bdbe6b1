"""A normal turn: the model runs scripts, reads their results and ends its turn."""

from __future__ import annotations

import json

import pytest

from toolscript.agent import Agent, ResumeError

from .fake_runtime import FakeRuntime
from .helpers import agent_for, control, said_to_model
from .standins import Reply, StandIn

pytestmark = pytest.mark.timeout(20)


async def test_a_turn_runs_the_scripts_the_model_asks_for_and_ends_on_finish(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(
        Reply(text="Let me look.", calls=[("run_python", {"code": "print(2 + 2)"})]),
        Reply(calls=[("finish", {"summary": "printed 4"})]),
    )
    agent = agent_for(standin, fake)

    turn = await agent.run("print four")

    assert (turn.stop_reason, turn.steps, turn.error) == ("end_turn", 2, None)
    assert turn.summary == "printed 4"
    assert fake.the_shell.runs == [("print(2 + 2)", 60.0, False)]
    assert "ran 'print(2 + 2)'" in said_to_model(standin.requests[1])
    assert "print four" in said_to_model(standin.requests[0])
    assert [entry["role"] for entry in turn.transcript] == [
        "user",
        "assistant",
        "script",
        "tool_results",
        "assistant",
        "tool_results",
        "stop",
    ]


async def test_the_system_prompt_carries_the_runtime_catalogue_and_the_action_tools(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(text="Nothing to do."))
    agent = agent_for(standin, fake)

    turn = await agent.run("nothing")

    body = standin.requests[0]
    system = body["system"] if standin.provider == "anthropic" else body["messages"][0]["content"]
    assert FakeRuntime.catalogue in system
    names = [t.get("name") or t["function"]["name"] for t in body["tools"]]
    assert names == ["run_python", "script_status", "cancel_script", "finish", "block"]
    assert body["stream"] is True
    assert (turn.stop_reason, turn.steps) == ("end_turn", 1)


async def test_a_reply_without_tool_calls_ends_the_turn(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(text="The answer is 4."))
    agent = agent_for(standin, fake)

    turn = await agent.run("what is 2 + 2")

    assert (turn.stop_reason, turn.steps, turn.summary) == ("end_turn", 1, None)
    assert turn.transcript[1]["text"] == "The answer is 4."


async def test_block_ends_the_turn_with_its_reason(standin: StandIn, fake: FakeRuntime) -> None:
    standin.queue(Reply(calls=[("block", {"reason": "no credentials"})]))
    agent = agent_for(standin, fake)

    turn = await agent.run("deploy")

    assert (turn.stop_reason, turn.blocked, turn.summary) == ("end_turn", "no credentials", None)


async def test_a_time_limit_over_the_tool_timeout_is_cut_to_it_and_the_model_is_told(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"code": "x = 1", "time_limit_s": 500})]),
        Reply(text="ok"),
    )
    agent = agent_for(standin, fake, tool_timeout=7.0)

    await agent.run("go")

    assert fake.the_shell.runs == [("x = 1", 7.0, False)]
    assert "cut to the tool_timeout, 7.0 s" in said_to_model(standin.requests[1])


async def test_a_call_with_arguments_that_are_not_an_object_is_answered_with_an_error(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"source": "x"}), ("frobnicate", {})]),
        Reply(text="ok"),
    )
    agent = agent_for(standin, fake)

    turn = await agent.run("go")

    sent = said_to_model(standin.requests[1])
    assert "`code` must be a string" in sent
    assert "There is no tool named 'frobnicate'" in sent
    assert fake.the_shell.runs == []
    assert turn.stop_reason == "end_turn"


async def test_a_reply_cut_at_the_token_limit_is_followed_by_a_request_to_go_on(
    standin: StandIn, fake: FakeRuntime
) -> None:
    cut = "max_tokens" if standin.provider == "anthropic" else "length"
    standin.queue(Reply(text="The long answer beg", stop=cut), Reply(text="ins here."))
    agent = agent_for(standin, fake)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("end_turn", 2)
    assert "output token limit" in said_to_model(standin.requests[1])


def test_a_model_without_a_known_provider_is_refused_naming_model(fake: FakeRuntime) -> None:
    with pytest.raises(ValueError, match=r"^model: "):
        Agent("gemini:pro", fake, control=control())


async def test_a_turn_cannot_be_resumed_on_a_runtime_that_keeps_no_journal(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(Reply(text="Done."))
    agent = agent_for(standin, fake)
    turn = await agent.run("nothing")
    assert turn.turn_id

    with pytest.raises(ResumeError) as refused:
        await agent.resume(turn.turn_id)

    assert (refused.value.reason, refused.value.turn_id) == ("no_journal", turn.turn_id)
    assert "keeps no journal" in str(refused.value)
    assert len(standin.requests) == 1


async def test_a_call_whose_input_holds_nan_is_refused_and_the_turn_stays_json(
    standin: StandIn, fake: FakeRuntime
) -> None:
    # `NaN` is Python's, not JSON's: read as a number, the next request could not carry it.
    standin.queue(
        Reply(calls=[("run_python", {"code": "print(1)", "time_limit_s": float("nan")})]),
        Reply(text="done"),
    )

    turn = await agent_for(standin, fake).run("go")

    assert (turn.stop_reason, turn.steps) == ("end_turn", 2), turn.error
    assert fake.the_shell.runs == []
    assert "its arguments were not a JSON object" in said_to_model(standin.requests[1])
    json.dumps(turn.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    ("knobs", "named"),
    [({"images": "no"}, "images"), ({"on_event": 5}, "on_event")],
)
async def test_agent_arguments_of_the_wrong_kind_are_refused_naming_them(
    fake: FakeRuntime, knobs: dict[str, object], named: str
) -> None:
    with pytest.raises(TypeError, match=named):
        Agent("anthropic:model", fake, api_key="k", control=control(), **knobs)  # type: ignore[arg-type]


@pytest.mark.parametrize("task", [None, 5, b"bytes"])
async def test_a_task_that_is_not_text_is_refused_before_the_model_is_asked(
    standin: StandIn, fake: FakeRuntime, task: object
) -> None:
    with pytest.raises(TypeError, match="task"):
        await agent_for(standin, fake).run(task)  # type: ignore[arg-type]
    assert standin.requests == []
