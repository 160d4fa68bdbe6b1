"""The agent loop driving the real `toolscript.Runtime` (real interpreters, real tool calls)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime, tool
from toolscript.agent import Agent, ResumeError

from .helpers import KEY, agent_for, control, said_to_model
from .standins import Reply, StandIn

pytestmark = pytest.mark.timeout(30)


class Gate:
    """A tool the script awaits: it says when it was entered and answers once opened."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    async def wait(self) -> str:
        self.entered.set()
        await self.opened.wait()
        return "opened"


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
async def runtime(gate: Gate, make_runtime: MakeRuntime) -> Runtime:
    @tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    @tool
    async def wait_for_gate() -> str:
        """Wait until the test opens the gate."""
        return await gate.wait()

    return await make_runtime(tools=[lookup, wait_for_gate])


async def test_a_turn_runs_real_scripts_and_the_model_reads_their_results(
    standin: StandIn, runtime: Runtime
) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"code": "print(await lookup(key='abc'))"})]),
        Reply(calls=[("finish", {"summary": "looked it up"})]),
    )
    agent = agent_for(standin, runtime)

    turn = await agent.run("look up abc")

    assert (turn.stop_reason, turn.steps, turn.summary) == ("end_turn", 2, "looked it up")
    assert "exit 0 · ok" in said_to_model(standin.requests[1])
    assert "ABC" in said_to_model(standin.requests[1])
    assert "async def lookup(*, key: str" in json.dumps(standin.requests[0])
    scripts = [e for e in turn.transcript if e["role"] == "script"]
    assert scripts[0]["result"]["calls"]["by_fate"] == {"seen": 1}


async def test_the_images_a_script_shows_are_sent_to_the_model_as_image_blocks(
    standin: StandIn, runtime: Runtime
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"pixels"
    standin.queue(
        Reply(calls=[("run_python", {"code": f"show({png!r})\nprint('drawn')"})]),
        Reply(calls=[("finish", {"summary": "drew it"})]),
    )
    agent = agent_for(standin, runtime)

    turn = await agent.run("draw")

    assert turn.stop_reason == "end_turn"
    messages = standin.requests[1]["messages"]
    data = base64.b64encode(png).decode("ascii")
    if standin.provider == "anthropic":
        [result] = [
            block
            for message in messages
            if isinstance(message["content"], list)
            for block in message["content"]
            if block["type"] == "tool_result"
        ]
        text, image = result["content"]
        assert text["type"] == "text" and "drawn" in text["text"]
        assert image == {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": data},
        }
    else:
        tool = next(index for index, message in enumerate(messages) if message["role"] == "tool")
        assert "drawn" in messages[tool]["content"]
        shown = messages[tool + 1]
        assert shown["role"] == "user"
        label, image = shown["content"]
        assert label["type"] == "text" and "images shown by tool call" in label["text"]
        assert image == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
    results = [e for e in turn.transcript if e["role"] == "tool_results"]
    assert results[0]["results"][0]["images"] == [{"mime_type": "image/png", "size": len(png)}]


async def test_an_agent_told_its_model_takes_no_images_sends_the_text_alone(
    standin: StandIn, runtime: Runtime
) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"code": "show(b'GIF89a' + b'x' * 10)"})]),
        Reply(calls=[("finish", {"summary": "drew it"})]),
    )
    agent = Agent(
        standin.model,
        runtime,
        base_url=standin.base_url,
        api_key=KEY,
        control=control(),
        images=False,
    )

    turn = await agent.run("draw")

    assert turn.stop_reason == "end_turn"
    said = said_to_model(standin.requests[1])
    assert "images: 1 shown (image/gif 16 bytes)" in said
    assert "base64" not in said and '"type": "image' not in said


async def test_a_script_that_outlives_the_turn_is_stopped_by_the_runtime_at_the_lifetime(
    standin: StandIn, runtime: Runtime
) -> None:
    standin.queue(Reply(calls=[("run_python", {"code": "import time\ntime.sleep(30)"})]))
    agent = agent_for(standin, runtime, lifetime_timeout=1.0)

    turn = await asyncio.wait_for(agent.run("sleep"), 20)

    assert turn.stop_reason == "time_limit"
    scripts = [e for e in turn.transcript if e["role"] == "script"]
    assert scripts[0]["status"] == "time_limit"
    assert turn.elapsed < 10


async def test_an_abort_while_a_real_script_waits_on_a_tool_ends_the_turn_aborted(
    standin: StandIn, runtime: Runtime, gate: Gate
) -> None:
    standin.queue(Reply(calls=[("run_python", {"code": "await wait_for_gate()"})]))
    agent = agent_for(standin, runtime)
    task = asyncio.create_task(agent.run("wait"))

    await asyncio.wait_for(gate.entered.wait(), 15)
    task.cancel()
    turn = await asyncio.wait_for(task, 15)

    assert turn.stop_reason == "aborted"
    assert turn.error is not None and "while the script of run_python call" in turn.error
    # The script's own result, collected: it was cancelled, and its call never answered,
    # so whatever the tool does may still come.
    assert "cancelled" in turn.error and "wait_for_gate()" in turn.error, turn.error
    assert "may still come" in turn.error, turn.error
    [abandoned] = [e for e in turn.transcript if e.get("event") == "script_abandoned"]
    result = abandoned["result"]
    assert result["status"] == "cancelled"
    assert result["calls"]["by_fate"] == {"pending": 1}, result["calls"]


async def test_finish_waits_for_a_real_background_script_and_is_refused_until_it_was_read(
    standin: StandIn, runtime: Runtime, gate: Gate
) -> None:
    async def open_the_gate_after_the_refusal(body: dict[str, Any]) -> Reply:
        assert "finish was refused" in said_to_model(body)
        assert "Still running" in said_to_model(body)
        gate.opened.set()
        return Reply(calls=[("finish", {"summary": "after the gate"})])

    def finish_once_read(body: dict[str, Any]) -> Reply:
        assert "ended" in said_to_model(body)
        assert "opened" in said_to_model(body)
        return Reply(calls=[("finish", {"summary": "read it"})])

    standin.queue(
        Reply(calls=[("run_python", {"code": "print(await wait_for_gate())", "background": True})]),
        Reply(calls=[("finish", {"summary": "too early"})]),
        open_the_gate_after_the_refusal,
        finish_once_read,
    )
    agent = agent_for(standin, runtime, terminal_wait=0.5)

    turn = await asyncio.wait_for(agent.run("wait in the background"), 25)

    assert (turn.stop_reason, turn.summary) == ("end_turn", "read it")


PENDING = (
    "import asyncio\n"
    "task = asyncio.ensure_future(wait_for_gate())\n"
    "await asyncio.sleep(0.3)\n"
    "'left it'"
)
"""A script that ends with a call of its pending: its effect may still come."""


async def test_finish_waits_for_a_call_left_pending_and_is_refused_with_its_late_answer(
    standin: StandIn, runtime: Runtime, gate: Gate
) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"code": PENDING})]),
        Reply(calls=[("finish", {"summary": "done"})]),
        Reply(calls=[("finish", {"summary": "done, having read it"})]),
    )
    agent = agent_for(standin, runtime)

    async def open_while_finish_waits() -> None:
        await gate.entered.wait()
        while len(standin.requests) < 2:  # the model is asked, and answers finish
            await asyncio.sleep(0.01)
        gate.opened.set()

    opener = asyncio.ensure_future(open_while_finish_waits())
    turn = await agent.run("write it")
    await opener

    assert (turn.stop_reason, turn.steps) == ("end_turn", 3), turn.error
    assert "pending" in said_to_model(standin.requests[1])
    refused = said_to_model(standin.requests[2])
    assert "finish was refused" in refused and "wait_for_gate()" in refused, refused
    assert "answered since: 'opened'" in refused, refused
    assert turn.summary == "done, having read it"


async def test_finish_is_refused_once_naming_a_call_still_pending_then_accepted(
    standin: StandIn, runtime: Runtime, gate: Gate
) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"code": PENDING})]),
        Reply(calls=[("finish", {"summary": "done"})]),
        Reply(calls=[("finish", {"summary": "done, knowing it may still come"})]),
    )
    agent = agent_for(standin, runtime, terminal_wait=0.3)

    turn = await agent.run("write it")
    gate.opened.set()

    assert (turn.stop_reason, turn.steps) == ("end_turn", 3), turn.error
    refused = said_to_model(standin.requests[2])
    # A tool call is not a script: it does not "run" for the model to wait on or cancel.
    assert "tool calls of this turn never answered" in refused, refused
    assert "Never answered, so their effects may still come" in refused, refused
    assert "cancel_script" not in refused and "Still running" not in refused, refused
    assert "wait_for_gate()" in refused and "pending when the script ended" in refused
    assert turn.summary == "done, knowing it may still come"


async def test_a_turn_this_process_is_running_cannot_be_resumed_beside_it(
    standin: StandIn, runtime: Runtime, gate: Gate
) -> None:
    # The journal names this process as the turn's holder, and this process is alive: a
    # second loop taking the turn up would tell the model the script never ran while it runs.
    standin.queue(
        Reply(calls=[("run_python", {"code": "print(await wait_for_gate())"})]),
        Reply(calls=[("finish", {"summary": "through the gate"})]),
    )
    started: list[str] = []
    agent = agent_for(
        standin,
        runtime,
        on_event=lambda event: (
            started.append(event.detail["turn_id"]) if event.kind == "turn_started" else None
        ),
    )
    running = asyncio.create_task(agent.run("wait at the gate"))
    await asyncio.wait_for(gate.entered.wait(), 20)
    [turn_id] = started

    with pytest.raises(ResumeError) as refused:
        await agent_for(standin, runtime).resume(turn_id)

    assert refused.value.reason == "held" and "still running in this process" in str(refused.value)
    gate.opened.set()
    turn = await asyncio.wait_for(running, 20)
    assert (turn.stop_reason, turn.steps) == ("end_turn", 2)
    assert len(standin.requests) == 2  # the refused resume asked the model nothing
