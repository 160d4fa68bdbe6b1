"""`toolscript agent`: one turn in the terminal, with a summary or the whole turn as JSON."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from toolscript.cli.agent import agent_command

from .standins import Reply, StandIn

pytestmark = pytest.mark.timeout(60)


def the_app() -> typer.Typer:
    app = typer.Typer()
    app.command("agent")(agent_command)

    @app.callback()
    def root() -> None:
        """toolscript, as the test builds it."""

    return app


async def invoke(standin: StandIn, *args: str, journal: str = ":memory:") -> tuple[int, str, str]:
    runner = CliRunner()
    env = {"ANTHROPIC_API_KEY": "stand-in-key", "OPENAI_API_KEY": "stand-in-key"}
    result = await asyncio.to_thread(
        runner.invoke,
        the_app(),
        [
            "agent",
            *args,
            "--model",
            standin.model,
            "--base-url",
            standin.base_url,
            "--journal",
            journal,
        ],
        env=env,
    )
    return result.exit_code, result.stdout, result.stderr


async def test_the_command_prints_the_whole_turn_as_json(standin: StandIn) -> None:
    standin.queue(
        Reply(calls=[("run_python", {"code": "print(6 * 7)"})]),
        Reply(calls=[("finish", {"summary": "printed 42"})]),
    )

    code, out, err = await invoke(standin, "print 42", "--json")

    turn = json.loads(out)
    assert code == 0, err
    assert (turn["stop_reason"], turn["steps"], turn["summary"]) == ("end_turn", 2, "printed 42")
    scripts = [e for e in turn["transcript"] if e["role"] == "script"]
    assert "42" in scripts[0]["result"]["stdout"]
    assert f"script turn-{turn['turn_id']}:" in err


async def test_the_command_prints_a_summary_and_fails_when_the_turn_did_not_end_by_the_model(
    standin: StandIn,
) -> None:
    standin.queue(Reply(text="Working", calls=[("run_python", {"code": "1"})], cut="clean"))

    code, out, _err = await invoke(standin, "work")

    assert code == 1
    assert "stop_reason: truncated" in out
    assert re.search(r"turn: [0-9a-f]{12}\n", out)
    assert "were not run: run_python" in out


async def test_an_invalid_limit_is_refused_naming_its_option_before_any_request(
    standin: StandIn,
) -> None:
    code, _out, err = await invoke(standin, "work", "--max-steps", "0")

    assert code == 2
    assert "--max-steps" in err and "max_steps: must be an int of at least 1" in err
    assert standin.requests == []


async def test_resuming_an_unknown_turn_is_one_line_and_exit_code_2(
    standin: StandIn, tmp_path: Path
) -> None:
    journal = str(tmp_path / "journal.sqlite3")

    code, _out, err = await invoke(standin, "--resume", "f00d", journal=journal)

    assert code == 2
    assert err.count("\n") == 1 and err.startswith("toolscript: no turn 'f00d' in the journal")
    assert standin.requests == []


async def test_a_turn_that_ended_cannot_be_resumed(standin: StandIn, tmp_path: Path) -> None:
    journal = str(tmp_path / "journal.sqlite3")
    standin.queue(Reply(text="Nothing to do."))
    code, out, _err = await invoke(standin, "do nothing", "--json", journal=journal)
    turn_id = json.loads(out)["turn_id"]
    assert code == 0

    code, _out, err = await invoke(standin, "--resume", turn_id, journal=journal)

    assert code == 2
    assert err == f"toolscript: turn {turn_id} already ended (end_turn); only a turn whose " + (
        "process died before it ended can be resumed\n"
    )
    assert len(standin.requests) == 1


async def test_a_task_and_resume_together_are_refused(standin: StandIn) -> None:
    code, _out, err = await invoke(standin, "a task", "--resume", "f00d")

    assert code == 2
    assert "give a TASK, or --resume TURN_ID, not both" in err
