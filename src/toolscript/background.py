"""Background scripts: `Shell.start` runs one in an interpreter of its own and returns a
`ScriptHandle` at once.

A background script does not share its shell's variables. Its output goes to a log file under
the state directory, and its result carries the tail of each stream, the log's path and the
same call report as a foreground run. The logs are kept for a while, not for ever
(`LOGS_KEPT`, `LOG_DAYS`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from .config import output_limit
from .host.interpreter import Interpreter, InterpreterStartError
from .host.pool import CLOSED, CapReached
from .results import ScriptResult, check_words, render_output, restart_words, result_from

if TYPE_CHECKING:
    from .host.keeper import RunningScript
    from .shell import ShellServices

__all__ = ["ScriptHandle"]

_log = logging.getLogger(__name__)

LOGS_KEPT = 1000
"""Background scripts' logs kept in a state directory: past this many, the oldest are removed."""

LOG_DAYS = 7.0
"""Days a background script's log is kept after its last write, however few there are."""

_STILL_WRITTEN = 3600.0
"""Seconds after its last write within which a log is never removed: its script may still run
(silent), up to its time limit; at least the runtime's `max_time_limit` and `grace`."""

_PRUNE_EVERY = 60.0
"""Seconds between two looks at the log folder for logs to remove."""


class Refuse(Protocol):
    """Journal a script that never ran and make its result."""

    def __call__(
        self, script_id: str, reason: str, time_limit: float | None, note: str | None = None
    ) -> ScriptResult:
        """The result's note is `note`, else "Nothing ran: <reason>."."""
        ...


async def check_before_running(
    services: ShellServices, code: str, interpreter: Interpreter
) -> tuple[str | None, list[str]]:
    """The check before running, as `services.settings.check` asks: the note refusing the
    script (None: it may run), and the notes to put first in its result."""
    mode = services.settings.check
    if mode == "off":
        return None, []
    checked = await services.checker.check(
        services.catalogue(),
        code,
        interpreter.script_names,
        interpreter.python_version,
        interpreter.earlier_runs,
    )
    if checked.findings and mode == "refuse":
        return check_words(checked.findings, refused=True), []
    interpreter.earlier_runs.remember(code)  # it runs: a key it stores is no mistake later
    if checked.findings:
        return None, [check_words(checked.findings, refused=False)]
    if checked.failure is not None:
        return None, [f"The check before running could not run: {checked.failure}."]
    return None, []


_CANCELLED_BY_CALLER = "cancelled by the caller"
"""The reason of a cancel that gives none."""


def _not_begun(reason: str | None, when: str, then: str = ".") -> str:
    """The note of a background script that ended `when` it had not begun, cancelled for
    `reason` (None: by nobody, as its runtime closed; "" or the default: by the caller)."""
    if reason is None:
        verb, why = "abandoned", ""
    elif reason in ("", _CANCELLED_BY_CALLER):
        verb, why = "cancelled", ""
    else:
        verb, why = "stopped", f" ({reason})"
    return f"The background script was {verb} {when}{why}{then}"


class ScriptHandle:
    """A background script: ask its status, await its result, or cancel it.

    `id` is its script id (in the journal too); `log_path` its log file once it started.
    """

    def __init__(
        self,
        script_id: str,
        on_done: Callable[[ScriptResult], Any] | None,
        grace: float,
        text_limit: int,
    ) -> None:
        self.id = script_id
        self._grace = grace
        self._text_limit = text_limit
        self.log_path: str | None = None
        self._on_done: list[Callable[[ScriptResult], Any]] = [] if on_done is None else [on_done]
        self._result: asyncio.Future[ScriptResult] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._ending: asyncio.Task[None] | None = None
        self._interpreter: Interpreter | None = None
        self._cancelled_for: str | None = None  # the reason of a cancel before it began

    def status(self) -> str:
        """`"running"` until it ends, then its result's status."""
        if not self._result.done():
            return "running"
        return self._result.result().status

    def done(self) -> bool:
        """Whether it has ended and its result is settled (`status()` is then not
        `"running"`, and `result()` returns at once)."""
        return self._result.done()

    def output(self, limit: int | None = None) -> str:
        """What it has written so far: the last lines of its stderr and stdout, each cut to
        its share of `limit` characters (default: the runtime's `text_limit`), under the
        headings its result's text uses. Once it has ended, its result's output."""
        limit = output_limit(limit, self._text_limit)
        if self._result.done():
            result = self._result.result()
            return render_output(result.stdout, result.stderr, limit)
        interpreter = self._interpreter
        if interpreter is None:
            return ""
        stdout, stderr = interpreter.output_so_far()
        return render_output(stdout, stderr, limit)

    async def result(self) -> ScriptResult:
        """Its result, once it has ended (waits until then)."""
        return await asyncio.shield(self._result)

    async def cancel(self, reason: str = _CANCELLED_BY_CALLER) -> ScriptResult:
        """Stop it (interrupt, then a kill after the grace period) and return its result."""
        if not self._result.done():
            interpreter = self._interpreter
            if interpreter is not None and interpreter.busy:
                await interpreter.stop(reason, self._grace)
            elif self._task is not None:
                self._cancelled_for = reason
                self._task.cancel()
        return await self.result()

    def add_done_callback(self, callback: Callable[[ScriptResult], Any]) -> None:
        """Call `callback(result)` once when it ends (soon, if it has ended), as `on_done`
        is: for a script a restarted host took back, which nobody gave an `on_done`."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {callback!r}")
        self._on_done.append(callback)
        if self._result.done():
            asyncio.get_running_loop().call_soon(
                self._call_on_done, callback, self._result.result()
            )

    def _settle(self, result: ScriptResult) -> None:
        if self._result.done():
            return
        self._result.set_result(result)
        for callback in self._on_done:
            asyncio.get_running_loop().call_soon(self._call_on_done, callback, result)

    def _call_on_done(self, callback: Callable[[ScriptResult], Any], result: ScriptResult) -> None:
        try:
            outcome = callback(result)
            if asyncio.iscoroutine(outcome):
                task = asyncio.get_running_loop().create_task(outcome)
                task.add_done_callback(self._on_done_ended)
        except Exception:
            _log.exception("toolscript: on_done of background script %s failed", self.id)

    def _on_done_ended(self, task: asyncio.Task[Any]) -> None:
        """An `async` on_done failing is said as a plain one's is, not left unretrieved."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            _log.error(
                "toolscript: on_done of background script %s failed",
                self.id,
                exc_info=(type(error), error, error.__traceback__),
            )


class BackgroundScripts:
    """The background scripts of one runtime that have not ended."""

    def __init__(self) -> None:
        self._handles: dict[str, ScriptHandle] = {}
        self._taken_back: list[tuple[ScriptHandle, RunningScript, ShellServices, BinaryIO]] = []
        self._pruned_at = -_PRUNE_EVERY

    def running(self) -> list[ScriptHandle]:
        """The scripts still running."""
        return [handle for handle in self._handles.values() if handle.status() == "running"]

    async def cancel_all(self, reason: str) -> None:
        """Stop every one (bounded by each one's grace period)."""
        await asyncio.gather(
            *(handle.cancel(reason) for handle in self._handles.values()),
            return_exceptions=True,
        )

    def start(
        self,
        code: str,
        limit: float,
        *,
        shell: str,
        time_limit: float | None,
        problem: str | None,
        on_done: Callable[[ScriptResult], Any] | None,
        services: ShellServices,
        refuse: Refuse,
    ) -> ScriptHandle:
        """Start `code` for `shell`, or refuse it (the handle is done at once): for `problem`
        with the request, or because `max_background` scripts are running."""
        settings = services.settings
        script_id = f"{shell}:bg-{secrets.token_hex(5)}"
        handle = ScriptHandle(script_id, on_done, settings.grace, settings.text_limit)
        running = len(self.running())
        if problem is None and running >= settings.max_background:
            problem = (
                f"{running} background scripts are running, the most this runtime allows "
                f"(max_background={settings.max_background}); wait for one to end, or cancel one"
            )
        if problem is not None:
            handle._settle(refuse(script_id, problem, time_limit))
            return handle
        self._handles[script_id] = handle
        handle._task = asyncio.get_running_loop().create_task(
            self._run(handle, code, limit, shell, services, refuse)
        )
        # A task cancelled before its first step never runs its `finally`: settled here then.
        text_limit = services.settings.text_limit
        handle._task.add_done_callback(lambda _: self._abandoned(handle, shell, limit, text_limit))
        return handle

    def take_back(
        self, interpreter: Interpreter, running: RunningScript, services: ShellServices
    ) -> ScriptHandle:
        """The handle of the script a host that is gone started in `interpreter`, which a
        keeper kept: called before the interpreter is taken back, so that its log gets all
        the output the host before did not read. `follow_taken_back` then follows it."""
        settings = services.settings
        handle = ScriptHandle(running.script_id, None, settings.grace, settings.text_limit)
        handle._interpreter = interpreter
        log_path = _log_path(services, handle.id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115 - closed when the script ends
        handle.log_path = str(log_path)
        interpreter.log_to(log, settings.log_limit)
        self._handles[handle.id] = handle
        self._taken_back.append((handle, running, services, log))
        return handle

    def follow_taken_back(self) -> None:
        """Follow each script `take_back` gave to its end, as a background script."""
        loop = asyncio.get_running_loop()
        for handle, running, services, log in self._taken_back:
            handle._task = loop.create_task(self._follow(handle, running, services, log))
        self._taken_back.clear()

    async def _follow(
        self, handle: ScriptHandle, running: RunningScript, services: ShellServices, log: BinaryIO
    ) -> None:
        interpreter = handle._interpreter
        assert interpreter is not None
        settings = services.settings
        shell = interpreter.shell
        result: ScriptResult | None = None
        try:
            outcome = await interpreter.resume()
            result = result_from(
                outcome,
                settings,
                running.time_limit,
                [restart_words(running.keeper_stop, "background script")],
                generation=interpreter.generation,
                script_id=handle.id,
                shell=shell,
                duration=max(0.0, time.time() - (running.deadline - running.time_limit)),
                log_path=handle.log_path,
                one_off=True,
            )
            services.journal.end_script(handle.id, result.status, time.time())
            interpreter.script_recorded()
        finally:
            await asyncio.shield(interpreter.close())
            await services.pool.release()
            log.close()
            self._handles.pop(handle.id, None)
            handle._settle(
                result
                if result is not None
                else ScriptResult(
                    status="cancelled",
                    note="The background script was stopped while a restarted host took it back.",
                    script_id=handle.id,
                    shell=shell,
                    time_limit=running.time_limit,
                    text_limit=settings.text_limit,
                )
            )

    def _abandoned(self, handle: ScriptHandle, shell: str, limit: float, text_limit: int) -> None:
        if handle._ending is not None:
            return  # it started, and its end settles it (`_end`)
        self._handles.pop(handle.id, None)
        handle._settle(
            ScriptResult(
                status="cancelled",
                note=_not_begun(handle._cancelled_for or "", "before it started", ": nothing ran."),
                script_id=handle.id,
                shell=shell,
                time_limit=limit,
                text_limit=text_limit,
            )
        )

    async def _run(
        self,
        handle: ScriptHandle,
        code: str,
        limit: float,
        shell: str,
        services: ShellServices,
        refuse: Refuse,
    ) -> None:
        settings, pool, journal = services.settings, services.pool, services.journal
        script_id = handle.id
        result: ScriptResult | None = None
        interpreter: Interpreter | None = None
        log = None
        try:
            try:
                interpreter = await pool.acquire()
                await interpreter.adopt(shell, 1, services.folder(shell), background=True)
            except (CapReached, InterpreterStartError) as error:
                if interpreter is not None:
                    await interpreter.kill()
                    await pool.release()
                    interpreter = None
                result = refuse(script_id, f"no interpreter could be had: {error.reason}", limit)
                return
            handle._interpreter = interpreter
            if services.is_closed():
                result = refuse(script_id, CLOSED, limit)
                return
            refusal, notes = await check_before_running(services, code, interpreter)
            if refusal is not None:
                result = refuse(script_id, "", limit, note=refusal)
                return
            log_path = _log_path(services, script_id)
            try:
                services.log_dir.mkdir(parents=True, exist_ok=True)
                log = open(log_path, "wb")  # noqa: SIM115 - closed in finally
            except OSError as error:
                reason = error.strerror or str(error)
                result = refuse(
                    script_id, f"its log file {str(log_path)!r} could not be made: {reason}", limit
                )
                return
            if time.monotonic() - self._pruned_at >= _PRUNE_EVERY:
                self._pruned_at = time.monotonic()
                busy = max(_STILL_WRITTEN, settings.max_time_limit + settings.grace + 60)
                await asyncio.to_thread(prune_logs, services.log_dir, busy)
            handle.log_path = str(log_path)
            interpreter.log_to(log, settings.log_limit)
            services.check_open()
            started = time.monotonic()
            try:
                outcome = await interpreter.execute(script_id, code, limit, settings.grace)
            except asyncio.CancelledError:
                # A cancel of this task (`cancel`, as the script ended on its own and its
                # interpreter was not busy any more): the script was sent, and its end is
                # the interpreter's word all the same.
                if interpreter.last_outcome is None:
                    raise
                outcome = interpreter.last_outcome
            result = result_from(
                outcome,
                settings,
                limit,
                [
                    *notes,
                    *services.interpreter_words(interpreter),
                    *interpreter.catalogue.down_notes(code),
                ],
                generation=interpreter.generation,
                script_id=script_id,
                shell=shell,
                duration=time.monotonic() - started,
                log_path=str(log_path),
                one_off=True,
            )
            journal.end_script(script_id, result.status, time.time())
            interpreter.script_recorded()
        finally:
            if result is None:
                result = ScriptResult(
                    status="cancelled",
                    note=_not_begun(handle._cancelled_for, "while it started"),
                    script_id=script_id,
                    shell=shell,
                    time_limit=limit,
                    text_limit=settings.text_limit,
                )
            # A task of its own, which a cancel does not reach: a cancel that comes while the
            # interpreter of a script that ended on its own closes (the handle still says
            # "running") must not cut the end short, leaving the handle to be settled as if
            # nothing ran, its log open and its interpreter's place never given back.
            handle._ending = asyncio.get_running_loop().create_task(
                self._end(handle, interpreter, services, log, result)
            )
            await asyncio.shield(handle._ending)

    async def _end(
        self,
        handle: ScriptHandle,
        interpreter: Interpreter | None,
        services: ShellServices,
        log: BinaryIO | None,
        result: ScriptResult,
    ) -> None:
        try:
            if interpreter is not None:
                try:
                    # Handlers of its calls in flight finish under their own timeouts, so
                    # the journal learns what they did, as after a shell's script; closing
                    # the runtime cancels them.
                    await interpreter.close(abandon_calls=services.is_closed())
                finally:
                    await services.pool.release()
        finally:
            if log is not None:
                log.close()
            self._handles.pop(handle.id, None)
            handle._settle(result)


def prune_logs(folder: Path, busy: float, kept: int = LOGS_KEPT, days: float = LOG_DAYS) -> int:
    """Remove from `folder` the background logs past the newest `kept`, and those not written
    for `days`; never one written within `busy` seconds, which a script may still write.
    Returns how many were removed."""
    now = time.time()
    logs: list[tuple[float, Path]] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(".log") and entry.is_file(follow_symlinks=False):
                    try:
                        logs.append((entry.stat(follow_symlinks=False).st_mtime, Path(entry.path)))
                    except OSError:
                        continue  # removed meanwhile
    except OSError:
        return 0
    logs.sort(reverse=True)
    removed = 0
    for rank, (written, path) in enumerate(logs):
        idle = now - written
        if idle > busy and (rank >= kept or idle > days * 86_400):
            try:
                path.unlink()
            except OSError:
                continue
            removed += 1
    return removed


_LONGEST_LOG_NAME = 200
"""Bytes of a log file's name taken from its script's id (a file name holds 255)."""


def _log_path(services: ShellServices, script_id: str) -> Path:
    name = script_id.replace(":", "_").replace("/", "_")
    if len(name.encode()) > _LONGEST_LOG_NAME:
        # A long shell name: its start, then a digest of the whole id, which stays unique.
        digest = hashlib.sha256(script_id.encode()).hexdigest()[:16]
        name = f"{name.encode()[:100].decode(errors='ignore')}-{digest}"
    return services.log_dir / f"{name}.log"
