"""What the journal records and answers: calls as made, answered and settled; calls and
scripts as the journal knows them; and the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, once per call
class CallStart:
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


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, once per call
class CallAnswer:
    """The answer a call got from its handler: when, whether an error, and its start."""

    call_id: str
    answered_at: float
    is_error: bool
    answer_brief: str


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, once per call
class CallFate:
    """A call's fate when its script's result was settled (docs/design.md#call-fates).

    `fate` is one of `seen`, `unread`, `late`, `pending`, `refused`; `cause` one of
    `timeout`, `cancelled`, `stopped`, `interpreter_gone`, `tool_timeout`, `source_gone`,
    or `None`.
    """

    call_id: str
    fate: str
    cause: str | None


StartRow = tuple[str, "str | None", str, str, str, float]
"""A `CallStart`'s fields in order: what the host's hot path records (see `record_call_rows`)."""
AnswerRow = tuple[str, float, bool, str]
"""A `CallAnswer`'s fields in order."""
FateRow = tuple[str, str, "str | None"]
"""A `CallFate`'s fields in order."""

# Goal: journaling costs the host's event loop as little as it can, and the buffer holds up
# to FLUSH_INTERVAL worth of calls. What fails: an object per record (a slotted dataclass,
# 0.5 µs to make, three per call), which the collector also tracks: a gather's thousand
# calls leave three thousand in the buffer, old enough by the flush to be walked by the
# collector's older generations, and their count brings its full collections sooner (tens
# of ms each in a host with a big heap). What we do: the host records plain tuples of
# strings and numbers (`record_call_rows` and the two like it), which the collector stops
# tracking at its first look; the dataclasses stay the public way in.


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


@dataclass(frozen=True, slots=True)
class JournalScript:
    """One script as the journal knows it. `status` and `ended_at` are `None` until it ends.

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


class JournalClosedError(Exception):
    """The journal was used after `close()`."""

    def __init__(self) -> None:
        super().__init__("The journal is closed; open a new one with Journal.open().")
