"""The host's side of the keeper (`toolscript.kernel.keeper`): find or start it, fork and take
back interpreters through it, tell it what each runs.

One concept, though over 500 lines: the host's whole conversation with the keeper (starting
it, forking and taking back interpreters, its board): one protocol.

With `Runtime(keep_interpreters=True)` the template is the keeper's child, not the host's, so
interpreters outlive the host. `Keeper` offers what `Template` offers (`fork`, `alive`,
`preloaded`), so a kernel's process is forked through either the same way, and adds what only
a keeper does: `held` (what a host before this one left), `take`, `note` and `forget`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import math
import mmap
import os
import re
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..kernel.keeper import ALIVE_NAME, BOARD, SLOT, SLOT_SIZE, SLOTS, socket_address
from .command import BOOTSTRAP, KERNEL_DIR, template_command
from .pids import ended
from .template import Forked, TemplateError, fail_waiting, read_messages, unsafe_threads

if TYPE_CHECKING:
    from .sandbox import Sandbox

SOCKET_NAME = "keeper.sock"
"""The keeper's socket, in the state directory."""

_MAX_MESSAGE = 1 << 20
"""The longest message the keeper sends."""

EXIT_WAIT = 3.0
"""Seconds a closing host waits for a keeper that holds nothing to exit."""


class KeeperError(Exception):
    """No keeper could be found or started; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RunningScript:
    """A script a host that is gone started, as its keeper was told: its id, its output's
    marker, its deadline (wall-clock time) and grace, its time limit, and whether the keeper
    stopped it for that limit while no host was attached (`interrupted`, `killed`)."""

    script_id: str
    marker: str
    deadline: float
    grace: float
    time_limit: float
    keeper_stop: str | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """An interpreter the keeper held when this host attached: its number, the notes the
    previous host left on it (shell, generation, running script, ...), its exit status if it
    has ended."""

    k: int
    meta: dict[str, Any] = field(default_factory=dict)
    returncode: int | None = None

    @property
    def shell(self) -> str | None:
        """The shell it served, or whose background script it ran (`background`); None for
        a warm one, which no shell had."""
        name, prefix = self.meta.get("shell"), self.meta.get("prefix")
        if not isinstance(prefix, str):
            return None
        return name if isinstance(name, str) and name else None

    @property
    def background(self) -> bool:
        """Whether it ran a background script of its shell, not the shell itself."""
        return bool(self.meta.get("background"))

    @property
    def generation(self) -> int:
        return int(self.meta.get("generation") or 0)

    @property
    def prefix(self) -> str:
        """What its calls' ids start with."""
        return str(self.meta.get("prefix", ""))

    def running(self, grace: float) -> RunningScript | None:
        """The script it was running when the host that started it was last heard of."""
        script_id = self.meta.get("script")
        if not isinstance(script_id, str):
            return None
        stop = self.meta.get("keeper_stop")
        marker = str(self.meta.get("marker", ""))
        if not _MARKER.fullmatch(marker):
            # A damaged board: a marker no output holds, so the script's output is not taken
            # for its own; the rest goes on (the board is the keeper's memory, not a trust).
            marker = "0" * 16
        return RunningScript(
            script_id=script_id,
            marker=marker,
            deadline=_finite(self.meta.get("deadline"), 0.0),
            grace=_finite(self.meta.get("grace"), grace),
            time_limit=_finite(self.meta.get("time_limit"), 0.0),
            keeper_stop=stop if isinstance(stop, str) else None,
        )


_MARKER = re.compile(r"[0-9A-Za-z_-]{1,32}")


def _finite(value: object, default: float) -> float:
    """`value` as a finite number of seconds, or `default`."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) and number >= 0 else default


class Keeper:
    """This host's connection to the keeper of one state directory."""

    def __init__(self, connection: socket.socket, process: asyncio.subprocess.Process | None):
        self._connection = connection
        self._process = process
        self._loop = asyncio.get_running_loop()
        self._requests = itertools.count(1)
        self._waiting: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._statuses: dict[int, asyncio.Future[int]] = {}
        self.lost = False
        """The keeper exited while this host was attached: every interpreter died with it."""
        self._closed = False
        self.pid = 0
        self.held: list[Held] = []
        """What the keeper held when this host attached."""
        self.preloaded: list[str] = []
        self.preload_failures: list[tuple[str, str]] = []
        self.template_failure: str | None = None
        """Why the keeper's template did not start, if it did not."""
        self._board: mmap.mmap | None = None
        self._loop.add_reader(connection.fileno(), self._readable)

    @classmethod
    async def attach(
        cls,
        folder: Path,
        python: str,
        preload: Sequence[str],
        sandbox: Sandbox | None,
        env: dict[str, str],
        window: float,
        timeout: float,
    ) -> Keeper:
        """Attach to the keeper of `folder`, starting it (with a template of `python`,
        importing `preload`, inside `sandbox` when given) if none runs. Raises `KeeperError`."""
        if not (hasattr(os, "fork") and hasattr(os, "pidfd_open")):
            raise KeeperError("keep_interpreters needs Linux (fork and pidfd_open)")
        command = template_command(python, preload, sandbox, "{control}", kept=True)
        return await cls.open(folder, command, env, window, timeout)

    @classmethod
    async def open(
        cls, folder: Path, template: list[str], env: dict[str, str], window: float, timeout: float
    ) -> Keeper:
        """Attach to the keeper of `folder`, starting it (with `template`, a command whose
        `{control}` is the template's control descriptor) if none runs. Raises `KeeperError`."""
        folder.mkdir(parents=True, exist_ok=True)
        lock = os.open(folder / "keeper.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            await asyncio.wait_for(asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX), timeout)
            path = folder / SOCKET_NAME
            process = None
            connection = _connect(path)
            if connection is None:
                process = await _start(path, template, env, window, timeout)
                connection = _connect(path)
                if connection is None:
                    raise KeeperError("the keeper started but its socket did not answer")
            keeper = cls(connection, process)
            try:
                await keeper._hello(timeout)
                keeper._map_board(folder / BOARD)
            except BaseException:
                await keeper.close()
                raise
            return keeper
        except TimeoutError:
            raise KeeperError(
                f"the keeper of {folder} did not answer within {timeout:g} s"
            ) from None
        finally:
            os.close(lock)

    async def _hello(self, timeout: float) -> None:
        hello = await self._ask({"t": "hello"}, "hello", timeout)
        if hello.get("t") not in ("hello", "busy"):
            raise KeeperError(f"the keeper did not say hello: {hello.get('error')}")
        if hello.get("t") == "busy":
            raise KeeperError(
                "another host is attached to this state directory's keeper; use another "
                "state_dir, or close that host first"
            )
        self.pid = int(hello.get("pid", 0))
        self.held = [
            Held(int(item["k"]), dict(item.get("meta") or {}), item.get("returncode"))
            for item in hello.get("held", [])
        ]
        ready = hello.get("template") or {}
        if "error" in ready:
            self.template_failure = str(ready["error"])
        self.preloaded = [str(name) for name in ready.get("preloaded", [])]
        self.preload_failures = [(str(a), str(b)) for a, b in ready.get("failures", [])]
        unsafe = unsafe_threads(ready)
        if unsafe is not None:
            self.template_failure = unsafe

    def _map_board(self, path: Path) -> None:
        descriptor = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            self._board = mmap.mmap(descriptor, SLOTS * SLOT_SIZE)
        except (OSError, ValueError) as error:
            raise KeeperError(f"the keeper's board could not be read: {error}") from None
        finally:
            os.close(descriptor)

    def script_began(
        self, slot: int, script_id: str, marker: str, deadline: float, grace: float, limit: float
    ) -> bool:
        """Write a run's script and deadline in an interpreter's slot (see
        `toolscript.kernel.keeper`); False when they do not fit in it."""
        name = script_id.encode("utf-8")
        board = self._board
        if board is None or len(name) > 128 or len(marker) > 32:
            return False
        at = slot * SLOT_SIZE
        sequence = SLOT.unpack_from(board, at)[0]
        board[at : at + 8] = (sequence + 1).to_bytes(8, "little")
        SLOT.pack_into(
            board, at, sequence + 2, deadline, grace, limit, name, marker.encode("ascii")
        )
        return True

    def script_ended(self, slot: int) -> None:
        """Clear an interpreter's slot: no script runs in it."""
        board = self._board
        if board is not None:
            at = slot * SLOT_SIZE
            board[at + 8 : at + 16] = bytes(8)  # deadline 0: nothing runs

    @property
    def alive(self) -> bool:
        """Whether interpreters can be forked through the keeper."""
        return not self._closed and self.template_failure is None

    async def fork(
        self,
        cwd: Path | None,
        env: dict[str, str],
        limits: dict[str, int | None],
        timeout: float,
        extra: dict[str, Any] | None = None,
    ) -> Forked:
        """Fork one kernel through the keeper's template. Raises `TemplateError`."""
        if not self.alive:
            raise TemplateError("the keeper's template is not running")
        number = next(self._requests)
        request = {"cwd": str(cwd) if cwd else None, "env": env, "limits": limits, **(extra or {})}
        try:
            answer = await self._ask(
                {"t": "fork", "id": number, "request": request}, ("forked", number), timeout
            )
        except (OSError, TimeoutError) as error:
            raise TemplateError(f"the keeper did not fork a kernel ({error!r})") from None
        return self._forked(answer)

    async def take(self, k: int, timeout: float) -> Forked:
        """The descriptors of an interpreter the keeper holds. Raises `TemplateError`."""
        try:
            answer = await self._ask({"t": "take", "k": k}, ("taken", k), timeout)
        except (OSError, TimeoutError) as error:
            raise TemplateError(
                f"the keeper did not hand over interpreter {k} ({error!r})"
            ) from None
        if answer.get("returncode") is not None:
            status = self._statuses.setdefault(k, self._loop.create_future())
            if not status.done():
                status.set_result(int(answer["returncode"]))
        return self._forked(answer)

    def _forked(self, answer: dict[str, Any]) -> Forked:
        fds: list[int] = answer.pop("_fds", [])
        if "k" not in answer or "error" in answer or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            raise TemplateError(f"the keeper could not fork: {answer.get('error')}")
        k = int(answer["k"])
        channel, stdout, stderr, pidfd = fds
        status = self._statuses.setdefault(k, self._loop.create_future())
        return Forked(
            int(answer.get("pid", 0)),
            socket.socket(fileno=channel),
            stdout,
            stderr,
            status,
            pidfd,
            held=k,
            slot=int(answer.get("slot", 0)),
        )

    def note(self, k: int, **meta: Any) -> None:
        """Tell the keeper about an interpreter (its shell, its running script's deadline)."""
        self._send({"t": "note", "k": k, "meta": meta})

    def forget(self, k: int) -> None:
        """The host has ended this interpreter: the keeper lets go of it."""
        self._statuses.pop(k, None)
        self._send({"t": "forget", "k": k})

    def kill(self, k: int) -> None:
        """End an interpreter the host will not take back."""
        self._statuses.pop(k, None)
        self._send({"t": "kill", "k": k})

    async def close(self) -> None:
        """Detach. A keeper left holding nothing exits; this waits for that (bounded)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._connection.fileno())
        self._connection.close()
        fail_waiting(self._waiting, "the host detached from the keeper")
        if self._board is not None:
            self._board.close()
            self._board = None
        if self._process is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._process.wait(), EXIT_WAIT)

    async def detach_and_wait(self) -> None:
        """Detach, and wait (bounded) for the keeper to exit, whether this host started it or
        not (it holds nothing: the host ended every interpreter)."""
        pidfd = None
        if self.pid:
            with contextlib.suppress(OSError):
                pidfd = os.pidfd_open(self.pid)
        await self.close()
        if pidfd is not None:
            try:
                await asyncio.wait_for(ended(pidfd), EXIT_WAIT)
            except TimeoutError:
                pass
            finally:
                os.close(pidfd)

    # -- messages ----------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        if self._closed:
            return
        with contextlib.suppress(OSError):
            self._connection.send(json.dumps(message).encode("utf-8"))

    async def _ask(self, message: dict[str, Any], key: Any, timeout: float) -> dict[str, Any]:
        if self._closed:
            raise OSError("the host detached from the keeper")
        waiter: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._waiting[key] = waiter
        try:
            self._connection.send(json.dumps(message).encode("utf-8"))
            return await asyncio.wait_for(waiter, timeout)
        finally:
            self._waiting.pop(key, None)

    def _readable(self) -> None:
        read_messages(self._connection, _MAX_MESSAGE, 8, self._handle, self._gone)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "exited":
            status = self._statuses.setdefault(int(message["k"]), self._loop.create_future())
            if not status.done():
                status.set_result(int(message.get("returncode", 0)))
            return
        if kind == "forked":
            key: Any = ("forked", message.get("id"))
        elif kind == "taken":
            key = ("taken", message.get("k"))
        elif kind in ("hello", "busy"):
            key = "hello"
        else:
            key = None
        waiter = self._waiting.pop(key, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(message)
        else:
            for fd in message.get("_fds", []):
                os.close(fd)

    def _gone(self) -> None:
        if not self._closed:
            self._closed = True
            self.lost = True
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._connection.fileno())
            self._connection.close()
        fail_waiting(self._waiting, "the keeper exited")
        # Its interpreters die with it (SIGKILL, their parent's death signal), and no one is
        # left to report how: said here, so that none is taken for a kernel that lives on
        # with its channel closed (a script's doing).
        for status in self._statuses.values():
            if not status.done():
                status.set_result(-signal.SIGKILL)


def _keeper_alive(alive: Path) -> bool:
    """Whether a keeper holds its lock on `alive` (it holds it for its whole life)."""
    try:
        descriptor = os.open(alive, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # and with it the lock, if we took it
    return False


def _connect(path: Path) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with socket_address(str(path)) as address:
            connection.connect(address)
    except (FileNotFoundError, ConnectionRefusedError):
        connection.close()
        return None
    connection.setblocking(False)
    return connection


async def _start(
    path: Path, template: list[str], env: dict[str, str], window: float, timeout: float
) -> asyncio.subprocess.Process:
    config = {"template": template, "env": env, "reattach_window": window, "start_timeout": timeout}
    if _keeper_alive(path.with_name(ALIVE_NAME)):
        # Its socket is gone (removed by hand), the keeper is not: a second keeper would
        # leave the first one's interpreters, and their shells' variables, out of reach.
        raise KeeperError(
            f"a keeper of {path.parent} still runs, but its socket {path.name} is gone, so "
            "its interpreters cannot be reached; it exits once no host attaches within its "
            "reattach window, or end it (its process has 'keeper' and this folder in its "
            "command line)"
        )
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a keeper that died left it; we hold the lock
    log = path.with_name("keeper.log")
    with open(log, "ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            BOOTSTRAP,
            str(KERNEL_DIR),
            "keeper",
            str(path),
            json.dumps(config),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout + 5)
    except TimeoutError:
        line = b""
    if line.strip() != b"ready":
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        said = ""
        with contextlib.suppress(OSError):
            said = log.read_text(errors="replace")[-800:].strip()
        raise KeeperError(f"the keeper did not start{'; it said: ' + said if said else ''}")
    return process
