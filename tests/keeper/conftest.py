"""Real hosts for the keeper's tests: a small host program run as its own process, killed
with SIGKILL where a test says, and the processes each test must leave behind (none).

`HOST` opens a `Runtime` with `keep_interpreters=True` on the state directory it is given and
runs the scripts it is given, one shell each, in order: `[shell, code, time_limit, wait]`
(with `wait` false, the script is started and the next one runs beside it). It prints one
line per event the test waits for: `result <shell> <status> <script id> <value>` when a waited-for script ends, then
`kernel <shell> <pid>`.
With `die_at` (`[step, n]`, a step of `STEPS` or `answer_journaled`), the host SIGKILLs
itself right after the `n`-th time it takes that step, so a test can stop it exactly there;
with `seen_read`, as it reads the first acknowledgement that code took an answer, before it
records it; with `answer_sent`, after it sent its `n`-th answer and before it journaled it.
Scripts signal the test with files in the shared folder and wait for it on FIFOs there;
nothing here waits on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GRACE, SANDBOX, is_gone, processes_with, wait_for_file
from toolscript import Runtime

WAIT = 20.0
"""The bound on any wait for a host's line, a file or a process's end."""

STEPS = ("board_written", "journal_begun", "journal_ended", "board_cleared")
"""The steps of a run a host can be made to die right after (`die_at`): the keeper's board
names the script, the journal records its start, the journal records its end, the board is
cleared. A host can also die at `answer_journaled`, a step of a tool call: its answer held
back in the host, as a write the socket had no room for would be, then journaled and written
to SQLite, and the host dies before it could send it."""

HOST = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from toolscript import Runtime
    from tests.keeper.tools import effect_tools

    config = json.loads(sys.argv[1])
    shared = config["shared"]

    if config.get("die_at"):
        import signal
        from toolscript.host.journal import Journal
        from toolscript.host.process import KernelProcess

        step, nth = config["die_at"]
        if step == "seen_read":
            # The host reads the kernel's word that code took an answer, and dies before it
            # records it.
            from toolscript.host.calls import CallLedger

            acknowledged = CallLedger.acknowledged

            def die_on_seen(self, acks=(), seen=(), on_call=None):
                if seen:
                    os.kill(os.getpid(), signal.SIGKILL)
                return acknowledged(self, acks, seen, on_call)

            CallLedger.acknowledged = die_on_seen
            step = None
        elif step == "answer_sent":
            # The host sends an answer, then journals it: it dies in between, the answer in
            # the kernel's hands and not in the journal.
            record_answers = Journal.record_answers
            sent = []

            def die_before_journaling(self, answers):
                sent.append(1)
                if len(sent) == nth:
                    os.kill(os.getpid(), signal.SIGKILL)
                return record_answers(self, answers)

            Journal.record_answers = die_before_journaling
            step = None
        owner, name = {
            "board_written": (KernelProcess, "script_began"),
            "journal_begun": (Journal, "begin_script"),
            "answer_journaled": (Journal, "record_answers"),
            "journal_ended": (Journal, "end_script"),
            "board_cleared": (KernelProcess, "script_ended"),
        }.get(step, (None, None))
        taken = []

        def die_after(method):
            def step_then_die(*args, **kwargs):
                method(*args, **kwargs)
                taken.append(step)
                if len(taken) == nth:
                    if step == "answer_journaled":
                        args[0].flush()  # as the flush thread would
                    os.kill(os.getpid(), signal.SIGKILL)
            return step_then_die

        if owner is not None:
            setattr(owner, name, die_after(getattr(owner, name)))
        if step == "answer_journaled":
            # The host writes an answer before it journals it: the nth answer stays in the
            # host instead, as one the socket had no room for would, until the host dies.
            from toolscript.host.channel import Channel

            send_frames = Channel.send_frames

            def send_unless_held(self, frames, *args, **kwargs):
                if len(taken) != nth - 1:
                    send_frames(self, frames, *args, **kwargs)

            Channel.send_frames = send_unless_held

    async def main():
        async with Runtime(
            tools=effect_tools(shared, hold=True),
            state_dir=config["state_dir"],
            keep_interpreters=True,
            reattach_window=config.get("reattach_window", 60.0),
            grace=config["grace"],
            start_timeout=config.get("start_timeout", 20.0),
            sandbox=config["sandbox"],
            mounts={shared: "rw"},
            pool_size=0,
            journal=config.get("journal"),
        ) as rt:
            running = []
            for shell, code, time_limit, wait in config["scripts"]:
                run = asyncio.ensure_future(rt.shell(shell).run(code, time_limit=time_limit))
                if wait:
                    result = await run
                    print("result", shell, result.status, result.script_id, result.value)
                    pid = rt.shell(shell)._interpreter.kernel_pid()
                    print("kernel", shell, pid, flush=True)  # after the result line
                else:
                    running.append(run)
            await asyncio.gather(*running)
            await asyncio.Event().wait()  # until killed

    asyncio.run(main())
    """
)


class Host:
    """One host process on a state directory: its lines, its kernels, its kill."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.kernels: dict[str, int] = {}
        self.results: dict[str, tuple[str, str, str]] = {}
        """By shell, the last result it printed: status, script id, value."""

    async def line(self, *starts: str) -> list[str]:
        """The next line that starts with one of `starts`; kernel and result lines are kept."""
        assert self.process.stdout is not None
        while True:
            raw = await asyncio.wait_for(self.process.stdout.readline(), WAIT)
            if not raw:
                assert self.process.stderr is not None
                said = await asyncio.wait_for(self.process.stderr.read(), WAIT)
                raise AssertionError(f"the host exited: {said.decode()[-3000:]}")
            words = raw.decode().split()
            if words[:1] == ["kernel"]:
                self.kernels[words[1]] = int(words[2])
            elif words[:1] == ["result"]:
                self.results[words[1]] = (words[2], words[3], " ".join(words[4:]))
            if words[:1] and words[0] in starts:
                return words

    async def kill(self) -> None:
        """SIGKILL, and wait for it to be gone."""
        self.process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(self.process.wait(), WAIT) == -signal.SIGKILL


class Hosts:
    """Starts hosts on one state directory and, at the end, checks nothing is left."""

    def __init__(self, folder: Path) -> None:
        self.state_dir = folder / "state"
        self.shared = folder / "shared"
        self.shared.mkdir()
        self.started: list[Host] = []
        self.watched: list[Path] = [self.state_dir]

    def watch(self, state_dir: Path) -> None:
        """Check at the end that nothing of another state directory is left running either."""
        self.watched.append(state_dir)

    async def start(self, scripts: list[list[Any]], program: str = HOST, **config: Any) -> Host:
        """A host running `program` (`HOST` unless a test brings its own) on `scripts`."""
        settings = {
            "state_dir": str(self.state_dir),
            "shared": str(self.shared),
            "grace": GRACE,
            "sandbox": SANDBOX,
            "scripts": scripts,
            **config,
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            program,
            json.dumps(settings),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        host = Host(process)
        self.started.append(host)
        return host

    def runtime(self, **knobs: Any) -> Runtime:
        """The runtime the next host opens on this state directory: its interpreters kept,
        no warm pool, the shared folder shown read-write, the tests' grace (`knobs` add to
        these or change them)."""
        settings: dict[str, Any] = {
            "state_dir": self.state_dir,
            "keep_interpreters": True,
            "sandbox": SANDBOX,
            "mounts": {str(self.shared): "rw"},
            "pool_size": 0,
            "grace": GRACE,
            **knobs,
        }
        return Runtime(**settings)

    async def kill_when(
        self, signal_name: str, code: str, time_limit: float, **config: Any
    ) -> Host:
        """A host that sets `x = 1` in the shell "main" and then runs `code` there (under
        `time_limit`), killed once the script has made the file `signal_name` in the shared
        folder; `config` as `start`'s (`journal`, say)."""
        scripts = [["main", "x = 1", 30, True], ["main", code, time_limit, False]]
        host = await self.start(scripts, **config)
        await host.line("kernel")
        await wait_for_file(self.shared / signal_name, WAIT)
        await host.kill()
        return host

    def keeper(self) -> list[int]:
        """The pids of the keepers of the state directories watched (none or one each)."""
        return [
            p.pid for folder in self.watched for p in processes_with(str(folder / "keeper.sock"))
        ]

    def left(self) -> list[int]:
        """Processes of this test still alive: hosts, the keeper, its sandbox, kernels."""
        pids = [p.pid for folder in self.watched for p in processes_with(str(folder))]
        for host in self.started:
            pids += [pid for pid in host.kernels.values() if not is_gone(pid)]
            if host.process.returncode is None:
                pids.append(host.process.pid)
        return pids


@pytest.fixture
async def hosts(tmp_path: Path) -> AsyncIterator[Hosts]:
    """Hosts on one state directory; every process they left must be gone at the end."""
    made = Hosts(tmp_path)
    yield made
    for host in made.started:
        if host.process.returncode is None:
            host.process.kill()
            await host.process.wait()
    left = made.left()
    for pid in made.keeper():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running: {left}"


def keeper_notes(hosts: Hosts) -> list[dict[str, Any]]:
    """What the keeper holds and its notes on each, asked as a host would (`hello`), then
    detached: only while no host is attached."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
        connection.settimeout(WAIT)
        connection.connect(str(hosts.state_dir / "keeper.sock"))
        connection.send(b'{"t": "hello"}')
        hello = json.loads(connection.recv(1 << 20))
    held: list[dict[str, Any]] = hello["held"]
    return held


def gate(hosts: Hosts, name: str) -> str:
    """Python for a script: wait until the test opens the gate `name` (`open_gate`)."""
    path = hosts.shared / name
    if not path.exists():
        os.mkfifo(path)
    return f"open({str(path)!r}).read()\n"


async def open_gate(hosts: Hosts, name: str) -> None:
    """Let a script waiting at the gate `name` go on (it blocks until the script reads)."""

    def write() -> None:
        with open(hosts.shared / name, "w") as fifo:
            fifo.write("go")

    await asyncio.wait_for(asyncio.to_thread(write), WAIT)


def signal_file(hosts: Hosts, name: str) -> str:
    """Python for a script: create the file `name` in the shared folder (tells the test)."""
    return f"open({str(hosts.shared / name)!r}, 'w').close()\n"


def interruptible(hosts: Hosts, body: str) -> str:
    """Python for a script: make the file `started` (inside the `try`, so an interrupt it invites
    is always caught), run `body` (a statement, its inner lines indented by eight spaces), and
    make the file `stopped` if an interrupt ends it."""
    stopped = hosts.shared / "stopped"
    return (
        "try:\n    "
        + signal_file(hosts, "started")
        + "    "
        + body
        + f"except KeyboardInterrupt:\n    open({str(stopped)!r}, 'w').close()\n    raise\n"
    )
