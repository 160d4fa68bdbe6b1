"""`Shell`: one persistent namespace whose scripts run one at a time in its own interpreter.

One concept, though over 500 lines: one persistent namespace's life (its runs, its
background scripts, its interpreter replaced), which all share its one state.

The interpreter is replaced, with a note in the next result, when it dies or is killed; a
shell idle past `idle_timeout` gives its interpreter back. What a shell uses of its runtime
is `ShellServices`, so it never reaches into the runtime's own state.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .background import BackgroundScripts, ScriptHandle, check_before_running
from .config import Settings, output_limit, positive_seconds
from .host.calls import NotJournaled
from .host.catalogue import ToolCatalogue
from .host.checker import ScriptChecker
from .host.interpreter import (
    OUTPUT_END_WAIT,
    SHUTDOWN_WAIT,
    Interpreter,
    InterpreterStartError,
    Outcome,
    code_too_large,
)
from .host.journal import Journal, JournalClosedError
from .host.pool import CLOSED, CapReached, InterpreterPool
from .results import (
    SHELL_CLOSING,
    ScriptResult,
    broken_reset_words,
    render_output,
    reset_words,
    restart_words,
    result_from,
    uncertain_words,
)

if TYPE_CHECKING:
    from .host.keeper import RunningScript

__all__ = ["Shell", "ShellServices"]

_BIND_FAILURES_TOLD = 10
"""Tools that could not be bound, named one by one in a result's note; the rest counted."""


@dataclass(frozen=True, slots=True)
class ShellServices:
    """What a shell uses of the runtime that owns it."""

    settings: Settings
    """The runtime's knobs."""
    pool: InterpreterPool
    """Where the shell's interpreters come from, and where they go back."""
    journal: Journal
    """The journal, unchecked: a run that `aclose()` stopped still ends in it."""
    background: BackgroundScripts
    """The runtime's background scripts."""
    log_dir: Path
    """The folder background scripts log to."""
    catalogue: Callable[[], ToolCatalogue]
    """The tool catalogue as it is now (an MCP server's tools may change)."""
    folder: Callable[[str], Path]
    """The working folder of the shell of that name, made if need be."""
    interpreter_words: Callable[[Interpreter], list[str]]
    """Once per interpreter: the notes said of it once (no sandbox; `preload` modules its
    kernel, started afresh, could not import)."""
    check_open: Callable[[], None]
    """Raise `RuntimeClosedError` unless the runtime is started and not closed."""
    is_closed: Callable[[], bool]
    """Whether the runtime was closed."""
    checker: ScriptChecker
    """The check before running, against the catalogue's stubs."""
    lost_result: Callable[[str], ScriptResult | None]
    """The result of the last script a host that is gone began in the shell of that name,
    whose interpreter was not kept for this host (see `recovered`); None if there was none."""
    idle_shells: Callable[[], list[str]]
    """The names of the shells that hold an interpreter and run nothing in the foreground."""


class Shell:
    """A persistent namespace whose scripts run one at a time in its own interpreter."""

    def __init__(self, name: str, services: ShellServices) -> None:
        self.name = name
        self._services = services
        self.generation = 0
        self._interpreter: Interpreter | None = None
        self._running: str | None = None
        self._ended: asyncio.Event | None = None
        self._reset_reason: str | None = None
        self._told_uncertain = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_ended = 0.0
        self._recovered: asyncio.Task[ScriptResult] | None = None
        self._last_result: ScriptResult | None = None
        self._closes = 0
        self._close_reason = SHELL_CLOSING
        """How many times `close` was called: a run that sees it change before its script
        began does not begin it."""

    def _reattach(self, interpreter: Interpreter, running: RunningScript | None) -> None:
        """Take back an interpreter a keeper held for a host that is gone, with its
        generation; with the script it was `running`, which this shell then follows to its
        end (`recovered()`)."""
        self._interpreter = interpreter
        self._reset_reason = None  # it is the interpreter the shell had
        self.generation = interpreter.generation
        if running is None:
            self._arm_idle_timer()
            return
        self._running = running.script_id
        self._ended = asyncio.Event()
        self._recovered = asyncio.get_running_loop().create_task(self._follow(interpreter, running))

    def _not_kept(self, generation: int) -> None:
        """This shell ran in a host that is gone, up to `generation`, and no keeper held its
        interpreter for this one: its next run says its variables are gone, in a generation
        after that one."""
        self.generation = max(self.generation, generation)
        self._reset_reason = (
            "this shell last ran in another host, and its interpreter was not kept for this "
            "one (it closed with that host's runtime, or no host took it back from the keeper "
            "within the reattach window)"
        )

    async def recovered(self) -> ScriptResult | None:
        """The result of the script a host that is gone had started in this shell and a keeper
        kept running, once it ends; None if there was none. Its end is journaled too.

        A script that was running when its host ended, and whose interpreter was not kept
        for this host (its keeper had ended, or no host took it back within the reattach
        window), gives a `crashed` result saying so; the journal says `host_gone` of it."""
        if self._recovered is None:
            # A script whose interpreter no keeper held for this host: its end, as a crash.
            return self._services.lost_result(self.name)
        return await asyncio.shield(self._recovered)

    async def _follow(self, interpreter: Interpreter, running: RunningScript) -> ScriptResult:
        started = time.monotonic()
        try:
            outcome = await interpreter.resume()
            notes = [restart_words(running.keeper_stop)]
            result = self._conclude(
                running.script_id, interpreter, outcome, running.time_limit, started, notes
            )
            if self._interpreter is not interpreter:
                await self._drop(interpreter, close=False)
            return result
        finally:
            self._running = None
            if self._ended is not None:
                self._ended.set()
            self._arm_idle_timer()

    def _idle_words(self) -> str:
        """For a refusal at the cap: which shells hold an interpreter while running nothing,
        since closing one frees its interpreter (a shell keeps its own between runs)."""
        idle = [name for name in self._services.idle_shells() if name != self.name]
        if not idle:
            return ""
        named = ", ".join(repr(name[:40]) for name in idle[:5])
        if len(idle) > 5:
            named += f" and {len(idle) - 5} more"
        kept = (
            "1 is kept by a shell that runs"
            if len(idle) == 1
            else f"{len(idle)} are kept by shells that run"
        )
        return (
            f". Of those, {kept} nothing now ({named}): "
            "`await rt.shell(name).close()` frees one (its variables are lost)"
        )

    @property
    def holds_interpreter(self) -> bool:
        """Whether this shell keeps an interpreter between its runs now."""
        return self._interpreter is not None

    @property
    def last_result(self) -> ScriptResult | None:
        """The result of the last script that ran in this shell's interpreter (in the
        foreground), also of one whose `run` was cancelled, so that its caller never got it
        (`status="cancelled"`, with every call's fate); None before the first."""
        return self._last_result

    @property
    def busy(self) -> bool:
        """Whether a script runs in the foreground now (a second `run` would be refused)."""
        return self._running is not None

    def output(self, limit: int | None = None) -> str:
        """What the script running in the foreground has written so far ("" when none
        runs): the last lines of its stderr and stdout, each cut to its share of `limit`
        characters (default: the runtime's `text_limit`)."""
        limit = output_limit(limit, self._services.settings.text_limit)
        interpreter = self._interpreter
        if self._running is None or interpreter is None:
            return ""
        stdout, stderr = interpreter.output_so_far()
        return render_output(stdout, stderr, limit)

    async def start(
        self,
        code: str,
        *,
        time_limit: float | None = None,
        on_done: Callable[[ScriptResult], Any] | None = None,
    ) -> ScriptHandle:
        """Start `code` in the background, in an interpreter of its own; returns at once.

        The shell's foreground runs go on beside it (a background script does not share the
        shell's variables). Its output goes to a log file under the state directory, and its
        result carries the tail of each stream, the log's path and the same call report as a
        foreground run. `on_done(result)` is called once when it ends, however it ends. One
        over the runtime's `max_background` is refused (the handle is done at once).
        """
        if on_done is not None and not callable(on_done):
            raise TypeError(f"on_done must be callable or None, not {on_done!r}")
        services = self._services
        services.check_open()
        code = _without_bom(code)
        limit, problem = self._check_request(code, time_limit)
        return services.background.start(
            code,
            limit,
            shell=self.name,
            time_limit=time_limit,
            problem=problem,
            on_done=on_done,
            services=services,
            refuse=self._refused,
        )

    def _check_request(self, code: object, time_limit: float | None) -> tuple[float, str | None]:
        settings = self._services.settings
        limit = settings.default_time_limit if time_limit is None else time_limit
        if not isinstance(code, str):
            return limit, "code must be a string of Python source"
        too_large = code_too_large(code)
        if too_large is not None:
            return limit, too_large
        try:
            positive_seconds("time_limit", limit)
        except ValueError as error:
            return limit, str(error)
        if limit > settings.max_time_limit:
            return limit, (
                f"time_limit {limit:g} s is over this runtime's maximum of "
                f"{settings.max_time_limit:g} s"
            )
        return float(limit), None

    async def run(self, code: str, *, time_limit: float | None = None) -> ScriptResult:
        """Run one script and return its result, whatever happens to it.

        Cancelling the awaiting task stops the script (interrupt, then a kill after the grace
        period); a second cancel kills it at once. Either way the cancel is raised once the
        script has ended, and its end is journaled and kept as `last_result`.
        """
        self._services.check_open()
        script_id = f"{self.name}:{secrets.token_hex(5)}"
        code = _without_bom(code)
        limit, problem = self._check_request(code, time_limit)
        if problem is None and self._running is not None:
            problem = (
                f"this shell is already running script {self._running}; wait for it to end, "
                "or run this in another shell"
            )
        if problem is not None:
            return self._refused(script_id, problem, time_limit)
        self._running = script_id
        self._ended = asyncio.Event()
        try:
            return await self._run(script_id, code, limit)
        finally:
            self._running = None
            self._ended.set()
            self._arm_idle_timer()

    def _arm_idle_timer(self) -> None:
        # One timer per shell, not one per run: a run only notes when it ended, and the timer,
        # when it fires early, sets itself again for the rest of the idle time.
        loop = asyncio.get_running_loop()
        self._last_ended = loop.time()
        idle = self._services.settings.idle_timeout
        if (
            idle is not None
            and self._idle_timer is None
            and self._interpreter is not None
            and not self._services.is_closed()
        ):
            self._idle_timer = loop.call_later(idle, self._reclaim)

    def _reclaim(self) -> None:
        """The shell was idle past `idle_timeout`: its interpreter goes, its state with it."""
        self._idle_timer = None
        interpreter = self._interpreter
        if interpreter is None:
            return
        loop = asyncio.get_running_loop()
        idle = self._services.settings.idle_timeout or 0
        left = self._last_ended + idle - loop.time()
        if self._running is not None or left > 0:
            self._idle_timer = loop.call_later(max(left, idle / 10), self._reclaim)
            return
        self._interpreter = None
        self._reset_reason = f"the shell was idle for {idle:g} s, so its interpreter was reclaimed"
        asyncio.get_running_loop().create_task(
            self._drop(interpreter, close=True, abandon_calls=False)
        )

    async def _drop(
        self, interpreter: Interpreter, *, close: bool, abandon_calls: bool = True
    ) -> None:
        """An interpreter this shell held is gone or going: end it and free its place."""
        try:
            if close:
                await interpreter.close(abandon_calls=abandon_calls)
            else:
                await interpreter.kill()
        finally:
            await self._services.pool.release()

    async def _run(self, script_id: str, code: str, limit: float) -> ScriptResult:
        services = self._services
        services.check_open()
        closes = self._closes
        journal = services.journal
        notes: list[str] = []
        notes.extend(await self._uncertain_notes())
        try:
            interpreter, reset_note = await self._interpreter_for_run()
        except InterpreterStartError as error:
            if services.is_closed():
                return self._refused(script_id, CLOSED, limit)
            return self._refused(
                script_id, f"the interpreter could not start: {error.reason}", limit
            )
        except CapReached as error:
            return self._refused(script_id, error.reason + self._idle_words(), limit)
        if services.is_closed():
            # The runtime closed while this run got its interpreter: it is ended here, as
            # `close` would have ended it had it been the shell's then.
            self._interpreter = None
            await self._drop(interpreter, close=True)
            return self._refused(script_id, CLOSED, limit)
        fresh = interpreter.runs == 0
        if reset_note:
            notes.append(reset_note)
        notes.extend(services.interpreter_words(interpreter))
        failures = interpreter.bind_failures
        for key, why in failures[:_BIND_FAILURES_TOLD]:
            notes.append(f"The tool {key} could not be bound and is missing: {why}")
        if len(failures) > _BIND_FAILURES_TOLD:
            notes.append(
                f"{len(failures) - _BIND_FAILURES_TOLD} more tools could not be bound and are "
                "missing; `rt.prompt()` lists the tools that are."
            )
        refusal, check_notes = await check_before_running(services, code, interpreter)
        if refusal is not None:
            return self._refused(script_id, "", limit, note=refusal)
        if services.is_closed():  # closed during the check
            return self._refused(script_id, CLOSED, limit)
        if self._closes != closes:
            # The shell was closed before the script began (while its interpreter started,
            # or the check ran): `close` could not stop it, so it is not begun, and the
            # interpreter it got is ended here, as `close` would have ended it.
            if self._interpreter is interpreter:
                self._interpreter = None
                await self._drop(interpreter, close=True)
            return self._closed_before_start(script_id, limit)
        notes[:0] = check_notes
        notes.extend(interpreter.catalogue.down_notes(code))
        started = time.monotonic()
        try:
            outcome = await interpreter.execute(script_id, code, limit, services.settings.grace)
        except NotJournaled as failure:
            return self._refused(script_id, failure.reason, limit)
        except asyncio.CancelledError:
            if interpreter.last_outcome is not None:
                self._conclude(
                    script_id, interpreter, interpreter.last_outcome, limit, started, notes
                )
            if self._interpreter is not interpreter:
                await asyncio.shield(self._drop(interpreter, close=False))
            raise
        if outcome.never_started and not fresh:
            # The interpreter died between two scripts, before this one began: nothing ran,
            # so it runs once more, in a fresh interpreter, with the reason in the note.
            journal.end_script(script_id, "refused", time.time())
            interpreter.script_recorded()
            self._interpreter = None
            self._reset_reason = reset_words(outcome, "crashed") + " between two scripts"
            await self._drop(interpreter, close=False)
            return await self._run(script_id + "r", code, limit)
        result = self._conclude(script_id, interpreter, outcome, limit, started, notes)
        if self._interpreter is not interpreter:
            # Replaced (killed, crashed, out of memory): end it if it still lives, free its place.
            await self._drop(interpreter, close=False)
        return result

    def _conclude(
        self,
        script_id: str,
        interpreter: Interpreter,
        outcome: Outcome,
        limit: float,
        started: float,
        notes: list[str],
    ) -> ScriptResult:
        result = result_from(
            outcome,
            self._services.settings,
            limit,
            notes,
            generation=interpreter.generation,
            script_id=script_id,
            shell=self.name,
            duration=time.monotonic() - started,
        )
        if (
            outcome.ending in ("killed", "crashed", "fault")
            or result.status == "crashed"
            or outcome.report.get("threads_left")
            or outcome.report.get("timers_left")
            or outcome.report.get("processes_left")
        ):
            self._interpreter = None
            self._reset_reason = reset_words(outcome, result.status)
        # Not checked open: a run stopped by aclose() ends in the journal all the same.
        self._services.journal.end_script(script_id, result.status, time.time())
        interpreter.script_recorded()
        self._last_result = result
        return result

    async def _interpreter_for_run(self) -> tuple[Interpreter, str | None]:
        interpreter = self._interpreter
        if interpreter is not None and interpreter.alive:
            catalogue = self._services.catalogue()
            if interpreter.catalogue is not catalogue or interpreter.rebind_due:
                try:
                    await interpreter.rebind(catalogue)  # an MCP server's tools changed
                except InterpreterStartError:
                    self._interpreter = None
                    await self._drop(interpreter, close=False)
                    raise
            return interpreter, None
        note = None
        if interpreter is not None:
            self._reset_reason = self._reset_reason or (
                broken_reset_words(interpreter.broken)
                if interpreter.broken is not None
                else f"the previous one was killed because a script broke the protocol "
                f"({interpreter.fault})"
                if interpreter.fault is not None
                else f"the previous interpreter ended ({interpreter.exit_words()})"
            )
            self._interpreter = None
            await self._drop(interpreter, close=False)
        if self._reset_reason is not None:
            note = (
                f"This run started a fresh interpreter: {self._reset_reason}. Variables, "
                "imports and tasks from earlier runs are gone."
            )
        fresh = await self._adopted()
        self.generation += 1
        self._interpreter = fresh
        self._reset_reason = None
        return fresh, note

    async def _adopted(self) -> Interpreter:
        """An interpreter from the pool, given to this shell."""
        # Every warm one may be dead at once (killed together, or with their template): one
        # try past the warm ones the pool may hold, so the last is a fresh start.
        attempts = self._services.pool.size + 2
        for attempt in range(1, attempts + 1):
            interpreter = await self._services.pool.acquire()
            try:
                folder = self._services.folder(self.name)
                await interpreter.adopt(self.name, self.generation + 1, folder)
            except InterpreterStartError:
                await self._drop(interpreter, close=False)
                if attempt == attempts:
                    raise
                # A warm one may have died (killed from outside, or with its template) a
                # moment before the pool could see it: nothing of this run reached it, so
                # it is asked for once more (a real failure fails again, and is said).
                continue
            except BaseException:
                await self._drop(interpreter, close=False)
                raise
            return interpreter
        raise AssertionError("not reached")

    async def _uncertain_notes(self) -> list[str]:
        if self._told_uncertain:
            return []
        journal = self._services.journal

        def look_up() -> list[str]:
            calls = journal.untold_uncertain(self.name)
            if not calls:
                return []
            journal.mark_told(call.call_id for call in calls)
            return [uncertain_words(calls)]

        # Off the event loop: another process may hold the journal's lock for as long as
        # SQLite waits (seconds), and every other shell would wait with this one.
        try:
            notes = await asyncio.to_thread(look_up)
        except (sqlite3.Error, JournalClosedError) as error:
            return [
                "The journal could not be read for the calls an earlier host of this shell "
                f"left uncertain ({error}); a later run looks again."
            ]
        self._told_uncertain = True
        return notes

    def _refused(
        self, script_id: str, reason: str, time_limit: float | None, note: str | None = None
    ) -> ScriptResult:
        """A result for a script that never ran: `note`, else "Nothing ran: <reason>."."""
        journal = self._services.journal
        if not self._services.is_closed():  # else the journal is closed, or closing
            with contextlib.suppress(OSError):  # a full disk: the refusal is said all the same
                journal.begin_script(script_id, self.name, self.generation, "", time.time())
                journal.end_script(script_id, "refused", time.time())
        return ScriptResult(
            status="refused",
            note=note or f"Nothing ran: {reason}.",
            generation=self.generation,
            script_id=script_id,
            shell=self.name,
            time_limit=time_limit,
            text_limit=self._services.settings.text_limit,
        )

    def _closed_before_start(self, script_id: str, time_limit: float) -> ScriptResult:
        journal = self._services.journal
        with contextlib.suppress(OSError):  # a full disk: the cancel is said all the same
            journal.begin_script(script_id, self.name, self.generation, "", time.time())
            journal.end_script(script_id, "cancelled", time.time())
        return ScriptResult(
            status="cancelled",
            note=f"Cancelled by the caller ({self._close_reason}) before the script began: "
            "nothing ran.",
            generation=self.generation,
            script_id=script_id,
            shell=self.name,
            time_limit=time_limit,
            text_limit=self._services.settings.text_limit,
        )

    async def close(self, reason: str = SHELL_CLOSING) -> None:
        """Stop this shell's interpreter (bounded). The shell can run again afterwards.

        A script still running is stopped first (interrupt, then a kill after the grace
        period), so its run returns as cancelled, giving `reason`, and is journaled before
        the journal closes; one that has not begun yet is not begun.
        """
        self._closes += 1
        self._close_reason = reason
        interpreter = self._interpreter
        if interpreter is not None and self._running is not None:
            await interpreter.stop(reason, self._services.settings.grace)
            if self._ended is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._ended.wait(), OUTPUT_END_WAIT + SHUTDOWN_WAIT)
        elif self._running is not None and self._ended is not None and self._services.is_closed():
            # A run still getting its interpreter: it sees the runtime closed and ends that
            # interpreter itself (`_run`), within its start-up's bound.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._ended.wait(), self._services.settings.start_timeout + SHUTDOWN_WAIT
                )
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        interpreter, self._interpreter = self._interpreter, None
        if interpreter is not None:
            await self._drop(interpreter, close=True)


def _without_bom(code: str) -> str:
    """`code` without the byte order mark a file saved as "UTF-8 with BOM" begins with, when
    read as plain UTF-8: Python runs such a file, but refuses the mark in source text."""
    return code[1:] if isinstance(code, str) and code.startswith("\ufeff") else code
