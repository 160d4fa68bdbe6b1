"""The actions both faces offer (`toolscript.actions`), driven directly on a real runtime.

`tests/serve/test_action_words.py` and `tests/agent/test_action_words.py` check that each face
says exactly these words.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import eventually
from toolscript import Runtime
from toolscript.actions import CANCEL_REASON, Actions, Answer, RunRequest, no_such_tool

pytestmark = pytest.mark.timeout(60)

SLEEPER = "import pathlib, time\npathlib.Path('started').write_text('yes')\ntime.sleep(60)"
"""A background script that says it started, in the runtime's `workdir`, then sleeps."""

NOT_CODE = "run_python was not run: `code` must be a string of Python source."
BAD_LIMIT = (
    "run_python was not run: `time_limit_s` must be a number of seconds above 0 and at most 60, "
    "or null for the default."
)
NOT_ID = "script_status was not run: `script_id` must be the id run_python gave, a string."


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with Runtime(
        journal=":memory:",
        state_dir=tmp_path / "state",
        pool_size=0,
        max_time_limit=60,
        workdir=tmp_path,
    ) as rt:
        yield rt


async def sleeping(actions: Actions, folder: Path) -> Answer:
    """Start SLEEPER in the background and return once it runs.

    Waiting matters: a background script cancelled before its task began never settles (a
    fault of `ScriptHandle.cancel` outside this module), so these tests cancel running ones.
    """
    started = await actions.start(request(actions, code=SLEEPER, background=True))
    async with asyncio.timeout(30):
        while not (folder / "started").exists():
            await asyncio.sleep(0.01)
    return started


@pytest.fixture
def actions(runtime: Runtime) -> Actions:
    return Actions(runtime.shell("actions"), max_time_limit=runtime.max_time_limit)


def request(actions: Actions, **arguments: Any) -> RunRequest:
    checked = actions.check_run(arguments)
    assert isinstance(checked, RunRequest), checked
    return checked


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({}, NOT_CODE),
        ({"code": 1}, NOT_CODE),
        ({"code": None}, NOT_CODE),
        ({"code": "1", "time_limit_s": 0}, BAD_LIMIT),
        ({"code": "1", "time_limit_s": -1}, BAD_LIMIT),
        ({"code": "1", "time_limit_s": 61}, BAD_LIMIT),
        ({"code": "1", "time_limit_s": math.nan}, BAD_LIMIT),
        ({"code": "1", "time_limit_s": math.inf}, BAD_LIMIT),
        ({"code": "1", "time_limit_s": True}, BAD_LIMIT),
        ({"code": "1", "time_limit_s": "5"}, BAD_LIMIT),
        (
            {"code": "1", "background": "yes"},
            "run_python was not run: `background` must be true or false.",
        ),
        (
            {"source": "x"},
            "run_python was not run: `code` must be a string of Python source; it takes only "
            "code, time_limit_s and background, not 'source'.",
        ),
    ],
)
def test_run_python_refuses_bad_arguments_in_words_that_name_the_rule(
    actions: Actions, arguments: dict[str, Any], words: str
) -> None:
    answer = actions.check_run(arguments)

    assert answer == Answer(words, is_error=True)


def test_a_refusal_names_every_problem_at_once(actions: Actions) -> None:
    answer = actions.check_run({"code": 2, "time_limit_s": -1, "background": 1, "shell": "x"})

    assert isinstance(answer, Answer)
    assert answer.text == (
        "run_python was not run: `code` must be a string of Python source; `time_limit_s` must "
        "be a number of seconds above 0 and at most 60, or null for the default; `background` "
        "must be true or false; it takes only code, time_limit_s and background, not 'shell'."
    )


def test_good_arguments_make_a_request_with_the_limit_in_seconds(actions: Actions) -> None:
    assert request(actions, code="") == RunRequest("", None, False)
    assert request(actions, code="1", time_limit_s=60, background=True) == RunRequest(
        "1", 60.0, True
    )
    assert request(actions, code="1", time_limit_s=None) == RunRequest("1", None, False)


def test_background_is_refused_by_a_shell_that_cannot_start_scripts() -> None:
    class ForegroundOnly:
        async def run(self, code: str, *, time_limit: float | None = None) -> Any:
            raise AssertionError("not run")

    actions = Actions(ForegroundOnly(), max_time_limit=60)

    answer = actions.check_run({"code": "1", "background": True})

    assert answer == Answer.refusal(
        "run_python was not run: this runtime cannot run scripts in the background; run it "
        "without background=true."
    )


async def test_a_foreground_run_answers_with_the_results_text_and_dict(actions: Actions) -> None:
    answer = await actions.run(request(actions, code="print('hi')\n6 * 7", time_limit_s=20))

    assert answer.result is not None
    assert (answer.text, answer.data) == (answer.result.text, answer.result.to_dict())
    assert answer.data is not None and (answer.data["value"], answer.data["stdout"]) == (
        "42",
        "hi\n",
    )
    assert answer.script_id == answer.data["script_id"]
    assert not answer.is_error and answer.handle is None


async def test_a_script_that_does_not_end_ok_is_an_error_answer(actions: Actions) -> None:
    answer = await actions.run(request(actions, code="1 / 0"))

    assert answer.is_error
    assert answer.data is not None and answer.data["status"] == "error"


async def test_a_background_script_is_started_watched_and_cancelled(
    actions: Actions, tmp_path: Path
) -> None:
    started = await sleeping(actions, tmp_path)
    script_id = started.script_id
    assert script_id is not None and started.handle is not None and not started.is_error
    assert started.data == {"script_id": script_id, "status": "running", "background": True}
    assert started.text.startswith(f"Started background script {script_id}. ")
    assert f'script_status(script_id="{script_id}")' in started.text

    running = await actions.script_status({"script_id": script_id})
    assert running.data is not None and running.data["status"] == "running"
    assert running.text.startswith(f"Background script {script_id} is still running (")
    assert not running.is_error and running.result is None

    cancelled = await actions.cancel_script({"script_id": script_id})
    assert cancelled.data is not None
    assert (cancelled.data["status"], cancelled.data["script_id"]) == ("cancelled", script_id)
    assert CANCEL_REASON in cancelled.text and cancelled.is_error

    again = await actions.script_status({"script_id": script_id})
    assert again.data == cancelled.data


async def test_script_status_of_a_running_script_shows_its_output_so_far(
    actions: Actions, tmp_path: Path
) -> None:
    code = "import sys\nprint('first step done', flush=True)\n" + SLEEPER
    started = await actions.start(request(actions, code=code, background=True))
    handle = started.handle
    assert handle is not None
    await eventually(lambda: "first step done" in handle.output(), 30, "no output showed")
    running = await actions.script_status({"script_id": started.script_id})
    assert running.text.endswith("Its output so far:\n\nstdout:\nfirst step done")
    assert running.data is not None and running.data["output"] == "stdout:\nfirst step done"
    await actions.cancel_script({"script_id": started.script_id})


async def test_script_status_says_when_a_running_script_has_written_nothing(
    actions: Actions, tmp_path: Path
) -> None:
    started = await sleeping(actions, tmp_path)
    running = await actions.script_status({"script_id": started.script_id})
    assert running.text.endswith("It has written nothing yet.")
    assert running.data is not None and running.data["output"] == ""
    await actions.cancel_script({"script_id": started.script_id})


async def test_on_done_hears_a_background_scripts_end(actions: Actions) -> None:
    heard: asyncio.Queue[Any] = asyncio.Queue()

    started = await actions.start(
        request(actions, code="6 * 7", background=True), on_done=heard.put_nowait
    )

    result = await asyncio.wait_for(heard.get(), 30)
    assert (result.script_id, result.value) == (started.script_id, "42")
    ended = await actions.script_status({"script_id": started.script_id})
    assert ended.data == result.to_dict()


async def test_cancelling_a_script_that_had_ended_says_nothing_was_cancelled(
    actions: Actions,
) -> None:
    heard: asyncio.Queue[Any] = asyncio.Queue()
    started = await actions.start(
        request(actions, code="6 * 7", background=True), on_done=heard.put_nowait
    )
    result = await asyncio.wait_for(heard.get(), 30)

    late = await actions.cancel_script({"script_id": started.script_id})

    assert late.text.startswith(
        f"Background script {started.script_id} had already ended ok; nothing was cancelled. "
    ), late.text
    assert late.text.endswith(result.text)
    assert late.data == {**result.to_dict(), "already_ended": True}
    assert not late.is_error  # its result is ok, and nothing failed


@pytest.mark.parametrize(
    "arguments",
    [{}, {"script_id": ""}, {"script_id": 5}, {"script_id": None}],
)
async def test_script_id_must_be_a_non_empty_string(
    actions: Actions, arguments: dict[str, Any]
) -> None:
    assert await actions.script_status(arguments) == Answer.refusal(NOT_ID)


async def test_script_id_is_the_only_argument_of_status_and_cancel(actions: Actions) -> None:
    answer = await actions.cancel_script({"script_id": "x", "force": True})

    assert answer == Answer.refusal(
        "cancel_script was not run: it takes only script_id, not 'force'."
    )


async def test_an_unknown_script_id_is_refused_naming_the_known_ones(
    actions: Actions, tmp_path: Path
) -> None:
    nothing = await actions.script_status({"script_id": "nope"})
    assert nothing.is_error and nothing.data is None
    assert nothing.text == (
        "There is no background script 'nope' here (known: none). A background script can be "
        "found only where it was started: while it runs, and for 60 minutes after it ends (the "
        "last 100 that ended)."
    )
    started = await sleeping(actions, tmp_path)

    answer = await actions.cancel_script({"script_id": "nope"})

    assert f"(known: {started.script_id})" in answer.text
    await actions.close("the test ended")


async def test_only_the_last_keep_count_ended_scripts_are_kept(runtime: Runtime) -> None:
    actions = Actions(runtime.shell("kept"), max_time_limit=60, keep_count=1)
    first, second = await ended(actions, "1"), await ended(actions, "2")

    assert (
        "no background script" in (await actions.script_status({"script_id": first.script_id})).text
    )
    kept = await actions.script_status({"script_id": second.script_id})
    assert kept.data is not None and kept.data["value"] == "2"


async def test_a_script_forgotten_here_is_not_answered_by_the_recall_of_an_earlier_face(
    runtime: Runtime,
) -> None:
    # `recall` answers for scripts an earlier face (a restarted server) started; one this
    # conversation started and forgot is unknown, as the refusal says, not "the server
    # stopped before it kept the result".
    asked: list[str] = []

    def recall(script_id: str) -> Answer | None:
        asked.append(script_id)
        return Answer("exit 0 · ok\n\nthe server stopped before it kept the result")

    actions = Actions(runtime.shell("kept"), max_time_limit=60, keep_count=1, recall=recall)
    first = await ended(actions, "1")
    await ended(actions, "2")

    answer = await actions.script_status({"script_id": first.script_id})

    assert answer.is_error and "no background script" in answer.text, answer.text
    assert "the last 1 that ended" in answer.text
    assert asked == []
    elsewhere = await actions.script_status({"script_id": "kept:0123456789"})
    assert "server stopped" in elsewhere.text and asked == ["kept:0123456789"]


async def test_an_ended_script_is_forgotten_keep_for_seconds_after_its_end(
    runtime: Runtime,
) -> None:
    actions = Actions(runtime.shell("kept"), max_time_limit=60, keep_for=0.2)
    started = await actions.start(RunRequest("1", None, True))
    assert started.handle is not None
    await started.handle.result()
    assert not (await actions.script_status({"script_id": started.script_id})).is_error

    await asyncio.sleep(0.4)

    assert (await actions.script_status({"script_id": started.script_id})).is_error


async def test_close_cancels_the_background_scripts_still_running(
    actions: Actions, tmp_path: Path
) -> None:
    started = await sleeping(actions, tmp_path)
    assert started.handle is not None

    await actions.close("the conversation ended")

    result = await started.handle.result()
    assert result.status == "cancelled" and "the conversation ended" in result.text
    assert (await actions.script_status({"script_id": started.script_id})).is_error


def test_a_tool_that_is_not_offered_is_refused_naming_those_that_are() -> None:
    assert no_such_tool("frobnicate", ["run_python", "script_status"]) == Answer.refusal(
        "There is no tool named 'frobnicate'; the tools are run_python, script_status."
    )


async def ended(actions: Actions, code: str) -> Answer:
    """`code` started in the background; the answer that started it, once it has ended."""
    started = await actions.start(RunRequest(code, None, True))
    assert started.handle is not None
    await started.handle.result()
    return started
