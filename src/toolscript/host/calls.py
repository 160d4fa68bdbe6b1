"""Every tool call of one interpreter, from the frame that made it to its fate.

One concept, though over 500 lines: the ledger of one interpreter's calls from frame to
fate, whose every step reads the same records.

Goal: each call gets exactly one true fate when its script's result is settled (docs/design.md#call-fates).
The host knows what it did (dispatched, answered, gave up, refused); only the kernel knows
whether code received the answer. The fate joins the two:

- `refused`: never dispatched.
- `pending`: no answer when settled, or the host gave up on the handler (`tool_timeout`) or
  lost its source (`source_gone`): the effect may still come.
- `seen`: the kernel said the code took the answer.
- `late`: answered, but the kernel said the code stopped waiting before the answer reached
  it, or the kernel died before it could say (`interpreter_gone`).
- `unread`: answered, and no code took it.

Memory stays bounded however many calls a script makes: a call whose fate is final is folded
into its script's report (a record for the first 1,000, a count per tool beyond) and dropped.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..kernel.brief import brief
from .journal import AnswerRow, FateRow, Journal, JournalCall, JournalClosedError, StartRow

MAX_TOOL_NAME = 200
"""The longest tool name a call frame's name is kept to; longer is no tool's, and is cut."""
BRIEF_KEPT = 1_000
"""The most characters kept of a brief or a reason the kernel sends with a call it refused."""

MAX_RECORDS = 1000
"""How many calls one result lists one by one; the rest are counted by tool."""

FATES = ("seen", "unread", "late", "pending", "refused")

_ANSWER_LISTED = frozenset(("late", "unread", "refused"))
"""The fates whose record shows the answer: the ones where code did not take it."""


RecordRow = tuple[
    str, str, str, str, "str | None", "str | None", bool, float, "float | None", bool, bool
]
"""One call's record, as a row in the order of `toolscript.CallRecord`'s fields: `id`, `tool`,
`args_brief`, `fate`, `cause`, `answer_brief`, `is_error`, `made_at`, `answered_at`,
`made_before_start`, `answered_from_journal`."""


@dataclass(frozen=True, slots=True)
class SettledCalls:
    """What became of the calls of one script, as plain data: `toolscript.CallReport` wraps it.

    `made` counts calls made while the script ran, `made_before_start` those taken over from
    between scripts; `by_fate` counts every call by fate; `rows` holds at most
    `MAX_RECORDS` calls (calls not `seen` first, past the bound; see `_Tally`); `unlisted`
    counts the rest by tool, and `unlisted_not_seen` those of them whose fate is not `seen`.
    """

    made: int = 0
    made_before_start: int = 0
    by_fate: dict[str, int] = field(default_factory=dict)
    rows: tuple[RecordRow, ...] = ()
    unlisted: dict[str, int] = field(default_factory=dict)
    unlisted_not_seen: dict[str, int] = field(default_factory=dict)


CallReport = SettledCalls
"""The name `host.interpreter`'s `Outcome` knows it by."""


class _Call:
    __slots__ = (
        "answer_brief",
        "answer_sent",
        "answered_at",
        "args_brief",
        "before_start",
        "earlier",
        "folded",
        "from_journal",
        "host_cause",
        "id",
        "is_error",
        "kernel_seen",
        "made_at",
        "refused",
        "script",
        "tool",
        "unwaited",
    )

    def __init__(
        self, call_id: str, tool: str, args_brief: str, script: str | None, made_at: float
    ) -> None:
        self.id = call_id
        self.tool = tool
        self.args_brief = args_brief
        self.script = script
        self.made_at = made_at
        self.answered_at: float | None = None
        self.answer_sent = False  # the host answered it (a value, an error, a refusal)
        self.answer_brief: str | None = None
        self.is_error = False
        self.refused = False
        self.host_cause: str | None = None
        self.kernel_seen = False
        self.unwaited: tuple[str, bool] | None = None
        self.before_start = False
        self.folded = False
        self.from_journal = False  # answered by a host that is gone, delivered by this one
        self.earlier = False  # made under a host that is gone, with no answer in the journal


class _Tally:
    """One script's report while it is being built.

    `records` keeps at most `MAX_RECORDS` calls, in the order they were settled. Once it is
    full, a call whose fate is not `seen` takes the place of the latest `seen` one kept (that
    one is then counted in `unlisted`): the calls the model must be told of are the ones a
    long script's report must not lose. A place given up is `None` until the report is built.
    """

    __slots__ = (
        "by_fate",
        "kept",
        "made",
        "made_before_start",
        "open",
        "records",
        "seen_at",
        "unlisted",
        "unlisted_not_seen",
    )

    def __init__(self) -> None:
        self.made = 0
        self.made_before_start = 0
        self.by_fate: Counter[str] = Counter()
        self.records: list[RecordRow | None] = []
        self.kept = 0
        self.seen_at: list[int] = []  # where `seen` records are in `records`
        self.unlisted: Counter[str] = Counter()
        self.unlisted_not_seen: Counter[str] = Counter()
        self.open: dict[int, _Call] = {}

    def fold(self, call: _Call, fate: str, cause: str | None) -> None:
        call.folded = True
        self.by_fate[fate] += 1
        if self.kept >= MAX_RECORDS:
            if fate == "seen" or not self.seen_at:
                self.unlisted[call.tool] += 1
                if fate != "seen":
                    self.unlisted_not_seen[call.tool] += 1
                return
            place = self.seen_at.pop()
            given_up = self.records[place]
            assert given_up is not None
            self.unlisted[given_up[1]] += 1
            self.records[place] = None
            self.kept -= 1
        elif fate == "seen":
            self.seen_at.append(len(self.records))
        self.kept += 1
        self.records.append(
            (
                call.id,
                call.tool,
                call.args_brief,
                fate,
                cause,
                call.answer_brief
                if fate in _ANSWER_LISTED or call.answered_at is not None
                else None,
                call.is_error,
                call.made_at,
                call.answered_at,
                call.before_start,
                call.from_journal,
            )
        )

    def rows(self) -> tuple[RecordRow, ...]:
        return tuple(row for row in self.records if row is not None)


class ProtocolViolation(ValueError):
    """A frame claimed what the host knows to be false: the script wrote to the channel.

    `script` names the script to blame when it is not the one running (None: that one).
    """

    def __init__(self, message: str, script: str | None = None) -> None:
        super().__init__(message)
        self.script = script


class NotJournaled(Exception):
    """Calls the journal could not record (a full disk, say), so they were not made: their
    numbers, refused in the ledger, and why, for the kernel's answers."""

    def __init__(self, numbers: list[int], reason: str) -> None:
        super().__init__(reason)
        self.numbers = numbers
        self.reason = reason


class CallLedger:
    """The calls of one interpreter (one generation), grouped by the script they belong to.

    The kernel's word is checked against what the host knows, never simply believed: calls
    come numbered 1, 2, 3, ... in the order they were made (the kernel numbers them so), and
    each is acknowledged at most once, `seen` only after the host answered it. A frame that
    says otherwise was written by the script, and raises `ProtocolViolation` before its
    claim changes any call. (A call whose fate is final is let go of; a claim about it can
    change nothing and is not checked.)
    """

    def __init__(self, prefix: str, shell: str, journal: Journal) -> None:
        self._prefix = prefix
        self._shell = shell
        self._journal = journal
        self._calls: dict[int, _Call] = {}
        self._next = 1  # the number the next call frame must carry
        self._taken_back = False  # calls before this host's are the other host's to check
        self._script: str | None = None
        self._tally: _Tally | None = None
        self._between = _Tally()
        self._stopped: str | None = None  # a script stopped, until the next one begins

    @property
    def prefix(self) -> str:
        """What its calls' ids start with: `<token>-<generation>`."""
        return self._prefix

    def continue_numbering(self) -> None:
        """Take the next call's number from its frame: another host saw the calls before
        (a kernel taken back from a keeper), so the count goes on from where it was."""
        self._next = 0
        self._taken_back = True

    @property
    def in_flight(self) -> int:
        return sum(1 for call in self._calls.values() if call.answered_at is None)

    def begin_script(self, script_id: str) -> None:
        """Open the report of a new script; it takes over calls made between scripts."""
        tally = self._between
        self._between = _Tally()
        tally.made_before_start = tally.made
        tally.made = 0
        self._script = script_id
        self._tally = tally
        self._stopped = None

    # Goal: after a stop, no code of the script goes on, and none calls a tool. What fails:
    # taking a call made between two scripts as one of the code a finished script left to
    # run (a task, a thread: allowed, and reported in the next script's result): after a
    # stop, the kernel has ended all of that, or said it could not (and the interpreter is
    # replaced). What we do: a call that comes after a stopped script's `done` and before the
    # next script is code the script kept from the stop: a protocol violation.
    def script_stopped(self, script_id: str) -> None:
        """The kernel said script `script_id` was stopped: nothing of it may call a tool
        before the next script begins."""
        self._stopped = script_id

    def made(self, frames: list[dict[str, Any]]) -> list[tuple[int, _Call, dict[str, Any]]]:
        """Register call frames and journal them in one transaction, before any is acted on.

        Returns `(n, call, args)` for each call to dispatch; refused ones are settled here.
        Raises `ValueError` for a frame that is not a well-formed call, `ProtocolViolation`
        for one out of its turn (both protocol faults).
        """
        starts: list[StartRow] = []
        todo: list[tuple[int, _Call, dict[str, Any]]] = []
        calls, prefix, shell, running = self._calls, self._prefix, self._shell, self._script
        between = self._between
        current = self._tally if self._tally is not None else between
        made_at = time.time()  # one reading for the frames of one read
        broken = True  # until every frame was taken
        try:
            for frame in frames:
                n = frame.get("n")
                tool = frame.get("tool")
                if type(n) is not int or type(tool) is not str:
                    raise ValueError("a call frame without a number and a tool name")
                if len(tool) > MAX_TOOL_NAME:
                    # No tool has such a name: only code that calls the kernel's own `invoke`
                    # sends one. It is refused as unknown; kept whole, it would swell the
                    # host's memory, the journal and every report that names the call.
                    tool = tool[:MAX_TOOL_NAME] + "…"
                if self._stopped is not None:
                    raise ProtocolViolation(
                        f"a call came after script {self._stopped} was stopped: code the "
                        "script started ran on past its stop",
                        self._stopped,
                    )
                if n != self._next and (self._next != 0 or n < 1):
                    raise ProtocolViolation(
                        f"a call numbered {_number(n)} came where call {self._next} was due "
                        "(the interpreter numbers its calls one after another)"
                    )
                refused = frame.get("refused")
                args = frame.get("args")
                if refused is None and type(args) is not dict:
                    raise ValueError("a call frame whose arguments are not an object")
                self._next = n + 1
                script = frame.get("script")
                script_id = script if script == running and script is not None else None
                args_brief = (
                    str(frame.get("brief", ""))[:BRIEF_KEPT] if refused is not None else brief(args)
                )
                call = _Call(f"{prefix}.{n}", tool, args_brief, script_id, made_at)
                calls[n] = call
                # Made while no script ran: the next script's report lists it as made before
                # it started, even if its fate is settled (seen) before that script begins.
                tally = current if script_id is not None else between
                call.before_start = tally is between
                tally.made += 1
                tally.open[n] = call
                starts.append((call.id, script_id, shell, tool, args_brief, made_at))
                if refused is not None:
                    call.refused = True
                    call.answer_brief = str(refused)[:BRIEF_KEPT]
                else:
                    assert type(args) is dict
                    todo.append((n, call, args))
            broken = False
        finally:
            # Calls before a frame that was not one were made all the same: journaled, though
            # not dispatched (the interpreter is replaced), so they are reported pending.
            try:
                self._journal.record_calls(starts)
            except OSError as error:
                if not broken:
                    # Recorded before it is acted on, or not made at all: the host's own
                    # trouble, not the script's, and the interpreter stays.
                    reason = (
                        "the host could not record the call in its journal "
                        f"({error.strerror or error}), so it did not make it"
                    )
                    for n, _, _ in todo:
                        self.refuse(n, reason)
                    raise NotJournaled([n for n, _, _ in todo], reason) from None
        return todo

    def recovered(
        self, frames: list[dict[str, Any]], journaled: set[str]
    ) -> list[tuple[int, _Call, dict[str, Any]]]:
        """Register calls a host that is gone may have read (their frames as the kernel sent
        them again), outside the order of numbers; journal those whose ids are not in
        `journaled`. Returns `(n, call, args)` for each, as `made` does."""
        starts: list[StartRow] = []
        todo: list[tuple[int, _Call, dict[str, Any]]] = []
        made_at = time.time()
        for frame in frames:
            n, tool, args = frame.get("n"), frame.get("tool"), frame.get("args")
            if type(n) is not int or type(tool) is not str or type(args) is not dict:
                raise ValueError("a held call without a number, a tool name and arguments")
            if n in self._calls:
                continue  # read again from the channel by this host: dispatched already
            script = frame.get("script")
            script_id = script if script == self._script and script is not None else None
            call = _Call(f"{self._prefix}.{n}", tool, brief(args), script_id, made_at)
            self._calls[n] = call
            tally = self._tally if script_id is not None and self._tally is not None else None
            tally = tally or self._between
            call.before_start = tally is self._between
            tally.made += 1
            tally.open[n] = call
            if call.id not in journaled:
                starts.append((call.id, script_id, self._shell, tool, call.args_brief, made_at))
            todo.append((n, call, args))
        self._journal.record_calls(starts)
        return todo

    # Goal: a script taken back from a keeper gets a report of every call it made, whatever
    # host saw each, and every such call its fate. What fails: reporting only what this host
    # saw (the calls the kernel still holds, and those made after): the calls answered by a
    # host that is gone were missing from the result, and those whose fate the kernel had
    # not yet given stayed in flight in the journal for good. What we do: the running
    # script's calls the journal holds from before (`earlier`, all hosts) join its report:
    # those with a fate, as they are; the others as this host's own open calls, settled by
    # the kernel's word or by the script's end, as any call.
    def adopt(self, earlier: Iterable[JournalCall]) -> None:
        """Join the running script's report with its calls made before this host took its
        kernel back, except those the kernel holds (answered through `recovered`)."""
        tally = self._tally
        if tally is None:
            return
        for record in earlier:
            _, _, number = record.call_id.rpartition(".")
            n = int(number) if number.isdigit() else None
            if n is None or n in self._calls:
                continue
            call = _Call(
                record.call_id, record.tool, record.args_brief, self._script, record.made_at
            )
            call.answered_at = record.answered_at
            call.answer_sent = record.answered_at is not None
            call.answer_brief = record.answer_brief
            call.is_error = bool(record.is_error)
            call.refused = record.fate == "refused"
            tally.made += 1
            if record.fate is not None:
                tally.fold(call, record.fate, record.cause)
            else:
                if record.cause is not None:  # answered by its host, not its tool (`in_doubt`)
                    call.host_cause = record.cause
                    call.answer_sent = True
                elif record.answered_at is None:
                    # The host before may have sent its answer and died before it journaled
                    # it: the kernel's word that it arrived is then all there is to go on.
                    call.earlier = True
                self._calls[n] = call
                tally.open[n] = call

    def tool_of(self, n: int) -> str:
        """The tool that call `n` is for, while the ledger holds the call."""
        call = self._calls.get(n)
        return call.tool if call is not None else "the tool"

    def refuse(self, n: int, reason: str) -> None:
        """A call the host would not dispatch (unknown tool, invalid arguments)."""
        call = self._calls.get(n)
        if call is not None:
            call.refused = True
            call.answer_sent = True
            call.answer_brief = reason
            call.is_error = True

    def answered(self, n: int, is_error: bool, value: Any, host_cause: str | None = None) -> None:
        """The handler answered, or the host gave up on it (`host_cause`)."""
        if host_cause is not None:
            call = self._calls.get(n)
            if call is not None:
                call.host_cause = host_cause
                call.answer_sent = True
                if host_cause == "in_doubt":
                    self._journal.mark_in_doubt([call.id])
            return
        self.answered_all([(n, is_error, value, None)])

    def answered_all(self, answers: Iterable[tuple[int, bool, Any, bytes | None]]) -> None:
        """Handlers answered: `(n, is_error, value, frame)` each, journaled together; `frame`
        is the answer as sent to the kernel (kept by the journal until the code has seen it)."""
        now = time.time()
        rows: list[AnswerRow] = []
        calls = self._calls
        for n, is_error, value, frame in answers:
            call = calls.get(n)
            if call is None:
                continue
            call.answered_at = now
            call.answer_sent = True
            call.is_error = is_error
            call.answer_brief = text = brief(value)
            rows.append((call.id, now, is_error, text, frame))
            if call.folded:
                del calls[n]
        if rows:
            self._journal.record_answers(rows)

    def answered_late(self, n: int, call_id: str, is_error: bool, value: Any) -> None:
        """Call `n` (`call_id`), which the host gave up on at its tool's timeout
        (`host_cause`), ended after all, with `value`: journaled as its late answer, so its
        effect is no longer in doubt. Its fate stays `pending` (the script never had the
        answer); its script's report, if not made yet, carries the answer too."""
        now, text = time.time(), brief(value)
        call = self._calls.get(n)
        if call is not None and call.id == call_id and not call.folded:
            call.answered_at, call.is_error, call.answer_brief = now, is_error, text
        with contextlib.suppress(JournalClosedError, OSError):  # closed meanwhile, or full
            self._journal.record_answers([(call_id, now, is_error, text, None)])

    def answered_from_journal(
        self, n: int, is_error: bool, answer_brief: str, answered_at: float | None
    ) -> None:
        """A host that is gone journaled call `n`'s answer and died before it reached the
        kernel; this host delivers it from the journal, which has it already."""
        call = self._calls.get(n)
        if call is not None:
            call.answered_at = answered_at
            call.answer_sent = True
            call.is_error = is_error
            call.answer_brief = answer_brief
            call.from_journal = True

    def acknowledged(
        self, acks: Iterable[Any] = (), seen: Iterable[Any] = (), on_call: object = None
    ) -> None:
        """The kernel's word on calls: `seen` holds the numbers of calls whose answer code
        took; each of `acks` is `[n, "unwaited", cause, arrived]` (or `[n, "seen"]`).
        `on_call`: the number of the call whose frame carried them, when one did; only
        earlier calls can be acknowledged there, whatever the host did since.

        Raises `ProtocolViolation` for a claim the host knows to be false (see the class),
        `ValueError` for one that is not a claim at all; the claims before it stand.
        """
        fates: list[FateRow] = []  # journaled together: one buffer lock for a gather's acks
        carrier = on_call if type(on_call) is int else None
        try:
            for n in seen:
                if type(n) is not int:
                    raise ValueError("a 'seen' acknowledgement that is not a call number")
                if carrier is not None and n >= carrier:
                    raise _not_yet(n, carrier)
                self._seen(n, fates)
            for ack in acks:
                if type(ack) is not list or len(ack) < 2:
                    raise ValueError("an acknowledgement that is not a list of at least two items")
                n = ack[0]
                if type(n) is not int:
                    raise ValueError("an acknowledgement that is not of a call number")
                if carrier is not None and n >= carrier:
                    raise _not_yet(n, carrier)
                if ack[1] == "seen":
                    self._seen(n, fates)
                elif ack[1] == "unwaited" and len(ack) >= 4:
                    self._unwaited(n, ack[2], ack[3])
                else:
                    raise ValueError("an acknowledgement of an unknown kind")
        finally:
            if fates:
                self._journal.settle_calls(fates)

    def recalled(self, acks: object, seen: object) -> None:
        """The kernel's acknowledgements sent lately, said again when this host took it back
        (`holding`): the host before may have read them and died before it recorded them.
        Those about calls this ledger holds unacknowledged count as if just sent (and are
        checked as such): a call seen, or one whose answer arrived, if it was answered; a
        call its code stopped waiting for before an answer came, answered or not. The others
        change nothing: recorded already, by a host, or about an answer the journal lacks
        (the host before may have sent it and died before it journaled it), which this host
        cannot check."""
        calls = self._calls
        fates: list[FateRow] = []

        def unacknowledged(n: object, answered: bool) -> bool:
            call = calls.get(n) if type(n) is int else None
            return (
                call is not None
                and (call.answer_sent or call.earlier or not answered)
                and not call.kernel_seen
                and call.unwaited is None
            )

        try:
            for n in seen if type(seen) is list else ():
                if unacknowledged(n, True):
                    self._seen(n, fates)
            for ack in acks if type(acks) is list else ():
                unwaited = type(ack) is list and len(ack) >= 4 and ack[1] == "unwaited"
                if unwaited and unacknowledged(ack[0], ack[3] is not False):
                    self._unwaited(ack[0], ack[2], ack[3])
        finally:
            if fates:
                self._journal.settle_calls(fates)

    def _acknowledgeable(self, n: int, claim: str) -> _Call | None:
        """The call `n` that a claim is about, if the ledger still holds it; raises
        `ProtocolViolation` if it was never made or was acknowledged already."""
        call = self._calls.get(n)
        if call is None:
            if self._taken_back and type(n) is int and (self._next == 0 or 0 < n < self._next):
                return None  # a call the host before this one answered, or this one settled
            if not 0 < n < self._next:
                raise ProtocolViolation(
                    f"the kernel said the answer of call {_number(n)} was {claim}, but no such "
                    "call was made"
                )
            return None  # its fate is final and it was let go: the claim changes nothing
        if call.kernel_seen or call.unwaited is not None:
            raise ProtocolViolation(
                f"the kernel said the answer of call {n} ({call.tool}) was {claim}, but it "
                "had already acknowledged that call"
            )
        return call

    def _seen(self, n: int, fates: list[FateRow]) -> None:
        call = self._calls.get(n)
        if call is not None and call.earlier:
            call.answer_sent = True  # answered by the host before, unjournaled: see `adopt`
        if call is None or call.kernel_seen or call.unwaited is not None or not call.answer_sent:
            call = self._acknowledgeable(n, "seen")
            if call is None:
                return
            raise ProtocolViolation(
                f"the kernel said the answer of call {n} ({call.tool}) was seen, but the "
                "host had not answered that call"
            )
        call.kernel_seen = True
        tally = self._open_tally(n)
        if tally is not None and not call.refused and call.host_cause is None:
            del tally.open[n]
            tally.fold(call, "seen", None)
            fates.append((call.id, "seen", None))
            if call.answered_at is not None:
                del self._calls[n]

    def _unwaited(self, n: int, cause: object, arrived: object) -> None:
        call = self._acknowledgeable(n, "not waited for")
        if call is None:
            return
        if cause not in _UNWAITED_CAUSES or type(arrived) is not bool:
            raise ValueError("an 'unwaited' acknowledgement without a known cause")
        if call.refused and not call.answer_sent:
            raise ProtocolViolation(
                f"the kernel said it stopped waiting for call {n} ({call.tool}), which it "
                "had refused itself and never waited for"
            )
        if arrived and call.earlier:
            call.answer_sent = True  # answered by the host before, unjournaled: see `adopt`
        if arrived and not call.answer_sent:
            raise ProtocolViolation(
                f"the kernel said the answer of call {n} ({call.tool}) had arrived, but the "
                "host had not answered that call"
            )
        call.unwaited = (str(cause), arrived)

    def settle(self, interpreter_gone: bool) -> SettledCalls:
        """Close the running script's report: every call it made gets its fate now."""
        tally = self._tally or _Tally()
        if not tally.made and not tally.made_before_start and not tally.open:
            self._tally = None
            self._script = None
            return SettledCalls()  # the common case of a script that called no tool
        fates: list[FateRow] = []
        for n, call in list(tally.open.items()):
            fate, cause = _fate(call, interpreter_gone)
            tally.fold(call, fate, cause)
            fates.append((call.id, fate, cause))
            if fate != "pending" or call.host_cause is not None:
                self._calls.pop(n, None)  # nothing more can come that the journal needs
        if fates:
            self._journal.settle_calls(fates)
        self._tally = None
        self._script = None
        order = {fate: i for i, fate in enumerate(FATES)}
        by_fate = dict(sorted(tally.by_fate.items(), key=lambda item: order[item[0]]))
        return SettledCalls(
            tally.made,
            tally.made_before_start,
            by_fate,
            tally.rows(),
            dict(tally.unlisted),
            dict(tally.unlisted_not_seen),
        )

    def _open_tally(self, n: int) -> _Tally | None:
        if self._tally is not None and n in self._tally.open:
            return self._tally
        if n in self._between.open:
            return self._between
        return None


_UNWAITED_CAUSES = frozenset(("timeout", "cancelled", "stopped"))
"""Why the kernel says code stopped waiting for a call."""


def _not_yet(n: int, carrier: int) -> ProtocolViolation:
    return ProtocolViolation(
        f"the kernel acknowledged call {_number(n)} on the frame of call {carrier}: a frame "
        "can only acknowledge calls made before its own"
    )


def _number(n: object) -> str:
    """A call number from a frame, for a message: short whatever the frame held."""
    return str(n) if type(n) is int and -(10**12) < n < 10**12 else "out of any range"


def _fate(call: _Call, interpreter_gone: bool) -> tuple[str, str | None]:
    if call.refused:
        return "refused", None
    if call.host_cause is not None:
        return "pending", call.host_cause
    if call.kernel_seen:
        return "seen", None
    if call.answered_at is not None:
        if call.unwaited is not None:
            cause, arrived = call.unwaited
            return ("unread" if arrived else "late"), cause
        if interpreter_gone:
            return "late", "interpreter_gone"
        return "unread", None
    if call.unwaited is not None:
        return "pending", call.unwaited[0]
    if interpreter_gone:
        return "pending", "interpreter_gone"
    return "pending", None
