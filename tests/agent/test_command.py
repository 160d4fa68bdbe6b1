"""`toolscript agent`: one turn in the terminal, with a summary or the whole turn as JSON."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

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

    async def invoke(
        standin: StandIn, *args: str, journal: str = ":memory:"
    ) -> tuple[int, str, str]:
        argv = ["agent", *args, "--model", standin.model, "--base-url", standin.base_url]
        code = await asyncio.to_thread(run, [*argv, "--journal", journal])
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
    assert f"script turn-{turn['turn_id']}:" in err


async def test_the_command_prints_a_summary_and_fails_when_the_turn_did_not_end_by_the_model(
    standin: StandIn, invoke: Invoke
) -> None:
    standin.queue(Reply(text="Working", calls=[("run_python", {"code": "1"})], cut="clean"))

    code, out, _err = await invoke(standin, "work")

    assert code == 1
    assert "stop_reason: truncated" in out
    assert re.search(r"turn: [0-9a-f]{12}\n", out)
    assert "were not run: run_python" in out


async def test_an_invalid_limit_is_refused_naming_its_option_before_any_request(
    standin: StandIn, invoke: Invoke
) -> None:
    code, _out, err = await invoke(standin, "work", "--max-steps", "0")

    assert code == 2
    assert "--max-steps" in err and "max_steps: must be an int from 1 to 1,000,000,000" in err
    assert standin.requests == []


async def test_resuming_an_unknown_turn_is_one_line_and_exit_code_2(
    standin: StandIn, tmp_path: Path, invoke: Invoke
) -> None:
    journal = str(tmp_path / "journal.sqlite3")

    code, _out, err = await invoke(standin, "--resume", "f00d", journal=journal)

    assert code == 2
    assert err.count("\n") == 1 and err.startswith(
        "toolscript agent: error: no turn 'f00d' in the journal"
    )
    assert standin.requests == []


async def test_a_turn_that_ended_cannot_be_resumed(
    standin: StandIn, tmp_path: Path, invoke: Invoke
) -> None:
    journal = str(tmp_path / "journal.sqlite3")
    standin.queue(Reply(text="Nothing to do."))
    code, out, _err = await invoke(standin, "do nothing", "--json", journal=journal)
    turn_id = json.loads(out)["turn_id"]
    assert code == 0

    code, _out, err = await invoke(standin, "--resume", turn_id, journal=journal)

    assert code == 2
    assert (
        err
        == f"toolscript agent: error: turn {turn_id} already ended (end_turn); only a turn whose "
        + ("process died before it ended can be resumed\n")
    )
    assert len(standin.requests) == 1


async def test_a_task_and_resume_together_are_refused(standin: StandIn, invoke: Invoke) -> None:
    code, _out, err = await invoke(standin, "a task", "--resume", "f00d")

    assert code == 2
    assert "give a TASK, or --resume TURN_ID, not both" in err


def test_progress_prints_words_with_square_brackets_as_they_are() -> None:
    # A retry's reason is the model API's words; read as markup, "[/]" would raise.
    import io

    from rich.console import Console

    from toolscript.agent import AgentEvent
    from toolscript.cli.agent import Progress

    console = Console(file=io.StringIO(), width=200)
    progress = Progress(console)
    progress.hear(AgentEvent("retry", 1, 0.5, {"attempt": 1, "why": "HTTP 529 [/] [bold]busy"}))
    progress.hear(
        AgentEvent("script_ended", 1, 0.6, {"script_id": "[x]", "status": "ok", "calls": {}})
    )
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "retry 1: HTTP 529 [/] [bold]busy" in out and "script [x]: ok" in out, out


def test_progress_on_a_terminal_shows_the_models_control_sequences_escaped() -> None:
    # A tool name the model made up, and an API's error, reach the terminal: their control
    # sequences (repaint a line, set the clipboard) are shown, not obeyed.
    import io

    from rich.console import Console

    from toolscript.agent import AgentEvent
    from toolscript.cli.agent import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    console = Console(file=Terminal(), width=200, force_terminal=True, color_system=None)
    progress = Progress(console)
    progress.hear(AgentEvent("retry", 1, 0.5, {"attempt": 1, "why": "busy\x1b]52;c;aGk=\x07"}))
    progress.hear(AgentEvent("terminal_refused", 1, 0.6, {"tool": "block\x1b[2K"}))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x07" not in out and "\x1b]52" not in out and "\x1b[2K" not in out, repr(out)
    assert "busy\\x1b]52;c;aGk=\\x07" in out and "block\\x1b[2K refused" in out, repr(out)
