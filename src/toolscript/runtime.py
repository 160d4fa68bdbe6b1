"""`Runtime` and `Shell`: the public face that the agent, the MCP server and users build on.

A `Runtime` owns the tools (Python functions and MCP servers), the journal and every
interpreter. A `Shell` is one persistent namespace: its scripts run one at a time in its own
interpreter, which is replaced (with a note in the next result) when it dies or is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .host import busypoll
from .host.busypoll import DEFAULT_WINDOW as DEFAULT_BUSY_POLL
from .host.busypoll import LoopPoll
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
from .host.pool import CapReached, InterpreterPool
from .host.result import TEXT_LIMIT, ScriptResult
from .host.sandbox import LEVEL_NONE, Sandbox, SandboxError, parse_mounts
from .host.sandbox import Mount as SandboxMount
from .host.sandbox import prepare as prepare_sandbox
from .host.template import Template, TemplateError
from .tools.prompt import call_name, matching_plans, render_prompt
from .tools.spec import ToolSpec

__all__ = ["Runtime", "RuntimeClosedError", "ScriptHandle", "Shell"]

_log = logging.getLogger(__name__)


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
    - `preload`: modules every interpreter starts with imported (the template imports them
      once and forks each interpreter from it); `fork` (True): use the template where the
      system can fork, else start each interpreter afresh; `pool_size` (2): interpreters kept
      started and ready for new shells.
    - `max_interpreters` (64): live interpreters at once (shells and background scripts); a
      request over it waits up to `queue_timeout` (30 s) and is then refused.
    - `max_background` (8): background scripts running at once; one more is refused.
    - `idle_timeout` (900 s; None: never): an idle shell's interpreter is reclaimed after it.
    - `log_limit`: bytes of a background script's log file (64 MiB).
    - `busy_poll` (0.001 s; 0: off): while a reply is due, the host's event loop and the
      kernel poll for it this long before they sleep, when a core is spare for it. It trades
      a bounded amount of CPU for a tool call's round trip (see `toolscript.host.busypoll`).
    - `sandbox` ("auto"): "auto" runs every interpreter in an OS sandbox where the machine
      allows one and says so in `rt.sandbox` and in results where it does not; "required"
      refuses to start without one; "off" runs without (for debugging).
    - `network` (False): share the host's network with the sandbox.
    - `mounts`: more of the host to show in the sandbox, `{host_path: "ro" | "rw" | "/path" |
      "/path:rw"}` (read-only unless asked).
    - `workdir`: a host folder every shell works in (read-write), instead of a private folder
      per shell (`toolscript exec` gives the current directory).
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
        preload: Iterable[str] = (),
        fork: bool = True,
        pool_size: int = 2,
        max_interpreters: int = 64,
        queue_timeout: float = 30.0,
        max_background: int = 8,
        idle_timeout: float | None = 900.0,
        log_limit: int = 64 * 1024 * 1024,
        busy_poll: float = DEFAULT_BUSY_POLL,
        sandbox: str = "auto",
        network: bool = False,
        mounts: Mapping[str | Path, str] | None = None,
        workdir: str | Path | None = None,
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
        _positive("queue_timeout", queue_timeout)
        if type(busy_poll) not in (int, float) or not 0 <= busy_poll <= 0.01:
            raise ValueError("busy_poll must be a number of seconds from 0 to 0.01")
        _positive("idle_timeout", idle_timeout, allow_none=True)
        for knob, value, least in (
            ("pool_size", pool_size, 0),
            ("max_interpreters", max_interpreters, 1),
            ("max_background", max_background, 0),
            ("log_limit", log_limit, 0),
        ):
            if type(value) is not int or value < least:
                raise ValueError(f"{knob} must be a whole number, at least {least}")
        if sandbox not in ("auto", "required", "off"):
            raise ValueError(f"sandbox must be 'auto', 'required' or 'off', not {sandbox!r}")
        if not isinstance(network, bool):
            raise ValueError("network must be True or False")
        self._mounts = parse_mounts(mounts)
        if workdir is not None:
            workdir = Path(workdir).expanduser().resolve()
            if not workdir.is_dir():
                raise ValueError(f"workdir: {str(workdir)!r} is not a folder")
        self.workdir = workdir
        self.sandbox_mode = sandbox
        self.network = network
        preload = list(preload)
        for module in preload:
            if not isinstance(module, str) or not module.replace(".", "_").isidentifier():
                raise ValueError(f"preload: {module!r} is not a module name")
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
        self.preload = preload
        self.fork = bool(fork)
        self.pool_size = pool_size
        self.max_interpreters = max_interpreters
        self.queue_timeout = float(queue_timeout)
        self.max_background = max_background
        self.idle_timeout = idle_timeout
        self.log_limit = log_limit
        self.busy_poll = float(busy_poll)
        self._busy: LoopPoll | None = None
        self.template_failure: str | None = None
        """Why interpreters are started afresh instead of forked from the template, if so."""
        self._template: Template | None = None
        self._template_start: asyncio.Task[None] | None = None
        self._pool: InterpreterPool | None = None
        self._background: dict[str, ScriptHandle] = {}
        self._catalogue_listeners: list[Callable[[], Any]] = []
        self._journal: Journal | None = None
        self._catalogue: ToolCatalogue | None = None
        self._mcp: Any = None
        self._workdir: Path | None = None
        self._shells: dict[str, Shell] = {}
        self._shell_numbers = itertools.count(1)
        self._started = False
        self._closed = False
        self.mcp_failures: dict[str, str] = {}
        self._sandbox: Sandbox | None = None
        self.sandbox_failure: str | None = None
        """Why interpreters run without the sandbox, when they do."""

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
            self._mcp.set_on_change(self._tools_changed)
        self._catalogue = ToolCatalogue(specs, self.tool_timeout)
        self._workdir = Path(tempfile.mkdtemp(prefix="toolscript-"))
        try:
            await self._prepare_sandbox()
        except BaseException:
            await self._close_services()
            raise
        self._busy = busypoll.attach(self.busy_poll)
        self._log_dir = base / "logs" / "background"
        if self.fork and hasattr(os, "fork") and hasattr(os, "pidfd_open"):
            self._template_start = asyncio.get_running_loop().create_task(self._start_template())
        elif self.fork:
            self.template_failure = "this system cannot fork from a template"
        self._pool = InterpreterPool(
            self._new_interpreter,
            self.pool_size,
            self.max_interpreters,
            self.queue_timeout,
            before_fill=self._template_start,
        )
        self._started = True
        self._pool.fill()
        return self

    async def _prepare_sandbox(self) -> None:
        """Make this runtime's sandbox, or say why there is none (refuse if it is required)."""
        if self.sandbox_mode == "off":
            self.sandbox_failure = "the sandbox was turned off (sandbox='off')"
            return
        mounts = list(self._mounts)
        if self.workdir is not None:
            mounts.append(SandboxMount(str(self.workdir), str(self.workdir), writable=True))
        assert self._workdir is not None
        try:
            self._sandbox = await prepare_sandbox(
                self.python,
                scrubbed_environment(self._env),
                self._workdir,
                mounts,
                self.network,
            )
        except SandboxError as error:
            if self.sandbox_mode == "required":
                raise SandboxError(
                    f"sandbox='required', but no sandbox can be made here: {error.reason}"
                ) from None
            self.sandbox_failure = error.reason
            _log.warning("toolscript: scripts will run without a sandbox: %s", error.reason)

    @property
    def sandbox(self) -> str:
        """The isolation in force: "namespaces+seccomp", or "process only" (see
        `sandbox_failure` for why)."""
        return self._sandbox.level if self._sandbox is not None else LEVEL_NONE

    def _unconfined_words(self, interpreter: Interpreter) -> list[str]:
        """Once per interpreter without a sandbox: the note that says so."""
        if self._sandbox is not None or interpreter.told_unconfined:
            return []
        interpreter.told_unconfined = True
        return [
            f"This interpreter is not sandboxed ({self.sandbox_failure}): the script could "
            "reach the host's files, processes and network as the host's user."
        ]

    @property
    def process_limit(self) -> str:
        """What enforces `limits["processes"]` in this runtime's interpreters."""
        if self._sandbox is not None:
            return self._sandbox.process_limit
        return "RLIMIT_NPROC (not enforced for root)" if os.geteuid() == 0 else "RLIMIT_NPROC"

    async def _start_template(self) -> None:
        """Start the template in the background: until it is ready, interpreters are spawned."""
        try:
            self._template = await Template.start(
                self.python,
                self.preload,
                scrubbed_environment(self._env),
                self.start_timeout,
                self._sandbox,
            )
        except TemplateError as error:
            self.template_failure = error.reason
            _log.warning("toolscript: interpreters will be started afresh: %s", error.reason)

    @property
    def preload_failures(self) -> list[tuple[str, str]]:
        """Modules of `preload` the template could not import, with the error."""
        return list(self._template.preload_failures) if self._template is not None else []

    async def template_ready(self) -> bool:
        """Wait until the template has started (or failed to); True if interpreters fork."""
        if self._template_start is not None:
            await asyncio.shield(self._template_start)
        return self._template is not None and self._template.alive

    def _new_interpreter(self) -> Interpreter:
        assert self._catalogue is not None and self._journal is not None
        return Interpreter(self._launch(), self._catalogue, self._journal)

    def _tools_changed(self, server: str) -> None:
        """An MCP server's tool list changed: bindings follow for the next run."""
        if self._closed or not self._started or self._mcp is None:
            return
        self._catalogue = ToolCatalogue([*self._tool_specs, *self._mcp.specs()], self.tool_timeout)
        if self._pool is not None:
            asyncio.get_running_loop().create_task(self._pool.discard_warm())
        for listener in list(self._catalogue_listeners):
            try:
                listener()
            except Exception:
                _log.exception("toolscript: a catalogue listener failed")

    def on_catalogue_change(self, listener: Callable[[], Any]) -> None:
        """Have `listener()` called after the tool catalogue changed (an MCP server's list)."""
        self._catalogue_listeners.append(listener)

    async def aclose(self) -> None:
        """Stop every interpreter, close the MCP servers and the journal. Bounded; idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(
            *(handle.cancel("the runtime was closed") for handle in self._background.values()),
            *(shell.close() for shell in self._shells.values()),
            return_exceptions=True,
        )
        if self._pool is not None:
            await self._pool.close()
        if self._template_start is not None and not self._template_start.done():
            self._template_start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._template_start
        if self._template is not None:
            await self._template.close()
        await self._close_services()

    async def _close_services(self) -> None:
        if self._mcp is not None:
            await self._mcp.aclose()
        if self._journal is not None:
            self._journal.close()
        if self._busy is not None:
            busypoll.detach(self._busy)
            self._busy = None
        if self._sandbox is not None:
            self._sandbox.close()
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

    def prompt(self, matching: str | None = None) -> str:
        """The tool catalogue as Python stubs that compile, for a system prompt.

        With `matching`, only the stubs of the tools a script can call whose server, name or
        description contains it (case-insensitive; an empty string keeps every one).
        """
        if matching is None:
            return self.catalogue.prompt()
        return render_prompt(matching_plans(self.catalogue.plans, matching))

    def tool_names(self, matching: str | None = None) -> list[str]:
        """The tools a script can call, as it calls them (`server.tool`, or `tool` at top
        level), in the catalogue's order; with `matching`, only those `prompt` would show."""
        return [call_name(plan) for plan in matching_plans(self.catalogue.plans, matching or "")]

    def shell(self, name: str | None = None) -> Shell:
        """The shell of that name (made on first use), or a new one with a fresh name."""
        self._check_open()
        if name is None:
            name = f"shell-{next(self._shell_numbers)}"
            while name in self._shells:
                name = f"shell-{next(self._shell_numbers)}"
        if not isinstance(name, str) or not name:
            raise ValueError("a shell's name must be a non-empty string")
        if not name.isprintable():  # no control characters, no lone surrogates
            raise ValueError(f"a shell's name must be printable text, not {name!r}")
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

    def _launch(self) -> Launch:
        assert self._workdir is not None
        return Launch(
            python=self.python,
            cwd=self._workdir,
            env=self._interpreter_environment(),
            limits=self.limits,
            start_timeout=self.start_timeout,
            output_limit=self.output_limit,
            template=self._template,
            preload=tuple(self.preload),
            busy=self._busy,
            sandbox=self._sandbox,
        )

    def _interpreter_environment(self) -> dict[str, str]:
        env = scrubbed_environment(self._env)
        if self._sandbox is not None:
            # The host's home and temporary folder are not in the sandbox: its own /tmp is,
            # private and writable, where libraries look for a home to keep caches in.
            for name in ("HOME", "TMPDIR"):
                if name not in self._env:
                    env[name] = "/tmp"
        return env

    def _folder(self, shell: str) -> Path:
        """A shell's working directory: its own (kept across its interpreters), or the
        runtime's `workdir`."""
        if self.workdir is not None:
            return self.workdir
        assert self._workdir is not None
        name = shell.replace("/", "_").replace(os.sep, "_")
        if name.startswith("."):
            name = "_" + name  # never "." or "..": a folder of its own, under the runtime's
        folder = self._workdir / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @property
    def background(self) -> list[ScriptHandle]:
        """Background scripts still running."""
        return [handle for handle in self._background.values() if handle.status() == "running"]


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
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_ended = 0.0

    @property
    def busy(self) -> bool:
        return self._running is not None

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
        runtime = self.runtime
        runtime._check_open()
        script_id = f"{self.name}:bg-{secrets.token_hex(5)}"
        handle = ScriptHandle(script_id, on_done, runtime.grace)
        limit, problem = self._check_request(code, time_limit)
        running = len(runtime.background)
        if problem is None and running >= runtime.max_background:
            problem = (
                f"{running} background scripts are running, the most this runtime allows "
                f"(max_background={runtime.max_background}); wait for one to end, or cancel one"
            )
        if problem is not None:
            handle._settle(self._refused(script_id, problem, time_limit))
            return handle
        runtime._background[script_id] = handle
        handle._task = asyncio.get_running_loop().create_task(
            self._run_background(handle, code, limit)
        )
        return handle

    async def _run_background(self, handle: ScriptHandle, code: str, limit: float) -> None:
        runtime = self.runtime
        pool = runtime._pool
        assert pool is not None
        script_id = handle.id
        result: ScriptResult | None = None
        interpreter: Interpreter | None = None
        log = None
        try:
            try:
                interpreter = await pool.acquire()
                await interpreter.adopt(self.name, 1, runtime._folder(self.name))
            except (CapReached, InterpreterStartError) as error:
                if interpreter is not None:
                    await interpreter.kill()
                    await pool.release()
                    interpreter = None
                result = self._refused(
                    script_id, f"no interpreter could be had: {error.reason}", limit
                )
                return
            handle._interpreter = interpreter
            runtime._log_dir.mkdir(parents=True, exist_ok=True)
            log_path = runtime._log_dir / f"{script_id.replace(':', '_').replace('/', '_')}.log"
            log = open(log_path, "wb")  # noqa: SIM115 - closed in finally
            handle.log_path = str(log_path)
            interpreter._stdout.log_to(log, runtime.log_limit)
            interpreter._stderr.log_to(log, runtime.log_limit)
            runtime.journal.begin_script(script_id, self.name, 1, code, time.time())
            started = time.monotonic()
            outcome = await interpreter.execute(script_id, code, limit, runtime.grace)
            result = _result_from(
                outcome,
                runtime,
                limit,
                runtime._unconfined_words(interpreter),
                generation=interpreter.generation,
                script_id=script_id,
                shell=self.name,
                duration=time.monotonic() - started,
                log_path=str(log_path),
            )
            journal = runtime._journal
            assert journal is not None
            journal.end_script(script_id, result.status, time.time())
        finally:
            if interpreter is not None:
                await asyncio.shield(interpreter.close())
                await pool.release()
            if log is not None:
                log.close()
            runtime._background.pop(script_id, None)
            handle._settle(
                result
                if result is not None
                else ScriptResult(
                    status="cancelled",
                    note="The background script was abandoned while it started.",
                    script_id=script_id,
                    shell=self.name,
                    time_limit=limit,
                    text_limit=runtime.text_limit,
                )
            )

    def _check_request(self, code: object, time_limit: float | None) -> tuple[float, str | None]:
        runtime = self.runtime
        limit = runtime.default_time_limit if time_limit is None else time_limit
        if not isinstance(code, str):
            return limit, "code must be a string of Python source"
        try:
            _positive("time_limit", limit)
        except ValueError as error:
            return limit, str(error)
        if limit > runtime.max_time_limit:
            return limit, (
                f"time_limit {limit:g} s is over this runtime's maximum of "
                f"{runtime.max_time_limit:g} s"
            )
        return float(limit), None

    async def run(self, code: str, *, time_limit: float | None = None) -> ScriptResult:
        """Run one script and return its result, whatever happens to it.

        Cancelling the awaiting task stops the script (interrupt, then a kill after the grace
        period); the script's end is still journaled.
        """
        runtime = self.runtime
        runtime._check_open()
        script_id = f"{self.name}:{secrets.token_hex(5)}"
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
        idle = self.runtime.idle_timeout
        if (
            idle is not None
            and self._idle_timer is None
            and self._interpreter is not None
            and not self.runtime._closed
        ):
            self._idle_timer = loop.call_later(idle, self._reclaim)

    def _reclaim(self) -> None:
        """The shell was idle past `idle_timeout`: its interpreter goes, its state with it."""
        self._idle_timer = None
        interpreter = self._interpreter
        if interpreter is None:
            return
        loop = asyncio.get_running_loop()
        idle = self.runtime.idle_timeout or 0
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
        pool = self.runtime._pool
        try:
            if close:
                await interpreter.close(abandon_calls=abandon_calls)
            else:
                await interpreter.kill()
        finally:
            if pool is not None:
                await pool.release()

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
        except CapReached as error:
            return self._refused(script_id, error.reason, limit)
        fresh = interpreter.runs == 0
        if reset_note:
            notes.append(reset_note)
        notes.extend(runtime._unconfined_words(interpreter))
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
            if self._interpreter is not interpreter:
                await asyncio.shield(self._drop(interpreter, close=False))
            raise
        if outcome.never_started and not fresh:
            # The interpreter died between two scripts, before this one began: nothing ran,
            # so it runs once more, in a fresh interpreter, with the reason in the note.
            journal.end_script(script_id, "refused", time.time())
            self._interpreter = None
            self._reset_reason = _reset_words(outcome, "crashed") + " between two scripts"
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
        runtime = self.runtime
        result = _result_from(
            outcome,
            runtime,
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
        ):
            self._interpreter = None
            self._reset_reason = _reset_words(outcome, result.status)
        journal = runtime._journal  # not `runtime.journal`: a run stopped by aclose() ends here
        assert journal is not None
        journal.end_script(script_id, result.status, time.time())
        return result

    async def _interpreter_for_run(self) -> tuple[Interpreter, str | None]:
        interpreter = self._interpreter
        if interpreter is not None and interpreter.alive:
            catalogue = self.runtime.catalogue
            if interpreter.catalogue is not catalogue:
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
                _broken_reset_words(interpreter.broken)
                if interpreter.broken is not None
                else f"the previous one was killed because a script broke the protocol "
                f"({interpreter.fault})"
                if interpreter.fault is not None
                else "the previous interpreter ended (it exited)"
            )
            self._interpreter = None
            await self._drop(interpreter, close=False)
        if self._reset_reason is not None:
            note = (
                f"This run started a fresh interpreter: {self._reset_reason}. Variables, "
                "imports and tasks from earlier runs are gone."
            )
        runtime = self.runtime
        pool = runtime._pool
        assert pool is not None
        interpreter = await pool.acquire()
        try:
            await interpreter.adopt(self.name, self.generation + 1, runtime._folder(self.name))
        except BaseException:
            await self._drop(interpreter, close=False)
            raise
        self.generation += 1
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
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        interpreter, self._interpreter = self._interpreter, None
        if interpreter is not None:
            await self._drop(interpreter, close=True)


class ScriptHandle:
    """A background script: ask its status, await its result, or cancel it.

    `id` is its script id (in the journal too); `log_path` its log file once it started.
    """

    def __init__(
        self, script_id: str, on_done: Callable[[ScriptResult], Any] | None, grace: float
    ) -> None:
        self.id = script_id
        self._grace = grace
        self.log_path: str | None = None
        self._on_done = on_done
        self._result: asyncio.Future[ScriptResult] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._interpreter: Interpreter | None = None

    def status(self) -> str:
        """`"running"` until it ends, then its result's status."""
        if not self._result.done():
            return "running"
        return self._result.result().status

    def done(self) -> bool:
        return self._result.done()

    async def result(self) -> ScriptResult:
        """Its result, once it has ended (waits until then)."""
        return await asyncio.shield(self._result)

    async def cancel(self, reason: str = "cancelled by the caller") -> ScriptResult:
        """Stop it (interrupt, then a kill after the grace period) and return its result."""
        if not self._result.done():
            interpreter = self._interpreter
            if interpreter is not None and interpreter.busy:
                await interpreter.stop(reason, self._grace)
            elif self._task is not None:
                self._task.cancel()
        return await self.result()

    def _settle(self, result: ScriptResult) -> None:
        if self._result.done():
            return
        self._result.set_result(result)
        if self._on_done is not None:
            asyncio.get_running_loop().call_soon(self._call_on_done, result)

    def _call_on_done(self, result: ScriptResult) -> None:
        assert self._on_done is not None
        try:
            outcome = self._on_done(result)
            if asyncio.iscoroutine(outcome):
                asyncio.get_running_loop().create_task(outcome)
        except Exception:
            _log.exception("toolscript: on_done of background script %s failed", self.id)


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


def _result_from(
    outcome: Outcome,
    runtime: Runtime,
    limit: float,
    notes: list[str],
    *,
    generation: int,
    script_id: str,
    shell: str,
    duration: float,
    log_path: str | None = None,
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
    elif ending == "stopped" and report.get("threads_left"):
        status = "time_limit" if outcome.stop_reason == "time_limit" else "cancelled"
        words.append(_stop_words(outcome.stop_reason, limit, runtime, killed=False).split(" It")[0])
        words.append(
            f"{report['threads_left']} thread(s) the script started were still running after "
            "the stop, and a thread cannot be stopped from outside, so the interpreter was "
            "replaced. Its state is gone: variables, imports and tasks; the next run starts a "
            "fresh interpreter."
        )
    elif ending == "stopped":
        status = "time_limit" if outcome.stop_reason == "time_limit" else "cancelled"
        words.append(_stop_words(outcome.stop_reason, limit, runtime, killed=False))
    elif ending == "killed":
        status = "time_limit" if outcome.stop_reason == "time_limit" else "cancelled"
        words.append(_stop_words(outcome.stop_reason, limit, runtime, killed=True))
    elif ending == "broken":
        status = "crashed"
        broken = report.get("broken")
        if outcome.never_started:
            words.append(
                "Nothing of this script ran: the interpreter's own descriptors were found closed "
                f"or replaced before it began ({broken}), by something an earlier script left "
                "running. It was replaced: its variables, imports and tasks are gone, and the "
                "next run starts a fresh interpreter."
            )
        else:
            words.append(
                f"The interpreter's own descriptors were closed or replaced ({broken}), most "
                "likely by the script (os.close, os.closerange or os.dup2 over a number it did "
                "not open), so it could not go on and was replaced: its variables, imports and "
                "tasks are gone, and the next run starts a fresh interpreter. Close or overwrite "
                "only the descriptors the script opened itself."
            )
    elif ending == "fault":
        status = "crashed"
        words.append(
            f"The script broke the protocol between its interpreter and the host: "
            f"{outcome.fault}. Script code must not write to the interpreter's private channel. "
            "The interpreter was killed: its state is gone, and the next run starts a fresh "
            "interpreter."
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
        generation=generation,
        script_id=script_id,
        shell=shell,
        duration=duration,
        log_path=log_path,
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
    if outcome.report.get("threads_left"):
        return "a thread the previous script started was still running after its stop"
    if outcome.ending == "killed":
        return "the previous one was killed because it did not stop after the interrupt"
    if outcome.ending == "fault":
        return f"the previous one was killed because a script broke the protocol ({outcome.fault})"
    if outcome.ending == "broken":
        return _broken_reset_words(str(outcome.report.get("broken")))
    if outcome.report.get("memory"):
        return "the previous one ran out of memory"
    return f"the previous one died ({outcome.exit_description or 'exit status unknown'})"


def _broken_reset_words(broken: str) -> str:
    return f"a script closed or replaced the previous one's own descriptors ({broken})"


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
