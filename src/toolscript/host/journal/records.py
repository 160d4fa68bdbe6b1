"""What the journal records and answers: calls as made, answered and settled; calls and
scripts as the journal knows them; and the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class CallStart(NamedTuple):
    """A tool call as the host received it, before anything is done with it.

    `call_id` is unique within one `Journal` (one host); `script_id` is `None` for a call
    made while no script ran. Times are seconds since the epoch.
    """

    call_id: str
    script_id: str | None
    shell: str
    tool: str
    args_brief: str
    made_at: float


ANSWER_KEPT = 1 << 20
"""The longest answer, in bytes of its frame, that the journal keeps whole (1 MiB): a host that
takes back an interpreter can then deliver it, if the host before died before it could. A
longer answer is kept only by its start (`answer_brief`)."""


class CallAnswer(NamedTuple):
    """The answer a call got from its handler: when, whether an error, and its start.

    `answer_frame` is the answer as sent to the kernel (a frame: its length, then its JSON).
    The journal keeps it, if at most `ANSWER_KEPT` bytes, until the script's code has seen the
    answer (the call's fate is `seen`): until then, a host that takes the interpreter back may
    have to deliver it (docs/design.md#the-keeper-interpreters-that-outlive-their-host).
    """

    call_id: str
    answered_at: float
    is_error: bool
    answer_brief: str
    answer_frame: bytes | None = None


class CallFate(NamedTuple):
    """A call's fate when its script's result was settled (docs/design.md#call-fates).

    `fate` is one of `seen`, `unread`, `late`, `pending`, `refused`; `cause` one of
    `timeout`, `cancelled`, `stopped`, `interpreter_gone`, `tool_timeout`, `source_gone`,
    or `None`.
    """

    call_id: str
    fate: str
    cause: str | None


# Goal: journaling costs the host's event loop as little as it can. What fails: an object per
# record, which the garbage collector tracks while it waits in the buffer, and whose count
# brings the collector's full passes sooner. What we do: the write calls take rows, tuples of
# strings and numbers, which the collector stops tracking; the host builds plain tuples, and
# `CallStart`, `CallAnswer` and `CallFate` are the same rows with names, for readers.
StartRow = tuple[str, "str | None", str, str, str, float]
"""A call as `Journal.record_calls` takes it: a `CallStart`, or a plain tuple of its fields."""
AnswerRow = tuple[str, float, bool, str, "bytes | None"]
"""An answer as `Journal.record_answers` takes it: a `CallAnswer`, or a tuple of its fields."""
FateRow = tuple[str, str, "str | None"]
"""A fate as `Journal.settle_calls` takes it: a `CallFate`, or a tuple of its fields."""


@dataclass(frozen=True, slots=True)
class JournalCall:
    """One call as the journal knows it.

    `fate` is `None` while the call is in flight. `uncertain` says its effect is unknown;
    `uncertain_reason` is then `"pending_at_settle"` (no answer had come when its script was
    settled) or `"host_gone"` (the host that made it ended with the call in flight).
    A call settled `pending` that is answered later keeps the fate `pending` (what its
    result reported) but carries the answer and is no longer uncertain.
    """

    call_id: str
    script_id: str | None
    shell: str
    tool: str
    args_brief: str
    made_at: float
    answered_at: float | None
    is_error: bool | None
    answer_brief: str | None
    fate: str | None
    cause: str | None
    uncertain: bool
    uncertain_reason: str | None

    @property
    def idempotency_key(self) -> str:
        """The key the call's tool was given (`CallContext.idempotency_key`, and an MCP
        server's `_meta.idempotencyKey`): the same each time the call is made, a host's
        restart included, so a tool that deduplicates can be checked against it."""
        if self.script_id is None:
            return self.call_id
        return f"{self.script_id}.{self.call_id.rpartition('.')[2]}"


class TakenCall(NamedTuple):
    """A call of a host that is gone, as `Journal.take_over_calls` finds it for the host that
    took its interpreter back: the call as the journal knows it, and its answer as it was to
    be sent to the kernel (`CallAnswer.answer_frame`), if the journal kept it."""

    call: JournalCall
    answer_frame: bytes | None


@dataclass(frozen=True, slots=True)
class JournalScript:
    """One script as the journal knows it. `status` and `ended_at` are `None` until it ends.
    A script whose host died while it ran (its interpreter with it, or later, unkept by a
    keeper) is ended with the status `host_gone` by the next runtime that opens the journal.

    `violation` says how the script broke the protocol between its interpreter and the host
    (a frame it forged), which got its interpreter killed; `None` if it did not.
    """

    script_id: str
    shell: str
    generation: int
    started_at: float
    ended_at: float | None
    status: str | None
    violation: str | None = None


class StreamEvent(NamedTuple):
    """One stored event of a client's stream: its id, the JSON-RPC message as JSON (`None`
    for the event that marks the stream's start), and whether it is the answer ending it."""

    event_id: int
    message: str | None
    is_answer: bool


class ReplayedStream(NamedTuple):
    """The events of one stream after the event a client last saw.

    `answered` says the stream holds its answer (before or after that event); `by_this_host`
    that this host stored some of its events. A stream neither answered nor stored by this
    host was left unanswered by a host that is gone: no answer will come.
    """

    session: str
    stream: str
    events: list[StreamEvent]
    answered: bool
    by_this_host: bool


class ServeSession(NamedTuple):
    """A `toolscript serve` client session as kept for a restarted server: its id, its
    shell's name, its protocol version, its `initialize` parameters (JSON) and when it
    opened (seconds since the epoch)."""

    session_id: str
    shell: str
    protocol_version: str
    client: str
    opened_at: float


class StoredResult(NamedTuple):
    """A background script's result as its client read it: its text and its data (JSON)."""

    script_id: str
    shell: str
    status: str
    text: str
    data: str
    ended_at: float


class JournalVersionError(Exception):
    """The journal was written by a newer toolscript, with a schema this one does not know."""

    def __init__(self, path: str, found: int, known: int) -> None:
        self.path = path
        self.found = found
        self.known = known
        super().__init__(
            f"The journal at {path} has schema version {found}, but this toolscript knows "
            f"versions up to {known}: it was written by a newer toolscript. Upgrade toolscript, "
            f"or point it at another journal (TOOLSCRIPT_STATE, or the journal argument)."
        )


class JournalFileError(Exception):
    """The file given as the journal is not a toolscript journal: not an SQLite database (nor
    empty, nor missing), or the database of another program, left as it was."""

    def __init__(self, path: str, reason: str, *, from_sqlite: bool = True) -> None:
        self.path = path
        said = f"SQLite says: {reason}" if from_sqlite else reason
        super().__init__(
            f"{path} is not a toolscript journal ({said}). Point toolscript at "
            "another file, or at none for the one under the state directory."
        )


class JournalOpenError(JournalFileError):
    """The journal's file cannot be opened or made there (a folder, no permission, ...)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        Exception.__init__(
            self,
            f"cannot open the journal {path!r}: {reason}. Point toolscript at another file, "
            "or at none for the one under the state directory.",
        )


class JournalAccessError(JournalOpenError):
    """The journal's file (or its folder) cannot be opened for writing: read-only, not
    permitted, or locked by another process for longer than the busy timeout. Every open
    journal writes (its host's row, and the calls of hosts that are gone), readers too.
    A `JournalOpenError`, so a `JournalFileError` too."""

    def __init__(self, path: str, reason: str, *, locked: bool = False) -> None:
        self.path = path
        advice = (
            "Another process held it for longer than toolscript waits: try again."
            if locked
            else "A journal is written even to be read: give its file and folder write "
            "access, or point toolscript at another journal (TOOLSCRIPT_STATE, or the "
            "journal argument)."
        )
        Exception.__init__(self, f"The journal at {path} cannot be written ({reason}). {advice}")


class JournalClosedError(Exception):
    """The journal was used after `close()`."""

    def __init__(self) -> None:
        super().__init__("The journal is closed; open a new one with Journal.open().")
