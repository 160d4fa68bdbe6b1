"""Answering one kernel's tool calls: check each, run its handler, journal and send its answer.

The path of a call through the host is `Channel.received → Channel._handle →
Dispatcher.dispatch → Dispatcher._answer → Channel.send_frames`: no task, no object and no
pass of the event loop of its own for a handler that answers without waiting.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..kernel import wire
from ..kernel.brief import brief
from ..tools.spec import CallIdentity, ToolOutcome, current_call, left_running
from . import codec
from .calls import CallLedger, NotJournaled
from .catalogue import (
    Answer,
    ToolCatalogue,
    Waiting,
    answer_of,
    gave_up_before_it_began,
    never_began,
)
from .journal import ANSWER_KEPT, TakenCall

if TYPE_CHECKING:
    from .channel import Channel

_EAGER = sys.version_info >= (3, 12)
"""Whether tasks can run their first step at once (`eager_start`, Python 3.12)."""
_EAGER_START: dict[str, Any] = {"eager_start": True}

_HOST_CAUSES = ("tool_timeout", "source_gone", "in_doubt")
"""The answers that are the host's own word that it gave up, not the handler's."""


class Dispatcher:
    """The calls of one kernel: recorded in `ledger`, answered from `catalogue` through
    `channel` (set once, right after both are made)."""

    channel: Channel

    def __init__(
        self, ledger: CallLedger, catalogue: ToolCatalogue, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.ledger = ledger
        self.catalogue = catalogue
        self._loop = loop
        self._tasks: set[asyncio.Task[Any]] = set()
        self._waiting_tools: set[str] = set()  # tools whose handler had to wait, by key

    def abandon(self) -> None:
        """Cancel the handlers still running (the runtime is closing): their calls stay
        unanswered, pending."""
        for task in list(self._tasks):
            task.cancel()

    def dispatch(self, frames: list[wire.Message]) -> None:
        """Record call frames, refuse the ones the catalogue rejects, answer the rest."""
        todo: list[_Todo] = []
        try:
            made = self.ledger.made(frames)
        except NotJournaled as failure:
            for n in failure.numbers:
                self.channel.send(Answer("refused", message=failure.reason).to_frame(n))
            return
        for n, call, args in made:
            key = call.tool
            problem = self.catalogue.check(key, args)
            if problem is not None:
                self.ledger.refuse(n, problem)
                self.channel.send(Answer("refused", message=problem).to_frame(n))
                continue
            todo.append((n, key, args, (call.id, call.script, False)))
        if todo:
            # Its first step runs now where tasks can start eagerly (3.12): handlers that
            # need no wait answer before this returns, without a pass of the event loop.
            self._answer_soon(todo, 0, eager=_EAGER)

    # Goal: after a restart, every call the kernel still waits on gets exactly one truthful
    # answer, and no call runs twice unless its tool says a repeat is safe. What fails:
    # dispatching them all again (a transfer made twice), or answering them all "unknown"
    # (a call the old host never read would never run at all). What we do: the kernel says
    # which calls it still waits on (`held`), and the journal, which records every call
    # before it is dispatched, says how far the old host got with each:
    # - not journaled: the old host never dispatched it (it never read the frame, or died
    #   before it could record it): dispatched now, as usual; its effect had not begun. With
    #   a journal in memory, which began with this host, not journaled says nothing: such a
    #   call is in doubt, as below;
    # - journaled with an answer: the tool ran and answered, but the answer never reached the
    #   kernel: the journal kept it as it was to be sent (its frame), and it is sent now, so
    #   the script gets the value or the tool's error it would have got; the call's record
    #   says it was answered from the journal. An answer too large for the journal to keep
    #   whole (over `ANSWER_KEPT`) is an error saying so, with the start the journal kept;
    # - journaled without an answer: in doubt, it may have taken effect. A tool that says a
    #   repeat is safe (`idempotent`, `read_only`) gets it again, with the same idempotency
    #   key; any other is answered `ToolError` with cause `in_doubt`, and the journal and the
    #   result keep it uncertain. So is a call that this host cannot make again (its tool is
    #   gone, say, or its server did not start, or the arguments no longer fit the tool):
    #   only a call the old host never dispatched is refused, as any call would be.

    def recover(
        self,
        frames: list[dict[str, Any]],
        journaled: Mapping[str, TakenCall],
        remembered: bool = True,
    ) -> None:
        """Answer the calls a kernel taken back from a keeper still waits on (`frames`, as it
        sent them again), given what the journal holds of them, by call id. `remembered`:
        whether the journal outlived the host before (a file); a journal in memory began with
        this host, so a call missing from it may have been dispatched, and is in doubt."""
        todo: list[_Todo] = []
        for n, call, args in self.ledger.recovered(frames, set(journaled)):
            before = journaled.get(call.id)
            key = call.tool
            if before is not None and before.call.answered_at is not None:
                # It ran and answered: its answer stands, whatever this host's tools are now.
                self._answer_from_journal(n, key, before)
                continue
            # Checked against this host's tools only now: a call the host before made is
            # not refused ("it did not happen") because this host lacks its tool, or its
            # arguments no longer fit; it stays in doubt.
            problem = self.catalogue.check(key, args)
            if before is None and remembered:  # never dispatched: a call like any other
                if problem is not None:
                    self.ledger.refuse(n, problem)
                    self.channel.send(Answer("refused", message=problem).to_frame(n))
                else:
                    todo.append((n, key, args, (call.id, call.script, False)))
            elif problem is None and self.catalogue.repeat_is_safe(key):
                todo.append((n, key, args, (call.id, call.script, True)))
            else:
                message = f"{key}: the host restarted while this call was in flight; it may have taken effect. "
                if problem is not None:
                    message += (
                        f"It could not be made again on this host ({problem}): check before "
                        "you repeat it."
                    )
                else:
                    message += (
                        "It was not made again, since the tool does not say a repeat is safe: "
                        "check before you repeat it."
                    )
                if before is None:
                    message += (
                        " (The journal is in memory, so nothing tells whether the host before "
                        "had made it.)"
                    )
                self._answered_all([(n, Answer("in_doubt", message=message))])
        if todo:
            self._answer_soon(todo, 0, eager=_EAGER)

    def _answer_from_journal(self, n: int, key: str, taken: TakenCall) -> None:
        """Send call `n` the answer a host that is gone journaled and never sent."""
        call = taken.call
        frame = taken.answer_frame
        if frame is not None:
            is_error, said = bool(call.is_error), call.answer_brief or ""
        else:
            message = (
                f"{key}: the tool ran and answered, but the host restarted before the answer "
                "reached the script, and the answer was too large for the journal to keep "
                f"(over {ANSWER_KEPT >> 20} MiB); it kept only its start: {call.answer_brief or ''}"
            )
            frame = codec.encode(Answer("error", message, message).to_frame(n))
            is_error, said = True, brief(message)
        self.ledger.answered_from_journal(n, is_error, said, call.answered_at)
        self.channel.send_frames([frame])

    def _answer_soon(self, todo: list[_Todo], start: int, eager: bool) -> None:
        if eager:
            task = asyncio.Task(self._answer(todo, start), loop=self._loop, **_EAGER_START)
            if not task.done():
                self._tasks.add(task)
        else:
            task = self._loop.create_task(self._answer(todo, start))
            if not _started_now(self._loop, task):
                self._tasks.add(task)

    async def _answer(self, todo: list[_Todo], start: int) -> None:
        """Answer the calls `todo[start:]`, as many as can be in this one task.

        Goal: a call costs what its handler costs, and most handlers (Python tools) answer
        without waiting. What fails: a task per call, which costs more than such a handler
        (its creation, a pass of the loop, its bookkeeping). What we do: run the calls'
        handlers one after another in one task, each in its own copy of the context, as a
        task of its own would. A handler that has to wait keeps this task, which waits for
        it: whatever it tied to the current task in its first step (a timeout, a cancel
        scope) is tied to the task that goes on running it. The calls after it go on in new
        tasks, at once (`_answer_rest`).
        """
        answered: list[tuple[int, Answer]] = []  # journaled and sent together
        begin = self.catalogue.begin
        try:
            for i in range(start, len(todo)):
                n, key, args, identity = todo[i]
                context = contextvars.copy_context()
                try:
                    begun = context.run(_begin_as, identity, begin, key, args)
                except asyncio.CancelledError:
                    # Nothing cancelled this task mid-step: the handler raised it itself.
                    answered.append((n, _cancelled_itself(key)))
                    continue
                if type(begun) is Answer:
                    answered.append((n, begun))
                    continue
                assert isinstance(begun, Waiting)
                self._waiting_tools.add(key)
                if i + 1 < len(todo):
                    self._answer_rest(todo, i + 1)
                if answered:  # the calls before this one that answered at once
                    done, answered = answered, []
                    self._answered_all(done)
                started = self._loop.time()
                try:
                    answer = await self.catalogue.finish(begun, context)
                except asyncio.CancelledError:
                    task = asyncio.current_task(self._loop)
                    if task is None or task.cancelling():
                        raise  # the runtime is closing: the call stays unanswered, pending
                    answer = _cancelled_itself(key)
                waited = self._loop.time() - started
                late = context.get(left_running) if answer.kind == "tool_timeout" else None
                if late is not None and never_began(late):
                    answer = gave_up_before_it_began(key, begun.timeout)
                self._answered_all([(n, answer)], self.channel.still_polling(waited))
                if late is not None:
                    late.add_done_callback(functools.partial(self._late, n, identity[0], key))
                return
        finally:
            if answered:
                self._answered_all(answered)
            # Not a done callback: that would cost every call another pass of the loop.
            self._tasks.discard(asyncio.current_task(self._loop))

    # Goal: the calls of a `gather` to a tool that waits (an MCP server's) all go out at once,
    # so the server has the whole burst in front of it, as it has from the SDK's own client.
    # What fails: handing all the calls after a waiting one to a single new task: that task
    # starts one call, which waits too and hands the rest to yet another task, so the calls
    # start one per pass of the event loop, between the answers coming in, and a burst of
    # 200 trickles out over most of its time. What we do: the calls after a waiting one are
    # cut into runs that each end with a call to a tool whose handler waited before; each run
    # gets its own task, all made now (in order, so they start in order, on the next pass).
    # Calls to tools that answer at once still share a task, as in `_answer`.
    def _answer_rest(self, todo: list[_Todo], start: int) -> None:
        """Start the calls `todo[start:]` in new tasks, a task per run that ends with a call
        to a tool known to wait."""
        waiting = self._waiting_tools
        first = start
        for i in range(start, len(todo)):
            if todo[i][1] in waiting:
                self._answer_soon(todo[first : i + 1], 0, eager=False)
                first = i + 1
        if first < len(todo):
            self._answer_soon(todo[first:], 0, eager=False)

    def _late(self, n: int, call_id: str, key: str, late: asyncio.Future[ToolOutcome]) -> None:
        """The work a handler left running when the host gave up on it at its timeout (a
        synchronous tool's thread) ended: its outcome is the call's late answer."""
        if not late.cancelled():
            answer = answer_of(key, late.result())
            self.ledger.answered_late(n, call_id, answer.kind != "value", answer.value)

    def _answered_all(self, answers: list[tuple[int, Answer]], reply_due: bool = True) -> None:
        """Send handlers' answers, then journal them; `reply_due` as `Channel.send_frames`.

        The kernel reads an answer while the host journals it: both happen before the host
        reads another frame, so the kernel's word on an answer always finds it journaled,
        and a crash between the two loses no more than the journal's unflushed buffer would.
        An answer the channel cannot carry (over `wire.MAX_FRAME`, or not JSON) becomes an
        error answer saying so: the script gets a `ToolError`, the interpreter stays.
        """
        encode = codec.encode
        frames: list[bytes] = []
        for i, (n, answer) in enumerate(answers):
            try:
                frame = encode(answer.to_frame(n))
            except (TypeError, ValueError, RecursionError, MemoryError) as error:
                problem = f"could not be sent as JSON ({type(error).__name__}: {error})"
                advice = (
                    "A tool's answer must be JSON data (dicts, lists, strings, numbers, "
                    "booleans, None)."
                )
            else:
                if len(frame) <= wire.LONGEST_FRAME:
                    frames.append(frame)
                    continue
                problem = (
                    f"was {len(frame) / 1e6:,.0f} MB as JSON, over the {wire.MAX_FRAME >> 20} "
                    "MiB limit of the interpreter's channel, so it was not sent"
                )
                advice = "Ask it for less at a time."
            message = (
                f"the answer of {self.ledger.tool_of(n)} {problem}. The tool ran, so its effect "
                f"happened. {advice}"
            )
            answer = Answer("error", message, message)
            answers[i] = (n, answer)
            frames.append(encode(answer.to_frame(n)))
        self.channel.send_frames(frames, reply_due)
        self.ledger.answered_all(
            (n, answer.kind != "value", answer.value, frame)
            for (n, answer), frame in zip(answers, frames, strict=True)
            if answer.kind not in _HOST_CAUSES
        )
        for n, answer in answers:
            if answer.kind in _HOST_CAUSES:
                self.ledger.answered(n, True, None, host_cause=answer.kind)


# Goal: on Python 3.11 too, a handler that answers without waiting costs no pass of the event
# loop. What fails: `create_task`, whose first step waits for the loop's next pass: a second
# `select` system call and pass per call, on cold caches after the kernel's write woke us.
# Running the handler's first step outside a task fails too: `asyncio.timeout()` and
# `current_task()` in it would find no task, or not the one that goes on running it. What we
# do: what 3.12's `eager_start` does, by hand: the task's first step, which `create_task`
# just queued, is taken back off the loop's queue and run at once, as the task itself, when
# no other task is running (a protocol's callback) on asyncio's own loop; anywhere else the
# step stays queued, as before.
def _started_now(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> bool:
    """Run `task`'s first step now if it can be; whether the task is done after it."""
    ready: Any = getattr(loop, "_ready", None)  # asyncio's queue of callbacks, if it has one
    if (
        type(ready) is not collections.deque
        or not ready
        or _current_task(loop) is not None
        or getattr(ready[-1]._callback, "__self__", None) is not task
    ):
        return False
    ready.pop()._run()
    return bool(task.done())


_current_task = asyncio.current_task


_Todo = tuple[int, str, dict[str, Any], CallIdentity]
"""A call to answer: its number, its tool, its arguments, and its identity for the handler."""


def _begin_as(
    identity: CallIdentity,
    begin: Callable[[str, dict[str, Any]], Answer | Waiting],
    key: str,
    args: dict[str, Any],
) -> Answer | Waiting:
    """Begin a handler in the current context, which names the call it answers."""
    current_call.set(identity)
    return begin(key, args)


def _cancelled_itself(key: str) -> Answer:
    """The answer to a call whose handler raised `CancelledError` when nothing cancelled it
    (it awaited a task that someone cancelled, say): an error the script can see, rather than
    a call that never answers."""
    message = (
        f"{key}: the tool's handler was cancelled (it raised CancelledError). It may have "
        "taken effect in part: check before you repeat it."
    )
    return Answer("error", message, message)
