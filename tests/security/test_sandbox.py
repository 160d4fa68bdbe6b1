"""Attacks from inside a script on the host, on other shells and on the sandbox itself.

Each test runs the attack as a hostile script would, against the real sandbox, and checks
that it fails. (Against a runtime with `sandbox="off"`, every one of them succeeds.)
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript.kernel.init import PROC_MASKED

pytestmark = pytest.mark.timeout(60)


async def test_the_hosts_environment_is_unreadable_from_any_process_the_script_can_see(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("TOOLSCRIPT_TEST_SECRET", secret)
    runtime = await make_runtime()
    result = await runtime.run(
        "import glob, os\n"
        "found = []\n"
        "for path in glob.glob('/proc/*/environ') + [f'/proc/{os.getppid()}/environ',"
        f" '/proc/{os.getpid()}/environ']:\n"
        "    try:\n"
        f"        if {secret!r}.encode() in open(path, 'rb').read():\n"
        "            found.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        f"found, {secret!r} in str(os.environ)"
    )
    assert result.status == "ok", result.text
    assert result.value == "([], False)"


async def test_the_hosts_memory_can_be_neither_read_nor_written(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime()
    host = os.getpid()
    result = await runtime.run(
        "import os\n"
        "opened = []\n"
        f"for pid in ({host}, os.getppid(), 1):\n"
        "    for mode in ('rb', 'r+b'):\n"
        "        try:\n"
        "            open(f'/proc/{pid}/mem', mode).close()\n"
        "            opened.append((pid, mode))\n"
        "        except OSError:\n"
        "            pass\n"
        "opened"
    )
    assert result.status == "ok", result.text
    assert result.value == "[]"


async def test_the_read_only_view_holds_against_a_remount(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime()
    result = await runtime.run(
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "MS_REMOUNT, MS_BIND = 32, 4096\n"
        "remount = libc.mount(None, b'/', None, MS_REMOUNT | MS_BIND, None)\n"
        "usr = libc.mount(None, b'/usr', None, MS_REMOUNT | MS_BIND, None)\n"
        "try:\n"
        "    open('/usr/toolscript-was-here', 'w')\n"
        "    wrote = True\n"
        "except OSError:\n"
        "    wrote = False\n"
        "caps = open('/proc/self/status').read().split('CapEff:')[1].split()[0]\n"
        "remount, usr, wrote, int(caps, 16)"
    )
    assert result.status == "ok", result.text
    assert result.value == "(-1, -1, False, 0)"
    assert not Path("/usr/toolscript-was-here").exists()


async def test_escape_calls_are_refused_by_the_seccomp_filter(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime()
    result = await runtime.run(
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def errno(result):\n"
        "    return ctypes.get_errno() if result == -1 else 'allowed'\n"
        "CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000\n"
        "{\n"
        "    'ptrace': errno(libc.ptrace(16, 1, 0, 0)),\n"
        "    'unshare': errno(libc.unshare(CLONE_NEWUSER)),\n"
        "    'unshare_ns': errno(libc.unshare(CLONE_NEWNS)),\n"
        "    'setns': errno(libc.setns(os.open('/proc/1/ns/mnt', os.O_RDONLY)"
        " if os.access('/proc/1/ns/mnt', os.R_OK) else 0, 0)),\n"
        "    'keyctl': errno(libc.syscall(250 if os.uname().machine == 'x86_64' else 219,"
        " 0, 0, 0, 0, 0)),\n"
        "    'bpf': errno(libc.syscall(321 if os.uname().machine == 'x86_64' else 280,"
        " 0, 0, 0)),\n"
        "    'io_uring_setup': errno(libc.syscall(425, 8, ctypes.create_string_buffer(120))),\n"
        "}"
    )
    assert result.status == "ok", result.text
    refused = eval(result.value or "{}")
    assert all(value != "allowed" for value in refused.values()), refused


async def test_the_journal_state_directory_and_home_are_invisible(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "token").write_text("bearer-secret")
    home_file = Path.home() / f".toolscript-test-{secrets.token_hex(4)}"
    home_file.write_text("home-secret")
    try:
        runtime = await make_runtime(state_dir=state, journal=state / "journal.sqlite3", mounts={})
        # The home folder itself may show what Python needs of it (a version manager's
        # prefix, read-only); nothing else of it.
        paths = [state / "journal.sqlite3", state / "token", state, home_file]
        result = await runtime.run(
            "import os\n"
            f"paths = {[str(path) for path in paths]!r}\n"
            "seen = []\n"
            "for path in paths:\n"
            "    if os.path.isfile(path) or (os.path.isdir(path) and os.listdir(path)):\n"
            "        seen.append(path)\n"
            f"seen, os.path.exists({str(home_file)!r})"
        )
    finally:
        home_file.unlink()
    assert result.status == "ok", result.text
    assert result.value == "([], False)"


async def test_a_python_linked_from_a_homes_bin_folder_shows_nothing_else_of_the_home(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # As `uv python install` and pipx link them (`~/.local/bin`), or a user's own `~/bin`:
    # the folder above the binary's is no Python prefix, and not to be shown.
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / "bin" / "python3").symlink_to(os.path.realpath(sys.executable))
    runtime = await make_runtime(python=str(home / "bin" / "python3"), mounts={})
    result = await runtime.run(
        f"import os, sys\nsorted(os.listdir({str(home)!r})), sys.version_info[:2] >= (3, 11)"
    )
    assert (result.status, result.value) == ("ok", "(['bin'], True)"), result.text


async def test_another_shells_folder_and_tmp_are_invisible(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime()
    first = await runtime.shell("A").run(
        "import os\nopen('mine.txt', 'w').write('A-secret')\n"
        "open('/tmp/scratch.txt', 'w').write('A-tmp')\nos.getcwd()"
    )
    assert first.status == "ok", first.text
    folder = eval(first.value or "''")
    second = await runtime.shell("B").run(
        "import os\n"
        f"folder = {folder!r}\n"
        "(os.path.exists(os.path.join(folder, 'mine.txt')),\n"
        " os.path.exists('/tmp/scratch.txt'),\n"
        " sorted(os.listdir(os.path.dirname(os.getcwd()))))"
    )
    assert second.status == "ok", second.text
    assert second.value == "(False, False, ['B'])"


_LEAVE_BEHIND = (
    "import os, socket\n"
    "open('/dev/shm/left', 'w').write('A-secret')\n"
    "unix = socket.socket(socket.AF_UNIX)\n"
    "unix.bind('\\0toolscript-test-A')\n"
    "unix.listen()\n"
    "tcp = socket.socket()\n"
    "tcp.bind(('127.0.0.1', 0))\n"
    "tcp.listen()\n"
    "port = tcp.getsockname()[1]\n"
    "planted = []\n"
    "try:\n"
    "    open('/dev/planted', 'w').close()\n"
    "    planted.append('/dev/planted')\n"
    "except OSError:\n"
    "    pass\n"
    "import ctypes, ctypes.util\n"
    "libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)\n"
    "segment = libc.shmget(4242, 4096, 0o1000 | 0o666)  # IPC_CREAT\n"
    "terminal = os.openpty()  # as pexpect or pty.spawn would\n"
    "port, planted, segment >= 0, sorted(os.listdir('/dev/shm'))"
)

_LOOK_FOR_IT = (
    "import ctypes, ctypes.util, os, socket\n"
    "found = []\n"
    "if os.listdir('/dev/shm'):\n"
    "    found.append('/dev/shm')\n"
    "for address, family in (('\\0toolscript-test-A', socket.AF_UNIX),"
    " (('127.0.0.1', {port}), socket.AF_INET)):\n"
    "    try:\n"
    "        socket.socket(family).connect(address)\n"
    "        found.append(family.name)\n"
    "    except OSError:\n"
    "        pass\n"
    "libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)\n"
    "if libc.shmget(4242, 0, 0) >= 0:\n"
    "    found.append('System V')\n"
    "if set(os.listdir('/dev/pts')) - {{'ptmx'}}:\n"
    "    found.append('/dev/pts')\n"
    "import multiprocessing\n"
    "multiprocessing.Lock()  # needs a /dev/shm of its own\n"
    "mine = socket.socket()\n"
    "mine.bind(('127.0.0.1', 0))\n"
    "mine.listen()\n"
    "socket.create_connection(mine.getsockname(), timeout=2).close()  # its own loopback works\n"
    "found"
)


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "spawned"])
async def test_nothing_one_shell_leaves_in_shared_places_reaches_another(
    make_runtime: MakeRuntime, fork: bool
) -> None:
    # /dev/shm, /dev/pts, System V memory, abstract Unix sockets and loopback ports, each of which
    # lives in a namespace or a mount the interpreters forked from one template would share.
    runtime = await make_runtime(fork=fork)
    assert await asyncio.wait_for(runtime.template_ready(), 20) is fork, runtime.template_failure
    first = await runtime.shell("A").run(_LEAVE_BEHIND)
    assert first.status == "ok", first.text
    port, planted, made, listed = eval(first.value or "")
    assert (made, listed) == (True, ["left"])
    second = await runtime.shell("B").run(_LOOK_FOR_IT.format(port=port))
    assert (second.status, second.value) == ("ok", "[]"), second.text
    assert planted == []  # /dev is read-only: nothing planted there for the next shell


async def test_no_connection_reaches_the_hosts_loopback_or_any_network(
    make_runtime: MakeRuntime,
) -> None:
    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        runtime = await make_runtime()
        result = await runtime.run(
            "import socket\n"
            "outcome = None\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
            "    outcome = 'connected'\n"
            "except OSError as error:\n"
            "    outcome = type(error).__name__\n"
            "outcome, [name for _, name in socket.if_nameindex()]"
        )
    assert result.status == "ok", result.text
    outcome, interfaces = eval(result.value or "(None, None)")
    assert outcome != "connected"
    # Only a loopback of its own: no route leads anywhere outside the sandbox.
    assert interfaces == ["lo"]


async def test_network_true_shares_the_hosts_network(make_runtime: MakeRuntime) -> None:
    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        runtime = await make_runtime(network=True)
        result = await runtime.run(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
            "'connected'"
        )
    assert result.status == "ok", result.text
    assert result.value == "'connected'"


async def test_mounts_show_more_of_the_host_read_only_unless_asked(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    readable = tmp_path / "data"
    readable.mkdir()
    (readable / "in.csv").write_text("a,b\n1,2\n")
    writable = tmp_path / "out"
    writable.mkdir()
    runtime = await make_runtime(mounts={readable: "/data", writable: "rw"}, sandbox="required")
    result = await runtime.run(
        "text = open('/data/in.csv').read()\n"
        "try:\n"
        "    open('/data/new.txt', 'w')\n"
        "    wrote = True\n"
        "except OSError:\n"
        "    wrote = False\n"
        f"open({str(writable / 'plot.txt')!r}, 'w').write('saved')\n"
        "text, wrote"
    )
    assert result.status == "ok", result.text
    assert result.value == "('a,b\\n1,2\\n', False)"
    assert (writable / "plot.txt").read_text() == "saved"


async def test_a_workdir_is_every_shells_working_directory(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    (tmp_path / "data.csv").write_text("x\n")
    runtime = await make_runtime(workdir=tmp_path)
    result = await runtime.run("import os\nopen('out.txt', 'w').write(open('data.csv').read())\n")
    assert result.status == "ok", result.text
    assert (tmp_path / "out.txt").read_text() == "x\n"


async def test_a_script_cannot_reach_the_sandboxs_init(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime()
    result = await runtime.run(
        "import os, signal\n"
        "for signum in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):\n"
        "    os.kill(1, signum)\n"
        "os.getpid()"
    )
    assert result.status == "ok", result.text
    after = await runtime.run("1 + 1")
    assert after.value == "2"
    assert after.generation == result.generation


async def test_the_machines_settings_in_proc_cannot_be_written(make_runtime: MakeRuntime) -> None:
    # When the host runs as root, so does the script (its user namespace maps its uid to
    # itself), and a fresh /proc lets uid 0 write sysctls without any capability: a
    # `kernel.core_pattern` of the script's choosing is a command the kernel runs as root
    # outside every namespace. Each file is only opened for writing, never written.
    runtime = await make_runtime(sandbox="required")
    result = await runtime.run(
        "import os\n"
        "paths = ['/proc/sys/kernel/core_pattern', '/proc/sys/kernel/printk_ratelimit_burst',\n"
        "         '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger',\n"
        "         '/proc/irq/default_smp_affinity', '/proc/pressure/cpu']\n"
        "opened = {}\n"
        "for path in paths:\n"
        "    try:\n"
        "        os.close(os.open(path, os.O_WRONLY))\n"
        "        opened[path] = 'opened for writing'\n"
        "    except OSError as error:\n"
        "        opened[path] = error.errno\n"
        "opened, open('/proc/sys/kernel/core_pattern').read() != '', os.getuid()"
    )
    assert result.status == "ok", result.text
    opened, readable, _uid = eval(result.value or "")
    assert "opened for writing" not in opened.values(), opened
    assert readable  # read-only, not hidden


async def test_procs_files_about_the_whole_machine_cannot_be_read(
    make_runtime: MakeRuntime,
) -> None:
    # The machine's memory pages, timers, slabs and every user's keys: masked, as container
    # runtimes mask them. Those this kernel has are tried; the script's own stay readable.
    runtime = await make_runtime(sandbox="required")
    result = await runtime.run(
        "import os\n"
        f"names = {list(PROC_MASKED)!r}\n"
        "read = {}\n"
        "for name in names:\n"
        "    try:\n"
        "        with open('/proc/' + name, 'rb') as masked:\n"
        "            read[name] = len(masked.read(4096))\n"
        "    except FileNotFoundError:\n"
        "        pass\n"
        "    except OSError as error:\n"
        "        read[name] = error.strerror\n"
        "read, len(open('/proc/self/status').read()) > 0"
    )
    assert result.status == "ok", result.text
    read, own = eval(result.value or "")
    assert own
    assert read, "none of the masked files exists on this kernel"
    assert all(not isinstance(got, int) or got == 0 for got in read.values()), read


async def test_no_file_the_script_makes_can_be_setuid_or_setgid(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # The folder is `nosuid` only inside the sandbox: on the host, a setuid file the script
    # made there (root's, when the host runs as root) would run as its owner for anyone.
    runtime = await make_runtime(workdir=tmp_path, sandbox="required")
    result = await runtime.run(
        "import os, stat\n"
        "tried = {}\n"
        "def attempt(name, make):\n"
        "    try:\n"
        "        make()\n"
        "        tried[name] = 'allowed'\n"
        "    except OSError as error:\n"
        "        tried[name] = error.errno\n"
        "open('plain', 'w').close()\n"
        "fd = os.open('plain', os.O_RDONLY)\n"
        "attempt('chmod setuid', lambda: os.chmod('plain', 0o4755))\n"
        "attempt('chmod setgid', lambda: os.chmod('plain', 0o2755))\n"
        "attempt('fchmod setuid', lambda: os.fchmod(fd, 0o4755))\n"
        "attempt('chmod at setuid', lambda: os.chmod('plain', 0o4755, dir_fd=os.open('.', os.O_RDONLY)))\n"
        "attempt('create setuid', lambda: os.close(os.open('made', os.O_CREAT | os.O_WRONLY, 0o4755)))\n"
        "attempt('mknod setuid', lambda: os.mknod('node', stat.S_IFREG | 0o4755))\n"
        "attempt('chmod', lambda: os.chmod('plain', 0o750))\n"
        "attempt('create', lambda: os.close(os.open('made2', os.O_CREAT | os.O_WRONLY, 0o700)))\n"
        "attempt('open', lambda: os.close(os.open('plain', os.O_RDONLY)))\n"
        "tried"
    )
    assert result.status == "ok", result.text
    tried = eval(result.value or "{}")
    assert tried == {
        "chmod setuid": 1,
        "chmod setgid": 1,
        "fchmod setuid": 1,
        "chmod at setuid": 1,
        "create setuid": 1,
        "mknod setuid": 1,
        "chmod": "allowed",
        "create": "allowed",
        "open": "allowed",
    }, tried
    set_id = [path.name for path in tmp_path.iterdir() if path.stat().st_mode & 0o6000]
    assert set_id == []
    assert (tmp_path / "plain").stat().st_mode & 0o777 == 0o750


@pytest.mark.parametrize("how", ["workdir", "mount elsewhere"])
async def test_a_writable_folder_holding_the_interpreters_installation_leaves_it_read_only(
    make_runtime: MakeRuntime, tmp_path: Path, how: str
) -> None:
    # A project's folder holds its `.venv`, and `toolscript exec` shows the current folder
    # read-write: a `.pth` file planted there would run in the host's next Python, outside
    # any sandbox.
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(
        [os.path.realpath(sys.executable), "-m", "venv", "--without-pip", str(project / ".venv")],
        check=True,
        timeout=60,
    )
    [site] = (project / ".venv" / "lib").glob("python3*/site-packages")
    inside = Path("/data") if how == "mount elsewhere" else project
    knobs: dict[str, Any] = (
        {"mounts": {str(project): "/data:rw"}}
        if how == "mount elsewhere"
        else {"workdir": project, "mounts": {}}
    )
    runtime = await make_runtime(python=str(project / ".venv" / "bin" / "python"), **knobs)
    planted = inside / site.relative_to(project) / "planted.pth"
    result = await runtime.run(
        "outcome = []\n"
        f"for path in ({str(planted)!r}, {str(inside / 'notes.txt')!r}):\n"
        "    try:\n"
        "        open(path, 'w').write('import os')\n"
        "        outcome.append('written')\n"
        "    except OSError as error:\n"
        "        outcome.append(type(error).__name__)\n"
        "outcome"
    )
    assert (result.status, result.value) == ("ok", "['OSError', 'written']"), result.text
    assert not (site / "planted.pth").exists()
    assert (project / "notes.txt").read_text() == "import os"  # the folder itself is writable
