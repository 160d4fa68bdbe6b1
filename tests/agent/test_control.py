"""ExecutionControl is validated when built, naming the field, before any request; the step
cap moves only when before_step offers a larger one in time."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest

from toolscript.agent import Agent, ExecutionControl, InvalidControl, StepState

from .fake_runtime import FakeRuntime
from .helpers import KEY, agent_for, said_to_model
from .standins import Reply, StandIn

pytestmark = pytest.mark.timeout(20)

INVALID: list[tuple[dict[str, Any], str]] = [
    ({"request_timeout": 0}, "request_timeout"),
    ({"request_timeout": -1.0}, "request_timeout"),
    ({"request_timeout": math.inf}, "request_timeout"),
    ({"request_timeout": math.nan}, "request_timeout"),
    ({"request_timeout": None}, "request_timeout"),
    ({"request_timeout": "30"}, "request_timeout"),
    ({"request_timeout": True}, "request_timeout"),
    ({"request_timeout": 5, "lifetime_timeout": 0}, "lifetime_timeout"),
    ({"request_timeout": 5, "lifetime_timeout": math.inf}, "lifetime_timeout"),
    ({"request_timeout": 5, "tool_timeout": -3}, "tool_timeout"),
    ({"request_timeout": 5, "tool_timeout": math.inf}, "tool_timeout"),
    ({"request_timeout": 5, "tool_timeout": None, "lifetime_timeout": None}, "tool_timeout"),
    ({"request_timeout": 5, "max_steps": 0}, "max_steps"),
    ({"request_timeout": 5, "max_steps": 2.5}, "max_steps"),
    ({"request_timeout": 5, "max_steps": True}, "max_steps"),
    ({"request_timeout": 5, "before_step": "raise the cap"}, "before_step"),
    ({"request_timeout": 5, "before_step_timeout": 0}, "before_step_timeout"),
    ({"request_timeout": 5, "terminal_wait": math.inf}, "terminal_wait"),
    # Past what a float holds (math.isfinite raised OverflowError), or SQLite an int.
    ({"request_timeout": 10**400}, "request_timeout"),
    ({"request_timeout": 5, "lifetime_timeout": 10**400}, "lifetime_timeout"),
    ({"request_timeout": 5, "terminal_wait": -(10**400)}, "terminal_wait"),
    ({"request_timeout": 5, "max_steps": 10**30}, "max_steps"),
]


@pytest.mark.parametrize(
    ("values", "field"), INVALID, ids=[f"{f}={v.get(f)!r}" for v, f in INVALID]
)
async def test_an_invalid_control_is_rejected_naming_the_field_before_any_request(
    standin: StandIn, fake: FakeRuntime, values: dict[str, Any], field: str
) -> None:
    standin.queue(Reply(text="should never be asked"))

    with pytest.raises(InvalidControl) as raised:
        Agent(
            standin.model,
            fake,
            base_url=standin.base_url,
            api_key=KEY,
            control=ExecutionControl(**values),
        )

    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")
    assert isinstance(raised.value, ValueError)
    assert standin.requests == []


@pytest.mark.parametrize(
    ("knobs", "error", "named"),
    [
        ({"max_tokens": -1}, ValueError, "max_tokens"),
        ({"max_tokens": "many"}, ValueError, "max_tokens"),
        ({"max_tokens": 10**30}, ValueError, "max_tokens"),
        ({"api_key": 5}, TypeError, "api_key"),
        ({"api_key": ""}, ValueError, "api_key"),
        ({"max_tokens": 10**5000}, ValueError, "max_tokens"),
        ({"api_key": "sk-abc\n"}, ValueError, "api_key"),
        ({"api_key": "   "}, ValueError, "api_key"),
        ({"instructions": 3}, TypeError, "instructions"),
        ({"runtime": 3}, TypeError, "runtime"),
    ],
)
async def test_a_bad_agent_argument_is_refused_naming_it_before_any_request(
    standin: StandIn, fake: FakeRuntime, knobs: dict[str, Any], error: type, named: str
) -> None:
    standin.queue(Reply(text="should never be asked"))
    arguments: dict[str, Any] = {"runtime": fake, "api_key": KEY, **knobs}
    with pytest.raises(error, match=f"^{named}"):
        Agent(
            standin.model,
            base_url=standin.base_url,
            control=ExecutionControl(request_timeout=5, tool_timeout=None, lifetime_timeout=60),
            **arguments,
        )
    assert standin.requests == []


@pytest.mark.parametrize("base_url", ["notaurl", "ftp://127.0.0.1/v1", "http://", "http://[::1", 5])
async def test_a_base_url_that_is_not_an_http_url_is_refused_before_any_request(
    standin: StandIn, fake: FakeRuntime, base_url: Any
) -> None:
    standin.queue(Reply(text="should never be asked"))
    with pytest.raises(ValueError, match=r"^base_url: expected an http"):
        Agent(
            standin.model,
            fake,
            base_url=base_url,
            api_key=KEY,
            control=ExecutionControl(request_timeout=5, tool_timeout=None, lifetime_timeout=60),
        )
    assert standin.requests == []


async def test_a_valid_control_reaches_the_server(standin: StandIn, fake: FakeRuntime) -> None:
    standin.queue(Reply(text="hello"))
    agent = Agent(
        standin.model,
        fake,
        base_url=standin.base_url,
        api_key=KEY,
        control=ExecutionControl(request_timeout=5, tool_timeout=None, lifetime_timeout=60),
    )

    turn = await agent.run("go")

    assert turn.stop_reason == "end_turn"
    assert len(standin.requests) == 1


def steps_that_run_scripts(count: int) -> list[Reply]:
    return [Reply(calls=[("run_python", {"code": f"step_{n} = {n}"})]) for n in range(count)]


async def test_before_step_raises_the_step_cap(standin: StandIn, fake: FakeRuntime) -> None:
    seen: list[StepState] = []

    async def renew(state: StepState) -> int:
        seen.append(state)
        return 3

    standin.queue(*steps_that_run_scripts(2), Reply(calls=[("finish", {"summary": "3 steps"})]))
    agent = agent_for(standin, fake, max_steps=1, before_step=renew)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps, turn.summary) == ("end_turn", 3, "3 steps")
    assert [(s.steps, s.max_steps, s.scripts) for s in seen] == [(1, 1, 1), (2, 3, 2)]


async def test_a_plain_before_step_function_may_raise_the_cap_too(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(*steps_that_run_scripts(1), Reply(text="done"))
    agent = agent_for(standin, fake, max_steps=1, before_step=lambda state: state.max_steps + 1)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("end_turn", 2)


async def test_a_before_step_that_raises_declines_and_the_turn_goes_on_to_its_cap(
    standin: StandIn, fake: FakeRuntime
) -> None:
    def broken(state: StepState) -> int:
        raise RuntimeError("budget service down")

    standin.queue(*steps_that_run_scripts(3))
    agent = agent_for(standin, fake, max_steps=2, before_step=broken)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("step_cap", 2)
    outcomes = [e["outcome"] for e in turn.transcript if e.get("event") == "before_step"]
    assert outcomes == [
        "declined: before_step raised RuntimeError: budget service down",
        "declined: before_step raised RuntimeError: budget service down",
    ]


@pytest.mark.parametrize("error", [asyncio.CancelledError, TimeoutError])
@pytest.mark.parametrize("plain", [True, False], ids=["plain", "async"])
async def test_a_before_step_raising_cancelled_or_timeout_itself_declines_in_those_words(
    standin: StandIn, fake: FakeRuntime, error: type[BaseException], plain: bool
) -> None:
    # Nobody cancelled the turn, and no time ran out: the callback raised them itself (it
    # awaited something cancelled elsewhere, say). A decline like any other exception.
    def broken(state: StepState) -> int:
        raise error("from the callback")

    async def broken_async(state: StepState) -> int:
        raise error("from the callback")

    standin.queue(*steps_that_run_scripts(3))
    agent = agent_for(standin, fake, max_steps=2, before_step=broken if plain else broken_async)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("step_cap", 2), turn.error
    outcomes = [e["outcome"] for e in turn.transcript if e.get("event") == "before_step"]
    said = f"declined: before_step raised {error.__name__}: from the callback"
    assert outcomes == [said, said]


async def test_a_before_step_that_overruns_its_timeout_declines(
    standin: StandIn, fake: FakeRuntime
) -> None:
    called = asyncio.Event()

    async def slow(state: StepState) -> int:
        called.set()
        await asyncio.Event().wait()
        return 10

    standin.queue(*steps_that_run_scripts(2))
    agent = agent_for(standin, fake, max_steps=1, before_step=slow, before_step_timeout=0.2)

    turn = await asyncio.wait_for(agent.run("go"), 10)

    assert called.is_set()
    assert (turn.stop_reason, turn.steps) == ("step_cap", 1)
    outcomes = [e["outcome"] for e in turn.transcript if e.get("event") == "before_step"]
    assert outcomes == ["declined: before_step did not answer within 0.2 s"]


async def test_a_blocking_before_step_that_overruns_its_timeout_declines(
    standin: StandIn, fake: FakeRuntime
) -> None:
    release = threading.Event()

    def blocking(state: StepState) -> int:
        release.wait(10)
        return 10

    standin.queue(*steps_that_run_scripts(2))
    agent = agent_for(standin, fake, max_steps=1, before_step=blocking, before_step_timeout=0.2)
    try:
        turn = await asyncio.wait_for(agent.run("go"), 10)
    finally:
        release.set()

    assert (turn.stop_reason, turn.steps) == ("step_cap", 1)


async def test_a_blocking_before_step_that_never_returns_cannot_keep_the_process_alive(
    standin: StandIn, fake: FakeRuntime
) -> None:
    # asyncio.run waits for its executor's threads at the end: a callback that never
    # returns must run in a thread of its own that the process does not wait for.
    release = threading.Event()
    threads: list[threading.Thread] = []

    def forever(state: StepState) -> int:
        threads.append(threading.current_thread())
        release.wait(30)
        return 10

    standin.queue(*steps_that_run_scripts(2))
    agent = agent_for(standin, fake, max_steps=1, before_step=forever, before_step_timeout=0.2)
    try:
        turn = await asyncio.wait_for(agent.run("go"), 10)
    finally:
        release.set()

    assert (turn.stop_reason, turn.steps) == ("step_cap", 1)
    [thread] = threads
    assert thread.daemon
    assert thread is not threading.main_thread()


@pytest.mark.parametrize("offer", [1, 0, -5, 2.0, math.inf, "3", True, 10**30])
async def test_an_offer_that_is_not_a_larger_int_leaves_the_cap(
    standin: StandIn, fake: FakeRuntime, offer: object
) -> None:
    standin.queue(*steps_that_run_scripts(2))
    agent = agent_for(standin, fake, max_steps=1, before_step=lambda state: offer)

    turn = await agent.run("go")

    assert (turn.stop_reason, turn.steps) == ("step_cap", 1)
    assert len(standin.requests) == 1


async def test_a_tool_timeout_over_the_runtimes_maximum_runs_scripts_at_that_maximum(
    standin: StandIn, fake: FakeRuntime
) -> None:
    # The model asked for no time limit: the tool_timeout (60 s) is the default, and the
    # runtime takes at most 30 s. Every script refused for it would be no turn at all.
    fake.max_time_limit = 30.0
    standin.queue(
        Reply(calls=[("run_python", {"code": "print(1)"})]),
        Reply(calls=[("finish", {"summary": "printed"})]),
    )
    turn = await agent_for(standin, fake, tool_timeout=60.0).run("print one")

    assert (turn.stop_reason, turn.error) == ("end_turn", None)
    assert fake.the_shell.runs == [("print(1)", 30.0, False)]
    assert "max_time_limit, 30 s" in said_to_model(standin.requests[1])
