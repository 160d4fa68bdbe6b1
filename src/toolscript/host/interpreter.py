"""One kernel, seen from the host: start it, feed it scripts, stop it, settle it.

An `Interpreter` is its process (`process`), its channel (`channel`) and the answering of its
tool calls (`dispatch`), put together. Every wait has a bound: start-up, a script (its time
limit, then the grace period after the interrupt), the output's end marker, shutdown.

One concept, though over 500 lines: one kernel's life as the host drives it (start, runs,
stop, settle, and the take-back from a keeper), each step needing the others' state.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, cast

from ..kernel import wire
from ..kernel.descriptors import BROKEN_EXIT
from ..kernel.names import MAX_NAMES
from . import codec
from .calls import CallLedger, CallReport, NotJournaled
from .catalogue import ToolCatalogue
from .channel import CHANNEL_LOST_WAIT, CHECK_DELAY, CHECK_WAIT, Channel
from .checker import EarlierRuns
from .dispatch import Dispatcher
from .images import ScriptImage
from .journal import Journal
from .output import Captured, LogRoom, StreamCapture
from .process import (
    EXIT_STATUS_WAIT,
    PIPE_READ_SIZE,
    SHUTDOWN_WAIT,
    InterpreterStartError,
    KernelProcess,
    Launch,
    describe_exit,
)
from .template import Forked

if TYPE_CHECKING:
    from .keeper import RunningScript

__all__ = [
    "CHANNEL_LOST_WAIT",
    "CHECK_DELAY",
    "CHECK_WAIT",
    "EXIT_STATUS_WAIT",
    "OUTPUT_END_WAIT",
    "PIPE_READ_SIZE",
    "SHUTDOWN_WAIT",
    "Interpreter",
    "InterpreterStartError",
    "Launch",
    "Outcome",
    "describe_exit",
]

LONGEST_CODE = wire.MAX_FRAME - 64 * 1024
"""Bytes a script's source may take in its `exec` frame (the rest: the frame's other fields)."""


def code_too_large(code: str) -> str | None:
    """Why the channel cannot carry `code` to the kernel, or None: the kernel takes a frame
    over `wire.MAX_FRAME` for a broken host and exits, which would read as the script's crash."""
    if len(code) * 6 <= LONGEST_CODE:  # no character takes more than 6 bytes as JSON
        return None
    size = codec.encoded_size(code)
    if size <= LONGEST_CODE:
        return None
    return (
        f"the script is {size / 1e6:,.0f} MB as sent to the interpreter, over the "
        f"{wire.MAX_FRAME >> 20} MiB limit of its channel"
    )


OUTPUT_END_WAIT = 2.0
"""Seconds to wait, after a script ends, for its output's end marker on both pipes."""

STRAYS_WAIT = 0.5
"""Seconds a process of the sandbox found after a stop has to end (the kernel killed it, and
its parent may not have reaped it yet) before it counts as one the script kept running."""


class Outcome(NamedTuple):
    """How one script ended, as the interpreter saw it, before it becomes a `ScriptResult`.

    `ending` is the kernel's status (`ok`, `error`, `stopped`) or the host's own word:
    `killed` (stopped by a kill after the grace period), `crashed` (the process died),
    `fault` (it broke the protocol and was killed), `broken` (its own descriptors were closed
    or replaced, said in `report["broken"]`, and it was ended).
    """

    ending: str
    report: wire.DoneFrame
    stdout: Captured
    stderr: Captured
    calls: CallReport
    stop_reason: str | None = None
    exit_description: str | None = None
    fault: str | None = None
    unattributed_bytes: int = 0
    never_started: bool = False
    """The interpreter was gone before the script began (it died between two scripts)."""
    images: tuple[ScriptImage, ...] = ()
    """The images the script showed, within their bounds."""
    images_dropped: str | None = None
    """What was dropped of the images the script showed, in a sentence."""


class Interpreter:
    """A kernel process with its channel, output pipes and call ledger."""

    def __init__(
        self,
        launch: Launch,
        catalogue: ToolCatalogue,
        journal: Journal,
        shell: str = "",
        generation: int = 0,
    ) -> None:
        self.launch = launch
        self.generation = generation
        self.shell = shell
        self._journal = journal
        self.bind_failures: list[tuple[str, str]] = []
        self._names: set[str] = set()
        self._names_many = False
        self.earlier_runs = EarlierRuns()
        """What the check of a later script reads of the scripts that ran here before: the
        keys they put in dicts (`EarlierRuns.remember`, as a script begins)."""
        self.python_version: str | None = None
        self._stdout = StreamCapture(launch.output_limit)
        self._stderr = StreamCapture(launch.output_limit)
        # The loop it is made and run on, kept: asyncio.get_running_loop(), and current_task()
        # without a loop, call getpid() each time (a system call), on every tool call.
        self._loop = asyncio.get_running_loop()
        self._process = KernelProcess(launch, self._stdout, self._stderr, self._exited)
        self._channel = Channel(self._process, journal, launch.busy, self._loop)
        self._channel.image_bounds = (launch.max_images, launch.image_limit)
        ledger = CallLedger(f"{secrets.token_hex(4)}-{generation}", shell, journal)
        self._calls = Dispatcher(ledger, catalogue, self._loop)
        self._channel.calls = self._calls
        self._calls.channel = self._channel
        self.broken: str | None = None
        """What became of the kernel's own descriptors, when it found them closed or replaced
        (it is ended then: see `toolscript.kernel.descriptors`)."""
        self.last_outcome: Outcome | None = None
        self.runs = 0
        """Scripts sent to this interpreter so far."""
        self._quiet = False
        self._stop_reason: str | None = None
        self.told_once = False
        """Whether a result has said what is said once per interpreter: that it runs without
        a sandbox, and the `preload` modules it could not import."""
        self.preload_failures: list[tuple[str, str]] = []
        """Modules of `preload` its kernel, started afresh, could not import (a forked one's
        are its template's)."""
        self.rebind_due = False
        """Its tools were bound by another host: bind this host's before the next run."""
        self._resuming: RunningScript | None = None
        self._taken_back: asyncio.Future[None] | None = None
        """Done once a kernel taken back from a keeper has said what it holds (or is gone)."""
        self._stopping: (
            tuple[asyncio.Future[wire.DoneFrame], asyncio.Future[wire.DoneFrame]] | None
        ) = None
        """The stop under way, with the `done` of the script it stops."""
        self._hurried = False
        """A second cancel came: the stop of this script kills at once (`_hurry`)."""
        self._hurry_future: asyncio.Future[None] | None = None

    # -- what it is --------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._channel.alive

    @property
    def script_names(self) -> frozenset[str] | None:
        """The global names the kernel says its namespace holds beyond the bound tools (the
        kernel's own, and what earlier scripts defined); None when too many to tell."""
        return None if self._names_many else frozenset(self._names)

    def _learn_names(self, frame: Mapping[str, Any]) -> None:
        many = frame.get("names_many")
        new, gone = frame.get("names_new", []), frame.get("names_gone", [])
        if many is True or not _all_text(new) or not _all_text(gone):
            # Too many, or a claim that does not parse: every name may be defined.
            self._names_many = True
            self._names.clear()
            return
        if many is False:
            self._names_many = False
        self._names.difference_update(gone)
        # The script can put any string in its globals (`globals()["a\nb"] = 1`) and any
        # claim in a frame: only identifiers are names the check declares, and past the
        # kernel's own bound the host too says only that there are too many.
        self._names.update(name for name in new if name.isidentifier())
        if len(self._names) > MAX_NAMES:
            self._names_many = True
            self._names.clear()

    @property
    def busy(self) -> bool:
        return self._channel.script is not None

    @property
    def pid(self) -> int | None:
        """The pid of the process the host started or was given (a sandboxed kernel's init)."""
        return self._process.pid

    @property
    def held(self) -> bool:
        """Whether a keeper holds it, so that it outlives this host."""
        return self._process.held is not None

    @property
    def forked(self) -> bool:
        """Whether it was forked from the runtime's template."""
        return self._process.forked

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def exit_words(self) -> str:
        """How its kernel ended, in words: `killed by signal 9 (SIGKILL)`, `exit code 3`."""
        return self._process.exit_words()

    @property
    def fault(self) -> str | None:
        """How the kernel broke the protocol, if it did (it was killed for it)."""
        return self._channel.fault

    @property
    def closing(self) -> bool:
        """The host is ending it on purpose."""
        return self._process.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        self._process.closing = value

    def output_so_far(self) -> tuple[str, str]:
        """The running script's stdout and stderr read so far (empty when none runs)."""
        if not self.busy:
            return "", ""
        return self._stdout.so_far(), self._stderr.so_far()

    @property
    def ledger(self) -> CallLedger:
        return self._calls.ledger

    @property
    def catalogue(self) -> ToolCatalogue:
        return self._calls.catalogue

    def log_to(self, sink: BinaryIO, limit: int) -> None:
        """Also write the script's stdout and stderr to `sink`, up to `limit` bytes of both."""
        room = LogRoom(limit)
        self._stdout.log_to(sink, room)
        self._stderr.log_to(sink, room)

    def kernel_pid(self) -> int | None:
        """The kernel's pid as the host sees it. (A sandboxed kernel is its init's child.)"""
        return self._process.kernel_pid()

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the kernel, wait for `ready`, bind the tools. Raises `InterpreterStartError`."""
        # Start-up output is the kernel's, not a script's: kept to explain a failed start.
        self._stdout.begin(secrets.token_hex(8), at_start_marker=False)
        self._stderr.begin(secrets.token_hex(8), at_start_marker=False)
        try:
            host_end = await self._process.start()
        except asyncio.CancelledError:
            # Cancelled while its kernel was made: a sandbox of its own, or a kernel the
            # template forked, would be held by nobody (`kill` ends both).
            await asyncio.shield(self.kill())
            raise
        channel = self._channel
        try:
            await channel.connect(host_end)
            ready = await channel.expect("ready", self.launch.start_timeout)
            self.python_version = str(ready.get("python"))
            failures = ready.get("preload_failures")
            if isinstance(failures, list):
                # Said before any script ran, but cut all the same: it is the kernel's word.
                self.preload_failures = [
                    (str(failure[0])[:200], str(failure[1])[:500])
                    for failure in failures[:100]
                    if isinstance(failure, list) and len(failure) == 2
                ]
            if self.catalogue.plans or self.catalogue.down_messages:
                await self._bind(self.catalogue)
        except InterpreterStartError as error:
            await self.kill()
            stderr = self._stderr.take().text.strip()
            detail = f"; it said: {stderr[-800:]}" if stderr else ""
            raise InterpreterStartError(f"{error.reason}{detail}") from None
        except asyncio.CancelledError:
            # Nobody holds this interpreter yet, so nobody else would ever stop it.
            await asyncio.shield(self.kill())
            raise

    async def adopt(
        self, shell: str, generation: int, cwd: Path | None, *, background: bool = False
    ) -> None:
        """Give a started (pooled) interpreter to a shell: its name, generation and folder;
        `background`: to a background script of that shell, not to the shell itself.

        Raises `InterpreterStartError` if the kernel cannot change to `cwd`.
        """
        self.shell = shell
        self.generation = generation
        self._calls.ledger = CallLedger(
            f"{secrets.token_hex(4)}-{generation}", shell, self._journal
        )
        if cwd is not None:
            setup: wire.SetupFrame = {"t": "setup", "cwd": str(cwd)}
            sandbox = self.launch.sandbox
            if sandbox is not None and cwd.parent == sandbox.shells_root:
                setup["folder"] = cwd.name  # the sandbox's init mounts it (`kernel.init`)
            answer = await self._channel.expect("set", self.launch.start_timeout, setup)
            if answer.get("error"):
                raise InterpreterStartError(f"the kernel could not enter {cwd}: {answer['error']}")
        self._process.note(
            shell=shell, generation=generation, prefix=self.ledger.prefix, background=background
        )

    # Goal: a script keeps running through the host's restart and notices only a delay; taking
    # back 50 shells takes milliseconds, whatever their scripts are doing. What fails: waiting
    # for the kernel's answer to `held` before going on. The kernel reads its channel on its
    # main thread's event loop, which a script blocked in plain code (`open(fifo).read()`,
    # `time.sleep(30)`, `Event().wait()`) holds: the take-back of that shell, and of every
    # shell after it, waited `start_timeout`, and the answer, once the script let go, came to
    # a host no longer waiting for it and was taken for a fault. Answering `held` from another
    # thread of the kernel fails too: only the loop reads the channel (a thread would race it
    # for the bytes), the answer must take its place among the loop's frames, and the table of
    # held calls is the loop's to change; a signal handler would run inside the kernel's own
    # code. What we do: send `held` and go on, the shell is back at once; the answer is
    # handled whenever it comes (`_recover`). Until then frames that answer requests are
    # dropped, as the dead host's: the kernel answers in order, so every answer to this host
    # comes after it, and `held` carries a token, so an answer to a host that asked and died
    # in turn is not taken for this one's. A call frame meanwhile is one the dead host never
    # read, and is dispatched as usual. The time limit runs as ever, from the deadline the dead
    # host set: the interrupt reaches blocking code. The script's end is concluded only once
    # the answer came (or the kernel is gone), so that its report names every held call.

    async def reattach(self, forked: Forked, prefix: str, running: RunningScript | None) -> None:
        """Take back a kernel a keeper held for a host that is gone, as it is: its namespace,
        its tools, its running script. `shell` and `generation` were given when it was made;
        `prefix` is what its calls' ids start with; `running`, the script it runs, if any
        (`resume` follows it to its end). Returns without waiting for the kernel."""
        self._calls.ledger = CallLedger(prefix, self.shell, self._journal)
        self._calls.ledger.continue_numbering()
        if running is not None:
            # In place before the channel is read: the script's `done` may be waiting in it.
            self._stdout.begin(running.marker, at_start_marker=False)
            self._stderr.begin(running.marker, at_start_marker=False)
            left = max(running.deadline - time.time(), 0.0)
            done = self._channel.begin_script(
                running.script_id, self._loop.time() + left + running.grace
            )
            self.ledger.begin_script(running.script_id)
            if running.keeper_stop == "killed":
                done.set_result({"status": "killed"})  # not a crash: its time limit was up
            self._resuming = running
        host_end = await self._process.attach(forked)
        self._channel.taking_back = True
        await self._channel.connect(host_end)
        self.runs = 1  # it has run before: no start marker is owed to a first script
        self.rebind_due = True
        script_id = running.script_id if running is not None else None
        if forked.status.done():
            # It ended while no host was attached: nothing waits for an answer.
            self._channel.taking_back = False
            self._adopt_earlier(script_id, set())
            return
        self._taken_back = self._channel.ask_held(lambda holding: self._recover(holding, script_id))

    def _recover(self, holding: wire.Message, script_id: str | None) -> None:
        """The kernel said what it holds (`holding`): answer the calls it still waits on; end
        the script that a keeper said was running (`script_id`) if it runs no more and its
        end was not in the channel."""
        frames = [call for call in holding.get("calls", []) if isinstance(call, dict)]
        prefix = self.ledger.prefix
        held = {f"{prefix}.{call.get('n')}" for call in frames}
        journaled = self._journal.take_over_calls(held)
        self._adopt_earlier(script_id, held)
        self.ledger.recalled(holding.get("acks"), holding.get("seen"))
        self._calls.recover(frames, journaled, remembered=self._journal.path is not None)
        waiting = self._channel.done
        if (
            script_id is not None
            and self._channel.script == script_id
            and waiting is not None
            and not waiting.done()
            and holding.get("running") != script_id
        ):
            self._settle_lost_end(script_id, holding.get("done"), waiting)

    def _adopt_earlier(self, script_id: str | None, held: set[str]) -> None:
        """Join the running script's report with the calls it made before this host took it
        back that the kernel does not hold (`held`): see `CallLedger.adopt`. Those the
        journal has not settled become this host's to settle."""
        if script_id is None:
            return
        start = f"{self.ledger.prefix}."
        earlier = [
            call
            for call in self._journal.calls(script_id=script_id)
            if call.call_id.startswith(start) and call.call_id not in held
        ]
        self._journal.take_over_calls(call.call_id for call in earlier if call.fate is None)
        self.ledger.adopt(earlier)

    def _settle_lost_end(
        self, script_id: str, last: object, done: asyncio.Future[wire.DoneFrame]
    ) -> None:
        """The script a keeper said was running runs no more, and its `done` is not in the
        channel: the host before read it and died before it could report it, or died before
        it sent the script. Which one, the kernel's last `done` says."""
        if isinstance(last, dict) and last.get("script") == script_id:
            done.set_result(cast("wire.DoneFrame", last))
        else:
            # The host before may have died before the journal had the start: it has it now.
            self._journal.begin_script(script_id, self.shell, self.generation, "", time.time())
            done.set_result(
                {
                    "status": "error",
                    "error": "The host restarted before this script reached the interpreter: "
                    "none of it ran.",
                }
            )

    async def rebind(self, catalogue: ToolCatalogue) -> None:
        """Bind a changed catalogue (an MCP server's tool list changed) before the next run."""
        await self._bind(catalogue)

    async def _bind(self, catalogue: ToolCatalogue) -> None:
        frame: wire.BindFrame = {"t": "bind", "plans": catalogue.plans}
        if catalogue.down_messages:
            frame["down"] = catalogue.down_messages
        bound = await self._channel.expect("bound", self.launch.start_timeout, frame)
        self._calls.catalogue = catalogue
        self.rebind_due = False
        self.bind_failures = [(str(item[0]), str(item[1])) for item in bound.get("failures", [])]
        self._learn_names(bound)

    async def close(self, *, abandon_calls: bool = True) -> None:
        """Ask the kernel to exit; kill its whole process group if it does not in time.

        With `abandon_calls`, handlers still running for its calls are cancelled too (the
        runtime is closing); otherwise they finish under their own timeouts, so the journal
        learns their answers.
        """
        self.closing = True
        if self.alive:
            self._channel.send({"t": "shutdown"})
            try:
                await asyncio.wait_for(self._process.exited.wait(), SHUTDOWN_WAIT)
            except TimeoutError:
                pass
        await self.kill()
        if abandon_calls:
            self._calls.abandon()

    @property
    def dispatcher(self) -> Dispatcher:
        """What answers its calls: the handlers still running for them, even once it is gone."""
        return self._calls

    async def kill(self) -> None:
        """Kill the kernel and everything in its process group; bounded."""
        await self._process.kill()
        self._channel.close()
        await self._process.release()
        # Handlers of its calls still in flight are left to finish under their own timeouts:
        # their answers tell the journal what happened. `close()` abandons them.

    def _exited(self, returncode: int | None) -> None:
        if returncode == BROKEN_EXIT and self.broken is None:
            self.broken = f"the kernel could not say which: it exited with code {returncode}"
        self._channel.kernel_exited()

    # -- scripts -----------------------------------------------------------------------------

    async def execute(self, script_id: str, code: str, time_limit: float, grace: float) -> Outcome:
        """Run one script to its end, whatever that end is. Cancelling this stops the script.

        The script's start is journaled here; its end is the caller's to journal, and then to
        say with `script_recorded`. The caller must not run two scripts at once on one
        interpreter.
        """
        loop = self._loop
        channel = self._channel
        marker = secrets.token_hex(8)
        self._record_begin(script_id, code, marker, time_limit, grace)
        # The kernel writes a start marker unless it said, when the last script ended, that
        # nothing was left that could write before this one (see `toolscript.kernel.stop`).
        marked = not self._quiet
        self._stdout.begin(marker, at_start_marker=marked)
        self._stderr.begin(marker, at_start_marker=marked)
        check = channel.watching
        done = channel.begin_script(script_id, loop.time() + time_limit + grace)
        self.ledger.begin_script(script_id)
        busy = self.launch.busy
        exec_frame: wire.ExecFrame = {
            "t": "exec",
            "script": script_id,
            "code": code,
            "marker": marker,
            "grace": grace,
            "start_marker": marked,
        }
        if check is not None:
            exec_frame["check"] = check  # the kernel checks before it starts this one
        if busy is not None:
            exec_frame["busy_poll"] = busy.script_started()
        self.runs += 1
        try:
            channel.send(exec_frame)
            return await self._until_end(done, time_limit, grace, None)
        finally:
            if busy is not None:
                busy.script_ended()

    def _record_begin(
        self, script_id: str, code: str, marker: str, time_limit: float, grace: float
    ) -> None:
        # Goal: a host killed at any moment of a run leaves the script to end exactly once.
        # Two records say a script runs: the journal, and the keeper's board, which is what
        # makes the next host follow the script. What fails: journaling the start before the
        # board names the script, or clearing the board before the journal has the end; a
        # kill between the two leaves a script the journal began that nobody follows, and it
        # never ends. What we do: the board brackets the journal. It names the script before
        # the journal records the start and is cleared only after the journal has the end
        # (`script_recorded`), so the next host follows a script caught in between and ends
        # it from the kernel's word (its last `done`, or none of it ran).
        held = self._process.held is not None
        if held:
            self._process.script_began(
                script_id, marker, time.time() + time_limit, grace, time_limit
            )
        try:
            self._journal.begin_script(script_id, self.shell, self.generation, code, time.time())
        except OSError as error:  # a full disk: nothing is sent that the journal lacks
            if held:
                self._process.script_ended()
            raise NotJournaled(
                [],
                f"the host could not record the script in its journal ({error.strerror or error})",
            ) from None
        except BaseException:
            if held:
                self._process.script_ended()
            raise

    def script_recorded(self) -> None:
        """The script that ended here has its end in the journal: a keeper that holds this
        interpreter need no longer follow it. Call once per script `execute` or `resume`
        ran, after the journal's `end_script`."""
        self._process.script_ended()

    async def resume(self) -> Outcome:
        """Follow the script given to `reattach` to its end, as `execute` would. Its output
        before now was the other host's to read."""
        running = self._resuming
        done = self._channel.done
        assert running is not None and done is not None
        self._resuming = None
        stop_reason = "time_limit" if running.keeper_stop is not None else None
        left = running.deadline - time.time()
        if running.keeper_stop == "interrupted":
            # The keeper interrupted it at its deadline, and its grace period runs from
            # there: what is left of it is waited for, with no second interrupt (which would
            # cut short the clean-up the first one began) and no new grace period.
            return await self._until_end(
                done, left + running.grace, 0.0, stop_reason, interrupted=True
            )
        return await self._until_end(done, left, running.grace, stop_reason)

    async def _until_end(
        self,
        done: asyncio.Future[wire.DoneFrame],
        time_limit: float,
        grace: float,
        stop_reason: str | None,
        interrupted: bool = False,
    ) -> Outcome:
        # Goal: however many cancels come, and wherever they land, the script that was sent
        # ends, is concluded, and its outcome is the one the caller records (`last_outcome`).
        # What fails: a second cancel while the first one's stop waits out its grace period,
        # or a cancel while an ended script is concluded, unwinds the conclusion: the caller
        # then recorded an earlier script's outcome, and the stop went on behind its back.
        # What we do: the first cancel begins the stop; from there the end runs in a task of
        # its own, awaited shielded, and each later cancel only hurries the stop (the kill
        # comes now, not after the grace period).
        cancelled = False
        self.last_outcome = None
        self._hurried = False
        stopping: asyncio.Future[wire.DoneFrame] | None = None
        report: wire.DoneFrame | None = None
        try:
            if time_limit <= 0:
                raise TimeoutError
            async with asyncio.timeout(time_limit):  # no task of its own, unlike wait_for
                report = await asyncio.shield(done)
        except TimeoutError:
            stop_reason = "time_limit"
            stopping = self._stop_task(grace, interrupt=not interrupted)
        except asyncio.CancelledError:
            cancelled = True
            stop_reason = "cancelled"
            stopping = self._stop_task(grace, interrupt=not interrupted)
        ending = asyncio.ensure_future(self._ended(stopping, report, stop_reason))
        while True:
            try:
                outcome = await asyncio.shield(ending)
                break
            except asyncio.CancelledError:
                if ending.cancelled():
                    raise
                cancelled = True
                self._hurry()
        if cancelled:
            self.last_outcome = outcome
            raise asyncio.CancelledError
        return outcome

    async def _ended(
        self,
        stopping: asyncio.Future[wire.DoneFrame] | None,
        report: wire.DoneFrame | None,
        stop_reason: str | None,
    ) -> Outcome:
        if stopping is not None:
            report = await stopping
        assert report is not None
        taken_back = self._taken_back
        if taken_back is not None and not taken_back.done():
            # Taken back from a keeper: the report waits for what the kernel holds (see
            # `reattach`). Once it has ended, its kernel answers at its next turn, or is killed.
            try:
                await asyncio.wait_for(asyncio.shield(taken_back), self.launch.start_timeout)
            except TimeoutError:
                pass
        return await self._conclude(report, stop_reason)

    def _hurry(self) -> None:
        """Cut short the grace period of the stop under way, or of the next one: the script
        is killed now (a second cancel)."""
        self._hurried = True
        hurry = self._hurry_future
        if hurry is not None and not hurry.done():
            hurry.set_result(None)

    async def stop(self, reason: str, grace: float) -> None:
        """Stop the running script (used by a handle's cancel); `execute` then concludes,
        giving `reason` as the stop's reason."""
        done = self._channel.done
        if self._channel.script is not None and done is not None and not done.done():
            if self._stop_reason is None:  # a second stop waits for the first, and its reason
                self._stop_reason = reason
            await self._stop(reason, grace)

    async def _stop(self, reason: str, grace: float, interrupt: bool = True) -> wire.DoneFrame:
        return await asyncio.shield(self._stop_task(grace, interrupt))

    def _stop_task(self, grace: float, interrupt: bool) -> asyncio.Future[wire.DoneFrame]:
        done = self._channel.done
        assert done is not None
        stopping = self._stopping
        if stopping is not None and stopping[0] is done and not stopping[1].done():
            # Stopped already (a cancel, then the runtime's close, say): a second SIGINT
            # would cut short the clean-up the first one's grace period is for.
            return stopping[1]
        task = asyncio.ensure_future(self._stop_once(done, grace, interrupt))
        self._stopping = (done, task)
        return task

    async def _stop_once(
        self, done: asyncio.Future[wire.DoneFrame], grace: float, interrupt: bool = True
    ) -> wire.DoneFrame:
        """Interrupt the script (unless a keeper did already: `interrupt` false), wait
        `grace` seconds for its `done`, then kill the interpreter."""
        if not done.done() and self.alive and self.pid is not None:
            if interrupt:
                self._process.signal(signal.SIGINT)  # the kernel's handler makes it a stop
            if not self._hurried:
                hurry = self._hurry_future = self._loop.create_future()
                try:
                    await asyncio.wait(
                        (done, hurry), timeout=grace, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    self._hurry_future = None
        if not done.done():
            # Said before the kill: the kernel's exit, reported while `kill` waits for it,
            # would otherwise settle the script as a crash. A frame cut short on the channel
            # may have swallowed the kernel's `done`: the result says so.
            killed: wire.DoneFrame = {"status": "killed"}
            if self._hurried:
                killed["hurried"] = True
            partial = self._channel.partial_frame
            if partial:
                killed["partial_frame"] = partial
            done.set_result(killed)
            await self.kill()
        return done.result()

    async def _conclude(self, report: wire.DoneFrame, stop_reason: str | None) -> Outcome:
        self._learn_names(report)
        status = str(report.get("status"))
        said = report.get("broken")
        if isinstance(said, str) and status in ("ok", "error", "stopped"):
            self.broken = said[:1000]
        if self.broken is not None and status not in ("killed", "fault"):
            # Whatever the script's code did, the interpreter cannot go on: it is ended here.
            status = "broken"
            report = {**report, "broken": self.broken}
        gone = status in ("killed", "crashed", "fault", "broken")
        self._quiet = report.get("quiet") is True
        if status == "stopped" and (report.get("threads_left") or report.get("timers_left")):
            # A thread cannot be stopped from outside, nor a timer the kernel cannot name:
            # the interpreter goes with it.
            self.closing = True
            gone = True
        elif status == "stopped" and not gone:
            left = await self._process.strays(STRAYS_WAIT)
            if left:
                # The kernel ended every process of the script, it said; these it did not.
                report = {**report, "processes_left": left}
                self.closing = True
                gone = True
        if gone:
            await self.kill()
            try:
                await asyncio.wait_for(self._process.pipes_closed.wait(), OUTPUT_END_WAIT)
            except TimeoutError:
                pass
        elif report.get("drained") is True and self._quiet:
            # The kernel found both pipes read to the end, so the script's output has all
            # been fed to the captures already: it ends here, with no marker to wait for.
            self._stdout.end_here()
            self._stderr.end_here()
        else:
            await self._stdout.wait_ended(OUTPUT_END_WAIT)
            await self._stderr.wait_ended(OUTPUT_END_WAIT)
        if self.fault is not None and not gone:
            # Found broken while its output was awaited (its `done` was forged, say): the
            # result says so, rather than what the frame claimed.
            status, gone = "fault", True
            await self.kill()
        never_started = gone and not self._stdout.started and not self._stderr.started
        stdout = self._stdout.take()
        stderr = self._stderr.take()
        calls = self.ledger.settle(interpreter_gone=gone)
        tray = self._channel.images
        self._channel.end_script()
        if stop_reason is None:
            stop_reason = self._stop_reason
        self._stop_reason = None
        if status == "stopped" and stop_reason is None:
            # Neither this host nor a keeper stopped it: the script sent itself SIGINT, which
            # the kernel cannot tell from a stop. It is the script's own error, not a cancel.
            status = "error"
            report = {
                **report,
                "status": "error",
                "error": report.get("error")
                or "KeyboardInterrupt: the script's process received SIGINT that the host did "
                "not send (the script sent it itself?), and the interpreter took it for a stop: "
                "the script was interrupted where it was.",
            }
        return Outcome(
            ending=status,
            report=report,
            stdout=stdout,
            stderr=stderr,
            calls=calls,
            stop_reason=stop_reason,
            exit_description=self._process.exit_words() if gone else None,
            fault=self.fault,
            unattributed_bytes=self._stdout.unattributed_bytes + self._stderr.unattributed_bytes,
            never_started=never_started,
            images=() if tray is None else tuple(tray.images),
            images_dropped=None if tray is None else tray.dropped_words(),
        )


def _all_text(items: object) -> bool:
    return isinstance(items, list) and all(isinstance(item, str) for item in items)
