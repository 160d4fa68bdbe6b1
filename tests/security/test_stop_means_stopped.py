"""After a stop, after a close, and after the host's death, nothing the script started runs.

The processes a script starts carry a token in their command line, so the test can find them
from outside the sandbox (inside, their pids are of another PID namespace).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.conftest import MakeRuntime, eventually, processes_with
from toolscript import Runtime, tool

pytestmark = pytest.mark.timeout(60)


def sleeper(token: str) -> str:
    """Python source for a process that sleeps with `token` in its command line."""
    return f"[sys.executable, '-c', 'import time; time.sleep(300)  # {token}']"


def setsid_double_fork(token: str, ready: Path) -> str:
    return textwrap.dedent(
        f"""\
        import os, sys, subprocess, pathlib
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                subprocess.Popen({sleeper(token)}, start_new_session=True)
                pathlib.Path({str(ready)!r}).touch()
            os._exit(0)
        """
    )


def sigint_ignoring_child(token: str, ready: Path) -> str:
    child = (
        "import signal, time, pathlib\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        f"time.sleep(300)  # {token}\n"
    )
    return f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {child!r}])\n"


def fork_bomb(tries: int, *, each: str = "", end: str = "") -> str:
    """Python source that forks up to `tries` children that sleep, counting those it got in
    `made`; `each` runs after every fork that worked, `end` after the loop."""
    return (
        "import os, time\n"
        "made = 0\n"
        f"for _ in range({tries}):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if pid == 0:\n"
        "        time.sleep(300)\n"
        "        os._exit(0)\n"
        "    made += 1\n" + each + end
    )


ATTACKS = {"setsid-double-fork": setsid_double_fork, "sigint-ignoring": sigint_ignoring_child}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_processes_the_script_started_are_gone_after_a_time_limit_stop(
    make_runtime: MakeRuntime, tmp_path: Path, attack: str
) -> None:
    token = f"tok-{secrets.token_hex(6)}"
    ready = tmp_path / "ready"
    runtime = await make_runtime(mounts={tmp_path: "rw"})
    script = ATTACKS[attack](token, ready) + "import time\ntime.sleep(60)\n"
    result = await runtime.run(script, time_limit=5)
    assert result.status == "time_limit", result.text
    assert ready.exists(), "the attack had not started its process when the script stopped"
    await eventually(lambda: not processes_with(token), 1.0, "a process outlived the stop")
    # The interpreter itself stays: only what the script started is gone.
    after = await runtime.run("1 + 1")
    assert after.value == "2"


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_processes_the_script_started_are_gone_after_the_runtime_closes(
    make_runtime: MakeRuntime, tmp_path: Path, attack: str
) -> None:
    token = f"tok-{secrets.token_hex(6)}"
    ready = tmp_path / "ready"
    runtime = await make_runtime(mounts={tmp_path: "rw"})
    result = await runtime.run(ATTACKS[attack](token, ready))
    assert result.status == "ok", result.text
    await eventually(lambda: bool(processes_with(token)), 10, "its process did not appear")
    await runtime.aclose()
    await eventually(lambda: not processes_with(token), 1.0, "a process outlived the runtime")


async def init_of(runtime: Runtime) -> psutil.Process:
    """The default shell's interpreter's init, as the host sees it (it has run a script)."""
    await runtime.run("1")
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None and interpreter.pid is not None
    return psutil.Process(interpreter.pid)


async def test_a_spinning_thread_and_a_fork_bomb_are_gone_after_the_runtime_closes(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(limits={"processes": 50})
    init = await init_of(runtime)
    result = await runtime.run(
        "import os, threading, time\n"
        "threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start()\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(300)\n"
        "            os._exit(0)\n"
        "    except OSError:\n"
        "        pass\n",
        time_limit=30,
    )
    assert result.status == "ok", result.text
    assert len(init.children(recursive=True)) > 10  # the bomb's children live on: until close
    await runtime.aclose()

    def gone() -> bool:
        try:
            return init.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    await eventually(gone, 1.0, "the interpreter outlived the runtime")


@pytest.mark.parametrize(
    "fork", [True, False], ids=["forked-from-the-runtime's-template", "a-template-of-its-own"]
)
async def test_the_process_limit_is_the_number_given_however_the_interpreter_started(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    """The kernel and what it starts are held to `limits["processes"]`: an interpreter forked
    from the runtime's template is moved into its cgroup by its init; one whose template was
    started for it alone (`fork=False`, the command line's) is born in it, with its template
    and init, and the limit counts those two apart. Either way the script gets what it was
    given: the kernel itself, and 49 more."""
    runtime = await make_runtime(limits={"processes": 50}, fork=fork)
    result = await runtime.run(fork_bomb(200, end="print(made)\n"), time_limit=20)
    assert result.status == "ok", result.text
    assert int(result.stdout) == 49, result.stdout


async def test_a_fork_bomb_is_held_to_the_process_limit_and_ends_with_the_stop(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(limits={"processes": 50})
    init = await init_of(runtime)
    result = await runtime.run(
        fork_bomb(10_000, each="    print('made', made, flush=True)\n", end="time.sleep(60)\n"),
        time_limit=5,
    )
    assert result.status == "time_limit", result.text
    made = int(result.stdout.split()[-1])
    assert 0 < made < 50, made

    def bomb_gone() -> bool:
        try:
            alive = [
                child
                for child in init.children(recursive=True)
                if child.status() != psutil.STATUS_ZOMBIE
            ]
            return len(alive) <= 1  # the kernel, if it was kept
        except psutil.NoSuchProcess:
            return True  # the interpreter was killed, and its namespace with it

    await eventually(bomb_gone, 1.0, "forked processes outlived the stop")


async def test_a_spinning_thread_makes_the_stop_replace_the_interpreter(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime()
    first = await runtime.run(
        "import threading\n"
        "def spin():\n"
        "    while True:\n"
        "        pass\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "import time\n"
        "time.sleep(60)\n",
        time_limit=1,
    )
    assert first.status == "time_limit", first.text
    assert "thread" in first.note and "state" in first.note, first.note
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is None or not interpreter.alive
    after = await runtime.run("threading")
    assert after.status == "error"  # a fresh interpreter: the old namespace is gone
    assert after.generation == first.generation + 1
    assert "fresh interpreter" in after.note


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "start",
    [
        # Made with `_thread`: `threading` never hears of it.
        "import _thread\n_thread.start_new_thread(spin, ())\n",
        # A `Thread` that lies: it says it is not alive, and its `join` returns at once.
        "import threading\n"
        "class Liar(threading.Thread):\n"
        "    def is_alive(self):\n"
        "        return False\n"
        "    def join(self, timeout=None):\n"
        "        return None\n"
        "Liar(target=spin, daemon=True).start()\n",
    ],
    ids=["_thread", "lying-thread"],
)
async def test_a_thread_threading_cannot_see_still_makes_the_stop_replace_the_interpreter(
    make_runtime: MakeRuntime, start: str
) -> None:
    runtime = await make_runtime()
    first = await runtime.run(
        "def spin():\n    while True:\n        pass\n" + start + "while True:\n    pass\n",
        time_limit=1,
    )
    assert first.status == "time_limit", first.text
    assert "thread" in first.note and "state" in first.note, first.note
    after = await runtime.run("spin")
    assert after.status == "error"  # a fresh interpreter: the thread went with the old one
    assert after.generation == first.generation + 1


DISARM = (
    "import sys\n"
    "runner = next(m for n, m in sys.modules.items() if n.endswith('kernel.runner'))\n"
    "async def nothing_to_end(*args, **kwargs):\n"
    "    import types\n"
    "    return types.SimpleNamespace(threads=0, timers=0, closed=0)\n"
    "runner.end_what_it_started = nothing_to_end\n"
)
"""Python for a script: replace the kernel's code that ends what a stopped script started
with code that ends nothing and says no thread is left."""


def hopper(token: str, ready: Path) -> str:
    """A process of its own session that forks and exits every 50 ms: a new pid each time."""
    child = (
        "import os, pathlib, time\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
        "    if os.fork() != 0:\n"
        "        os._exit(0)\n"
        f"# {token}\n"
    )
    return (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True)\n"
    )


def shell_chain(token: str, ready: Path) -> str:
    """A shell script that appends a line, starts itself again in the background and exits:
    a new pid every millisecond or so, each gone before a pidfd of it can be looked at."""
    chain = ready.parent / f"chain-{token}.sh"
    return (
        f"import pathlib, subprocess\n"
        f"pathlib.Path({str(chain)!r}).write_text("
        f"'echo x >> {ready}\\n/bin/sh {chain} &\\nexit 0\\n')\n"
        f"subprocess.Popen(['/bin/sh', {str(chain)!r}], start_new_session=True)\n"
    )


KEPT = {**ATTACKS, "hopper": hopper, "shell-chain": shell_chain}


@pytest.mark.parametrize("attack", list(KEPT))
async def test_processes_a_script_kept_from_the_kernels_stop_are_found_by_the_host(
    make_runtime: MakeRuntime, tmp_path: Path, attack: str
) -> None:
    # The script shares its process with the kernel: it replaces the code that ends what it
    # started after a stop, so the kernel says all was ended. The host looks for itself.
    token = f"tok-{secrets.token_hex(6)}"
    ready = tmp_path / "ready"
    runtime = await make_runtime(mounts={tmp_path: "rw"})
    script = DISARM + KEPT[attack](token, ready) + "import time\ntime.sleep(60)\n"
    first = await runtime.run(script, time_limit=3)
    assert first.status == "time_limit", first.text
    assert ready.exists(), "the attack had not started its process when the script stopped"
    assert "process(es) the script started were still running" in first.note, first.note
    await eventually(lambda: not processes_with(token), 2.0, "a process outlived the stop")
    after = await runtime.run("'runner' in globals()")
    assert (after.value, after.generation) == ("False", first.generation + 1), after.text
    assert "a process the previous script started" in after.note, after.note
    if attack == "shell-chain":  # its processes carry no token: its file must stop growing
        size = ready.stat().st_size
        await runtime.run("import time\ntime.sleep(0.3)")
        assert ready.stat().st_size == size, "the chain went on after the stop"


async def test_a_thread_a_script_kept_from_the_kernels_stop_may_not_call_a_tool_after_it(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # Disarmed as above, the kernel says no thread is left; the thread calls a tool later.
    calls: list[int] = []

    @tool
    def record(n: int) -> int:
        """Record that it was called."""
        calls.append(n)
        return n

    gate = tmp_path / "gate"
    os.mkfifo(gate)
    runtime = await make_runtime(tools=[record], mounts={tmp_path: "rw"})
    script = (
        DISARM + "import asyncio, threading, time\n"
        "def later():\n"
        f"    open({str(gate)!r}).read()\n"
        "    asyncio.run(record(n=2))  # on a loop of its own: the frame goes out at once\n"
        "threading.Thread(target=later, daemon=True).start()\n"
        "await record(n=1)\n"
        "time.sleep(60)\n"
    )
    first = await runtime.run(script, time_limit=2)
    assert first.status == "time_limit" and first.generation == 1, first.text
    with open(gate, "w") as opened:  # the thread goes on, past the stop
        opened.write("go")
    interpreter = runtime.shell("default")._interpreter
    assert interpreter is not None
    await eventually(lambda: not interpreter.alive, 10.0, "the interpreter was kept")
    after = await runtime.run("'runner' in globals()")
    assert (after.value, after.generation) == ("False", 2), after.text
    assert "ran on past its stop" in after.note, after.note
    assert calls == [1]


HOST = """
import asyncio, os
from toolscript import Runtime

async def main():
    runtime = Runtime(journal=":memory:", sandbox="required")
    await runtime.start()
    task = asyncio.create_task(runtime.run(os.environ["SCRIPT"], time_limit=300))
    await asyncio.sleep(0)
    print("running", flush=True)
    await task

asyncio.run(main())
"""


async def test_every_sandbox_process_is_gone_within_a_second_of_the_hosts_sigkill(
    tmp_path: Path,
) -> None:
    token = f"tok-{secrets.token_hex(6)}"
    script = (
        "import subprocess, sys, os, time\n"
        f"subprocess.Popen({sleeper(token)}, start_new_session=True)\n"
        "time.sleep(300)\n"
    )
    host = subprocess.Popen(
        [sys.executable, "-c", HOST],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "SCRIPT": script},
    )
    try:
        await eventually(lambda: bool(processes_with(token)), 20, "the script did not start")
        descendants = psutil.Process(host.pid).children(recursive=True)
        assert descendants
        host.send_signal(signal.SIGKILL)
        host.wait(5)

        def alive(process: psutil.Process) -> bool:
            try:
                return process.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return False

        def all_gone() -> bool:
            return not any(map(alive, descendants)) and not processes_with(token)

        await eventually(all_gone, 1.0, "a sandbox process outlived the host")
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(5)


async def test_a_setsid_double_fork_is_gone_after_its_shell_is_closed(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    token = f"tok-{secrets.token_hex(6)}"
    ready = tmp_path / "ready"
    runtime = await make_runtime(mounts={tmp_path: "rw"})
    shell = runtime.shell("doomed")
    result = await shell.run(setsid_double_fork(token, ready))
    assert result.status == "ok", result.text
    await eventually(lambda: bool(processes_with(token)), 10, "the daemon did not appear")
    await shell.close()
    await eventually(lambda: not processes_with(token), 1.0, "the daemon outlived its shell")


async def test_a_timer_the_script_left_never_fires_after_a_time_limit_stop(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime()
    result = await runtime.run(
        "import asyncio, time\n"
        "fired = []\n"
        "loop = asyncio.get_running_loop()\n"
        "start = time.monotonic()\n"
        "loop.call_later(1.5, fired.append, 'call_later')\n"
        "loop.call_at(loop.time() + 1.5, fired.append, 'call_at')\n"
        "while True:\n"
        "    pass\n",
        time_limit=1,
    )
    assert result.status == "time_limit", result.text
    # The same interpreter, past the timers' time: its loop runs meanwhile.
    after = await runtime.run(
        "await asyncio.sleep(max(0.0, start + 2.0 - time.monotonic()))\nfired"
    )
    assert (after.status, after.value) == ("ok", "[]"), after.text
    assert after.generation == result.generation


async def _still_after_a_while(runtime: Runtime, count: str) -> None:
    """Run, in the stopped script's own interpreter (kept), `count` twice, 0.3 s apart: it
    must not have grown (its loop runs meanwhile: what the script left could run there)."""
    after = await runtime.run(
        f"import asyncio\nbefore = {count}\nawait asyncio.sleep(0.3)\n({count}) - before"
    )
    assert (after.status, after.value, after.generation) == ("ok", "0", 1), after.text


@pytest.mark.parametrize(
    "arm",
    [
        # An interval timer whose handler runs in the main thread, at any bytecode.
        "signal.signal(signal.SIGALRM, lambda *_: ticks.append(1))\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)\n",
        # An interval timer armed again by the script's own cleanup when the stop reaches it.
        "signal.signal(signal.SIGALRM, lambda *_: ticks.append(1))\n"
        "def rearm():\n    signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)\n",
        # A reader that makes itself ready again each time it runs.
        "a, b = socket.socketpair()\n"
        "def ready():\n    a.recv(1)\n    ticks.append(1)\n    b.send(b'x')\n"
        "asyncio.get_running_loop().add_reader(a.fileno(), ready)\nb.send(b'x')\n",
        # A signal handler on the loop, fed by an interval timer.
        "asyncio.get_running_loop().add_signal_handler(signal.SIGALRM, ticks.append, 1)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)\n",
        # A callback that queues itself again: the loop runs it at every pass, for ever.
        "def again():\n    ticks.append(1)\n    asyncio.get_running_loop().call_soon(again)\n"
        "asyncio.get_running_loop().call_soon(again)\n",
        # A reader of the script's bound to the loop, to pass for the loop's own.
        "import types\na, b = socket.socketpair()\n"
        "def ready(self):\n    a.recv(1)\n    ticks.append(1)\n    b.send(b'x')\n"
        "loop = asyncio.get_running_loop()\n"
        "loop.add_reader(a.fileno(), types.MethodType(ready, loop))\nb.send(b'x')\n",
        # A profile function: it runs whenever the kernel calls a function.
        "import sys\nsys.setprofile(lambda *_: ticks.append(1))\n",
        # A gc callback, run at every collection the kernel's work sets off.
        "import gc\ngc.callbacks.append(lambda *_: ticks.append(1))\ngc.set_threshold(1)\n",
    ],
    ids=[
        "setitimer",
        "rearmed-in-cleanup",
        "loop-reader",
        "loop-signal-handler",
        "ready-chain",
        "reader-bound-to-the-loop",
        "profile-function",
        "gc-callback",
    ],
)
async def test_what_runs_the_scripts_code_in_the_main_thread_ends_with_the_stop(
    make_runtime: MakeRuntime, arm: str
) -> None:
    runtime = await make_runtime()
    first = await runtime.run(
        "import asyncio, signal, socket, time\nticks = []\nrearm = lambda: None\n"
        + arm
        + "while True:\n    try:\n        time.sleep(0.05)\n    except KeyboardInterrupt:\n"
        "        rearm()\n        raise\n",
        time_limit=1,
    )
    assert first.status == "time_limit", first.text
    assert "kept" in first.note, first.note  # all of it ended: nothing costs the interpreter
    await _still_after_a_while(runtime, "len(ticks)")


async def test_faulthandlers_repeating_dump_ends_with_the_stop(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    dumps = tmp_path / "dumps"
    runtime = await make_runtime(mounts={tmp_path: "rw"})
    first = await runtime.run(
        f"import faulthandler, time\nout = open({str(dumps)!r}, 'w')\n"
        "faulthandler.dump_traceback_later(0.01, repeat=True, file=out)\ntime.sleep(60)\n",
        time_limit=1,
    )
    assert first.status == "time_limit", first.text
    assert dumps.stat().st_size > 0  # it ran until the stop
    await _still_after_a_while(runtime, f"__import__('os').path.getsize({str(dumps)!r})")


@pytest.mark.parametrize(
    "start",
    [
        # A thread whose loop is all in C: it never has a Python frame to be listed by.
        "import _thread, collections, itertools, time\n"
        "_thread.start_new_thread(collections.deque, (zip(map(time.sleep, "
        "itertools.repeat(0.01)), map(ticks.append, itertools.repeat(1))), 0))\n",
        # A POSIX timer that starts a native thread for each expiry (SIGEV_THREAD).
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "class Sigevent(ctypes.Structure):\n"
        "    _fields_ = [('value', ctypes.c_void_p), ('signo', ctypes.c_int),\n"
        "                ('notify', ctypes.c_int), ('function', ctypes.c_void_p),\n"
        "                ('attributes', ctypes.c_void_p), ('pad', ctypes.c_char * 32)]\n"
        "class Spec(ctypes.Structure):\n"
        "    _fields_ = [('interval', ctypes.c_long * 2), ('value', ctypes.c_long * 2)]\n"
        "tick = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: ticks.append(1))\n"
        "event = Sigevent(notify=2, function=ctypes.cast(tick, ctypes.c_void_p))\n"
        "timer = ctypes.c_void_p()\n"
        "assert libc.timer_create(1, ctypes.byref(event), ctypes.byref(timer)) == 0\n"
        "spec = Spec((ctypes.c_long * 2)(0, 10_000_000), (ctypes.c_long * 2)(0, 10_000_000))\n"
        "assert libc.timer_settime(timer, 0, ctypes.byref(spec), None) == 0\n",
        # A POSIX timer that sends a signal (SIGEV_SIGNAL, the default: SIGALRM).
        "import ctypes, signal\n"
        "signal.signal(signal.SIGALRM, lambda *_: ticks.append(1))\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "class Spec(ctypes.Structure):\n"
        "    _fields_ = [('interval', ctypes.c_long * 2), ('value', ctypes.c_long * 2)]\n"
        "timer = ctypes.c_void_p()\n"
        "assert libc.timer_create(1, None, ctypes.byref(timer)) == 0\n"
        "spec = Spec((ctypes.c_long * 2)(0, 10_000_000), (ctypes.c_long * 2)(0, 10_000_000))\n"
        "assert libc.timer_settime(timer, 0, ctypes.byref(spec), None) == 0\n",
    ],
    ids=["frameless-thread", "posix-timer-thread", "posix-timer-signal"],
)
async def test_what_the_stop_cannot_end_makes_it_replace_the_interpreter(
    make_runtime: MakeRuntime, start: str
) -> None:
    runtime = await make_runtime()
    first = await runtime.run(
        "ticks = []\n" + start + "while len(ticks) < 3:\n    pass\nwhile True:\n    pass\n",
        time_limit=2,
    )
    assert first.status == "time_limit", first.text
    assert "replaced" in first.note and "state is gone" in first.note, first.note
    after = await runtime.run("ticks")
    assert after.status == "error" and after.generation == first.generation + 1, after.text
    assert "fresh interpreter" in after.note, after.note


async def test_an_audit_hook_cannot_be_added(make_runtime: MakeRuntime) -> None:
    # A hook cannot be removed, and would run whenever the kernel does what is audited.
    runtime = await make_runtime()
    result = await runtime.run(
        "import sys\nheard = []\nsys.addaudithook(lambda event, _: heard.append(event))\n"
        "open('/dev/null').close()\nheard"
    )
    # Python drops a hook that another refuses, without a word to its caller.
    assert (result.status, result.value) == ("ok", "[]"), result.text


async def test_a_stop_says_it_closed_the_connections_on_the_loop(make_runtime: MakeRuntime) -> None:
    # An earlier script's connection, to a server the script started: a stop closes the
    # server and both ends (their protocols are the script's code), and the result says so.
    runtime = await make_runtime()
    opened = await runtime.run(
        "import asyncio\n"
        "async def echo(reader, writer):\n    writer.write(await reader.read(10))\n"
        "server = await asyncio.start_server(echo, '127.0.0.1', 0)\n"
        "port = server.sockets[0].getsockname()[1]\n"
        "reader, writer = await asyncio.open_connection('127.0.0.1', port)\n"
    )
    assert opened.status == "ok", opened.text
    stopped = await runtime.run("import time\ntime.sleep(30)", time_limit=1)
    assert stopped.status == "time_limit" and stopped.generation == opened.generation
    assert "The stop closed 3 connection(s) or server(s)" in stopped.note, stopped.note
    after = await runtime.run("server.is_serving()")
    assert after.value == "False", after.text
