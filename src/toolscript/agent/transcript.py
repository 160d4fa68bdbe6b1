"""What was said in a turn: the messages the model is sent, and the record of everything.

`history` is the conversation each request carries; `entries` (the `Turn.transcript`) holds,
JSON-safe and in order, every message, every script's result, what streamed of a reply that
was cut off, and each decision of the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .conversation import Message, ModelReply, StreamProgress, ToolResult, ToolResults
from .runtime_protocol import ScriptOutcome
from .turn import Stop


class Transcript:
    """The history of a turn and its record; every entry is written through one method here."""

    def __init__(self) -> None:
        self.history: list[Message] = []
        self.entries: list[dict[str, Any]] = []

    def say(self, message: Message) -> None:
        """Add a message to the conversation the model is sent, and to the record."""
        self.history.append(message)
        self.entries.append(message.to_dict())

    def record_loop(self, event: str, **detail: Any) -> None:
        """Record a decision or an observation of the loop itself."""
        self.entries.append({"role": "loop", "event": event, **detail})

    def record_script(
        self, call_id: str | None, script_id: str, outcome: ScriptOutcome, *, background: bool
    ) -> None:
        """Record a script's result; `call_id` is the run_python call's, `None` for one that
        is reported in a later step."""
        self.entries.append(
            {
                "role": "script",
                "call_id": call_id,
                "script_id": script_id,
                "background": background,
                "status": outcome.status,
                "result": outcome.to_dict(),
            }
        )

    def record_partial(self, progress: StreamProgress, ended: str) -> None:
        """Record what had streamed of a reply that ended as `ended`, if anything had."""
        if progress.content_started:
            self.entries.append(
                {
                    "role": "assistant_partial",
                    "text": "".join(progress.text),
                    "tool_calls": [{"name": name} for name in progress.tool_names],
                    "ended": ended,
                }
            )

    def record_truncated(self, reply: ModelReply) -> None:
        """Record a reply whose stream ended without its terminal event."""
        self.entries.append(
            {
                "role": "assistant_partial",
                "text": reply.text,
                "tool_calls": [call.to_dict() for call in reply.tool_calls],
                "ended": "truncated",
            }
        )

    def record_unsent(self, results: Sequence[ToolResult]) -> None:
        """Record the last step's results, which no request carried to the model."""
        self.entries.append(ToolResults(tuple(results)).to_dict() | {"sent": False})

    def record_stop(self, stop: Stop) -> None:
        """Record how the turn ended."""
        self.entries.append({"role": "stop", "stop_reason": stop.reason, "error": stop.error})
