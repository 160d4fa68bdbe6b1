"""`Runtime` and `Shell`: the public face that the agent, the MCP server and users build on.

A `Runtime` owns the tools (Python functions and MCP servers), the journal and every
interpreter. A `Shell` is one persistent namespace: its scripts run one at a time in its own
interpreter, which is replaced (with a note in the next result) when it dies or is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .host.calls import CallReport
from .host.catalogue import ToolCatalogue
from .host.environment import resolve_limits, scrubbed_environment
from .host.interpreter import (
    OUTPUT_END_WAIT,
    SHUTDOWN_WAIT,
    Interpreter,
    InterpreterStartError,
    Launch,
    Outcome,
)
from .host.journal import Journal, JournalCall, state_dir
from .host.result import TEXT_LIMIT, ScriptResult
from .tools.spec import ToolSpec

__all__ = ["Runtime", "RuntimeClosedError", "Shell"]


class RuntimeClosedError(RuntimeError):
    """The runtime was used before `start()` (or `async with`) or after `aclose()`."""


def _positive(name: str, value: float | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if (
        value is None
        or isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a positive, finite number of seconds, not {value!r}")


class Runtime:
    """Runs scripts in isolated interpreters and answers their tool calls.

    Use it as `async with Runtime(tools=[...], mcp_config="mcp.json") as rt:`. Every knob is a
    keyword argument with a default; a bad value raises `ValueError` naming the knob.

    - `tools`: Python tools (functions decorated with `@tool`, plain functions, or `ToolSpec`s).
    - `mcp_config`: a path to, or the dict of, an `{"mcpServers": {...}}` config.
    - `python`: the interpreter scripts run under (default: this one).
    - `state_dir`: where logs and the journal live (default `$TOOLSCRIPT_STATE`, else the
      platform's user state directory); `journal`: a path, `":memory:"`, or None for
      `state_dir/journal.sqlite3`.
    - `default_time_limit` (30 s), `max_time_limit` (600 s), `grace` (5 s between the interrupt
      and the kill), `tool_timeout` (60 s per call unless the tool sets its own; None: no bound).
    - `env`: extra variables for the interpreter; `limits`: resource limits (see
      `toolscript.host.environment.DEFAULT_LIMITS`).
    - `output_limit`: bytes of each stream the host keeps per script (head and tail);
      `text_limit`: characters of `ScriptResult.text`; `start_timeout`: seconds an
      interpreter has to become ready.
    """

    def __init__(
        self,
        tools: Iterable[Any] = (),
        mcp_config: str | Path | Mapping[str, Any] | None = None,
        *,
        python: str | None = None,
        state_dir: str | Path | None = None,
        journal: str | Path | None = None,
        default_time_limit: float = 30.0,
        max_time_limit: float = 600.0,
        grace: float = 5.0,
        tool_timeout: float | None = 60.0,
        env: Mapping[str, str] | None = None,
        limits: Mapping[str, int | None] | None = None,
        output_limit: int = 1_000_000,
        text_limit: int = TEXT_LIMIT,
        start_timeout: float = 20.0,
    ) -> None:
        _positive("default_time_limit", default_time_limit)
        _positive("max_time_limit", max_time_limit)
        _positive("grace", grace)
        _positive("tool_timeout", tool_timeout, allow_none=True)
        _positive("start_timeout", start_timeout)
        if default_time_limit > max_time_limit:
            raise ValueError(
                f"default_time_limit ({default_time_limit:g} s) is over "
                f"max_time_limit ({max_time_limit:g} s)"
            )
        if type(output_limit) is not int or output_limit < 1024:
            raise ValueError("output_limit must be a whole number of bytes, at least 1024")
        if type(text_limit) is not int or text_limit < 1000:
            raise ValueError("text_limit must be a whole number of characters, at least 1000")
        self._tool_specs = [_as_spec(item) for item in tools]
        self._mcp_config = mcp_config
        self.python = python or sys.executable
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._journal_where = journal
        self.default_time_limit = float(default_time_limit)
        self.max_time_limit = float(max_time_limit)
        self.grace = float(grace)
        self.tool_timeout = tool_timeout
        self._env = dict(env or {})
        self.limits = resolve_limits(limits)
        self.output_limit = output_limit
        self.text_limit = text_limit
        self.start_timeout = float(start_timeout)
        self._journal: Journal | None = None
        self._catalogue: ToolCatalogue | None = None
        self._mcp: Any = None
        self._workdir: Path | None = None
        self._shells: dict[str, Shell] = {}
        self._shell_numbers = itertools.count(1)
        self._started = False
        self._closed = False
        self.mcp_failures: dict[str, str] = {}

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> Runtime:
        """Open the journal and connect the MCP servers. `async with` calls this."""
        if self._closed:
            raise RuntimeClosedError("this runtime was closed; create a new one")
        if self._started:
            return self
        base = self.state_dir or state_dir()
        if self._journal_where is not None:
            self._journal = Journal.open(self._journal_where)
        elif self.state_dir is not None:
            self._journal = Journal.open(self.state_dir / "journal.sqlite3")
        else:
            self._journal = Journal.open(None)
        specs = list(self._tool_specs)
        if self._mcp_config is not None:
            from .tools.mcp import MCPTools

            log_dir = base / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            self._mcp = await MCPTools.open(self._mcp_config, log_dir)
            self.mcp_failures = dict(self._mcp.failures)
            specs.extend(self._mcp.specs())
        self._catalogue = ToolCatalogue(specs, self.tool_timeout)
        self._workdir = Path(tempfile.mkdtemp(prefix="toolscript-"))
        self._started = True
        return self

    async def aclose(self) -> None:
        """Stop every interpreter, close the MCP servers and the journal. Bounded; idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(
            *(shell.close() for shell in self._shells.values()), return_exceptions=True
        )
        if self._mcp is not None:
            await self._mcp.aclose()
        if self._journal is not None:
            self._journal.close()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    async def __aenter__(self) -> Runtime:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- use ---------------------------------------------------------------------------------

    @property
    def journal(self) -> Journal:
        """The call journal: `rt.journal.uncertain()` lists calls whose effect is unknown."""
        self._check_open()
        assert self._journal is not None
        return self._journal

    @property
    def catalogue(self) -> ToolCatalogue:
        self._check_open()
        assert self._catalogue is not None
        return self._catalogue

    def prompt(self) -> str:
        """The tool catalogue as Python stubs that compile, for a system prompt."""
        return self.catalogue.prompt()

    def shell(self, name: str | None = None) -> Shell:
        """The shell of that name (made on first use), or a new one with a fresh name."""
        self._check_open()
        if name is None:
            name = f"shell-{next(self._shell_numbers)}"
            while name in self._shells:
                name = f"shell-{next(self._shell_numbers)}"
        if not isinstance(name, str) or not name:
            raise ValueError("a shell's name must be a non-empty string")
        shell = self._shells.get(name)
        if shell is None:
            shell = Shell(self, name)
            self._shells[name] = shell
        return shell

    async def run(self, code: str, *, time_limit: float | None = None) -> ScriptResult:
        """Run `code` in the default shell (named "default")."""
        return await self.shell("default").run(code, time_limit=time_limit)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeClosedError("this runtime was closed; create a new one")
        if not self._started:
            raise RuntimeClosedError(
                "this runtime is not started: use `async with Runtime(...) as rt:` "
                "or `await rt.start()`"
            )

    def _launch(self, shell: str) -> Launch:
        assert self._workdir is not None
        cwd = self._workdir / shell.replace("/", "_")
        cwd.mkdir(parents=True, exist_ok=True)
        return Launch(
            python=self.python,
            cwd=cwd,
            env=scrubbed_environment(self._env),
            limits=self.limits,
            start_timeout=self.start_timeout,
            output_limit=self.output_limit,
        )


class Shell:
    """A persistent namespace whose scripts run one at a time in its own interpreter."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.runtime = runtime
        self.name = name
        self.generation = 0
        self._interpreter: Interpreter | None = None
        self._running: str | None = None
        self._ended: asyncio.Event | None = None
        self._reset_reason: str | None = None
        self._told_uncertain = False

    @property
    def busy(self) -> bool:
        return self._running is not None

    async def run(self, code: str, *, time_limit: float | None = None) -> ScriptResult:
        """Run one script and return its result, whatever happens to it.

        Cancelling the awaiting task stops the script (interrupt, then a kill after the grace
        period); the script's end is still journaled.
        """
        runtime = self.runtime
        runtime._check_open()
        script_id = f"{self.name}:{secrets.token_hex(5)}"
        if not isinstance(code, str):
            return self._refused(script_id, "code must be a string of Python source", time_limit)
        if self._running is not None:
            return self._refused(
                script_id,
                f"this shell is already running script {self._running}; wait for it to end, "
                "or run this in another shell",
                time_limit,
            )
        limit = runtime.default_time_limit if time_limit is None else time_limit
        try:
            _positive("time_limit", limit)
        except ValueError as error:
            return self._refused(script_id, str(error), time_limit)
        if limit > runtime.max_time_limit:
            return self._refused(
                script_id,
                f"time_limit {limit:g} s is over this runtime's maximum of "
                f"{runtime.max_time_limit:g} s",
                time_limit,
            )
        self._running = script_id
        self._ended = asyncio.Event()
        try:
            return await self._run(script_id, code, limit)
        finally:
            self._running = None
            self._ended.set()

    async def _run(self, script_id: str, code: str, limit: float) -> ScriptResult:
        runtime = self.runtime
        journal = runtime.journal
        notes: list[str] = []
        notes.extend(self._uncertain_notes())
        try:
            interpreter, reset_note = await self._interpreter_for_run()
        except InterpreterStartError as error:
            return self._refused(
                script_id, f"the interpreter could not start: {error.reason}", limit
            )
        if reset_note:
            notes.append(reset_note)
        for key, why in interpreter.bind_failures:
            notes.append(f"The tool {key} could not be bound and is missing: {why}")
        journal.begin_script(script_id, self.name, interpreter.generation, code, time.time())
        started = time.monotonic()
        try:
            outcome = await interpreter.execute(script_id, code, limit, runtime.grace)
        except asyncio.CancelledError:
            if interpreter.last_outcome is not None:
                self._conclude(
                    script_id, interpreter, interpreter.last_outcome, limit, started, notes
                )
            raise
        result = self._conclude(script_id, interpreter, outcome, limit, started, notes)
        if self._interpreter is not interpreter and interpreter.alive:
            await interpreter.kill()  # dropped while still running (out of memory): end it
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
        runtime = self.runtime
        result = _result_from(outcome, runtime, limit, notes)
        if outcome.ending in ("killed", "crashed", "fault") or result.status == "crashed":
            self._interpreter = None
            self._reset_reason = _reset_words(outcome, result.status)
        result = _with(
            result,
            generation=interpreter.generation,
            script_id=script_id,
            shell=self.name,
            duration=time.monotonic() - started,
        )
        journal = runtime._journal  # not `runtime.journal`: a run stopped by aclose() ends here
        assert journal is not None
        journal.end_script(script_id, result.status, time.time())
        return result

    async def _interpreter_for_run(self) -> tuple[Interpreter, str | None]:
        interpreter = self._interpreter
        if interpreter is not None and interpreter.alive:
            return interpreter, None
        note = None
        if interpreter is not None:
            self._reset_reason = self._reset_reason or (
                f"the previous interpreter ended ({interpreter.fault or 'it exited'})"
            )
            await interpreter.kill()
            self._interpreter = None
        if self._reset_reason is not None:
            note = (
                f"This run started a fresh interpreter: {self._reset_reason}. Variables, "
                "imports and tasks from earlier runs are gone."
            )
        runtime = self.runtime
        self.generation += 1
        interpreter = Interpreter(
            runtime._launch(self.name),
            runtime.catalogue,
            runtime.journal,
            self.name,
            self.generation,
        )
        await interpreter.start()
        self._interpreter = interpreter
        self._reset_reason = None
        return interpreter, note

    def _uncertain_notes(self) -> list[str]:
        if self._told_uncertain:
            return []
        self._told_uncertain = True
        journal = self.runtime.journal
        calls = journal.untold_uncertain(self.name)
        if not calls:
            return []
        journal.mark_told(call.call_id for call in calls)
        return [_uncertain_words(calls)]

    def _refused(self, script_id: str, reason: str, time_limit: float | None) -> ScriptResult:
        runtime = self.runtime
        runtime.journal.begin_script(script_id, self.name, self.generation, "", time.time())
        runtime.journal.end_script(script_id, "refused", time.time())
        return ScriptResult(
            status="refused",
            note=f"Nothing ran: {reason}.",
            generation=self.generation,
            script_id=script_id,
            shell=self.name,
            time_limit=time_limit,
            text_limit=runtime.text_limit,
        )

    async def close(self) -> None:
        """Stop this shell's interpreter (bounded). The shell can run again afterwards.

        A script still running is stopped first (interrupt, then a kill after the grace
        period), so its run returns as cancelled and is journaled before the journal closes.
        """
        interpreter = self._interpreter
        if interpreter is not None and self._running is not None:
            await interpreter.stop("the runtime was closed", self.runtime.grace)
            if self._ended is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._ended.wait(), OUTPUT_END_WAIT + SHUTDOWN_WAIT)
        interpreter, self._interpreter = self._interpreter, None
        if interpreter is not None:
            await interpreter.close()


def _as_spec(item: Any) -> ToolSpec:
    if isinstance(item, ToolSpec):
        return item
    spec = getattr(item, "spec", None)
    if isinstance(spec, ToolSpec):
        return spec
    if callable(item):
        from .tools.python import tool

        made = tool(item)
        made_spec = made.spec
        assert isinstance(made_spec, ToolSpec)
        return made_spec
    raise TypeError(f"tools: {item!r} is not a tool, a ToolSpec or a function")


def _with(result: ScriptResult, **changes: Any) -> ScriptResult:
    from dataclasses import replace

    return replace(result, **changes)


def _result_from(
    outcome: Outcome, runtime: Runtime, limit: float, notes: list[str]
) -> ScriptResult:
    report = outcome.report
    ending = outcome.ending
    value = report.get("value") if isinstance(report.get("value"), str) else None
    error = report.get("error") if isinstance(report.get("error"), str) else None
    words: list[str] = []
    if ending == "ok":
        status = "ok"
    elif ending == "error":
        status = "error"
        if report.get("memory"):
            status = "crashed"
            words.append(
                "The interpreter ran out of memory (MemoryError under the address-space limit "
                f"of {_size(runtime.limits.get('address_space'))}). It was replaced: its state "
                "is gone. Look for large lists, strings or data frames built in memory."
            )
    elif ending == "stopped":
        status = "time_limit" if outcome.stop_reason == "time_limit" else "cancelled"
        words.append(_stop_words(outcome.stop_reason, limit, runtime, killed=False))
    elif ending == "killed":
        status = "time_limit" if outcome.stop_reason == "time_limit" else "cancelled"
        words.append(_stop_words(outcome.stop_reason, limit, runtime, killed=True))
    elif ending == "fault":
        status = "crashed"
        words.append(
            f"The interpreter broke the protocol ({outcome.fault}) and was killed. This happens "
            "when a script writes to the interpreter's private channel. Its state is gone: the "
            "next run starts a fresh interpreter."
        )
    else:
        status = "crashed"
        words.append(_crash_words(outcome.exit_description))
    exit_value = report.get("exit")
    if ending == "ok" and exit_value == 0 and "error" not in report:
        words.append("The script called sys.exit(0); it ended as ok and the interpreter stays.")
    never = report.get("never_awaited")
    if isinstance(never, list) and never:
        names = ", ".join(sorted({str(name) for name in never}))
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
        calls=outcome.calls if isinstance(outcome.calls, CallReport) else CallReport(),
        time_limit=limit,
        text_limit=runtime.text_limit,
    )


def _stop_words(reason: str | None, limit: float, runtime: Runtime, *, killed: bool) -> str:
    if reason == "time_limit":
        first = f"Stopped at the time limit of {limit:g} s."
        more = (
            f" To allow more time, run again with a larger time_limit (at most "
            f"{runtime.max_time_limit:g} s), or split the work."
        )
    else:
        first = f"Cancelled by the caller ({reason or 'cancelled'})."
        more = ""
    if killed:
        return (
            f"{first} It did not stop within {runtime.grace:g} s of the interrupt, so the "
            "interpreter was killed: its variables, imports and tasks are gone, and the next "
            f"run starts a fresh interpreter.{more}"
        )
    return (
        f"{first} It was interrupted and stopped within the grace period; the interpreter "
        f"and its variables are kept.{more}"
    )


def _crash_words(exit_description: str | None) -> str:
    what = exit_description or "exit status unknown"
    if "SIGSEGV" in what or "SIGBUS" in what:
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
    return (
        f"The interpreter died ({what}). Likely cause: {cause}. What to look for: {look}. "
        "Its state is gone: the next run starts a fresh interpreter."
    )


def _reset_words(outcome: Outcome, status: str) -> str:
    if outcome.ending == "killed":
        return "the previous one was killed because it did not stop after the interrupt"
    if outcome.ending == "fault":
        return f"the previous one broke the protocol ({outcome.fault})"
    if outcome.report.get("memory"):
        return "the previous one ran out of memory"
    return f"the previous one died ({outcome.exit_description or 'exit status unknown'})"


def _uncertain_words(calls: list[JournalCall]) -> str:
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


OnDone = Callable[[ScriptResult], Any]
