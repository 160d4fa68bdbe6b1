"""What every test shares: how the runtimes under test are made, sandboxed and waited on.

`TOOLSCRIPT_TEST_SANDBOX` (default "required") is the `sandbox` knob of the runtimes the
suites make, so CI runs the suite with the sandbox on and once more with it off. The
sandbox shows a test's `tmp_path` to its scripts (read-write), where tests and scripts
leave each other files.

`make_runtime` starts runtimes with no warm pool: a test of the pool, or of anything that
needs interpreters started ahead of time, asks for `pool_size` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.processes import processes_with
from toolscript import Runtime, tool

__all__ = ["processes_with"]  # where the suites have always found it

SANDBOX = os.environ.get("TOOLSCRIPT_TEST_SANDBOX", "required")

GRACE = 0.5
"""The grace period the suites' runtimes have, so a kill comes quickly."""

CLOSE_BOUND = 20.0
"""Seconds a runtime made by `make_runtime` gets to close when its test ends."""

MakeRuntime = Callable[..., Awaitable[Runtime]]


def sandbox_knobs(knobs: dict[str, Any], *shared: Path) -> dict[str, Any]:
    """`knobs` with the suite's sandbox and `shared` folders mounted read-write."""
    knobs.setdefault("sandbox", SANDBOX)
    mounts = dict(knobs.get("mounts") or {})
    for folder in shared:
        mounts.setdefault(str(folder), "rw")
    knobs["mounts"] = mounts
    return knobs


@pytest.fixture
async def make_runtime(tmp_path: Path) -> AsyncIterator[MakeRuntime]:
    """Start runtimes with the given knobs; all closed when the test ends.

    Unless the test says otherwise: the suite's sandbox, showing `tmp_path` read-write (when
    the test gives no `mounts`), an in-memory journal, a grace of `GRACE`, a default time
    limit of 10 s and no warm pool.
    """
    made: list[Runtime] = []

    async def make(**knobs: Any) -> Runtime:
        knobs.setdefault("mounts", {tmp_path: "rw"})
        sandbox_knobs(knobs)
        knobs.setdefault("journal", ":memory:")
        knobs.setdefault("grace", GRACE)
        knobs.setdefault("default_time_limit", 10.0)
        knobs.setdefault("pool_size", 0)
        runtime = Runtime(**knobs)
        made.append(runtime)
        return await runtime.start()

    yield make
    for runtime in made:
        await asyncio.wait_for(runtime.aclose(), CLOSE_BOUND)


@pytest.fixture
async def runtime(make_runtime: MakeRuntime) -> Runtime:
    """A runtime started by `make_runtime` with the knobs it gives by default."""
    return await make_runtime()


async def eventually(
    predicate: Callable[[], bool], timeout: float, what: str = "the condition did not hold"
) -> None:
    """Wait, without holding the event loop, until `predicate()`; at `timeout`, fail saying
    `what` ("the daemon did not appear", say) and the timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:g} s")
        await asyncio.sleep(0.005)


async def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    """Wait, without holding the event loop, until `path` exists; fail at `timeout`."""
    await eventually(path.exists, timeout, f"{path} did not appear")


def is_gone(pid: int) -> bool:
    """True when no live process has `pid` (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


FIND_CHANNEL = (
    "import asyncio, os\n"
    "def channel():\n"
    # The event loop's own wake-up socketpair is skipped, and so are fds 0-2 (a host on uvloop
    # gives the kernel sockets, not pipes, for stdout and stderr): the other socket is the
    # channel (the kernel closes every other descriptor it inherits).
    "    loop = asyncio.get_running_loop()\n"
    "    own = {loop._ssock.fileno(), loop._csock.fileno()}\n"
    "    for name in os.listdir('/proc/self/fd'):\n"
    "        try:\n"
    "            link = os.readlink(f'/proc/self/fd/{name}')\n"
    "        except OSError:\n"
    "            continue\n"
    "        if link.startswith('socket:') and int(name) > 2 and int(name) not in own:\n"
    "            return int(name)\n"
    "    raise RuntimeError('no channel found')\n"
)
"""Script source defining `channel()`: the fd of the kernel's channel to the host, found as a
hostile script would find it."""


LONG_LITERAL = "x = [" + ", ".join(f"({i}, [{i}, {{'a': {i}}}])" for i in range(3000)) + "]"
"""A statement whose syntax tree is large enough for collections to run while it is built."""


@contextlib.contextmanager
def collections_that_format_tracebacks() -> Iterator[None]:
    """Garbage collections every few allocations, each formatting a traceback, as a finalizer
    of an asyncio future that logs an error no one took does. On Python 3.11 formatting a
    traceback parses source (for its carets): a parse running meanwhile sees another begin
    inside its own."""

    def failing() -> int:
        return {"a": 1}["b"] + [1, 2][5]

    def format_a_traceback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            try:
                failing()
            except LookupError as error:
                traceback.format_exception(error)

    threshold = gc.get_threshold()
    gc.callbacks.append(format_a_traceback)
    gc.set_threshold(10)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(format_a_traceback)


transfers: list[int] = []
"""The amounts `transfer` was called with: its effect, as a test sees it (cleared by each)."""


@tool
async def transfer(amount: int = 0) -> str:
    """A tool with an effect."""
    transfers.append(amount)
    return "sent"


def on_a_terminal(
    command: list[str],
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    stream: str = "stdout",
    timeout: float = 30,
) -> tuple[int, str]:
    """Run `command` with its `stream` ("stdout" or "stderr") on a pseudo-terminal, the other
    one discarded; its exit code, and what the terminal was shown."""
    import pty
    import subprocess

    leader, follower = pty.openpty()
    try:
        where = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: follower}
        done = subprocess.run(
            command,
            stdout=where["stdout"],
            stderr=where["stderr"],
            timeout=timeout,
            env=env,
            cwd=cwd,
        )
        os.close(follower)
        shown = b""
        with contextlib.suppress(OSError):  # EIO once everything written was read
            while chunk := os.read(leader, 65536):
                shown += chunk
    finally:
        os.close(leader)
    return done.returncode, shown.decode()
