"""What a run tells its caller: `ScriptResult`, its `CallReport` of `CallRecord`s, and the
words of its note.

One concept, though over 500 lines: everything a script's caller (and the model) reads of a
run is written here, so the fields, the text that puts the decisive facts first
(docs/design.md#how-a-script-can-end) and the sentences that explain a stop, a crash or a
fresh interpreter cannot drift apart. The host hands over plain data (an `Outcome` and its
`SettledCalls`); this module turns it into words.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import FrozenInstanceError, dataclass, field
from typing import TYPE_CHECKING, Any

from .host.calls import RecordRow, SettledCalls
from .host.images import ScriptImage
from .host.interpreter import Outcome
from .host.journal import JournalCall
from .host.output import cut_head, cut_middle
from .kernel.cells import VALUE_KEPT, bounded
from .tools.spec import NEVER_RAN

if TYPE_CHECKING:
    from .config import Settings

__all__ = ["CallRecord", "CallReport", "ScriptResult"]

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
    "in_doubt": "the host restarted while it was in flight",
}


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One tool call and its fate, as a script's result reports it.

    `answered_from_journal` says the host restarted after the tool answered and before the
    answer reached the interpreter: the next host sent the answer the journal kept (or, for
    one too large to keep, an error saying so).
    """

    id: str
    """The call's id, the same in the journal (`toolscript calls`)."""
    tool: str
    """The tool's name as the script called it (`server.tool` for an MCP tool)."""
    args_brief: str
    """The call's arguments, cut to a line: `channel_id='a', text='hi'`."""
    fate: str
    """`seen`, `unread`, `late`, `pending` or `refused` (README, "Call fates")."""
    cause: str | None
    """Why a call the host answered itself ended so: `timeout`, `cancelled`, `stopped`,
    `interpreter_gone`, `tool_timeout`, `source_gone` or `in_doubt`; None for a tool's own
    answer."""
    answer_brief: str | None
    """The start of the answer (or of the error it raised); None while there is none."""
    is_error: bool
    """Whether the answer was an error (the script got a `ToolError`)."""
    made_at: float
    """When the script made the call (seconds since the epoch)."""
    answered_at: float | None
    """When the answer came; None for a call with no answer (`pending`, `refused`)."""
    made_before_start: bool = False
    """Made before this script started, by a task an earlier script left running."""
    answered_from_journal: bool = False
    """The answer reached the script from the journal, after a host restart."""

    def to_dict(self) -> dict[str, Any]:
        """The same fields, JSON-safe."""
        return {
            "id": self.id,
            "tool": self.tool,
            "args_brief": self.args_brief,
            "fate": self.fate,
            "cause": self.cause,
            "answer_brief": self.answer_brief,
            "is_error": self.is_error,
            "made_at": self.made_at,
            "answered_at": self.answered_at,
            "made_before_start": self.made_before_start,
            "answered_from_journal": self.answered_from_journal,
        }


class CallReport:
    """What became of the tool calls of one script.

    `made` counts calls made while the script ran, `made_before_start` those taken over from
    between scripts (made by tasks an earlier script left running). `by_fate` counts every
    call by fate; `records` lists at most 1,000 one by one, the first ones, except that a call
    not `seen` takes the place of a `seen` one past that bound; `unlisted` counts the rest by
    tool, and `unlisted_not_seen` those of the rest whose fate is not `seen`. Immutable, like
    the records it holds.
    """

    # Goal: a tool call costs the host little. What fails: a `CallRecord` made for every call
    # as its fate is known, when most results are read only for their counts and their calls
    # that were not seen. What we do: the ledger hands over each record's fields as a row
    # (`RecordRow`), and the records are made the first time `records` is read.
    __slots__ = (
        "_records",
        "_rows",
        "by_fate",
        "made",
        "made_before_start",
        "unlisted",
        "unlisted_not_seen",
    )

    made: int
    """Calls the script made while it ran."""
    made_before_start: int
    """Calls taken over from between scripts: made by tasks an earlier script left running."""
    by_fate: dict[str, int]
    """Every call counted by its fate: `{"seen": 2, "pending": 1}`."""
    unlisted: dict[str, int]
    """The calls past the first 1,000, which `records` does not list, counted by tool."""
    unlisted_not_seen: dict[str, int]
    """Of `unlisted`, the calls whose fate is not `seen`, counted by tool (there are such only
    when more than 1,000 calls were not seen: those take the listed places first)."""
    _records: tuple[CallRecord, ...] | None  # None until made from `_rows`
    _rows: tuple[RecordRow, ...]

    def __init__(
        self,
        made: int = 0,
        made_before_start: int = 0,
        by_fate: dict[str, int] | None = None,
        records: Iterable[CallRecord] = (),
        unlisted: dict[str, int] | None = None,
        unlisted_not_seen: dict[str, int] | None = None,
    ) -> None:
        init = object.__setattr__
        init(self, "made", made)
        init(self, "made_before_start", made_before_start)
        init(self, "by_fate", {} if by_fate is None else by_fate)
        init(self, "unlisted", {} if unlisted is None else unlisted)
        init(self, "unlisted_not_seen", {} if unlisted_not_seen is None else unlisted_not_seen)
        init(self, "_records", tuple(records))
        init(self, "_rows", ())

    @classmethod
    def _of_rows(
        cls,
        made: int,
        made_before_start: int,
        by_fate: dict[str, int],
        rows: Iterable[RecordRow],
        unlisted: dict[str, int],
        unlisted_not_seen: dict[str, int] | None = None,
    ) -> CallReport:
        report = cls(made, made_before_start, by_fate, (), unlisted, unlisted_not_seen)
        object.__setattr__(report, "_records", None)
        object.__setattr__(report, "_rows", tuple(rows))
        return report

    @classmethod
    def _of_settled(cls, settled: SettledCalls) -> CallReport:
        """The report of the calls the host's ledger settled for one script."""
        return cls._of_rows(
            settled.made,
            settled.made_before_start,
            settled.by_fate,
            settled.rows,
            settled.unlisted,
            settled.unlisted_not_seen,
        )

    @property
    def records(self) -> tuple[CallRecord, ...]:
        """The first 1,000 calls, one record each, in the order their fates were known."""
        records: tuple[CallRecord, ...] | None = self._records
        if records is None:
            records = tuple([CallRecord(*row) for row in self._rows])
            object.__setattr__(self, "_records", records)
            object.__setattr__(self, "_rows", ())
        return records

    @property
    def not_seen(self) -> list[CallRecord]:
        """The listed calls whose fate is not `seen`: the ones the agent must think about."""
        if self._records is None:
            return [CallRecord(*row) for row in self._rows if row[3] != "seen"]
        return [record for record in self._records if record.fate != "seen"]

    @property
    def all_seen(self) -> bool:
        """Whether the script saw the answer of every call it made (and took over)."""
        return self.by_fate.get("seen", 0) == self.made + self.made_before_start

    def to_dict(self) -> dict[str, Any]:
        """The same facts, JSON-safe, with every listed record."""
        return {
            "made": self.made,
            "made_before_start": self.made_before_start,
            "by_fate": dict(self.by_fate),
            "records": [record.to_dict() for record in self.records],
            "unlisted": dict(self.unlisted),
            "unlisted_not_seen": dict(self.unlisted_not_seen),
        }

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not CallReport:
            return NotImplemented
        return (
            self.made == other.made
            and self.made_before_start == other.made_before_start
            and self.by_fate == other.by_fate
            and self.records == other.records
            and self.unlisted == other.unlisted
            and self.unlisted_not_seen == other.unlisted_not_seen
        )

    __hash__ = None  # type: ignore[assignment]  # like the dataclass it was: it holds dicts

    def __repr__(self) -> str:
        return (
            f"CallReport(made={self.made!r}, made_before_start={self.made_before_start!r}, "
            f"by_fate={self.by_fate!r}, records={self.records!r}, unlisted={self.unlisted!r}, "
            f"unlisted_not_seen={self.unlisted_not_seen!r})"
        )


@dataclass(frozen=True, slots=True)
class ScriptResult:
    """How one script ended, what it printed, and what became of every tool call it made."""

    status: str
    """How it ended: `ok`, `error`, `time_limit`, `cancelled`, `crashed` (the interpreter
    died; its state is gone) or `refused` (nothing ran)."""
    stdout: str = ""
    """What it printed, cut in the middle past `output_limit` (the cut says so)."""
    stderr: str = ""
    """What it wrote to stderr, cut as `stdout` is."""
    value: str | None = None
    """The `repr` of its last expression's value, as a string (`"'done'"` for the string
    `done`), or None when the last statement was not an expression or it did not finish."""
    error: str | None = None
    """The traceback of the exception that ended it, or None."""
    note: str = ""
    """What the caller must know of how it ended (a stop, a crash, a restart, the check's
    warnings), in words for the model; empty when there is nothing to say."""
    calls: CallReport = field(default_factory=CallReport)
    """What became of every tool call it made."""
    generation: int = 0
    """The interpreter's generation in its shell: a new one means the variables are gone."""
    script_id: str = ""
    """The script's id, the same in the journal (`toolscript calls --script`)."""
    shell: str = ""
    """The shell it ran in."""
    time_limit: float | None = None
    """The time limit it ran under, in seconds."""
    duration: float = 0.0
    """Seconds from its start to its end."""
    log_path: str | None = None
    """A background script's log file, with all it printed; None for a foreground run."""
    text_limit: int = TEXT_LIMIT
    """The cap, in characters, on `text`."""
    images: tuple[ScriptImage, ...] = ()
    """The images the script showed (`show(...)`), within `max_images` and `image_limit`."""

    def __post_init__(self) -> None:
        # The value, the error and the runner's words may carry text the script chose (a
        # `__repr__`, an exception's message, a name in a forged frame), lone surrogates
        # included: escaped here, as the output streams are, so the result can always be
        # written as UTF-8 (the CLI's print, `serve`'s JSON, `to_dict`).
        for name in ("value", "error", "note"):
            text = getattr(self, name)
            if text is not None and not _encodes(text):
                object.__setattr__(self, name, _escape_surrogates(text))

    @property
    def exit_code(self) -> int:
        """0 when the script finished without error, 1 otherwise."""
        return 0 if self.status == "ok" else 1

    @property
    def ok(self) -> bool:
        """Whether it finished without error (`status == "ok"`)."""
        return self.status == "ok"

    @property
    def text(self) -> str:
        """What the model reads: decisive facts first, output cut to fit `text_limit`."""
        return render_text(self)

    def to_dict(self) -> dict[str, Any]:
        """The same facts, structured and JSON-safe, and `text`, what the model reads."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "note": self.note,
            "text": self.text,
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
            "images": [{"mime_type": image.mime_type, "size": image.size} for image in self.images],
        }


def _encodes(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escape_surrogates(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def render_text(result: ScriptResult) -> str:
    parts = [f"exit {result.exit_code} · {result.status}"]
    if result.note:
        parts.append(result.note)
    call_lines = render_calls(result.calls, result.status)
    if call_lines:
        parts.append(call_lines)
    if result.images:
        shown = ", ".join(f"{image.mime_type} {image.size:,} bytes" for image in result.images)
        parts.append(f"images: {len(result.images)} shown ({shown})")
    head = "\n".join(parts)
    if len(head) > result.text_limit // 2:
        # The runner's words and the call lines are bounded each; this bounds them together,
        # whatever a forged frame brought into them.
        head = cut_middle("\n\n".join(parts), max(result.text_limit // 2, 2_000))
        parts = [head]
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
        cut = _cut_output if title in ("stdout", "stderr") else _cut_kernel_cut
        parts.append(f"{title}:\n{cut(body, share)}")
    return "\n\n".join(parts) + "\n"


_CAPTURE_CUT = re.compile(r"\n… ([\d,]+) bytes of output cut …\n")


def _cut_output(body: str, limit: int) -> str:
    """A stream's text cut to `limit` as `cut_middle` does; where the capture already cut
    its middle (`output_limit`), the two cuts are one, and its mark states both."""

    def mark(found: re.Match[str], more: int) -> str:
        if more:
            return f"{found.group(1)} bytes of output and {more:,} more characters cut"
        return f"{found.group(1)} bytes of output cut"

    return _one_cut(body, limit, _CAPTURE_CUT, mark)


_KERNEL_CUT = re.compile(r"\n… \[(.{1,40}?) was ([\d,]+) characters: ([\d,]+) are cut here\] …\n")


def _cut_kernel_cut(body: str, limit: int) -> str:
    """A value or an error cut to `limit` as `cut_middle` does; where the kernel already cut
    its middle (`VALUE_KEPT`), the two cuts are one, and its mark states all that was cut."""

    def mark(found: re.Match[str], more: int) -> str:
        cut = int(found.group(3).replace(",", "")) + more
        return f"[{found.group(1)} was {found.group(2)} characters: {cut:,} are cut here]"

    return _one_cut(body, limit, _KERNEL_CUT, mark)


def _one_cut(
    body: str, limit: int, earlier: re.Pattern[str], mark: Callable[[re.Match[str], int], str]
) -> str:
    """`body` cut to `limit`, its middle first: where an `earlier` cut's mark is, the new cut
    takes its place, and `mark` says both (given that mark and how many more characters go)."""
    found = earlier.search(body)
    if found is None or len(body) <= limit:
        return cut_middle(body, limit)
    head, tail = body[: found.start()], body[found.end() :]
    keep = max(limit, 2)
    kept_head = min(keep // 2, len(head))
    kept_tail = min(keep - kept_head, len(tail))
    more = len(head) - kept_head + len(tail) - kept_tail
    return f"{head[:kept_head]}\n… {mark(found, more)} …\n{tail[len(tail) - kept_tail :]}"


def render_output(stdout: str, stderr: str, limit: int) -> str:
    """A running script's output so far, as its result's text will show it (stderr, then
    stdout), but each stream cut to the last lines of its share of `limit`."""
    sections = [
        (title, body.rstrip("\n"))
        for title, body in (("stderr", stderr), ("stdout", stdout))
        if body.strip()
    ]
    shares = _share(limit, [len(body) for _, body in sections])
    return "\n\n".join(
        f"{title}:\n{_cut_output_head(body, share)}"
        for (title, body), share in zip(sections, shares, strict=True)
    )


def _cut_output_head(body: str, limit: int) -> str:
    """A stream's last lines as `cut_head` keeps them; where the capture's own cut mark falls
    in what is cut, the mark states both cuts."""
    found = _CAPTURE_CUT.search(body)
    kept = cut_head(body, limit)
    if found is None or kept == body or _CAPTURE_CUT.search(kept) is not None:
        return kept
    _, _, rest = kept.partition("\n")  # `… N characters cut …`, then the lines kept
    more = len(body) - len(rest) - (found.end() - found.start())
    return f"… {found.group(1)} bytes of output and {more:,} more characters cut …\n{rest}"


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


_KEPT_SLACK = 200
"""Room past `VALUE_KEPT` for the kernel's own mark of what it cut."""


def _kept(text: object, what: str) -> str | None:
    """A `done`'s value or error as the kernel bounds it (`VALUE_KEPT`): a script can forge
    its `done`, and one holding tens of megabytes would be kept whole in the result."""
    if not isinstance(text, str):
        return None
    return text if len(text) <= VALUE_KEPT + _KEPT_SLACK else bounded(text, what)


def render_calls(report: CallReport, status: str) -> str:
    """The call lines: counts first, then up to ten calls whose fate is not `seen` (or that
    were made before the script started)."""
    total = report.made + report.made_before_start
    if total == 0:
        return ""
    if status == "ok" and report.all_seen and not report.made_before_start:
        return ""
    fates = ", ".join(f"{count} {fate}" for fate, count in report.by_fate.items())
    line = f"calls: {report.made} made"
    if report.made_before_start:
        line += f", {report.made_before_start} made before this script started"
    line += f" ({fates})"
    lines = [line]
    not_seen = report.not_seen
    if report.made_before_start:
        # Made by code an earlier script left running, while no script ran: seen or not,
        # the model did not make them in this script, so each is named.
        not_seen += [r for r in report.records if r.fate == "seen" and r.made_before_start]
    for record in not_seen[:MAX_NAMED_CALLS]:
        lines.append(f"- {describe_call(record)}")
    rest = Counter(record.tool for record in not_seen[MAX_NAMED_CALLS:])
    rest.update(report.unlisted_not_seen)  # past the listed records: only those not seen
    if rest:
        common = rest.most_common()
        counted = ", ".join(
            f"{shown_name(tool)} ×{count}" for tool, count in common[:MAX_NAMED_CALLS]
        )
        if len(common) > MAX_NAMED_CALLS:
            others = sum(count for _, count in common[MAX_NAMED_CALLS:])
            counted += f", and {others:,} calls of {len(common) - MAX_NAMED_CALLS:,} other tools"
        lines.append(f"- and more, not named here: {counted}")
    return "\n".join(lines)


def describe_call(record: CallRecord) -> str:
    """One call in plain words: the tool, its arguments, its fate and what that means."""
    call = f"{shown_name(record.tool)}({_one_line(record.args_brief, 400)})"
    cause = _CAUSE_WORDS.get(record.cause or "", "")
    if record.fate == "seen":
        return f"{call}: answered and seen{_from_journal_words(record)}"
    if record.fate == "refused":
        return (
            f"{call}: refused before it was sent, so it did not happen "
            f"({_one_line(record.answer_brief, 400)})"
        )
    if record.fate == "pending":
        if record.cause == "tool_timeout" and record.answered_at is not None:
            if record.is_error and (record.answer_brief or "")[1:].startswith(NEVER_RAN):
                # Given up while it waited for a thread: dropped before it began.
                return (
                    f"{call}: pending: the host gave up waiting at the tool's timeout before "
                    "a thread could begin it, so it never ran: it did not happen"
                )
            # A synchronous tool's thread, which cannot be stopped, ended after all.
            return (
                f"{call}: pending: the host gave up waiting at the tool's timeout, but the "
                f"tool finished later, so it happened; the script never saw it"
                f"{_answer_words(record)}"
            )
        if record.cause == "tool_timeout":
            why = "the host gave up waiting at the tool's timeout"
        elif record.cause == "source_gone":
            why = "the tool's server stopped while the call was in flight"
        elif record.cause == "in_doubt":
            why = "the host restarted while it was in flight (the script got ToolError)"
        elif record.cause == "interpreter_gone":
            why = "the interpreter died before an answer came"
        elif cause:
            why = f"no answer had come when {cause}"
        else:
            why = "no answer had come when the script ended"
        return f"{call}: pending: {why}, so it may still take effect"
    answer = _answer_words(record) + _from_journal_words(record)
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


def shown_name(tool: str) -> str:
    """A tool's name as a report shows it: as it is when it is a short printable name (every
    real tool's is), else quoted and cut, so that a name sent by code that went around the
    bound tools can neither add lines to the report nor swell it."""
    if len(tool) <= 120 and tool.isprintable():
        return tool
    return _one_line(tool, 120, quoted=True)


def _one_line(text: str | None, limit: int, *, quoted: bool = False) -> str:
    """`text` on one line, within about `limit` characters (control characters escaped)."""
    text = text or ""
    if not quoted and len(text) <= limit and text.isprintable():
        return text
    shown = repr(text[:limit])[1:-1] if quoted or not text.isprintable() else text[:limit]
    if len(shown) > limit:
        shown = shown[:limit]
    more = f"… ({len(text):,} characters)" if len(text) > limit else ""
    return f"'{shown}'{more}" if quoted else f"{shown}{more}"


def _from_journal_words(record: CallRecord) -> str:
    if not record.answered_from_journal:
        return ""
    return " (the host restarted before sending the answer; the next host sent it from the journal)"


def _answer_words(record: CallRecord) -> str:
    if record.answer_brief is None:
        return ""
    kind = "an error" if record.is_error else "the answer"
    return f"; {kind} began: {_one_line(record.answer_brief, 400)}"


def restart_words(keeper_stop: str | None, what: str = "script") -> str:
    """What a result followed across a host's restart says of it, by what the keeper did
    while no host was attached (`RunningScript.keeper_stop`); `what` names the script."""
    if keeper_stop == "killed":
        happened = (
            "the keeper that held its interpreter stopped it at its time limit while no "
            "host was attached, and killed the interpreter when it did not stop within "
            "the grace period"
        )
    elif keeper_stop == "interrupted":
        happened = (
            "the interpreter was kept, and the keeper interrupted the script at its time "
            "limit while no host was attached"
        )
    else:
        happened = "the interpreter was kept, and the script went on"
    return (
        f"The host restarted while this {what} ran; {happened}. Output the script wrote "
        "before the restart is missing where the host that ended had already read it."
    )


def check_words(findings: Sequence[object], *, refused: bool) -> str:
    """The note on what the check before running found: one finding a line."""
    count = f"{len(findings)} problem{'s' if len(findings) != 1 else ''}"
    if refused:
        head = (
            f"Nothing ran: the check before running found {count} in this script, "
            f"so none of its tool calls were made. Fix {'it' if len(findings) == 1 else 'them'} "
            "and run it again:"
        )
    else:
        head = f"The check before running found {count} (the script ran anyway):"
    return "\n".join([head, *(str(finding) for finding in findings)])


def result_from(
    outcome: Outcome,
    settings: Settings,
    limit: float,
    notes: list[str],
    *,
    generation: int,
    script_id: str,
    shell: str,
    duration: float,
    log_path: str | None = None,
    one_off: bool = False,
) -> ScriptResult:
    """The result of a script that ran: its status, and a note that says what the caller
    must know of how it ended (after `notes`, the runner's own). `one_off`: it ran in an
    interpreter of its own (a background script), which nothing runs in after it."""
    report = outcome.report
    ending = outcome.ending
    value = _kept(report.get("value"), "the value's repr")
    error = _kept(report.get("error"), "the traceback")
    words: list[str] = []
    if ending == "ok":
        status = "ok"
    elif ending == "error":
        status = "error"
        if report.get("memory"):
            status = "crashed"
            words.append(
                "The interpreter ran out of memory (MemoryError under the address-space limit "
                f"of {_size(settings.limits.get('address_space'))}). It was replaced: its state "
                "is gone. Look for large lists, strings or data frames built in memory."
            )
    elif ending == "stopped" and (
        report.get("threads_left") or report.get("timers_left") or report.get("processes_left")
    ):
        status = "time_limit" if outcome.stop_reason == "time_limit" else "cancelled"
        words.append(
            _stop_words(outcome.stop_reason, limit, settings, killed=False, one_off=one_off).split(
                " It"
            )[0]
        )
        words.append(
            (
                f"{report['threads_left']} thread(s) were still running after the stop "
                "(started by this script or an earlier one), and a thread cannot be stopped "
                "from outside"
                if report.get("threads_left")
                else f"{report['timers_left']} timer(s) the script set (a POSIX timer, or an "
                "interval timer set again while it was stopped) were still armed after the "
                "stop, and each would run code of the script's"
                if report.get("timers_left")
                else f"{report['processes_left']} process(es) the script started were still "
                "running after the stop, though the interpreter said it had ended them all "
                "(the script kept them from it)"
            )
            + ", so the interpreter was "
            + (
                "killed."
                if one_off
                else "replaced. Its state is gone: variables, imports and tasks; the next run "
                "starts a fresh interpreter."
            )
        )
    elif ending == "stopped":
        status = "time_limit" if outcome.stop_reason == "time_limit" else "cancelled"
        words.append(
            _stop_words(outcome.stop_reason, limit, settings, killed=False, one_off=one_off)
        )
        closed = report.get("connections_closed")
        if isinstance(closed, int) and closed > 0 and not one_off:
            words.append(
                f"The stop closed {closed} connection(s) or server(s) open on the "
                "interpreter's event loop (this script's or an earlier one's): what their "
                "code would do when data came is the script's, and nothing of it runs after a "
                "stop. Open them again if they are needed."
            )
    elif ending == "killed":
        status = "time_limit" if outcome.stop_reason == "time_limit" else "cancelled"
        words.append(
            _stop_words(
                outcome.stop_reason,
                limit,
                settings,
                killed=True,
                one_off=one_off,
                hurried=report.get("hurried") is True,
            )
        )
        partial = report.get("partial_frame")
        if isinstance(partial, int) and partial > 0:
            words.append(
                f"The interpreter's channel to the host held the start of a frame "
                f"({partial:,} bytes) whose end never came, which code that writes to that "
                "private channel leaves: the interpreter's word that the script had ended "
                "may have been lost in it."
            )
    elif ending == "broken":
        status = "crashed"
        broken = report.get("broken")
        if outcome.never_started:
            words.append(
                "Nothing of this script ran: the interpreter's own descriptors were found closed "
                f"or replaced before it began ({broken}), by something an earlier script left "
                "running. It was replaced: its variables, imports and tasks are gone, and the "
                "next run starts a fresh interpreter."
            )
        else:
            words.append(
                f"The interpreter's own descriptors were closed or replaced ({broken}), most "
                "likely by the script (os.close, os.closerange or os.dup2 over a number it did "
                "not open), so it could not go on and was replaced: its variables, imports and "
                "tasks are gone, and the next run starts a fresh interpreter. Close or overwrite "
                "only the descriptors the script opened itself."
            )
    elif ending == "fault":
        status = "crashed"
        words.append(
            f"The script broke the protocol between its interpreter and the host: "
            f"{outcome.fault}. Script code must not write to the interpreter's private channel. "
            "The interpreter was killed: its state is gone, and the next run starts a fresh "
            "interpreter."
        )
    else:
        status = "crashed"
        words.append(_crash_words(outcome.exit_description, one_off=one_off))
    exit_value = report.get("exit")
    if ending == "ok" and exit_value == 0 and "error" not in report:
        words.append("The script called sys.exit(0); it ended as ok and the interpreter stays.")
    if outcome.images_dropped:
        words.append(outcome.images_dropped)
    never = report.get("never_awaited")
    if isinstance(never, list) and never:
        # Tool names as the kernel says them; a script can patch the kernel's code, so they
        # are shown as any name a frame brings: few, short and on one line.
        distinct = sorted({shown_name(str(name)[:1_000]) for name in never[:10_000]})
        names = ", ".join(distinct[:MAX_NAMED_CALLS])
        if len(distinct) > MAX_NAMED_CALLS:
            names += f" and {len(distinct) - MAX_NAMED_CALLS:,} more"
        words.append(
            f"{len(never)} tool call(s) were created but never awaited, so they did not run: "
            f"{names}. Use `await` on each call."
        )
    return ScriptResult(
        status=status,
        stdout=outcome.stdout.text,
        stderr=outcome.stderr.text,
        value=value,
        error=error,
        note="\n".join(notes + words),
        calls=CallReport._of_settled(outcome.calls),
        time_limit=limit,
        text_limit=settings.text_limit,
        generation=generation,
        script_id=script_id,
        shell=shell,
        duration=duration,
        log_path=log_path,
        images=outcome.images,
    )


CLOSING = "the runtime was closed"
"""The stop reason of a script whose runtime closes: its interpreter closes too."""

SHELL_CLOSING = "the shell was closed"
"""The stop reason of a script whose shell closes: its interpreter closes too."""

COMMAND_STOPPED = "toolscript exec was stopped by "
"""The start of the stop reason of a script whose `toolscript exec` got a signal (the
signal's name follows): the command, and the interpreter with it, ends after the stop."""

_DEFAULT_CANCEL = "cancelled by the caller"


def _closes_with_stop(reason: str | None) -> bool:
    """Whether a stop for `reason` ends the interpreter too, so nothing of it is kept."""
    said = reason or ""
    return said in (CLOSING, SHELL_CLOSING) or said.startswith((COMMAND_STOPPED, SHELL_CLOSING))


def _stop_words(
    reason: str | None,
    limit: float,
    settings: Settings,
    *,
    killed: bool,
    one_off: bool = False,
    hurried: bool = False,
) -> str:
    if reason == "time_limit":
        first = f"Stopped at the time limit of {limit:g} s."
        more = (
            f" To allow more time, run again with a larger time_limit (at most "
            f"{settings.max_time_limit:g} s), or split the work."
        )
    elif _closes_with_stop(reason):
        # Nobody cancelled it: what it ran in closed (the runtime, the shell, the command).
        first = f"Stopped: {reason}."
        more = ""
    else:
        first = (
            "Cancelled by the caller."
            if reason in (None, "", "cancelled", _DEFAULT_CANCEL)
            else f"Cancelled by the caller ({reason})."
        )
        more = ""
    late = (
        "It was cancelled again before it had stopped, so"
        if hurried
        else f"It did not stop within {settings.grace:g} s of the interrupt, so"
    )
    if one_off:
        # Its interpreter was its own and ends with it: nothing is kept, nothing runs next.
        how = (
            f"{late} its interpreter was killed."
            if killed
            else "It was interrupted and stopped within the grace period."
        )
        return f"{first} {how}{more}"
    if killed:
        return (
            f"{first} {late} the interpreter was killed: its variables, imports and tasks are gone"
            + (
                "."
                if _closes_with_stop(reason)
                else f", and the next run starts a fresh interpreter.{more}"
            )
        )
    if _closes_with_stop(reason):
        # Its interpreter closes with the runtime (or the shell): nothing of it is kept.
        return (
            f"{first} It was interrupted and stopped within the grace period, and the "
            "interpreter closed then: its variables are gone."
        )
    return (
        f"{first} It was interrupted and stopped within the grace period; the interpreter "
        f"and its variables are kept.{more}"
    )


def _crash_words(exit_description: str | None, *, one_off: bool = False) -> str:
    what = exit_description or "exit status unknown"
    if "with the keeper" in what:
        cause = "the keeper process that held the interpreter exited, and every interpreter it held died with it"
        look = "what ended the keeper (its command line has 'keeper' and the state folder)"
    elif "with the template" in what:
        cause = (
            "the template process the interpreter was forked from died (it was killed from "
            "outside?), and every interpreter forked from it died with it"
        )
        look = "what ended the template process; the script did not cause this"
    elif "SIGSEGV" in what or "SIGBUS" in what:
        cause = "a crash in C code: an extension module, ctypes, or a corrupted object"
        look = "native calls (ctypes, C extensions) near the end of the script"
    elif "SIGABRT" in what:
        cause = "os.abort(), or a fatal error or failed assertion inside C code"
        look = "the end of stderr for a fatal error message"
    elif "SIGKILL" in what:
        cause = "it was killed from outside: often the system's out-of-memory killer"
        look = "memory use: large data built in memory, or many processes"
    elif "SIGXCPU" in what:
        cause = "it used up its CPU-time limit"
        look = "long computations; raise the cpu_time limit if this is expected"
    elif "SIGXFSZ" in what:
        cause = "it wrote a file over the file-size limit"
        look = "large files written by the script"
    elif what.startswith("exit code"):
        cause = "the process ended itself: os._exit(), or a fatal error in the interpreter"
        look = "os._exit calls, and the end of stderr"
    else:
        cause = "it was ended by a signal"
        look = "the end of stderr"
    said = f"The interpreter died ({what}). Likely cause: {cause}. What to look for: {look}."
    return (
        said if one_off else f"{said} Its state is gone: the next run starts a fresh interpreter."
    )


def reset_words(outcome: Outcome, status: str) -> str:
    """Why the interpreter that ran `outcome` was replaced, for the next run's note."""
    if outcome.report.get("threads_left"):
        return "a thread the previous script started was still running after its stop"
    if outcome.report.get("timers_left"):
        return "a timer the previous script set was still armed after its stop"
    if outcome.report.get("processes_left"):
        return "a process the previous script started was still running after its stop"
    if outcome.ending == "killed":
        return "the previous one was killed because it did not stop after the interrupt"
    if outcome.ending == "fault":
        return f"the previous one was killed because a script broke the protocol ({outcome.fault})"
    if outcome.ending == "broken":
        return broken_reset_words(str(outcome.report.get("broken")))
    if outcome.report.get("memory"):
        return "the previous one ran out of memory"
    return f"the previous one died ({outcome.exit_description or 'exit status unknown'})"


def broken_reset_words(broken: str) -> str:
    """Why an interpreter whose own descriptors were closed or replaced was replaced."""
    return f"a script closed or replaced the previous one's own descriptors ({broken})"


def uncertain_words(calls: list[JournalCall]) -> str:
    """The note on calls a gone host left in flight, told once to the shell that made them."""
    shown = "; ".join(f"{call.tool}({call.args_brief})" for call in calls[:10])
    more = f"; and {len(calls) - 10} more" if len(calls) > 10 else ""
    return (
        f"{len(calls)} tool call(s) made by this shell before the host restarted have an "
        f"unknown outcome (they were in flight when the host stopped, so they may or may not "
        f"have taken effect): {shown}{more}."
    )


def _size(value: int | None) -> str:
    if value is None:
        return "none"
    return f"{value / 1024**3:g} GiB" if value >= 1024**3 else f"{value / 1024**2:g} MiB"
