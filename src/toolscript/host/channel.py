"""The host's end of one kernel's channel: frames out, batched; frames in, checked.

One concept, though over 500 lines: one kernel's channel in both directions, whose check of
each frame needs what the others said.

Everything the kernel sends is untrusted. A frame that is malformed, oversized or out of place
makes the host kill that interpreter and say why (its `fault`); it never raises in the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import signal
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ..kernel import wire
from . import codec
from .busypoll import LoopPoll
from .calls import ProtocolViolation
from .images import ImageTray
from .journal import Journal, JournalClosedError
from .process import InterpreterStartError, KernelProcess, describe_exit

if TYPE_CHECKING:
    from .dispatch import Dispatcher

CHANNEL_LOST_WAIT = 1.0
"""Seconds a kernel whose channel closed has to exit before that counts as a fault."""

CHECK_DELAY = 0.05
"""Seconds after a script's `done` before the host asks the kernel whether its code really
ended, unless the next script (which asks too) comes first."""

CHECK_WAIT = 1.0
"""The least time, after a `done`, that the kernel has to confirm the script's end."""

HOGGING = 0.2
"""Seconds of the host's event loop one read from a kernel may take before the host stops
reading that kernel for as long again (`Channel.received`)."""

HEAVY_FRAME = 1 << 20
"""A read that holds, with the frame begun before it, at least this many bytes rests its
kernel for as long as its handling took, however short (`Channel.received`): a script's
calls and acknowledgements come in frames of a few hundred bytes; a larger one is rare, or
forged to cost the host."""


class Channel:
    """The frames between the host and one kernel, and the running script as the host knows it.

    `calls` answers the kernel's tool calls; it is set once, right after both are made.
    """

    calls: Dispatcher

    def __init__(
        self,
        process: KernelProcess,
        journal: Journal,
        busy: LoopPoll | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._process = process
        self._journal = journal
        self._busy = busy
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._reader = codec.reader()
        self._outbox: list[bytes] = []
        self._outbox_reply_due = False  # a frame waiting in the outbox will be replied to
        self._wrote_alone = False  # a frame went out alone since the kernel last spoke
        self._waiters: dict[str, asyncio.Future[wire.Message]] = {}
        self.done: asyncio.Future[wire.DoneFrame] | None = None
        """The running script's `done`, or the host's own word on its end."""
        self._done_said = False
        self.script: str | None = None
        self.last_script: str | None = None
        """The script that ran last, or runs now."""
        self._deadline = 0.0  # when the running script's time limit and grace end
        self._watch: _EndWatch | None = None
        self._tokens = random.Random(secrets.randbits(128))
        self.fault: str | None = None
        """How the kernel broke the protocol, once it has."""
        self.images: ImageTray | None = None
        """The running script's images, once it has shown one."""
        self.image_bounds = (8, 5_000_000)
        """`max_images` and `image_limit` of each script's images."""
        self.taking_back = False
        """Taken back from a keeper, and not yet answered `holding`: answers to what the host
        before this one asked may still be in the channel, and are dropped."""
        self._held: tuple[str, Callable[[wire.Message], None]] | None = None
        self._taken_back: asyncio.Future[None] | None = None

    @property
    def alive(self) -> bool:
        """Whether the kernel runs and has kept to the protocol."""
        process = self._process
        return process.started and not process.exited.is_set() and self.fault is None

    @property
    def watching(self) -> str | None:
        """The token the kernel must answer to confirm the last script's end, if it is owed."""
        return self._watch.token if self._watch is not None else None

    async def connect(self, host_end: socket.socket) -> None:
        """Take the host's end of the socket pair; `ready` is awaited with `expect("ready")`.

        `ready` comes unasked, maybe before the connection has even returned: its waiter is
        in place first.
        """
        self._waiters["ready"] = self._loop.create_future()
        self._transport, _ = await self._loop.connect_accepted_socket(
            lambda: _ChannelProtocol(self), sock=host_end
        )

    async def expect(
        self, kind: str, timeout: float, request: wire.HostFrame | None = None
    ) -> wire.Message:
        """Send `request`, if any, and wait for the kernel's frame of `kind`.

        Raises `InterpreterStartError` if it does not come within `timeout` seconds.
        """
        waiter = self._waiters.get(kind)
        if waiter is None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[kind] = waiter
        if request is not None:
            self.send(request)
        exited: asyncio.Future[Any] = asyncio.ensure_future(self._process.exited.wait())
        try:
            finished, _ = await asyncio.wait(
                (waiter, exited), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            exited.cancel()
            self._waiters.pop(kind, None)
        if waiter in finished:
            return waiter.result()
        if self.fault is not None:
            raise InterpreterStartError(f"the kernel broke the protocol: {self.fault}")
        if self._process.exited.is_set():
            raise InterpreterStartError(
                f"the kernel exited during start-up ({describe_exit(self._process.returncode)})"
            )
        raise InterpreterStartError(f"the kernel did not answer {kind!r} within {timeout:g} s")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def ask_held(self, took_back: Callable[[wire.Message], None]) -> asyncio.Future[None]:
        """Ask a kernel taken back from a keeper which calls it still waits on (`held`), and
        wait for nothing: `took_back(holding)` is called when its answer comes, in its place
        among the kernel's frames. The future returned is done then, or once the kernel is
        gone or broken (no answer will come)."""
        token = f"{self._tokens.getrandbits(64):016x}"
        self._held = (token, took_back)
        self._taken_back = self._loop.create_future()
        self.taking_back = True
        self.send({"t": "held", "token": token})
        return self._taken_back

    def _holding(self, message: wire.Message) -> None:
        held = self._held
        if held is None or message.get("token") != held[0]:
            return  # the answer to a host before this one, which asked and died
        self._held = None
        self.taking_back = False
        try:
            held[1](message)
        finally:
            self._end_take_back()

    def _end_take_back(self) -> None:
        taken_back = self._taken_back
        if taken_back is not None and not taken_back.done():
            taken_back.set_result(None)

    # -- a script's run ----------------------------------------------------------------------

    def begin_script(self, script_id: str, deadline: float) -> asyncio.Future[wire.DoneFrame]:
        """A script is sent now; it must end by `deadline` (loop time). Its `done`, to come."""
        self.done = self._loop.create_future()
        self._done_said = False  # whether a frame said `done`, not the host's own word
        self.script = self.last_script = script_id
        self.images = None
        self._deadline = deadline
        if self._watch is not None:
            self._watch.asked = True  # the script's `exec` asks the kernel to check
        return self.done

    @property
    def partial_frame(self) -> int:
        """Bytes read of a frame whose end has not come (an honest kernel writes whole
        frames; a script writing to the channel can leave one cut short)."""
        return self._reader.pending

    def end_script(self) -> None:
        self.script = None
        self.done = None

    def settle(self, status: str) -> None:
        """End the running script's wait with the host's own word, unless it has ended."""
        if self.done is not None and not self.done.done():
            self.done.set_result({"status": status})

    def kernel_exited(self) -> None:
        self._drop_watch()
        self._end_take_back()
        self.settle("crashed")

    # -- sending -----------------------------------------------------------------------------

    def send(self, message: wire.HostFrame) -> None:
        """Send a frame now, or with the others of this loop iteration when some are waiting.

        A frame alone goes at once: waiting a loop iteration to batch it costs a lone call's
        round trip another pass of the event loop on each side. Frames that come while one is
        waiting to go (the answers of a `gather`) go together, in one write.
        """
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._send_frame(transport, codec.encode(message))

    def send_frames(self, frames: list[bytes], reply_due: bool = True) -> None:
        """Send frames already encoded, as `send` does. `reply_due`: whether the kernel will
        reply at once, so that the host polls for it (see `still_polling`)."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            for frame in frames:
                self._send_frame(transport, frame, reply_due)

    def still_polling(self, waited: float) -> bool:
        """Whether the kernel still polls for an answer that took `waited` seconds.

        A kernel that polled for a call's whole window sleeps, and wakes only when the answer
        comes: its next frame takes a wake-up to come, and polling for it costs the host more
        than sleeping would (an MCP tool's answer takes milliseconds).
        """
        return self._busy is not None and waited < self._busy.poll.window

    def _send_frame(
        self, transport: asyncio.Transport, frame: bytes, reply_due: bool = True
    ) -> None:
        if self._outbox:
            self._outbox.append(frame)
            self._outbox_reply_due = self._outbox_reply_due or reply_due
            if len(self._outbox) >= wire.BATCH:
                # A long burst goes out in pieces, so the kernel starts on the first
                # answers while the rest are still being made.
                frames, self._outbox = self._outbox, []
                transport.write(b"".join(frames))
                self._loop.call_soon(self._flush)
        elif not self._wrote_alone:
            transport.write(frame)
            self._wrote_alone = True
            if reply_due and self.done is not None and self._busy is not None:
                self._busy.expect()  # the running script's kernel answers at once
        else:
            self._outbox.append(frame)
            self._outbox_reply_due = reply_due
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        if not self._outbox:
            return
        if self._transport is not None and not self._transport.is_closing():
            frames, self._outbox = self._outbox, []
            self._transport.write(b"".join(frames))
            if self._outbox_reply_due and self.done is not None and self._busy is not None:
                self._busy.expect()
        self._outbox = []
        self._wrote_alone = False

    # -- receiving ---------------------------------------------------------------------------

    # Goal: one kernel cannot take the host's event loop from every other shell. What fails:
    # bounds on a frame alone: a frame of up to `MAX_FRAME` bytes, within every bound, still
    # costs about a second to decode (20 ms a MB of short values or huge integers), and a
    # script may send one after another for its whole time limit. What we do: a read whose
    # handling took over `HOGGING` seconds stops this channel's reading for as long again,
    # so such a kernel has at most half of the loop; a script's own calls never take that
    # long (a thousand calls of a `gather` take a few milliseconds). Frames that each cost
    # just under that would escape it, one after another: a read that holds a frame of
    # `HEAVY_FRAME` bytes or more rests the kernel for as long as it took, whatever that is
    # (told once per read, by what it and the frame begun before it hold).
    def received(self, data: bytes | memoryview) -> None:
        self._wrote_alone = False
        heavy = len(data) + self._reader.pending >= HEAVY_FRAME
        catalogue = self.calls.catalogue
        tools_before = catalogue.first_steps
        started = time.perf_counter()
        try:
            messages = self._reader.feed(data)
            self._handle(messages)
        except ProtocolViolation as error:
            self._broke(str(error), error.script)
        except (wire.FrameError, ValueError, KeyError, TypeError) as error:
            self._broke(str(error))
        except Exception as error:
            # Any other failure on an untrusted frame (an ack too short to index, ...) is
            # the kernel's fault too; let through, it would close the channel from inside
            # asyncio and be misreported as a channel the kernel closed.
            self._broke(f"a frame the host could not handle ({type(error).__name__}: {error})")
        # What the host's own tools took in their first steps (an `async` tool that blocks
        # before its first `await`) is theirs, not the kernel's frames'.
        spent = time.perf_counter() - started - (catalogue.first_steps - tools_before)
        if spent > HOGGING or heavy:
            self._rest(spent)

    def _rest(self, seconds: float) -> None:
        """Read nothing more from this kernel for `seconds`."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.pause_reading()
        self._loop.call_later(seconds, self._wake)

    def _wake(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    # Goal: a call's answer, or its request to an MCP server, goes out as soon as it can.
    # What fails: taking the kernel's word on earlier calls (acknowledgements carried along
    # on a call's frame, nearly every call's) first: the previous call's fate is settled and
    # journaled while this call waits, on the caches the wake-up left cold. What we do: the
    # calls of a read are dispatched first, and what their frames carried is taken right
    # after, before any other frame of the read (a `done` must find its calls settled). The
    # acknowledgements are of earlier calls, which are registered by then; a claim about a
    # call of the same frame or a later one was never true and stays a violation (a call the
    # host dispatched or answered in between changes nothing the kernel could have seen).
    def _handle(self, messages: list[wire.Message]) -> None:
        calls: list[wire.Message] = []
        carried: list[wire.Message] = []  # call frames with acknowledgements, in order
        for message in messages:
            kind = message.get("t")
            if kind == "call":
                if "acks" in message or "seen" in message:
                    carried.append(message)
                calls.append(message)
                continue
            if calls:
                self._dispatch(calls, carried)
                calls, carried = [], []
            if kind == "ack":
                self.calls.ledger.acknowledged(message.get("acks", ()), message.get("seen", ()))
            elif kind == "done" and message.get("again") is True:
                # Said again for a keeper (`toolscript.kernel.keeper`): it ends the script it
                # names only if that one still waits for its end here.
                # Checked as any `done` is (a script can forge one): its code must be found
                # stopped before the time limit and grace are over.
                done = self.done
                if done is not None and message.get("script") == self.script and not done.done():
                    done.set_result(cast("wire.DoneFrame", message))
                    self._watch_end(str(message["script"]))
            elif kind == "done":
                if self.done is None or message.get("script") != self.script:
                    self._stray_done(message.get("script"))
                if not self.done.done():
                    # The kernel's claims, each field checked where it is read.
                    self.done.set_result(cast("wire.DoneFrame", message))
                    self._done_said = True
                    self._watch_end(str(message["script"]))
                    if message.get("status") == "stopped":
                        self.calls.ledger.script_stopped(str(message["script"]))
                elif self._done_said:
                    # The kernel says `done` once a script: two are one forged, and the
                    # first may have been (sent by the script as its last statement).
                    raise ProtocolViolation(
                        f"a second 'done' came for script {self.script}: the script forged "
                        "one of them",
                        self.script,
                    )
            elif self.taking_back and kind in _STALE:
                if kind == "holding":
                    self._holding(message)
            elif kind == "checked":
                self._checked(message)
            elif kind == "image":
                self._image(message)
            elif kind in self._waiters:
                waiter = self._waiters[kind]
                if not waiter.done():
                    waiter.set_result(message)
            else:
                raise ValueError(f"an unexpected frame of kind {str(kind)[:40]!r}")
        if calls:
            self._dispatch(calls, carried)

    def _dispatch(self, calls: list[wire.Message], carried: list[wire.Message]) -> None:
        """Dispatch a read's run of call frames, then take what they carried."""
        acknowledged = self.calls.ledger.acknowledged
        try:
            self.calls.dispatch(calls)
        except Exception:
            # A frame broke the protocol and the channel goes: what the frames carried still
            # counts, as it did when it was taken first, but it cannot hide the fault.
            for message in carried:
                with contextlib.suppress(Exception):
                    acknowledged(message.get("acks", ()), message.get("seen", ()), message.get("n"))
            raise
        for message in carried:
            acknowledged(message.get("acks", ()), message.get("seen", ()), message.get("n"))

    def _image(self, message: wire.Message) -> None:
        if self.script is None or message.get("script") != self.script:
            return  # shown by code that outlived its script: no result is left to carry it
        if self.images is None:
            self.images = ImageTray(*self.image_bounds)
        self.images.take(message)

    # -- what the kernel claims --------------------------------------------------------------

    # Goal: a script's `done` cannot buy its code time. What fails: believing the frame. The
    # script shares the kernel's process and can write a `done` of its own, with the right
    # script id, and go on running: the host would report the script ended, and its code
    # would run on past its time limit, unseen. Waiting for the kernel's own `done` (a
    # second one) fails too: a loop that never yields never sends it. What we do: after a
    # `done`, the host asks the kernel whether the script's code still runs, with a token
    # the script cannot know before the host sends it (in the next `exec`, or alone after
    # `CHECK_DELAY`). The kernel answers from its event loop, which code still running in
    # the script's cell keeps busy, or finds the cell not finished and says so. An answer
    # that the code still runs, or no answer by the end of the script's time limit and
    # grace (and at least `CHECK_WAIT` after the `done`), is a protocol violation: the
    # interpreter is killed, and the script's journal row says why. The result of the run
    # may have gone out already; the next run then starts a fresh interpreter and says so.
    # The honest kernel's cost is one small frame per script, answered at once. (A script
    # that reads the channel itself and answers for the kernel is the kernel; no frame can
    # tell it apart. The sandbox is what bounds that one.)

    def _watch_end(self, script_id: str) -> None:
        loop = self._loop
        deadline = max(self._deadline, loop.time() + CHECK_WAIT)
        watch = _EndWatch(script_id, f"{self._tokens.getrandbits(64):016x}", deadline)
        if self._watch is not None and self._watch.timer is not None:
            self._watch.timer.cancel()
        self._watch = watch
        watch.timer = loop.call_later(CHECK_DELAY, self._watch_check)

    def _watch_check(self) -> None:
        watch = self._watch
        if watch is None or not self.alive or self._process.closing:
            return
        if self._loop.time() >= watch.deadline:
            self._watch = None
            self._broke(
                f"script {watch.script} said it was done, but the interpreter did not confirm "
                "that its code had stopped before its time limit and grace were over (the "
                "script forged its 'done' and ran on, or left code that holds the interpreter)",
                culprit=watch.script,
            )
            return
        if not watch.asked:
            watch.asked = True
            self.send({"t": "check", "token": watch.token})
        watch.timer = self._loop.call_at(watch.deadline, self._watch_check)

    def _checked(self, message: wire.Message) -> None:
        watch = self._watch
        running = message.get("running")
        if running is not None:
            culprit = watch.script if watch is not None else self.last_script
            raise ProtocolViolation(
                f"script {culprit} said it was done while its code was still running (the "
                "interpreter found it running when the host asked): the script forged its "
                "'done'",
                culprit,
            )
        if watch is not None and message.get("token") == watch.token:
            self._watch = None
            if watch.timer is not None:
                watch.timer.cancel()
        if self.done is not None and self._busy is not None:
            # The answer to an exec: the script's own frames follow, the first of them after
            # its start, which says nothing of how soon its calls come after their answers.
            self._busy.expect("start")

    def _stray_done(self, script: object) -> NoReturn:
        named = str(script)[:80]
        ended = self._watch.script if self._watch is not None else self.last_script
        if script == ended and ended != self.script:
            raise ProtocolViolation(
                f"a second 'done' came for script {named}: the script forged the first", ended
            )
        if self.script is None:
            raise ProtocolViolation(f"a 'done' came for script {named}, but no script was running")
        raise ProtocolViolation(
            f"a 'done' came for script {named}, but script {self.script} was running"
        )

    def _broke(self, reason: str, culprit: str | None = None) -> None:
        if self.fault is not None:
            return
        self.fault = reason
        self._drop_watch()
        self._end_take_back()
        culprit = culprit or self.script or self.last_script
        if culprit is not None:
            with contextlib.suppress(JournalClosedError):
                self._journal.record_violation(culprit, reason)
        if self._process.started:
            self._process.signal(signal.SIGKILL)
        self.settle("fault")

    def lost(self) -> None:
        # A kernel that dies closes its channel too, often a moment before the exit is
        # reported: only a channel closed by a kernel that goes on living is a fault.
        if not self._process.exited.is_set() and not self._process.closing:
            asyncio.get_running_loop().call_later(CHANNEL_LOST_WAIT, self._lost_check)

    def _lost_check(self) -> None:
        if not self._process.exited.is_set() and not self._process.closing:
            self._broke("it closed its channel to the host")

    def _drop_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None and watch.timer is not None:
            watch.timer.cancel()


_STALE = frozenset(("ready", "bound", "set", "checked", "holding"))
"""Frames that answer the host's requests: ones a host that is gone asked for are dropped,
until the kernel answers the `held` of the host that took it back."""


class _EndWatch:
    """A script whose `done` came, and whose end the kernel has yet to confirm."""

    __slots__ = ("asked", "deadline", "script", "timer", "token")

    def __init__(self, script: str, token: str, deadline: float) -> None:
        self.script = script
        self.token = token
        self.deadline = deadline
        self.asked = False
        self.timer: asyncio.TimerHandle | None = None


class _ChannelProtocol(asyncio.BufferedProtocol):
    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._buffer = wire.ChannelReader()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._channel.received(self._buffer.received(nbytes))

    def eof_received(self) -> bool:
        self._channel.lost()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._channel.lost()
