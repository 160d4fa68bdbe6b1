"""`Runtime`: opens, owns and closes what scripts need: the journal, the tool catalogue and
its MCP servers, the template (or the keeper, which takes the template's place when
interpreters are kept), the pool of interpreters and the sandbox.

Scripts run in its shells (`toolscript.shell`); its knobs are `toolscript.config.Settings`.
One concept, though a little over 500 lines since the keeper: what the runtime owns, and its
life from start to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from .background import BackgroundScripts, ScriptHandle
from .config import Knob, MountsMapping, Settings
from .host import busypoll, headstart
from .host.busypoll import LoopPoll
from .host.catalogue import ToolCatalogue
from .host.checker import ScriptChecker
from .host.environment import interpreter_environment, scrubbed_environment
from .host.interpreter import Interpreter, Launch
from .host.journal import Journal, state_dir
from .host.pool import InterpreterPool
from .host.sandbox import LEVEL_NONE, Sandbox, SandboxError
from .host.sandbox import Mount as SandboxMount
from .host.sandbox import prepare as prepare_sandbox
from .host.template import Template, TemplateError
from .results import CLOSING, ScriptResult
from .shell import Shell, ShellServices
from .tools.prompt import call_name, matching_plans, summary
from .tools.python import as_spec

if TYPE_CHECKING:
    from .host.dispatch import Dispatcher
    from .host.keeper import Keeper

# `Shell` and `ScriptHandle` are also named here, where they were first defined.
__all__ = ["Runtime", "RuntimeClosedError", "ScriptHandle", "Shell"]

_log = logging.getLogger(__name__)

TEMPLATE_RESTARTS = 3
"""Templates started again in an hour after one died; past that, interpreters start afresh."""


_LONGEST_FOLDER = 100
"""Bytes of a shell's name its folder's name keeps (a file name holds 255)."""
_DIGESTED = re.compile(r"-[0-9a-f]{16}\Z")
"""How the folder of a shell whose name was changed or cut ends."""


class RuntimeClosedError(RuntimeError):
    """The runtime was used before `start()` (or `async with`) or after `aclose()`."""


_DEFAULT = Settings()

_LOST_KEPT = 1000
"""The most scripts of hosts that are gone whose end `recovered()` gives (the newest)."""


class Runtime:
    """Runs scripts in isolated interpreters and answers their tool calls.

    Use it as `async with Runtime(tools=[...], mcp_config="mcp.json") as rt:`. `tools` are
    Python tools (functions decorated with `@tool`, plain functions, or `ToolSpec`s);
    `mcp_config` is a path to, or the dict of, an `{"mcpServers": {...}}` config. Every other
    argument is a knob of `toolscript.config.Settings`, with its default; a bad value raises
    `ValueError` naming the knob. `rt.settings` holds them, and `rt.<knob>` reads one.
    """

    def __init__(
        self,
        tools: Iterable[Any] = (),
        mcp_config: str | Path | Mapping[str, Any] | None = None,
        *,
        python: str | None = None,
        state_dir: str | Path | None = None,
        journal: str | Path | None = None,
        default_time_limit: float = _DEFAULT.default_time_limit,
        max_time_limit: float = _DEFAULT.max_time_limit,
        grace: float = _DEFAULT.grace,
        tool_timeout: float | None = _DEFAULT.tool_timeout,
        env: Mapping[str, str] | None = None,
        limits: Mapping[str, int | None] | None = None,
        output_limit: int = _DEFAULT.output_limit,
        text_limit: int = _DEFAULT.text_limit,
        max_images: int = _DEFAULT.max_images,
        image_limit: int = _DEFAULT.image_limit,
        start_timeout: float = _DEFAULT.start_timeout,
        preload: Iterable[str] = (),
        fork: bool = _DEFAULT.fork,
        pool_size: int = _DEFAULT.pool_size,
        max_interpreters: int = _DEFAULT.max_interpreters,
        queue_timeout: float = _DEFAULT.queue_timeout,
        max_background: int = _DEFAULT.max_background,
        idle_timeout: float | None = _DEFAULT.idle_timeout,
        log_limit: int = _DEFAULT.log_limit,
        busy_poll: float = _DEFAULT.busy_poll,
        sandbox: str = _DEFAULT.sandbox,
        network: bool = _DEFAULT.network,
        mounts: MountsMapping | None = None,
        workdir: str | Path | None = None,
        check: str = _DEFAULT.check,
        keep_interpreters: bool = _DEFAULT.keep_interpreters,
        reattach_window: float = _DEFAULT.reattach_window,
    ) -> None:
        self.settings = Settings(
            python=python or sys.executable,
            state_dir=state_dir,
            journal=journal,
            default_time_limit=default_time_limit,
            max_time_limit=max_time_limit,
            grace=grace,
            tool_timeout=tool_timeout,
            env=env or {},
            limits=limits or {},
            output_limit=output_limit,
            text_limit=text_limit,
            max_images=max_images,
            image_limit=image_limit,
            start_timeout=start_timeout,
            # A string is one module's name, not its letters: `Settings` says so.
            preload=preload if isinstance(preload, str) or preload is None else tuple(preload),
            fork=fork,
            pool_size=pool_size,
            max_interpreters=max_interpreters,
            queue_timeout=queue_timeout,
            max_background=max_background,
            idle_timeout=idle_timeout,
            log_limit=log_limit,
            busy_poll=busy_poll,
            sandbox=sandbox,
            network=network,
            mounts=mounts or {},
            workdir=workdir,
            check=check,
            keep_interpreters=keep_interpreters,
            reattach_window=reattach_window,
        )
        """The knobs this runtime was made with."""
        if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
            raise TypeError(
                f"tools must be a list of tools, not {type(tools).__name__}: "
                "Runtime(tools=[my_tool]), even for one"
            )
        # The same tool given twice is one tool (two tools of one name: the second is not
        # bound, and each run's note says so).
        self._tool_specs = list({id(spec): spec for spec in map(as_spec, tools)}.values())
        if mcp_config is not None and not isinstance(mcp_config, str | os.PathLike | Mapping):
            raise ValueError(
                "mcp_config must be the path of an MCP config file or its dict "
                f'({{"mcpServers": {{...}}}}), not {mcp_config!r}'[:300]
            )
        self._mcp_config = mcp_config
        self._busy: LoopPoll | None = None
        self.template_failure: str | None = None
        """Why interpreters are started afresh instead of forked from the template, if so."""
        self._template: Template | Keeper | None = None
        self._template_start: asyncio.Task[None] | None = None
        self._template_restarts: list[float] = []
        self._pool: InterpreterPool | None = None
        self._background = BackgroundScripts()
        self._services: ShellServices | None = None
        self._checker: ScriptChecker | None = None
        self._catalogue_listeners: list[Callable[[], Any]] = []
        self._journal: Journal | None = None
        self._catalogue: ToolCatalogue | None = None
        self._mcp: Any = None
        self._workdir: Path | None = None
        self._shells: dict[str, Shell] = {}
        self._preload_failures: list[tuple[str, str]] = []
        self._handlers: weakref.WeakSet[Dispatcher] = weakref.WeakSet()
        """The call dispatchers of every interpreter this runtime made, while they live (a
        handler still running holds its own): their handlers end when the runtime closes."""
        self._shell_numbers = itertools.count(1)
        self._started = False
        self._start_lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that started it
        self._lost_results: dict[str, ScriptResult] = {}  # see `_conclude_lost`
        self._closed = False
        self._closed_all: asyncio.Event | None = None
        self.mcp_failures: dict[str, str] = {}
        """The MCP servers that did not start (or list their tools), by name, with why."""
        self._sandbox: Sandbox | None = None
        self._head_start: headstart.HeadStart | None = None
        self.sandbox_failure: str | None = None
        """Why interpreters run without the sandbox, when they do."""

    python = Knob[str]()
    default_time_limit = Knob[float]()
    max_time_limit = Knob[float]()
    grace = Knob[float]()
    tool_timeout = Knob["float | None"]()
    output_limit = Knob[int]()
    text_limit = Knob[int]()
    start_timeout = Knob[float]()
    fork = Knob[bool]()
    pool_size = Knob[int]()
    max_interpreters = Knob[int]()
    queue_timeout = Knob[float]()
    max_background = Knob[int]()
    idle_timeout = Knob["float | None"]()
    log_limit = Knob[int]()
    busy_poll = Knob[float]()
    network = Knob[bool]()
    state_dir = Knob["Path | None"]()
    workdir = Knob["Path | None"]()
    check = Knob[str]()
    keep_interpreters = Knob[bool]()
    reattach_window = Knob[float]()

    @property
    def sandbox_mode(self) -> str:
        """The `sandbox` knob: "auto", "required" or "off" (`sandbox` is the level in force)."""
        return self.settings.sandbox

    @property
    def limits(self) -> dict[str, int | None]:
        """Resource limits per interpreter, every one named."""
        return dict(self.settings.limits)

    @property
    def preload(self) -> list[str]:
        """The modules each interpreter imports before its first script (`preload=`)."""
        return list(self.settings.preload)

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> Runtime:
        """Open the journal and connect the MCP servers. `async with` calls this.

        Idempotent, and safe to await from several tasks at once: the runtime starts once.

        Raises, each from `toolscript`: `JournalFileError` for a journal file that is not a
        toolscript journal, or one damaged (`JournalOpenError`, a subclass, for one that
        cannot be opened or made, and `JournalAccessError`, a subclass of that, for one that
        cannot be written: read-only, or locked by another process), `JournalVersionError` for one a newer toolscript wrote, `MCPConfigError` for
        an MCP config that cannot be used, `SandboxError` with `sandbox="required"` where no
        sandbox can be made, `KeeperError` with `keep_interpreters=True` when no keeper can
        be found or started (another host is attached, say), and `RuntimeClosedError`
        after `aclose()`. An MCP server that does not start is not an error here: every
        result that touches it says so."""
        self._check_loop()
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
            self._loop = asyncio.get_running_loop()
        async with self._start_lock:
            if self._closed:
                raise RuntimeClosedError("this runtime was closed; create a new one")
            if not self._started:
                await self._start()
                if self._closed:
                    # `aclose` came while this started: it waits for this start to end, then
                    # closes all it opened.
                    raise RuntimeClosedError("this runtime was closed while it started")
        return self

    async def _start(self) -> None:
        base = self.state_dir or state_dir()
        if self.settings.journal is not None:
            self._journal = Journal.open(self.settings.journal)
        elif self.state_dir is not None:
            self._journal = Journal.open(self.state_dir / "journal.sqlite3")
        else:
            self._journal = Journal.open(None)
        # A script's end is a record like any other: a host killed after a script ended
        # must not leave it journaled as never ended (one write per script, not per call).
        self._journal.durable_ends = True
        if (
            not self.keep_interpreters
            and self._journal.path is not None
            and not (base / "keeper.sock").exists()  # `host.keeper.SOCKET_NAME`
        ):
            # No keeper holds an interpreter here: a script a host that is gone left
            # running ended with it (with a keeper, `_reattach` does this after taking back
            # what the keeper held).
            self._conclude_lost([], results=False)
        try:
            specs = list(self._tool_specs)
            if self._mcp_config is not None:
                from .tools.mcp import MCPTools

                log_dir = base / "logs"
                log_dir.mkdir(parents=True, exist_ok=True)
                self._mcp = await MCPTools.open(self._mcp_config, log_dir)
                self.mcp_failures = dict(self._mcp.failures)
                specs.extend(self._mcp.specs())
                self._mcp.set_on_change(self._tools_changed)
            self._catalogue = ToolCatalogue(specs, self.tool_timeout, self.mcp_failures)
            if self.keep_interpreters:
                # The kept interpreters' folders outlive this host: they live where the next
                # host on this state directory finds them.
                self._workdir = base / "shells"
                self._workdir.mkdir(parents=True, exist_ok=True)
            else:
                self._workdir = Path(tempfile.mkdtemp(prefix="toolscript-"))
            await self._prepare_sandbox()
        except BaseException:
            # A start that fails leaves nothing open: `async with` never reaches `__aexit__`.
            await self._close_services()
            self._journal = self._mcp = None
            raise
        self._busy = busypoll.attach(self.busy_poll)
        if self.keep_interpreters:
            try:
                await self._start_keeper(base)
            except BaseException:
                await self._close_services()
                raise
        elif self.fork and hasattr(os, "fork") and hasattr(os, "pidfd_open"):
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
        self._checker = ScriptChecker(base / "check")
        self._services = ShellServices(
            settings=self.settings,
            pool=self._pool,
            journal=self._journal,
            background=self._background,
            log_dir=base / "logs" / "background",
            catalogue=lambda: self.catalogue,
            folder=self._folder,
            interpreter_words=self._interpreter_words,
            check_open=self._check_open,
            is_closed=lambda: self._closed,
            checker=self._checker,
            lost_result=self._lost_results.get,
            idle_shells=lambda: [
                name
                for name, shell in self._shells.items()
                if shell.holds_interpreter and not shell.busy
            ],
        )
        self._started = True
        if self.keep_interpreters:  # then the template is the keeper (`_start_keeper`)
            await self._reattach(cast("Keeper", self._template))
        self._pool.fill()

    async def _start_keeper(self, base: Path) -> None:
        """Attach to this state directory's keeper, starting it if none runs: it starts the
        template, so interpreters are its, and outlive this host."""
        from .host.keeper import Keeper  # imported only by runtimes that keep theirs

        keeper = await Keeper.attach(
            base,
            self.python,
            self.preload,
            self._sandbox,
            scrubbed_environment(self.settings.env),
            self.reattach_window,
            self.start_timeout,
        )
        self._template = keeper
        if keeper.template_failure is not None:
            self.template_failure = keeper.template_failure
            _log.warning("toolscript: interpreters are not kept: %s", keeper.template_failure)

    async def _reattach(self, keeper: Keeper) -> None:
        """Take back, by shell name, the interpreters a host that is gone left with the
        keeper, and the background scripts still running (or ended unseen) in theirs; end
        the others (warm ones, a background script's that runs nothing)."""
        assert self._pool is not None and self._catalogue is not None
        assert self._journal is not None and self._services is not None
        followed: list[str] = []
        for held in keeper.held:
            name = held.shell
            running = held.running(self.grace)
            if running is not None:
                followed.append(running.script_id)
            if name is None or (held.background and running is None):
                keeper.kill(held.k)
                continue
            try:
                forked = await keeper.take(held.k, self.start_timeout)
            except TemplateError as error:
                _log.warning("toolscript: shell %s could not be taken back: %s", name, error)
                keeper.kill(held.k)
                continue
            interpreter = Interpreter(
                self._launch(), self._catalogue, self._journal, name, held.generation
            )
            self._handlers.add(interpreter.dispatcher)
            if held.background and running is not None:
                self._background.take_back(interpreter, running, self._services)
            await interpreter.reattach(forked, held.prefix, running)
            self._pool.count_live()
            if not held.background:
                self.shell(name)._reattach(interpreter, running)
        self._conclude_lost(followed)
        # Followed only now, after the last await of `start`: a background script that ended
        # while no host was attached is in `background` when `start` returns, so its caller
        # can ask to hear of its end (`ScriptHandle.add_done_callback`) before it is settled.
        self._background.follow_taken_back()

    # Goal: every script a host began ends once, in the journal and for its shell. What
    # fails: a script whose interpreter was gone when this host came (its keeper had died,
    # or no host took it back within the reattach window): nothing followed it, so the
    # journal kept it as still running forever, and `recovered()` said there was none.
    # What we do: after taking back what the keeper held, every other script that a host
    # that is gone began and never ended is ended as `host_gone`, and `recovered()` of its
    # shell gives that end (the newest of each shell's, of the newest `_LOST_KEPT`). A
    # runtime without a keeper ends them in the journal only (`results` false), and only
    # where no keeper may still hold one.
    def _conclude_lost(self, followed: list[str], results: bool = True) -> None:
        assert self._journal is not None
        try:
            lost = self._journal.conclude_lost_scripts(followed)
        except (OSError, sqlite3.Error) as error:
            _log.warning(
                "toolscript: the scripts of hosts that ended were not concluded: %s", error
            )
            return
        for script in lost[-_LOST_KEPT:] if results else ():
            if ":bg-" in script.script_id:  # a background script's (`BackgroundScripts.start`)
                continue
            self._lost_results[script.shell] = ScriptResult(
                status="crashed",
                note=(
                    "The host that ran this script ended while it ran, and its interpreter "
                    "was not kept for this host: the keeper that held it had ended, or no host "
                    f"took it back within the reattach window ({self.reattach_window:g} s). "
                    "How the script ended, its output and its variables are lost; calls it "
                    "had in flight are in rt.journal.uncertain()."
                ),
                generation=script.generation,
                script_id=script.script_id,
                shell=script.shell,
                duration=max(0.0, (script.ended_at or script.started_at) - script.started_at),
                text_limit=self.settings.text_limit,
            )

    async def _prepare_sandbox(self) -> None:
        """Make this runtime's sandbox, or say why there is none (refuse if it is required)."""
        if self.sandbox_mode == "off":
            self.sandbox_failure = "the sandbox was turned off (sandbox='off')"
            return
        mounts = self.settings.sandbox_mounts
        workdir = self.workdir
        if workdir is not None:
            mounts.append(SandboxMount(str(workdir), str(workdir), writable=True))
        assert self._workdir is not None
        first = headstart.first_kernel(workdir, self.limits, tuple(self.preload))
        head = headstart.claim(self.python, dict(self.settings.env), mounts, self.network, first)
        if head is not None and (self.fork or self.keep_interpreters):
            head.abandon()  # interpreters come from the runtime's own template, or a keeper's
        elif head is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir, self._sandbox, self._head_start = head.shells_root, head.sandbox, head
            return
        try:
            self._sandbox = await prepare_sandbox(
                self.python,
                scrubbed_environment(self.settings.env),
                self._workdir,
                mounts,
                self.network,
                cache=(self.state_dir or state_dir()) / "sandbox-checks",
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

    def _interpreter_words(self, interpreter: Interpreter) -> list[str]:
        """Once per interpreter: the note that says it runs without a sandbox, and the one
        that names the `preload` modules its kernel, started afresh, could not import."""
        if interpreter.told_once:
            return []
        interpreter.told_once = True
        words = []
        if self._sandbox is None:
            words.append(
                f"This interpreter is not sandboxed ({self.sandbox_failure}): the script could "
                "reach the host's files, processes and network as the host's user."
            )
        if interpreter.preload_failures:
            for failure in interpreter.preload_failures:
                if failure not in self._preload_failures:
                    self._preload_failures.append(failure)
            named = "; ".join(f"{name} ({why})" for name, why in interpreter.preload_failures)
            words.append(f"These modules of preload could not be imported: {named}.")
        return words

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
                scrubbed_environment(self.settings.env),
                self.start_timeout,
                self._sandbox,
            )
            self.template_failure = None
        except TemplateError as error:
            self.template_failure = error.reason
            _log.warning("toolscript: interpreters will be started afresh: %s", error.reason)

    @property
    def preload_failures(self) -> list[tuple[str, str]]:
        """Modules of `preload` that could not be imported, with the error: the template's,
        and those of kernels started afresh (`fork=False`, or no template) so far."""
        found = list(self._template.preload_failures) if self._template is not None else []
        return found + [failure for failure in self._preload_failures if failure not in found]

    async def template_ready(self) -> bool:
        """Wait until the template has started (or failed to); True if interpreters fork."""
        if self._template_start is not None:
            await asyncio.shield(self._template_start)
        return self._template is not None and self._template.alive

    def _new_interpreter(self) -> Interpreter:
        assert self._catalogue is not None and self._journal is not None
        interpreter = Interpreter(self._launch(), self._catalogue, self._journal)
        self._handlers.add(interpreter.dispatcher)
        return interpreter

    def _tools_changed(self, server: str) -> None:
        """An MCP server's tool list changed: bindings follow for the next run."""
        if self._closed or not self._started or self._mcp is None:
            return
        self._catalogue = ToolCatalogue(
            [*self._tool_specs, *self._mcp.specs()], self.tool_timeout, self.mcp_failures
        )
        if self._pool is not None:
            asyncio.get_running_loop().create_task(self._pool.discard_warm())
        for listener in list(self._catalogue_listeners):
            try:
                listener()
            except Exception:
                _log.exception("toolscript: a catalogue listener failed")

    def on_catalogue_change(self, listener: Callable[[], Any]) -> None:
        """Have `listener()` called after the tool catalogue changed (an MCP server's list)."""
        if not callable(listener):
            raise TypeError(f"listener must be callable, not {listener!r}")
        self._catalogue_listeners.append(listener)

    async def aclose(self) -> None:
        """Stop every interpreter, close the MCP servers and the journal. Bounded; idempotent:
        a call while another closes returns once that one has closed."""
        self._check_loop()
        if self._closed:
            if self._closed_all is not None:
                await self._closed_all.wait()
            return
        self._closed = True
        self._closed_all = asyncio.Event()
        try:
            if self._start_lock is not None and self._start_lock.locked():
                # A start under way (its MCP servers connecting, its sandbox made): what it
                # opens after this point would be closed by nobody. It is bounded; wait for it.
                async with self._start_lock:
                    pass
            await self._close_all()
        finally:
            self._closed_all.set()

    async def _close_all(self) -> None:
        if self._pool is not None:
            # First: a run waiting in line for an interpreter, or starting one, is refused,
            # rather than given one once everything else is closed.
            await self._pool.close()
        await asyncio.gather(
            self._background.cancel_all(CLOSING),
            *(shell.close(CLOSING) for shell in self._shells.values()),
            return_exceptions=True,
        )
        if self._pool is not None:
            await self._pool.close()
        # Handlers still running for interpreters that were killed or closed earlier (a
        # crash, a time limit's kill, a background script's end) were left to finish under
        # their own timeouts; the runtime's close ends them, before the journal closes.
        for dispatcher in list(self._handlers):
            dispatcher.abandon()
        await asyncio.sleep(0)
        if self._template_start is not None and not self._template_start.done():
            self._template_start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._template_start
        if self.keep_interpreters and self._template is not None:
            await cast("Keeper", self._template).detach_and_wait()
        elif self._template is not None:
            await self._template.close()
        await self._close_services()

    async def _close_services(self) -> None:
        if self._checker is not None:
            await self._checker.close()
        head, self._head_start = self._head_start, None
        if head is not None:  # claimed, but no interpreter was started
            head.abandon()
        if self._mcp is not None:
            await self._mcp.aclose()
        try:
            if self._journal is not None:
                self._journal.close()
        finally:
            # A journal whose last write fails (a full disk) raises here, its records safe
            # in its intent files for the next reader; what else the runtime holds is let go
            # all the same, since a second `aclose` does nothing.
            if self._busy is not None:
                busypoll.detach(self._busy)
                self._busy = None
            if self._sandbox is not None:
                self._sandbox.close()
            if self._workdir is not None and not self.keep_interpreters:
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
        """Every tool scripts can call, with the binding plans the stubs and the kernel share
        (for the agent loop and `toolscript serve`; `prompt()` and `tools` are the public
        views of it). Raises `RuntimeClosedError` before `start()` or after `aclose()`."""
        self._check_open()
        assert self._catalogue is not None
        return self._catalogue

    def prompt(self, matching: str | None = None) -> str:
        """The tool catalogue as Python stubs that compile, for a system prompt.

        With `matching`, only the stubs of the tools a script can call whose name, server or
        description has every word of it (case-insensitive, plural or singular), best match
        first; an empty string keeps every one. A server that did not start is named in a
        comment line with the reason.
        """
        _check_matching(matching)
        return self.catalogue.prompt(matching)

    def tool_names(self, matching: str | None = None) -> list[str]:
        """The tools a script can call, as it calls them (`server.tool`, or `tool` at top
        level), in the catalogue's order; with `matching`, only those `prompt` would show,
        best match first."""
        _check_matching(matching)
        return [call_name(plan) for plan in matching_plans(self.catalogue.plans, matching or "")]

    def tool_summaries(self, matching: str | None = None) -> list[tuple[str, str]]:
        """Each tool of `tool_names(matching)` with the first sentence of its description."""
        _check_matching(matching)
        plans = matching_plans(self.catalogue.plans, matching or "")
        return [(call_name(plan), summary(plan)) for plan in plans]

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
            assert self._services is not None
            shell = Shell(name, self._services)
            self._shells[name] = shell
            if self.keep_interpreters:
                earlier = self._services.journal.generation_elsewhere(name)
                if earlier is not None:
                    # Not taken back at the start (`_reattach` takes a kept one back after
                    # this): its next interpreter's generation says the state is new.
                    shell._not_kept(earlier)
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
        self._check_loop()

    # Goal: a runtime used from an event loop other than its own fails saying so. What
    # fails: `asyncio.run(a())` then `asyncio.run(b())` with one runtime (a script or a
    # notebook that calls `asyncio.run` twice): its locks, futures and pipes belong to the
    # first loop, and asyncio's own words ("got Future attached to a different loop") name
    # no cause. What we do: the loop that started it is its loop; any other is refused here.
    def _check_loop(self) -> None:
        if self._loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # called outside any loop (`shell()` is not a coroutine)
            return
        if running is not self._loop:
            ended = "has ended" if self._loop.is_closed() else "is another"
            raise RuntimeClosedError(
                f"this runtime was started on another event loop, which {ended}: a runtime "
                "belongs to the loop that started it (each `asyncio.run` makes a new one). "
                "Use it and close it within one `asyncio.run`, or make a new runtime; the "
                "interpreters of one left unclosed end when this process exits"
            )

    def _launch(self) -> Launch:
        assert self._workdir is not None
        self._replace_dead_template()
        return Launch(
            python=self.python,
            cwd=self._workdir,
            env=self._interpreter_environment(),
            limits=self.limits,
            start_timeout=self.start_timeout,
            output_limit=self.output_limit,
            max_images=self.settings.max_images,
            image_limit=self.settings.image_limit,
            template=self._template,
            preload=tuple(self.preload),
            busy=self._busy,
            sandbox=self._sandbox,
            head_start=self._take_head_start(),
        )

    # Goal: a template that dies (killed from outside, say) costs its forks, not every start
    # after it. What fails: keeping it: each new interpreter is then spawned afresh (tens of
    # milliseconds instead of a few), for as long as the runtime runs, and nothing says why.
    # What we do: the next interpreter asked for starts a new template in the background (at
    # most `TEMPLATE_RESTARTS` an hour), and is spawned afresh meanwhile; `template_failure`
    # says so until the new one is ready.
    def _replace_dead_template(self) -> None:
        template = self._template
        if (
            template is None
            or self.keep_interpreters
            or self._closed
            or not getattr(template, "died", False)
            or (self._template_start is not None and not self._template_start.done())
        ):
            return
        self._template = None
        now = asyncio.get_running_loop().time()
        self._template_restarts = [at for at in self._template_restarts if now - at < 3600]
        if len(self._template_restarts) >= TEMPLATE_RESTARTS:
            self.template_failure = (
                f"the template exited {TEMPLATE_RESTARTS + 1} times within an hour, so "
                "interpreters are started afresh"
            )
            return
        self._template_restarts.append(now)
        self.template_failure = "the template exited; a new one is starting"
        _log.warning("toolscript: the template exited; starting a new one")
        self._template_start = asyncio.get_running_loop().create_task(self._start_template())

    def _take_head_start(self) -> headstart.HeadStart | None:
        """The command line's head start, for the first interpreter only."""
        head, self._head_start = self._head_start, None
        return head

    def _interpreter_environment(self) -> dict[str, str]:
        return interpreter_environment(self.settings.env, sandboxed=self._sandbox is not None)

    def _folder(self, shell: str) -> Path:
        """A shell's working directory: its own (kept across its interpreters), or the
        runtime's `workdir`."""
        workdir = self.workdir
        if workdir is not None:
            return workdir
        assert self._workdir is not None
        name = shell.replace("/", "_").replace(os.sep, "_")
        if name.startswith("."):
            name = "_" + name  # never "." or "..": a folder of its own, under the runtime's
        if name != shell or len(name.encode()) > _LONGEST_FOLDER or _DIGESTED.search(name):
            # Two names must not share a folder ("a/b" and "a_b"), and a long one must fit
            # a file name: the start of the name, then a digest of all of it. A name that
            # ends as such a folder's does is digested too, or "a/b" and "a_b-<its digest>"
            # would meet.
            digest = hashlib.sha256(shell.encode()).hexdigest()[:16]
            start = name.encode()[:_LONGEST_FOLDER].decode(errors="ignore")
            name = f"{start}-{digest}"
        folder = self._workdir / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @property
    def background(self) -> list[ScriptHandle]:
        """Background scripts still running. With `keep_interpreters`, those a host that is
        gone had started, and this one took back, are here when `start` returns, and none
        has ended before the caller first awaits: `ScriptHandle.add_done_callback` hears of
        every end."""
        return self._background.running()


def _check_matching(matching: object) -> None:
    if matching is not None and not isinstance(matching, str):
        raise TypeError(f"matching must be words to look for (a str) or None, not {matching!r}")
