"""`toolscript agent --resume`: a turn whose process was SIGKILLed goes on in another process,
against the stand-in model server, with its interpreters kept (docs/design.md: the keeper).

Each test runs the real command as its own process on a state directory of its own, kills it
with SIGKILL where the test says, resumes the turn with a second process, and checks at the
end that nothing of either is left running (the hosts, the keeper, its interpreters).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SANDBOX, eventually, processes_with, wait_for_file
from tests.keeper.tools import count

from .helpers import KEY, said_to_model
from .standins import Reply, StandIn

WAIT = 30.0
"""The bound on any wait for a process's line, a file or a process's end."""


AGENT = textwrap.dedent(
    """
    import asyncio, json, sys
    from toolscript import Runtime
    from toolscript.agent import Agent, ExecutionControl
    from tests.keeper.tools import effect_tools

    config = json.loads(sys.argv[1])

    def hear(event):
        if event.kind == "turn_started":
            print("turn", event.detail["turn_id"], "started", file=sys.stderr, flush=True)

    async def main():
        async with Runtime(
            tools=effect_tools(config["shared"], hold=config["hold"]),
            state_dir=config["state_dir"],
            keep_interpreters=True,
            sandbox=config["sandbox"],
            mounts={config["shared"]: "rw"},
            pool_size=0,
        ) as rt:
            agent = Agent(
                config["model"],
                rt,
                base_url=config["base_url"],
                api_key="stand-in-key",
                control=ExecutionControl(request_timeout=30.0),
                on_event=hear,
            )
            if config["resume"] is None:
                turn = await agent.run(config["task"])
            else:
                turn = await agent.resume(config["resume"])
            print(json.dumps(turn.to_dict()), flush=True)

    asyncio.run(main())
    """
)
"""An agent with tools (`tests.keeper.tools`), run through the API: `Agent.resume`."""


class AgentProcess:
    """One `toolscript agent` process: its standard error read as it comes, its kill."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.err: list[str] = []
        self.line_came = asyncio.Event()
        assert process.stderr is not None
        self.reader = asyncio.create_task(self._read(process.stderr))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while raw := await stream.readline():
            self.err.append(raw.decode(errors="replace"))
            self.line_came.set()

    async def turn_id(self) -> str:
        """The id the process printed for its turn."""
        async with asyncio.timeout(WAIT):
            while True:
                for line in self.err:
                    found = re.search(r"turn (\w+) (started|resumed)", line)
                    if found:
                        return found.group(1)
                self.line_came.clear()
                await self.line_came.wait()

    async def kill(self) -> None:
        """SIGKILL, and wait for it to be gone."""
        self.process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(self.process.wait(), WAIT) == -signal.SIGKILL

    async def ended(self) -> tuple[int, dict[str, Any]]:
        """Its exit code and the turn it printed (`--json`)."""
        assert self.process.stdout is not None
        out = await asyncio.wait_for(self.process.stdout.read(), WAIT * 2)
        code = await asyncio.wait_for(self.process.wait(), WAIT)
        await self.reader
        assert out, "".join(self.err)[-3000:]
        return code, json.loads(out)


class Agents:
    """Starts `toolscript agent` processes on one state directory; checks none is left."""

    def __init__(self, folder: Path, standin: StandIn) -> None:
        self.state_dir = folder / "state"
        self.shared = folder / "shared"
        self.shared.mkdir()
        self.standin = standin
        self.started: list[AgentProcess] = []

    async def start_with_tools(
        self, *, hold: bool, task: str | None = None, resume: str | None = None
    ) -> AgentProcess:
        """An agent process whose scripts can call the tools of `tests.keeper.tools`."""
        config = {
            "shared": str(self.shared),
            "hold": hold,
            "state_dir": str(self.state_dir),
            "sandbox": SANDBOX,
            "model": self.standin.model,
            "base_url": self.standin.base_url,
            "task": task,
            "resume": resume,
        }
        return await self._start(["-c", AGENT, json.dumps(config)])

    async def start(self, *args: str, keep: bool = True) -> AgentProcess:
        """A `toolscript agent` process with `args`, keeping its interpreters if `keep`."""
        command = ["-m", "toolscript", "agent", *args, "--model", self.standin.model]
        command += ["--base-url", self.standin.base_url, "--sandbox", SANDBOX]
        command += ["--mount", f"{self.shared}:rw", "--json"]
        if keep:
            command.append("--keep-interpreters")
        return await self._start(command)

    async def _start(self, command: list[str]) -> AgentProcess:
        env = {
            **os.environ,
            "TOOLSCRIPT_STATE": str(self.state_dir),
            "ANTHROPIC_API_KEY": KEY,
            "OPENAI_API_KEY": KEY,
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *command,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        started = AgentProcess(process)
        self.started.append(started)
        return started

    def left(self) -> list[int]:
        """Processes of this test still alive: agents, the keeper, its sandbox, kernels."""
        pids = [p.pid for p in processes_with(str(self.state_dir))]
        pids += [a.process.pid for a in self.started if a.process.returncode is None]
        return pids


@pytest.fixture
async def agents(tmp_path: Path, standin: StandIn) -> AsyncIterator[Agents]:
    """Agent processes on one state directory; every process they left must be gone."""
    made = Agents(tmp_path, standin)
    yield made
    for started in made.started:
        if started.process.returncode is None:
            started.process.kill()
            await started.process.wait()
        started.reader.cancel()
    try:
        await eventually(lambda: not made.left(), WAIT, "processes were left running")
    finally:
        for pid in made.left():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class Hang:
    """A reply that holds its request until the process that sent it is killed: a model
    request in flight at the kill. Its answer then goes to a closed connection."""

    def __init__(self) -> None:
        self.in_flight = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, body: dict[str, Any]) -> Reply:
        self.in_flight.set()
        await self.release.wait()
        return Reply(text="nobody reads this")


def _steps_of(turn: dict[str, Any]) -> list[dict[str, Any]]:
    return [entry for entry in turn["transcript"] if entry["role"] == "assistant"]


@pytest.mark.timeout(180)
async def test_a_turn_killed_while_its_request_was_in_flight_resumes_and_ends_with_each_step_once(
    agents: Agents, standin: StandIn
) -> None:
    hang = Hang()

    standin.queue(Reply(text="Computing.", calls=[("run_python", {"code": "print(6 * 7)"})]), hang)
    first = await agents.start("print 42")
    turn_id = await first.turn_id()
    await asyncio.wait_for(hang.in_flight.wait(), WAIT)
    await first.kill()
    hang.release.set()

    standin.queue(Reply(calls=[("finish", {"summary": "printed 42"})]))
    second = await agents.start("--resume", turn_id)
    code, turn = await second.ended()

    assert code == 0, "".join(second.err)[-3000:]
    assert (turn["turn_id"], turn["stop_reason"], turn["summary"]) == (
        turn_id,
        "end_turn",
        "printed 42",
    )
    assert turn["steps"] == 2
    assert len(standin.requests) == 3
    assert standin.requests[2]["messages"] == standin.requests[1]["messages"]
    assert "42" in said_to_model(standin.requests[2])
    steps = _steps_of(turn)
    assert [s["text"] for s in steps] == ["Computing.", ""]
    assert [s["tool_calls"][0]["name"] for s in steps] == ["run_python", "finish"]
    scripts = [e for e in turn["transcript"] if e["role"] == "script"]
    assert len(scripts) == 1 and "42" in scripts[0]["result"]["stdout"]
    sent = [e for e in turn["transcript"] if e["role"] == "tool_results" and e.get("sent", True)]
    assert len(sent) == 1
    [resumed] = [e for e in turn["transcript"] if e.get("event") == "resumed"]
    assert (resumed["phase"], resumed["step"]) == ("request", 2)


@pytest.mark.timeout(180)
async def test_a_script_still_running_in_its_kept_interpreter_is_taken_back_not_run_again(
    agents: Agents, standin: StandIn
) -> None:
    gate = agents.shared / "go"
    os.mkfifo(gate)
    runs = agents.shared / "runs"
    code = (
        f"open({str(runs)!r}, 'a').write('ran\\n')\n"
        f"open({str(agents.shared / 'started')!r}, 'w').close()\n"
        "import asyncio\n"
        f"await asyncio.to_thread(lambda: open({str(gate)!r}).read())\n"
        "print('went on')\n"
    )
    standin.queue(Reply(calls=[("run_python", {"code": code, "time_limit_s": 60})]))
    first = await agents.start("wait at the gate")
    turn_id = await first.turn_id()
    await wait_for_file(agents.shared / "started", WAIT)
    await first.kill()

    def finish_once_read(body: dict[str, Any]) -> Reply:
        assert "went on" in said_to_model(body)
        assert "process restarted while this script ran" in said_to_model(body)
        return Reply(calls=[("finish", {"summary": "went through the gate"})])

    standin.queue(finish_once_read)
    second = await agents.start("--resume", turn_id)
    await second.turn_id()  # resumed: the script still waits at the gate

    def open_gate() -> None:
        with open(gate, "w") as fifo:
            fifo.write("go")

    await asyncio.wait_for(asyncio.to_thread(open_gate), WAIT)
    code_, turn = await second.ended()

    assert code_ == 0, "".join(second.err)[-3000:]
    assert (turn["stop_reason"], turn["steps"]) == ("end_turn", 2)
    assert len(standin.requests) == 2
    scripts = [e for e in turn["transcript"] if e["role"] == "script"]
    assert len(scripts) == 1
    assert (scripts[0]["status"], scripts[0]["call_id"]) == (
        "ok",
        _steps_of(turn)[0]["tool_calls"][0]["id"],
    ), json.dumps(scripts[0]["result"], indent=1)
    assert "went on" in scripts[0]["result"]["stdout"]
    assert runs.read_text() == "ran\n"


@pytest.mark.timeout(180)
async def test_a_resumed_turn_counts_the_steps_made_before_the_kill_against_max_steps(
    agents: Agents, standin: StandIn
) -> None:
    hang = Hang()

    standin.queue(Reply(calls=[("run_python", {"code": "1"})]), hang)
    first = await agents.start("count", "--max-steps", "3")
    turn_id = await first.turn_id()
    await asyncio.wait_for(hang.in_flight.wait(), WAIT)
    await first.kill()
    hang.release.set()

    standin.queue(
        Reply(calls=[("run_python", {"code": "2"})]),
        Reply(calls=[("run_python", {"code": "3"})]),
        Reply(calls=[("run_python", {"code": "4"})]),
    )
    second = await agents.start("--resume", turn_id, "--max-steps", "3")
    code, turn = await second.ended()

    assert code == 1
    assert (turn["stop_reason"], turn["steps"]) == ("step_cap", 3), turn["error"]
    assert len(standin.requests) == 4  # one, the one in flight, then it again, and three
    assert len(_steps_of(turn)) == 3


_CATCH = (
    "try:\n"
    "    outcome = await transfer(key='w1')\n"
    "except ToolError as error:\n"
    "    outcome = ('ToolError', error.cause)\n"
    "outcome\n"
)


@pytest.mark.timeout(180)
async def test_a_block_after_a_call_held_across_the_kill_waits_for_its_answer_and_is_refused(
    agents: Agents, standin: StandIn
) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"code": _CATCH}), ("block", {"reason": "gave up early"})])
    )
    first = await agents.start_with_tools(hold=True, task="write it")
    turn_id = await first.turn_id()
    await wait_for_file(agents.shared / "entered-w1", WAIT)  # the write ran; no answer yet
    await first.kill()

    def block_once_read(body: dict[str, Any]) -> Reply:
        said = said_to_model(body)
        assert "block was refused: not every result of this turn has been read" in said
        assert "in_doubt" in said
        return Reply(calls=[("block", {"reason": "the write may have happened"})])

    standin.queue(block_once_read)
    second = await agents.start_with_tools(hold=False, resume=turn_id)
    code, turn = await second.ended()

    assert code == 0, "".join(second.err)[-3000:]
    assert (turn["stop_reason"], turn["blocked"]) == ("end_turn", "the write may have happened")
    [script] = [e for e in turn["transcript"] if e["role"] == "script"]
    assert script["result"]["value"] == "('ToolError', 'in_doubt')", script["result"]
    [record] = script["result"]["calls"]["records"]
    assert (record["tool"], record["fate"], record["cause"]) == ("transfer", "pending", "in_doubt")
    refused = [e for e in turn["transcript"] if e.get("event") == "terminal_refused"]
    assert [e["tool"] for e in refused] == ["block"]
    assert len(count(agents.shared, "effects", "transfer", "w1")) == 1


@pytest.mark.timeout(180)
async def test_without_kept_interpreters_a_script_that_ran_at_the_kill_is_said_lost_not_run_again(
    agents: Agents, standin: StandIn
) -> None:
    runs = agents.shared / "runs"
    code = (
        f"open({str(runs)!r}, 'a').write('ran\\n')\n"
        f"open({str(agents.shared / 'started')!r}, 'w').close()\n"
        "import time\ntime.sleep(60)\n"
    )
    standin.queue(Reply(calls=[("run_python", {"code": code})]))
    first = await agents.start("sleep", keep=False)
    turn_id = await first.turn_id()
    await wait_for_file(agents.shared / "started", WAIT)
    await first.kill()

    def finish_once_read(body: dict[str, Any]) -> Reply:
        assert "its interpreter was not kept" in said_to_model(body)
        return Reply(calls=[("finish", {"summary": "it was lost"})])

    standin.queue(finish_once_read)
    second = await agents.start("--resume", turn_id, keep=False)
    code_, turn = await second.ended()

    assert code_ == 0, "".join(second.err)[-3000:]
    assert (turn["stop_reason"], turn["steps"]) == ("end_turn", 2)
    [lost] = [e for e in turn["transcript"] if e.get("event") == "script_lost"]
    assert lost["call_id"] == _steps_of(turn)[0]["tool_calls"][0]["id"]
    assert runs.read_text() == "ran\n"


@pytest.mark.timeout(180)
async def test_a_turn_that_a_live_process_runs_cannot_be_resumed_by_another(
    agents: Agents, standin: StandIn
) -> None:
    hang = Hang()
    standin.queue(hang)
    first = await agents.start("wait", keep=False)
    turn_id = await first.turn_id()
    await asyncio.wait_for(hang.in_flight.wait(), WAIT)

    second = await agents.start("--resume", turn_id, keep=False)
    assert second.process.stdout is not None
    code = await asyncio.wait_for(second.process.wait(), WAIT)
    await second.reader

    assert code == 2
    assert second.err == [
        f"toolscript agent: error: turn {turn_id} is still running in another process that is alive\n"
    ]
    await first.kill()
    hang.release.set()


@pytest.mark.timeout(180)
async def test_a_script_the_keeper_stopped_at_its_time_limit_while_no_process_ran_says_time_limit(
    agents: Agents, standin: StandIn
) -> None:
    stopped = agents.shared / "stopped"
    code = (
        f"try:\n    open({str(agents.shared / 'started')!r}, 'w').close()\n"
        "    while True:\n        pass\nexcept KeyboardInterrupt:\n"
        f"    open({str(stopped)!r}, 'w').close()\n    raise\n"
    )
    standin.queue(Reply(calls=[("run_python", {"code": code, "time_limit_s": 1})]))
    first = await agents.start("spin")
    turn_id = await first.turn_id()
    await wait_for_file(agents.shared / "started", WAIT)
    await first.kill()
    await wait_for_file(stopped, WAIT)  # no process is attached: only the keeper can stop it

    def finish_once_read(body: dict[str, Any]) -> Reply:
        assert "time_limit" in said_to_model(body)
        return Reply(calls=[("finish", {"summary": "it was stopped"})])

    standin.queue(finish_once_read)
    second = await agents.start("--resume", turn_id)
    code_, turn = await second.ended()

    assert code_ == 0, "".join(second.err)[-3000:]
    assert (turn["stop_reason"], turn["steps"]) == ("end_turn", 2)
    [script] = [e for e in turn["transcript"] if e["role"] == "script"]
    assert script["status"] == "time_limit", script["result"]


async def _background_at_the_kill(agents: Agents, *, keep: bool) -> str:
    """A turn that started a background script (still running, without blocking its
    interpreter's loop) and was killed while its next model request was in flight."""
    started, gate = agents.shared / "started", agents.shared / "never"
    code = (
        f"open({str(started)!r}, 'w').close()\nimport asyncio, os\n"
        f"while not os.path.exists({str(gate)!r}):\n    await asyncio.sleep(0.02)\n"
    )
    hang = Hang()
    agents.standin.queue(Reply(calls=[("run_python", {"code": code, "background": True})]), hang)
    first = await agents.start("in the background", keep=keep)
    turn_id = await first.turn_id()
    await wait_for_file(started, WAIT)
    await asyncio.wait_for(hang.in_flight.wait(), WAIT)
    await first.kill()
    hang.release.set()
    return turn_id


@pytest.mark.timeout(180)
async def test_a_background_script_running_at_the_kill_is_taken_back_and_owed_to_the_model(
    agents: Agents, standin: StandIn
) -> None:
    turn_id = await _background_at_the_kill(agents, keep=True)

    def cancel_it(body: dict[str, Any]) -> Reply:
        said = said_to_model(body)
        assert "was lost" not in said
        [script_id] = set(re.findall(r"Started background script ([\w:-]+)\.", said))
        return Reply(calls=[("cancel_script", {"script_id": script_id})])

    def finish_once_told(body: dict[str, Any]) -> Reply:
        said = said_to_model(body)
        assert "cancel_script was called" in said  # its result, from the script taken back
        return Reply(calls=[("finish", {"summary": "told"})])

    standin.queue(cancel_it, finish_once_told)
    second = await agents.start("--resume", turn_id)
    code_, turn = await second.ended()

    assert code_ == 0, "".join(second.err)[-3000:]
    assert (turn["stop_reason"], turn["summary"], turn["steps"]) == ("end_turn", "told", 3)


@pytest.mark.timeout(180)
async def test_without_kept_interpreters_a_background_script_at_the_kill_is_reported_lost(
    agents: Agents, standin: StandIn
) -> None:
    turn_id = await _background_at_the_kill(agents, keep=False)

    def finish_once_told(body: dict[str, Any]) -> Reply:
        said = said_to_model(body)
        assert "finish was refused" in said
        assert "was lost: the agent's process died while it ran" in said
        return Reply(calls=[("finish", {"summary": "told"})])

    standin.queue(Reply(calls=[("finish", {"summary": "too early"})]), finish_once_told)
    second = await agents.start("--resume", turn_id, keep=False)
    code_, turn = await second.ended()

    assert code_ == 0, "".join(second.err)[-3000:]
    assert (turn["stop_reason"], turn["summary"], turn["steps"]) == ("end_turn", "told", 3)
