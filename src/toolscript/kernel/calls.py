"""Tool calls as the script sees them, and what only the kernel can tell the host about them.

One concept, though over 500 lines: a call's whole life inside the script (its coroutine,
its number, its wait, and what the kernel tells the host of it), whose parts read the same
records.

Goal: the host must learn, for every call, whether the code that made it received the answer.
Timing cannot tell (an answer can arrive while the event loop is held, or after the code gave
up), so the kernel says it, at the moment it happens:

- `seen`: the awaiting code resumed with the answer. When the tool's coroutine is itself the
  top-level coroutine of a task (`create_task(t())`, `gather(t(), ...)`), the answer is held by
  the task, and it counts as seen only when code takes the task's result; gather takes it only
  when every child succeeded, so the siblings of a failed gather stay unread, as they are.
- `unwaited`, with a cause: the code stopped waiting first (the call's own `timeout=`, its
  cancellation by the script's `wait_for`/`gather`/`TaskGroup`, a stop), and whether the answer
  had already reached the kernel.

Acknowledgements travel in the script's next call frame, or on their own a moment later
(`ACK_DELAY`), or with the script's `done`, whichever comes first.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import json
import sys
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from .brief import brief
from .content import from_wire
from .wire import (
    CONTAINERS_FROM,
    LONGEST_FRAME,
    MAX_CONTAINERS,
    MAX_FRAME,
    MAX_VALUES,
    VALUES_FROM,
    encode,
    encode_call,
    too_many_containers,
    too_many_values,
)

if TYPE_CHECKING:
    from .wire import AckFrame, AnswerFrame, CallFrame, Unwaited


class ToolError(Exception):
    """A tool answered with an error, or the call was refused before it was sent.

    `cause` is None, or `"in_doubt"`: the host restarted while the call was in flight, and
    the tool does not say a repeat is safe, so it was not made again; it may have taken
    effect."""

    cause: str | None = None


class ToolTimeout(TimeoutError):
    """A tool call passed its timeout. The call was sent, so its effect may still come."""


ToolError.__module__ = ToolTimeout.__module__ = "tools"


class _Call:
    __slots__ = (
        "arrived",
        "by_stop",
        "deadline",
        "frame",
        "future",
        "held_by_task",
        "loop",
        "n",
        "stopped",
        "timed_out",
    )

    def __init__(self, n: int, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]):
        self.n = n
        self.loop = loop
        self.future = future
        self.arrived = False
        self.timed_out = False
        self.held_by_task = False
        self.stopped = False
        self.by_stop = False
        self.deadline: float | None = None
        self.frame = b""  # the call's frame as it was sent, for a host that asks again


class ScriptTask(asyncio.Task[Any]):
    """A task that notes when code takes its result, so a held answer is counted seen then."""

    _toolscript_held: list[int] | None = None

    # asyncio's own methods, called straight: `super()` costs each call another lookup,
    # and `gather` asks every child for its exception twice and its result once.
    def result(self) -> Any:
        try:
            return _task_result(self)
        finally:
            if self._toolscript_held and self.done() and not self.cancelled():
                self._toolscript_taken()

    def exception(self) -> BaseException | None:
        error = _task_exception(self)
        if error is not None and self._toolscript_held:
            self._toolscript_taken()
        return error

    def __await__(self) -> Any:
        try:
            return (yield from super().__await__())
        finally:
            if self._toolscript_held and self.done() and not self.cancelled():
                self._toolscript_taken()

    __iter__ = __await__

    def _toolscript_taken(self) -> None:
        held, self._toolscript_held = self._toolscript_held, None
        if held and _table is not None:
            for n in held:
                _table.acknowledge_seen(n)


_table: CallTable | None = None

# asyncio.current_task is Python code before 3.12, around a lookup in this dict.
WIRE_INT_DIGITS = 4300
"""The most digits of an integer a call may carry: Python's default bound on printing and
reading one, which the host keeps (reading a longer one costs time that grows with its square)."""
_get_digits = sys.get_int_max_str_digits
_TOO_LONG = 10**WIRE_INT_DIGITS
"""The least integer with more digits than the wire carries (made once, never printed)."""


def _holds_too_long_int(value: Any) -> bool:
    """Whether `value` (a call's arguments, once encoded) holds an integer over
    `WIRE_INT_DIGITS` digits: asked only when the script lifted Python's bound, which is the
    whole process's, so that the encoding need not change it under the script's threads."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif isinstance(item, int) and item.bit_length() > 14_000 and abs(item) >= _TOO_LONG:
            return True
    return False


_current_tasks: Any = getattr(asyncio.tasks, "_current_tasks", None)
_current_task: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = (
    _current_tasks.get
    if sys.version_info < (3, 12) and type(_current_tasks) is dict
    else asyncio.current_task
)
_PLAIN = frozenset((str, int, float, bool, type(None)))
"""Answer values that `from_wire` gives back as they are."""
_task_result = asyncio.Task.result
_task_exception = asyncio.Task.exception


class CallTable:
    """Every call in flight from this interpreter, and the acknowledgements owed to the host.

    `post(frame_bytes, reply)` sends a frame (batched when called on the kernel's loop
    thread), `reply` the kind of reply it waits for (a tool's key), None for none;
    `script_id()` names the script running now, or None between scripts; `wait_here(future)`
    waits on the kernel's loop for a call's answer without a pass of the loop, when nothing
    else could run meanwhile (`Kernel.wait_here`).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        post: Callable[[bytes, str | None], None],
        script_id: Callable[[], str | None],
        wait_here: Callable[[asyncio.Future[Any]], None],
        stopping: Callable[[], bool] = lambda: False,
        write_now: Callable[[], None] = lambda: None,
    ) -> None:
        global _table
        _table = self
        self._loop = loop
        self._post = post
        self._stopping = stopping
        self._write_now = write_now
        self._script_id = script_id
        self._wait_here = wait_here
        self._numbers = itertools.count(1)
        self._numbering = threading.Lock()
        self._waiting: dict[int, _Call] = {}
        self._acks: list[Unwaited] = []  # [n, "unwaited", cause, arrived] each
        self._seen: list[int] = []  # the numbers of calls whose answer code took
        self._sent: deque[tuple[list[int], list[Unwaited]]] = deque(maxlen=ACKS_RECALLED)
        """The acknowledgements sent lately (`seen`, `acks`), each frame's lists as they went:
        said again to a host that takes this kernel back (`holding`)."""
        self._ack_timer: asyncio.TimerHandle | None = None
        self._other_loops = threading.Lock()
        self.tool_qualnames: frozenset[str] = frozenset()
        self.never_awaited: list[str] = []
        self._told_alive: dict[int, weakref.ref[Any]] = {}
        self._told_dead: set[int] = set()
        self._original_unawaited = getattr(warnings, "_warn_unawaited_coroutine", None)
        warnings._warn_unawaited_coroutine = self._on_unawaited  # type: ignore[attr-defined]

    # -- the script's side -------------------------------------------------------------------

    async def invoke(self, key: str, args: dict[str, Any], timeout: float | None) -> Any:
        """Send one call and wait for its answer. The bound tool functions await this."""
        if timeout is not None and (
            type(timeout) not in (int, float) or not timeout > 0 or timeout != timeout
        ):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        # On the main thread the running loop can only be the kernel's (a second one cannot
        # run there); asking asyncio costs a getpid() system call each time.
        loop = self._loop if threading.get_ident() == _MAIN_THREAD else asyncio.get_running_loop()
        caller = sys._getframe(1)
        task = _current_task(loop)
        carried = bool(self._acks or self._seen) and loop is self._loop
        future: asyncio.Future[Any] = loop.create_future()
        # The host takes call numbers strictly in order (a number out of order is a frame the
        # script forged): the number and the frame's place on the wire are taken together.
        with self._numbering:
            n = next(self._numbers)
            refused: str | None = None
            try:
                if carried:
                    # Acknowledgements still waiting travel in the call's own frame: one
                    # frame and one wake-up of the host for both.
                    frame = encode(
                        self._with_acks(
                            {
                                "t": "call",
                                "n": n,
                                "tool": key,
                                "args": args,
                                "script": self._script_id(),
                            }
                        )
                    )
                else:
                    frame = encode_call(n, key, args, self._script_id())
                if (
                    len(frame) > WIRE_INT_DIGITS
                    and _get_digits() != WIRE_INT_DIGITS
                    and _holds_too_long_int(args)
                ):
                    # The script changed how long an integer Python may print: the host reads
                    # no longer ones than the default allows, so none longer may go out.
                    refused = (
                        f"an integer in its arguments has over {WIRE_INT_DIGITS:,} digits, more "
                        "than the interpreter's channel carries: pass it as a string"
                    )
                elif len(frame) > LONGEST_FRAME:
                    refused = (
                        f"its arguments were {len(frame) / 1e6:,.0f} MB as JSON, over the "
                        f"{MAX_FRAME >> 20} MiB limit of the interpreter's channel"
                    )
                elif len(frame) > CONTAINERS_FROM and too_many_containers(frame):
                    refused = (
                        f"its arguments hold over {MAX_CONTAINERS:,} lists and dicts (in "
                        "arguments over 4 MiB, `[` and `{` in text count too), more than one "
                        "call may carry: pass them in parts"
                    )
                elif len(frame) > VALUES_FROM and too_many_values(frame):
                    refused = (
                        f"its arguments hold {MAX_VALUES:,} values or more (strings, numbers, "
                        "lists, dicts and keys; commas and colons in text count too), more "
                        "than one call may carry: pass them in parts"
                    )
            except ValueError as error:
                if "integer string conversion" in str(error):
                    refused = (
                        f"an integer in its arguments has over {_get_digits():,} digits, more "
                        "than the script's bound on printing one (sys.set_int_max_str_digits): "
                        "pass it as a string"
                        if _get_digits() < WIRE_INT_DIGITS
                        else f"an integer in its arguments has over {WIRE_INT_DIGITS:,} "
                        "digits, more than the interpreter's channel carries: pass it as a string"
                    )
                else:
                    refused = f"its arguments cannot be sent as JSON (ValueError: {error})"
            except (TypeError, RecursionError, MemoryError) as error:
                refused = f"its arguments cannot be sent as JSON ({type(error).__name__}: {error})"
            except BaseException:
                refused = "the call was interrupted before it was sent"
                raise
            finally:
                if refused is not None:
                    # The number goes out whatever stopped the call, so that none is missing.
                    self._post(
                        encode(
                            {
                                "t": "call",
                                "n": n,
                                "tool": key,
                                "refused": refused,
                                "brief": brief(args),
                                "script": self._script_id(),
                            }
                        ),
                        None,
                    )
            if refused is not None:
                raise ToolError(f"{key}: the call was not sent: {refused}")
            if carried:
                self._sent.append((self._seen, self._acks))
                self._acks = []
                self._seen = []
            call = _Call(n, loop, future)
            call.frame = frame
            self._waiting[n] = call
            self._post(frame, key)
        call.held_by_task = (
            task is not None
            and (type(task) is ScriptTask or isinstance(task, ScriptTask))
            and getattr(task.get_coro(), "cr_frame", None) is caller
        )
        timer = None
        if timeout is not None:
            call.deadline = loop.time() + timeout
            timer = loop.call_later(timeout, self._expire, call)
        try:
            if loop is self._loop and len(self._waiting) == 1:
                # The only call in flight: no other task's answer can come meanwhile and wake
                # it, so whatever runs next runs in the order it would have.
                self._wait_here(future)  # done by its return, or else awaited as ever
            answer = await future
        except asyncio.CancelledError:
            self._waiting.pop(n, None)
            if call.stopped:
                raise  # `cancel_waiting` already told the host
            if call.timed_out:
                self._unwaited(call, "timeout")
                raise ToolTimeout(
                    f"{key} did not answer within the {timeout:g} s you asked for. The call "
                    "was sent, so it may still take effect: check before you repeat it."
                ) from None
            self._unwaited(call, "stopped" if call.by_stop else "cancelled")
            raise
        finally:
            if timer is not None:
                timer.cancel()
        self._waiting.pop(n, None)  # answered: nothing more can come for it
        if call.held_by_task:
            held = task._toolscript_held  # type: ignore[union-attr]
            if held is None:
                task._toolscript_held = [n]  # type: ignore[union-attr]
            else:
                held.append(n)
        else:
            self.acknowledge_seen(n)
        if answer.get("ok"):
            value = answer.get("value")
            return value if type(value) in _PLAIN or "plain" in answer else from_wire(value)
        said = str(answer.get("message", "the tool reported an error"))
        if answer.get("error") == "ToolTimeout":
            raise ToolTimeout(said)
        failed = ToolError(said)
        failed.cause = answer.get("cause")
        raise failed

    def _expire(self, call: _Call) -> None:
        if not call.future.done():
            call.timed_out = True
            call.future.cancel()

    # -- the host's side ---------------------------------------------------------------------

    def deliver(self, n: int, answer: AnswerFrame) -> None:
        """Hand an answer from the host to the code waiting for it (on the kernel's loop)."""
        call = self._waiting.get(n)
        if call is None:
            return  # its code stopped waiting already; the host was told so
        if call.loop is self._loop:
            self._deliver(call, answer)
        else:
            try:
                call.loop.call_soon_threadsafe(self._deliver, call, answer)
            except RuntimeError:  # that thread's loop is closed: nobody can receive it
                self._waiting.pop(n, None)
                self._unwaited(call, "cancelled")

    def _deliver(self, call: _Call, answer: AnswerFrame) -> None:
        if call.loop is not self._loop:
            with self._other_loops:
                if call.stopped:
                    return  # the stop came first, and the host was told so
                self._hand_over(call, answer)
        else:
            self._hand_over(call, answer)

    def _hand_over(self, call: _Call, answer: AnswerFrame) -> None:
        if call.future.done():
            return
        if call.deadline is not None and call.loop.time() >= call.deadline:
            # The loop was held past the call's own timeout: the code's time was up before
            # it could look, so the timeout wins and the answer counts as late.
            self._expire(call)
            return
        call.arrived = True
        call.future.set_result(answer)

    # A call seen is acknowledged by its number alone, in the frame's `seen` list: a
    # gather's thousand acknowledgements are one list of numbers, not a thousand lists for
    # the host to decode, walk and collect. The rarer `unwaited` ones go in `acks`.
    def acknowledge_seen(self, n: int) -> None:
        if threading.get_ident() == _MAIN_THREAD:
            self._seen.append(n)
            self._flush_acks_soon()
        else:
            self._sent.append(([n], []))
            self._post(encode({"t": "ack", "seen": [n]}), None)

    def _unwaited(self, call: _Call, cause: str) -> None:
        ack = [call.n, "unwaited", cause, call.arrived]
        if threading.get_ident() == _MAIN_THREAD:
            self._acks.append(ack)
            self._flush_acks_soon()
        else:
            self._sent.append(([], [ack]))
            self._post(encode({"t": "ack", "acks": [ack]}), None)

    def _flush_acks_soon(self) -> None:
        if self._stopping():
            # Past the stop, the script may block its loop (a call it made after catching
            # the interrupt, then `time.sleep`) until it is killed: a timer would never fire,
            # and an answer the script saw would be journaled as never seen.
            self._send_acks_now()
            return
        if self._ack_timer is None:
            # Not at the end of this pass of the loop, but a moment later: the script's next
            # call (which carries them) or its end (which flushes them) usually comes first,
            # and then no pass of the loop is spent on them alone. One timer at a time: a
            # call that carries the acknowledgements leaves it be.
            self._ack_timer = self._loop.call_later(ACK_DELAY, self.flush_acks)

    def _send_acks_now(self) -> None:
        """The acknowledgements waiting, written to the channel now, not at the end of the
        loop's pass: the script may never let the loop run again."""
        self.flush_acks()
        self._write_now()

    def _with_acks(self, message: CallFrame | AckFrame) -> CallFrame | AckFrame:
        if self._acks:
            message["acks"] = self._acks
        if self._seen:
            message["seen"] = self._seen
        return message

    def flush_acks(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self._acks or self._seen:
            frame = encode(self._with_acks({"t": "ack"}))
            self._sent.append((self._seen, self._acks))
            self._acks = []
            self._seen = []
            self._post(frame, None)  # the host does not answer acknowledgements

    # Goal: a call's cause names who made its code stop waiting. What fails: asking, when the
    # code stops waiting, whether a stop is under way: the script's own `wait_for` or
    # `task.cancel()` may have cancelled the call just before the stop reached the script,
    # its code resuming only after, and the call would read `stopped` though the script had
    # given up on it itself. What we do: the stop marks the calls still waiting at the moment
    # it reaches the script (the task cancelled, or `KeyboardInterrupt` raised); a call whose
    # wait was cancelled before that keeps the script's cause.
    def stop_reaches_script(self) -> None:
        """A stop reaches the script now: calls its code still waits for are stopped by it, and
        the acknowledgements not yet sent go at once."""
        for call in list(self._waiting.values()):
            if call.loop is self._loop and not call.future.cancelled():
                call.by_stop = True
        if self._acks or self._seen:
            # Sent now, not by their timer: a script that catches the interrupt and blocks
            # (`time.sleep` in a loop) until it is killed never lets the timer fire, and the
            # answers its code took would be reported as never acknowledged (`late`).
            self._send_acks_now()

    def holding(self) -> list[dict[str, Any]]:
        """Every call whose answer has not arrived, as its frame said: what a host that took
        this kernel back asks for (the host before it may have read them, or not)."""
        held = []
        for call in list(self._waiting.values()):
            if call.future.done() or call.stopped or not call.frame:
                continue
            sent = json.loads(bytes(call.frame[4:]))
            held.append({key: sent.get(key) for key in ("n", "tool", "args", "script")})
        return held

    # Goal: a call whose answer the script took is reported `seen` after a restart too. What
    # fails: an acknowledgement the host before read from the channel and died before it
    # recorded: the next host found the answer sent and never acknowledged, and reported it
    # unread. What we do: the last `ACKS_RECALLED` frames' acknowledgements are said again in
    # `holding`; the host takes those about calls it holds unacknowledged, and nothing else.
    def recalled(self) -> tuple[list[int], list[Unwaited]]:
        """The acknowledgements sent lately: the calls seen, and the others."""
        seen: list[int] = []
        acks: list[Unwaited] = []
        for numbers, others in list(self._sent):
            seen += numbers
            acks += others
        return seen, acks

    def cancel_waiting(self) -> None:
        """Wake every call still waiting on another thread's loop after a stop.

        Goal: such a call is told `stopped` like one on the script's own loop, before the
        script's `done` goes out. What fails: leaving it to the thread, whose acknowledgement
        is posted whenever that thread gets to run, often after `done`, when the host has
        already settled the call without a cause. What we do: tell the host here, on the
        kernel's thread, and mark the call so that neither the thread's own cancellation path
        nor an answer arriving after this point can say anything else about it.
        """
        for call in list(self._waiting.values()):
            if call.loop is self._loop or call.loop.is_closed():
                continue
            with self._other_loops:
                if call.future.done() or call.stopped:
                    continue  # its answer was handed over first: its code says what it did
                call.stopped = True
            self._unwaited(call, "stopped")
            call.loop.call_soon_threadsafe(call.future.cancel)

    # -- calls that never ran ----------------------------------------------------------------

    def _on_unawaited(self, coroutine: Any) -> None:
        name = getattr(coroutine, "__qualname__", None)
        if name in self.tool_qualnames:
            if id(coroutine) in self._told_dead:
                self._told_dead.discard(id(coroutine))  # reported already, while it lived
            else:
                self.never_awaited.append(name)
        elif self._original_unawaited is not None:
            self._original_unawaited(coroutine)

    def take_never_awaited(
        self, namespace: dict[str, Any], also: tuple[Any, ...] = ()
    ) -> list[str]:
        """Tool calls created but never awaited: dropped ones, and ones left in variables,
        directly or in a list, tuple, set or dict's values held by one (the calls of a
        `gather` that was never made).

        Each is told once. One left in a variable is told at the end of the script that left
        it there, and not again when it is finally dropped: a weak reference's callback (run
        just before Python warns about the dropped coroutine) remembers that it was told.
        """
        found = self.never_awaited
        self.never_awaited = []
        for value in _held((*namespace.values(), *also)):
            if (
                type(value) is CoroutineType
                and value.__qualname__ in self.tool_qualnames
                and inspect.getcoroutinestate(value) == inspect.CORO_CREATED
            ):
                told = self._told_alive.get(id(value))
                if told is not None and told() is value:
                    continue
                key = id(value)
                self._told_alive[key] = weakref.ref(value, functools.partial(self._forget, key))
                found.append(value.__qualname__)
        return found

    def _forget(self, key: int, _reference: object) -> None:
        self._told_alive.pop(key, None)
        self._told_dead.add(key)


_CONTAINERS = (list, tuple, set, frozenset)
_LOOKED_INTO = 10_000
"""Items of containers that `_held` looks at, all together: a script's data costs no more."""


def _held(values: tuple[Any, ...]) -> Iterator[Any]:
    """`values`, and the items of those that are built-in containers (a dict's values), one
    level down and at most `_LOOKED_INTO` in all: exact types only, so no code of the
    script's runs. A container a thread of the script changes meanwhile is left as it is."""
    left = _LOOKED_INTO
    for value in values:
        yield value
        kind = type(value)
        items = value if kind in _CONTAINERS else value.values() if kind is dict else None
        if items is not None and left > 0:
            try:
                inside = list(itertools.islice(items, left))
            except RuntimeError:  # changed size during iteration
                continue
            left -= len(inside)
            yield from inside


_MAIN_THREAD = threading.main_thread().ident

ACK_DELAY = 0.005
"""Seconds acknowledgements may wait for a frame to travel with."""

ACKS_RECALLED = 256
"""How many frames' acknowledgements the kernel keeps to say again to a host that takes it
back: more than a host reads from the channel at once."""
