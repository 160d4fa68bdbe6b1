"""Small things the agent's tests share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from toolscript.agent import Agent, AgentEvent, ExecutionControl

from .standins import StandIn

KEY = "stand-in-key"


def control(**changes: Any) -> ExecutionControl:
    """A control with a short request timeout and no lifetime, changed by `changes`."""
    values: dict[str, Any] = {"request_timeout": 10.0}
    values.update(changes)
    return ExecutionControl(**values)


def agent_for(
    standin: StandIn,
    runtime: Any,
    *,
    on_event: Callable[[AgentEvent], None] | None = None,
    **changes: Any,
) -> Agent:
    """An agent that talks to `standin`, under `control(**changes)`."""
    return Agent(
        standin.model,
        runtime,
        base_url=standin.base_url,
        api_key=KEY,
        control=control(**changes),
        on_event=on_event,
    )


def said_to_model(body: dict[str, Any]) -> str:
    """Everything in a request's messages, as one text to search."""
    return json.dumps(body.get("messages", []), ensure_ascii=False)
