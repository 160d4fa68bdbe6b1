"""The keeper: the process that owns a state directory's interpreters, so they outlive a host.

One concept, though over 500 lines: one small process and everything it does, which must live
in one standard-library module that a bare Python runs (its socket's messages, the board it
reads, the time limits it enforces while no host is attached, its exit).

Goal: a host that dies (a crash, a deploy, a SIGKILL) must not take its interpreters with it:
variables stay, a running script keeps running and notices only a delay, and the next host
on the same state directory takes them back. What fails: interpreters that are the host's
descendants, or that hold the host's end of their channel only in the host: either way the
host's death ends them (bubblewrap's `--die-with-parent`, a kernel that sees its channel
close). Relaying frames through a third process fails the other promise: every tool call
would pay two more hops. What we do: a small process of the standard library only, one per
state directory, starts the template (and so every interpreter) and keeps a copy of each
interpreter's channel and output pipes. It hands copies of those descriptors to the host
(`SCM_RIGHTS`); the host then talks to the kernel directly, as it does without a keeper.
While a host is attached the keeper only listens. While none is, it enforces each running
script's time limit (interrupt, then a kill after the grace period, as the host would) from
the deadline the host gave it, and it ends every interpreter no host takes back within
`reattach_window` seconds. It exits when no host is attached and it holds no interpreter.

If the keeper dies, every interpreter dies with it: a sandboxed template runs under
`bwrap --die-with-parent`, and its PID namespace takes every interpreter along; an unconfined
template, and each kernel it forks, ask the kernel for SIGKILL when their parent dies
(`PR_SET_PDEATHSIG`).

The host's socket is a SOCK_SEQPACKET Unix socket, `keeper.sock` in the state directory, of
mode 0600. One message is one JSON object (with descriptors, when it carries some):

- `hello` → `hello` with the keeper's pid, the template's `ready` (or its `error`), and
  `held`: each interpreter's number `k`, the host's notes on it, and its exit status if ended.
- `fork` (`id`, `request`: what the template takes) → `forked` (`id`, `k`, `slot`, or
  `error`), with
  the host's end of the channel, the read ends of stdout and stderr, and a pidfd.
- `take` (`k`) → `taken` (`k`, `slot`, `returncode`) with the same four descriptors.
- `note` (`k`, `meta`): the host's notes on an interpreter (its shell, generation, the prefix
  of its calls' ids); no answer. Its running script is in its slot of the board (below).
- `forget` (`k`): the host ended it; `kill` (`k`): end it now. No answer.
- unasked, `exited` (`k`, `returncode`), when an interpreter ends.

What each interpreter runs now (its script, that script's deadline and grace) changes with
every run, so the host does not say it over the socket: it writes it to the interpreter's
slot in `keeper.board`, a file both map (`BOARD`), and the keeper reads the slots only when
it needs them (a host detached, or asked what it holds). A run costs the host two writes to
memory, and the keeper nothing. A slot is written by one host at a time, under a sequence
number that is odd while it is being written.

Only one host is attached at a time: a second connection is answered `busy` and closed.

One concept, though a little over 500 lines: the keeper is one process, and this is all of
it (one file of the standard library, which the host starts as `toolscript_kernel.keeper`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import mmap
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from .control import decode, receive

BOARD = "keeper.board"
"""The file of slots, in the state directory, beside the socket."""
SLOTS = 4096
SLOT_SIZE = 256
SLOT = struct.Struct("<Qddd128s32s")
"""A slot: sequence number, deadline (wall-clock time, 0 when no script runs), grace, time
limit, script id and output marker (UTF-8, padded with zero bytes)."""

_MAX_MESSAGE = 1 << 20
_PR_SET_PDEATHSIG = 1
_TEMPLATE_WAIT = 60.0
_SEND_WAIT = 5.0


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux), and die now if the
    parent is gone already."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(0)


class _Held:
    """One interpreter the keeper holds."""

    __slots__ = ("dones", "fds", "k", "meta", "pid", "pidfd", "returncode", "slot", "stopping")

    def __init__(self, k: int, slot: int, pid: int, pidfd: int, fds: list[int]) -> None:
        self.k = k
        self.slot = slot
        self.pid = pid
        self.pidfd = pidfd
        self.fds = fds  # the channel's host end, stdout's and stderr's read ends
        self.meta: dict[str, Any] = {}
        self.returncode: int | None = None
        self.stopping: str | None = None  # "interrupted", then "killed"; or "settled"
        self.dones = 0  # the running script's `done`s in the channel when it was interrupted


class Keeper:
    def __init__(self, path: str, config: dict[str, Any]) -> None:
        self.path = path
        self.config = config
        self.window = float(config.get("reattach_window", 60.0))
        self.selector = selectors.DefaultSelector()
        self.held: dict[int, _Held] = {}
        self.by_pid: dict[int, int] = {}
        self.numbers = 0
        self.requests = 0
        self.forking: dict[int, tuple[int, list[int]]] = {}  # template id → host id, fds
        self.host: socket.socket | None = None
        self.detached_at: float | None = time.monotonic()
        self.template_ready: dict[str, Any] = {}
        self.template: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        board = os.path.join(os.path.dirname(path), BOARD)
        descriptor = os.open(board, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(descriptor, SLOTS * SLOT_SIZE)
            self.board = mmap.mmap(descriptor, SLOTS * SLOT_SIZE)
        finally:
            os.close(descriptor)

    def read_board(self) -> None:
        """Take what the host wrote in each held interpreter's slot into its notes."""
        for held in self.held.values():
            sequence, deadline, grace, limit, script, marker = SLOT.unpack_from(
                self.board, held.slot * SLOT_SIZE
            )
            if sequence == 0:
                continue  # never written: the host says what runs over the socket
            name = script.rstrip(b"\0").decode("utf-8", "replace") if deadline else None
            if name != held.meta.get("script"):
                held.stopping = None
                held.dones = 0
                held.meta.pop("keeper_stop", None)
            if name is None:
                held.meta.update(script=None, deadline=None)
            else:
                held.meta.update(
                    script=name,
                    deadline=deadline,
                    grace=grace,
                    time_limit=limit,
                    marker=marker.rstrip(b"\0").decode("ascii", "replace"),
                )

    # -- start -------------------------------------------------------------------------------

    def start_template(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [
            str(theirs.fileno()) if part == "{control}" else part
            for part in self.config["template"]
        ]
        try:
            self.template = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env=self.config.get("env", {}),
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except OSError as error:
            self.template_ready = {"error": f"the template could not be started: {error}"}
            return
        finally:
            theirs.close()
        self.control = ours
        ours.settimeout(float(self.config.get("start_timeout", _TEMPLATE_WAIT)))
        try:
            data = ours.recv(_MAX_MESSAGE)
        except OSError:
            data = b""
        ours.settimeout(None)
        message = decode(data)
        if message is None or message.get("t") != "ready":
            self.template_ready = {"error": "the template exited during start-up"}
            return
        self.template_ready = message
        ours.setblocking(False)
        self.selector.register(ours, selectors.EVENT_READ, self.from_template)

    def listen(self) -> socket.socket:
        with _umask(0o177):
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            partial = f"{self.path}.{os.getpid()}"
            try:
                os.unlink(partial)
            except FileNotFoundError:
                pass
            with socket_address(partial) as address:
                listener.bind(address)
        os.chmod(partial, 0o600)
        listener.listen(8)
        os.replace(partial, self.path)
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, self.accept)
        return listener

    # -- the loop ----------------------------------------------------------------------------

    def serve(self) -> None:
        while True:
            timeout = self.next_timer()
            for key, _ in self.selector.select(timeout):
                key.data(key.fileobj)
            self.run_timers()
            if self.host is None and not self.held:
                return

    def next_timer(self) -> float | None:
        if self.host is not None:
            return None
        now = time.monotonic()
        wall = time.time()
        due = [self.detached_at + self.window - now] if self.detached_at is not None else []
        for held in self.held.values():
            deadline = held.meta.get("deadline")
            if (
                held.returncode is None
                and held.stopping in (None, "interrupted")
                and isinstance(deadline, (int, float))
            ):
                grace = float(held.meta.get("grace", 1.0))
                at = deadline if held.stopping is None else deadline + grace
                due.append(at - wall)
        return max(0.0, min(due)) if due else None

    def run_timers(self) -> None:
        if self.host is not None:
            return
        if self.detached_at is not None and time.monotonic() >= self.detached_at + self.window:
            for held in list(self.held.values()):
                self.end(held)
            return
        wall = time.time()
        for held in list(self.held.values()):
            deadline = held.meta.get("deadline")
            if held.returncode is not None or not isinstance(deadline, (int, float)):
                continue
            grace = float(held.meta.get("grace", 1.0))
            if held.stopping is None and wall >= deadline:
                # Interrupted even if its `done` waits in the channel: the script can write
                # one and run on. A kernel whose script has ended says its `done` again.
                held.dones = len(self.script_said_done(held))
                held.stopping = "interrupted"
                held.meta["keeper_stop"] = "interrupted"
                _signal(held.pidfd, signal.SIGINT)
            elif held.stopping == "interrupted" and wall >= deadline + grace:
                if self.settled(held):
                    continue
                held.stopping = "killed"
                held.meta["keeper_stop"] = "killed"
                _signal(held.pidfd, signal.SIGKILL)

    # Goal: while no host is attached, a script stops at its time limit, as with one. What
    # fails: taking a `done` in the channel as its end: the script shares the kernel's
    # process, can write a `done` of its own and run on, and the keeper never stopped it.
    # What we do: interrupt it at its deadline whatever the channel holds, and at the end of
    # the grace period take as its end only a `done` that came after the interrupt (the
    # kernel's answer to it: its stop, or its last `done` said again when the script had
    # ended already). A script that catches the interrupt and writes yet another `done` is
    # left to the next host's check, within the reattach window (docs/security.md).
    def settled(self, held: _Held) -> bool:
        """Whether a `done` of the running script came after the keeper's interrupt: then
        it has ended, and no kill is owed. A `done` said again (`again`) is of a script that
        ended before the interrupt, which stopped nothing: the next host is told so."""
        dones = self.script_said_done(held)
        if len(dones) <= held.dones:
            return False
        done = dones[-1]
        held.stopping = "settled"
        held.meta["keeper_saw_done"] = "again" if done.get("again") else "done"
        if done.get("again"):
            held.meta.pop("keeper_stop", None)
        return True

    def script_said_done(self, held: _Held) -> list[dict[str, Any]]:
        """The running script's `done`s the channel holds unread, in order: looked at,
        never taken (the host reads them when it comes back)."""
        script = held.meta.get("script")
        found: list[dict[str, Any]] = []
        try:
            data = socket.socket(fileno=os.dup(held.fds[0]))
        except OSError:
            return found
        try:
            waiting = data.recv(1 << 22, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            waiting = b""
        finally:
            data.close()
        at = 0
        while at + 4 <= len(waiting):
            size = int.from_bytes(waiting[at : at + 4], "big")
            body = waiting[at + 4 : at + 4 + size]
            if len(body) < size:
                break
            # Only a `done` is decoded: what the script writes can be anything, and the
            # keeper holds every shell's interpreter.
            if b'"done"' in body:
                frame = decode(body)
                if frame is not None and frame.get("t") == "done" and frame.get("script") == script:
                    found.append(frame)
            at += 4 + size
        return found

    # -- the host ----------------------------------------------------------------------------

    def accept(self, listener: Any) -> None:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        connection.setblocking(False)
        if self.host is not None:
            # Told when it says hello, so that it reads the answer rather than a closed socket.
            self.selector.register(connection, selectors.EVENT_READ, self.refuse)
            return
        self.host = connection
        self.detached_at = None
        self.selector.register(connection, selectors.EVENT_READ, self.from_host)

    def refuse(self, connection: Any) -> None:
        self.selector.unregister(connection)
        try:
            connection.recv(_MAX_MESSAGE)  # read first: closing over unread data resets it
        except OSError:
            pass
        _send(connection, {"t": "busy"})
        connection.close()

    def detach(self) -> None:
        if self.host is not None:
            self.selector.unregister(self.host)
            self.host.close()
            self.host = None
        self.detached_at = time.monotonic()
        self.read_board()

    def from_host(self, connection: Any) -> None:
        while True:
            try:
                data = connection.recv(_MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            message = decode(data) if data else None
            if message is None:
                self.detach()
                return
            self.handle(message)
            if self.host is None:
                return

    def handle(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        held = self.held.get(int(message.get("k", -1)))
        if kind == "hello":
            self.read_board()
            self.tell(
                {
                    "t": "hello",
                    "pid": os.getpid(),
                    "template": self.template_ready,
                    "held": [
                        {"k": h.k, "meta": h.meta, "returncode": h.returncode}
                        for h in self.held.values()
                    ],
                }
            )
        elif kind == "fork":
            self.fork(int(message.get("id", 0)), message.get("request") or {})
        elif kind == "take" and held is not None:
            self.tell(
                {"t": "taken", "k": held.k, "slot": held.slot, "returncode": held.returncode},
                [*held.fds, held.pidfd],
            )
        elif kind == "take":
            self.tell({"t": "taken", "k": message.get("k"), "error": "not held"})
        elif kind == "note" and held is not None and isinstance(message.get("meta"), dict):
            held.meta.update(message["meta"])
        elif kind == "forget" and held is not None:
            self.drop(held)
        elif kind == "kill" and held is not None:
            self.end(held)

    def tell(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        if self.host is not None and not _send(self.host, message, fds):
            self.detach()

    # -- interpreters ------------------------------------------------------------------------

    def fork(self, host_id: int, request: dict[str, Any]) -> None:
        if self.control is None:
            self.tell({"t": "forked", "id": host_id, "error": "the template is not running"})
            return
        ours, kernel_end = socket.socketpair()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        self.requests += 1
        number = self.requests
        self.forking[number] = (host_id, [ours.detach(), out_read, err_read])
        sent = _send(
            self.control, {**request, "id": number}, [kernel_end.fileno(), out_write, err_write]
        )
        kernel_end.close()
        os.close(out_write)
        os.close(err_write)
        if not sent:
            _, fds = self.forking.pop(number)
            for fd in fds:
                os.close(fd)
            self.tell({"t": "forked", "id": host_id, "error": "the template is gone"})

    def from_template(self, control: Any) -> None:
        while True:
            try:
                data, fds = receive(control, _MAX_MESSAGE, 8)
            except BlockingIOError:
                return
            message = decode(data) if data else None
            if message is None:
                self.template_gone()
                return
            kind = message.get("t")
            if kind == "forked":
                self.forked(message, fds)
            elif kind == "exited":
                k = self.by_pid.pop(int(message.get("pid", -1)), None)
                held = self.held.get(k) if k is not None else None
                if held is not None:
                    held.returncode = int(message.get("returncode", 0))
                    self.tell({"t": "exited", "k": held.k, "returncode": held.returncode})
            else:
                for fd in fds:
                    os.close(fd)

    def forked(self, message: dict[str, Any], fds: list[int]) -> None:
        host_id, ours = self.forking.pop(int(message.get("id", -1)), (None, []))
        if host_id is None:
            for fd in fds:
                os.close(fd)
            return
        if "pid" not in message or not fds:
            for fd in (*ours, *fds):
                os.close(fd)
            self.tell({"t": "forked", "id": host_id, "error": message.get("error", "no pidfd")})
            return
        taken = {other.slot for other in self.held.values()}
        slot = next((number for number in range(SLOTS) if number not in taken), None)
        if slot is None:
            for fd in (*ours, *fds):
                os.close(fd)
            self.tell({"t": "forked", "id": host_id, "error": f"it holds {SLOTS} already"})
            return
        self.board[slot * SLOT_SIZE : (slot + 1) * SLOT_SIZE] = bytes(SLOT_SIZE)
        self.numbers += 1
        held = _Held(self.numbers, slot, int(message["pid"]), fds[0], ours)
        self.held[held.k] = held
        self.by_pid[held.pid] = held.k
        self.tell(
            {"t": "forked", "id": host_id, "k": held.k, "slot": slot, "pid": held.pid},
            [*ours, held.pidfd],
        )

    def end(self, held: _Held) -> None:
        _signal(held.pidfd, signal.SIGKILL)
        self.drop(held)

    def drop(self, held: _Held) -> None:
        self.held.pop(held.k, None)
        self.by_pid.pop(held.pid, None)
        for fd in (*held.fds, held.pidfd):
            try:
                os.close(fd)
            except OSError:
                pass

    def template_gone(self) -> None:
        if self.control is not None:
            self.selector.unregister(self.control)
            self.control.close()
            self.control = None
        for host_id, fds in self.forking.values():
            for fd in fds:
                os.close(fd)
            self.tell({"t": "forked", "id": host_id, "error": "the template exited"})
        self.forking.clear()

    def close(self) -> None:
        for held in list(self.held.values()):
            self.end(held)
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.template is not None:
            try:
                self.template.wait(2.0)
            except subprocess.TimeoutExpired:
                os.killpg(self.template.pid, signal.SIGKILL)
                self.template.wait()
        try:
            if os.path.exists(self.path):
                os.unlink(self.path)
        except OSError:
            pass


ALIVE_NAME = "keeper.alive"
"""A file of the state folder every live keeper holds a shared lock on."""


# Goal: a state directory as deep as its user likes. What fails: a Unix socket's address
# holds at most 107 bytes, so binding or connecting to `keeper.sock` in a deeper folder
# raises "AF_UNIX path too long". What we do: reach the folder through a descriptor of it,
# as `/proc/self/fd/N/keeper.sock`, which the kernel resolves as the full path.
_LONGEST_ADDRESS = 107


@contextlib.contextmanager
def socket_address(path: str) -> Iterator[str]:
    """An address for the Unix socket at `path` that fits in one, for as long as this lasts."""
    if len(os.fsencode(path)) <= _LONGEST_ADDRESS:
        yield path
        return
    folder = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{folder}/{os.path.basename(path)}"
    finally:
        os.close(folder)


def main(argv: list[str]) -> None:
    """`keeper <socket path> <config JSON>`: start the template, say `ready` on stdout, serve."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    keeper = Keeper(argv[0], json.loads(argv[1]))
    # Held (shared) for the keeper's whole life, so a host can tell that a keeper lives even
    # when its socket is gone (`toolscript.host.keeper`), and never starts a second one.
    alive = os.open(
        os.path.join(os.path.dirname(argv[0]), ALIVE_NAME),
        os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
        0o600,
    )
    fcntl.flock(alive, fcntl.LOCK_SH)
    try:
        keeper.start_template()
        keeper.listen()
        os.write(1, b"ready\n")
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        keeper.serve()
    finally:
        keeper.close()


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> bool:
    """Send one message; a peer that does not take it within `_SEND_WAIT` seconds is gone."""
    data = json.dumps(message).encode("utf-8")
    deadline = time.monotonic() + _SEND_WAIT
    while True:
        try:
            if fds:
                socket.send_fds(sock, [data], fds)
            else:
                sock.send(data)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [sock], [], left)[1]:
                return False
        except OSError:
            return False


def _signal(pidfd: int, signum: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signum)
    except OSError:
        pass


class _umask:
    def __init__(self, mask: int) -> None:
        self.mask = mask
        self.old = 0

    def __enter__(self) -> None:
        self.old = os.umask(self.mask)

    def __exit__(self, *exc: object) -> None:
        os.umask(self.old)


if __name__ == "__main__":
    main(sys.argv[1:])
