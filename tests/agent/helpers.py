"""Small things the agent's tests share."""

from __future__ import annotations

import json
from typing import Any

from toolscript.agent import ExecutionControl

KEY = "stand-in-key"


def control(**changes: Any) -> ExecutionControl:
    """A control with a short request timeout and no lifetime, changed by `changes`."""
    values: dict[str, Any] = {"request_timeout": 10.0}
    values.update(changes)
    return ExecutionControl(**values)


def said_to_model(body: dict[str, Any]) -> str:
    """Everything in a request's messages, as one text to search."""
    return json.dumps(body.get("messages", []), ensure_ascii=False)
