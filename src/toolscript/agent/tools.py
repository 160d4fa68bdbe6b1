"""The tools the model acts with, and the system prompt that introduces them."""

from __future__ import annotations

from ..actions import run_python_schema, script_id_schema
from .conversation import ActionTool

RUN_PYTHON = ActionTool(
    name="run_python",
    description=(
        "Run Python code in a persistent interpreter (names defined by earlier calls stay "
        "defined). The tools listed in the system prompt are async functions there: call them "
        "with await. Top-level await works; the value of the last expression is shown. The "
        "result says how the script ended and what became of every tool call it made. With "
        "background=true the call returns at once with the script's id, and the script's "
        "result arrives as a message when it ends."
    ),
    input_schema=run_python_schema(),
)

SCRIPT_STATUS = ActionTool(
    name="script_status",
    description="Whether a background script is still running, and its result if it ended.",
    input_schema=script_id_schema(),
)

CANCEL_SCRIPT = ActionTool(
    name="cancel_script",
    description="Stop a background script and show its result.",
    input_schema=script_id_schema(),
)

FINISH = ActionTool(
    name="finish",
    description=(
        "End the turn: the task is done. Refused while a result of this turn is unread, a "
        "background script is still running, or a tool call a script left pending has not "
        "been named to you; read them, then call finish again."
    ),
    input_schema={
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "What was done."}},
        "required": ["summary"],
    },
)

BLOCK = ActionTool(
    name="block",
    description=(
        "End the turn without finishing: something outside your reach stops you. Refused "
        "under the same conditions as finish."
    ),
    input_schema={
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "What stops you."}},
        "required": ["reason"],
    },
)

ACTION_TOOLS = (RUN_PYTHON, SCRIPT_STATUS, CANCEL_SCRIPT, FINISH, BLOCK)


def system_prompt(catalogue: str, instructions: str | None = None) -> str:
    """The system prompt: how to act, the tool catalogue as Python stubs, and the caller's own
    instructions, if any."""
    parts = [
        "You act by writing Python and running it with the run_python tool. Inside the "
        "script these tools are available as async functions (call them with await):",
        f"```python\n{catalogue.strip()}\n```",
        "Read each result before going on: it says how the script ended and what became of "
        "each tool call. A call reported as still pending had no answer yet and may still "
        "take effect. When the task is done, call finish(summary). If something outside "
        "your reach stops you, call block(reason). Both are refused while a result of yours "
        "is unread, a background script is still running, or a call left pending has "
        "answered since (or was not yet named to you as still pending).",
    ]
    if instructions:
        parts.append(instructions)
    return "\n\n".join(parts)
