"""`toolscript agent`: one turn in the terminal, with a summary or the whole turn as JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from toolscript.cli import run

from .standins import Reply, StandIn

pytestmark = pytest.mark.timeout(60)

Invoke = Callable[..., Awaitable[tuple[int, str, str]]]


@pytest.fixture
def invoke(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """Run `toolscript agent ARGS` in this process against the stand-in: (exit, out, err)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "stand-in-key")
    monkeypatch.setenv("OPENAI_API_KEY", "stand-in-key")

    async def invoke(standin: StandIn, *args: str) -> tuple[int, str, str]:
        argv = ["agent", *args, "--model", standin.model, "--base-url", standin.base_url]
        code = await asyncio.to_thread(run, [*argv, "--journal", ":memory:"])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


async def test_the_command_prints_the_whole_turn_as_json(standin: StandIn, invoke: Invoke) -> None:
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
    assert "script shell-1:" in err


async def test_the_command_prints_a_summary_and_fails_when_the_turn_did_not_end_by_the_model(
    standin: StandIn, invoke: Invoke
) -> None:
    standin.queue(Reply(text="Working", calls=[("run_python", {"code": "1"})], cut="clean"))

    code, out, _err = await invoke(standin, "work")

    assert code == 1
    assert "stop_reason: truncated" in out
    assert "were not run: run_python" in out


async def test_an_invalid_limit_is_refused_naming_its_option_before_any_request(
    standin: StandIn, invoke: Invoke
) -> None:
    code, _out, err = await invoke(standin, "work", "--max-steps", "0")

    assert code == 2
    assert "--max-steps" in err and "max_steps: must be an int of at least 1" in err
    assert standin.requests == []
