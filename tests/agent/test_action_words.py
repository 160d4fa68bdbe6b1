"""The agent says the words of `toolscript.actions`, unchanged, to its model."""

from __future__ import annotations

import json
from typing import Any

from toolscript.actions import Actions, Answer

from .fake_runtime import FakeRuntime
from .helpers import agent_for, said_to_model
from .standins import Reply, StandIn

BAD_RUNS: list[dict[str, Any]] = [
    {"source": "x"},
    {"code": "1", "time_limit_s": 0},
    {"code": "1", "time_limit_s": 601},
    {"code": "1", "background": "yes"},
]


def said(fake: FakeRuntime, arguments: dict[str, Any]) -> str:
    """What `toolscript.actions` refuses these run_python arguments with, as sent in JSON."""
    answer = Actions(fake.the_shell, max_time_limit=fake.max_time_limit).check_run(arguments)
    assert isinstance(answer, Answer)
    return json.dumps(answer.text, ensure_ascii=False)[1:-1]


async def test_bad_run_python_arguments_are_refused_in_the_words_of_the_actions(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(
        Reply(calls=[("run_python", arguments) for arguments in BAD_RUNS]),
        Reply(text="ok"),
    )

    await agent_for(standin, fake).run("go")

    sent = said_to_model(standin.requests[1])
    for arguments in BAD_RUNS:
        assert said(fake, arguments) in sent
    assert fake.the_shell.runs == []


async def test_status_of_an_unknown_script_is_refused_in_those_words(
    standin: StandIn, fake: FakeRuntime
) -> None:
    standin.queue(
        Reply(calls=[("script_status", {"script_id": ""}), ("cancel_script", {"script_id": "s9"})]),
        Reply(text="ok"),
    )

    await agent_for(standin, fake).run("go")

    sent = said_to_model(standin.requests[1])
    assert (
        "script_status was not run: `script_id` must be the id run_python gave, a string." in sent
    )
    assert "There is no background script 's9' here (known: none)." in sent
