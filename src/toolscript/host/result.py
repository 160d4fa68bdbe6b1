"""`ScriptResult`: how a script ended and what became of its calls, for code and for the model.

`text` puts first what decides the agent's next step (docs/design.md#how-a-script-can-end), so no cap can push it
out of view: the heading and the runner's note, then the calls whose fate is not `seen`, then
stderr and stdout cut in the middle, then the value.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .calls import CallRecord, CallReport
from .output import cut_middle

STATUSES = ("ok", "error", "time_limit", "cancelled", "crashed", "refused")

TEXT_LIMIT = 20_000
"""The default cap, in characters, on `ScriptResult.text`."""

MAX_NAMED_CALLS = 10

_CAUSE_WORDS = {
    "timeout": "its own timeout passed",
    "cancelled": "the script cancelled it",
    "stopped": "the script was stopped",
    "interpreter_gone": "the interpreter was gone",
    "tool_timeout": "the host gave up at the tool's timeout",
    "source_gone": "the tool's server stopped",
}


@dataclass(frozen=True, slots=True)
class ScriptResult:
    """How one script ended, what it printed, and what became of every tool call it made."""

    status: str
    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    error: str | None = None
    note: str = ""
    calls: CallReport = field(default_factory=CallReport)
    generation: int = 0
    script_id: str = ""
    shell: str = ""
    time_limit: float | None = None
    duration: float = 0.0
    log_path: str | None = None
    text_limit: int = TEXT_LIMIT

    @property
    def exit_code(self) -> int:
        """0 when the script finished without error, 1 otherwise."""
        return 0 if self.status == "ok" else 1

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def text(self) -> str:
        """What the model reads: decisive facts first, output cut to fit `text_limit`."""
        return render_text(self)

    def to_dict(self) -> dict[str, Any]:
        """The same facts, structured and JSON-safe."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "note": self.note,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "value": self.value,
            "error": self.error,
            "calls": self.calls.to_dict(),
            "generation": self.generation,
            "script_id": self.script_id,
            "shell": self.shell,
            "time_limit": self.time_limit,
            "duration": self.duration,
            "log_path": self.log_path,
        }


def render_text(result: ScriptResult) -> str:
    parts = [f"exit {result.exit_code} · {result.status}"]
    if result.note:
        parts.append(result.note)
    call_lines = render_calls(result.calls, result.status)
    if call_lines:
        parts.append(call_lines)
    head = "\n".join(parts)
    room = max(result.text_limit - len(head), 2_000)
    sections: list[tuple[str, str]] = []
    if result.error:
        sections.append(("error", result.error.rstrip("\n")))
    if result.stderr:
        sections.append(("stderr", result.stderr.rstrip("\n")))
    if result.stdout:
        sections.append(("stdout", result.stdout.rstrip("\n")))
    if result.value is not None:
        sections.append(("value", result.value))
    shares = _share(room, [len(body) for _, body in sections])
    for (title, body), share in zip(sections, shares, strict=True):
        parts.append(f"{title}:\n{cut_middle(body, share)}")
    return "\n\n".join(parts) + "\n"


def _share(room: int, sizes: list[int]) -> list[int]:
    """Split `room` among sections: short ones whole, the rest evenly."""
    shares = [0] * len(sizes)
    left = room - 20 * len(sizes)
    pending = sorted(range(len(sizes)), key=lambda i: sizes[i])
    while pending:
        fair = max(left // len(pending), 200)
        i = pending.pop(0)
        shares[i] = min(sizes[i], fair)
        left -= shares[i]
    return shares


def render_calls(report: CallReport, status: str) -> str:
    """The call lines: counts first, then up to ten calls whose fate is not `seen`."""
    total = report.made + report.made_before_start
    if total == 0:
        return ""
    if status == "ok" and report.all_seen:
        return ""
    fates = ", ".join(f"{count} {fate}" for fate, count in report.by_fate.items())
    line = f"calls: {report.made} made"
    if report.made_before_start:
        line += f", {report.made_before_start} made before this script started"
    line += f" ({fates})"
    lines = [line]
    not_seen = report.not_seen
    for record in not_seen[:MAX_NAMED_CALLS]:
        lines.append(f"- {describe_call(record)}")
    rest = Counter(record.tool for record in not_seen[MAX_NAMED_CALLS:])
    rest.update(report.unlisted)
    if rest:
        counted = ", ".join(f"{tool} ×{count}" for tool, count in rest.most_common())
        lines.append(f"- and more, not named here: {counted}")
    return "\n".join(lines)


def describe_call(record: CallRecord) -> str:
    """One call in plain words: the tool, its arguments, its fate and what that means."""
    call = f"{record.tool}({record.args_brief})"
    cause = _CAUSE_WORDS.get(record.cause or "", "")
    if record.fate == "seen":
        return f"{call}: answered and seen"
    if record.fate == "refused":
        return f"{call}: refused before it was sent, so it did not happen ({record.answer_brief})"
    if record.fate == "pending":
        if record.cause == "tool_timeout":
            why = "the host gave up waiting at the tool's timeout"
        elif record.cause == "source_gone":
            why = "the tool's server stopped while the call was in flight"
        elif record.cause == "interpreter_gone":
            why = "the interpreter died before an answer came"
        elif cause:
            why = f"no answer had come when {cause}"
        else:
            why = "no answer had come when the script ended"
        return f"{call}: pending: {why}, so it may still take effect"
    answer = _answer_words(record)
    if record.fate == "late" and record.cause == "interpreter_gone":
        return (
            f"{call}: late: answered, but the interpreter died before it could say whether "
            f"the script received the answer; it happened{answer}"
        )
    if record.fate == "late":
        return f"{call}: late: answered after {cause or 'the script stopped waiting'}; it happened, the script never saw it{answer}"
    if record.fate == "unread":
        why = f" ({cause})" if cause else ""
        return f"{call}: unread: answered, but no code took the answer{why}; it happened{answer}"
    return f"{call}: {record.fate}"


def _answer_words(record: CallRecord) -> str:
    if record.answer_brief is None:
        return ""
    kind = "an error" if record.is_error else "the answer"
    return f"; {kind} began: {record.answer_brief}"
