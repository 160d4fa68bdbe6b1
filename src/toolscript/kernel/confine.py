"""Confinement inside the sandbox: namespaces, mounts, capabilities and a seccomp filter.

One concept, though over 500 lines: each confinement step (namespaces, mounts, capabilities,
the seccomp filter) with the system calls it needs, in one standard-library module that the
kernel loads before it trusts anything else.

The host starts the template under bubblewrap (see `toolscript.host.sandbox`), which gives it
a read-only view of what Python needs, no network, and its own user, PID, IPC and UTS
namespaces. This module does the rest, per interpreter, with the standard library only
(`ctypes` for the system calls Python 3.11 does not wrap):

- `unshare`/`setns`, so each interpreter is PID 1 of its own PID namespace (its `init`) with its
  own mount namespace: a private `/tmp`, its own `/proc`, and only its own shell's folder;
- `mount`/`umount2`, to put that folder in place and take the folder of every other shell out;
- `private_namespaces`, so that what one interpreter leaves in the sandbox's shared parts
  reaches no other: its own IPC namespace (System V memory, semaphores and queues, POSIX
  queues), network namespace (loopback ports and abstract Unix sockets; not with
  `network=True`, which shares the host's), a `/dev/shm` and `/dev/pts` of its own and `/dev`
  read-only;
- `lock_down`, which every kernel calls before it runs any script: a user namespace of its
  own (any capability left is then good only there, where it owns nothing), every capability
  dropped from all sets and from the bounding set, `no_new_privs`, and a seccomp filter
  that refuses the calls a script could use to reach past its sandbox (ptrace,
  process_vm_*, mount and the new mount API, unshare/setns, namespace flags to clone,
  module and kexec loading, keyctl, bpf, perf_event_open, io_uring, ...) and any that would
  set a file's setuid or setgid bit.

Each step raises `ConfineError` with the failing call's name; a kernel that cannot lock
itself down never serves a script.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_NAMESPACE_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
)

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_SECCOMP = 22
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECCOMP_MODE_FILTER = 2
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, and their locks.
_SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_CAP_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class ConfineError(OSError):
    """A confinement step failed; the message names the call."""


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise ConfineError(number, f"{what}: {os.strerror(number)}")
    return result


def unshare(flags: int) -> None:
    """`unshare(2)` (Python 3.11 has no `os.unshare`)."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, kind: int) -> None:
    """`setns(2)`: join the namespace that `fd` refers to."""
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(kind)), "setns")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    """`mount(2)`."""
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype is not None else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def umount(target: str) -> None:
    """Detach the mount at `target` (lazily, as `umount -l` does)."""
    _check(_libc.umount2(target.encode(), ctypes.c_int(MNT_DETACH)), f"umount {target}")


_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the interface's name, then its flags (40 bytes)


def private_namespaces(network: bool) -> None:
    """Give this process (and what it forks) an IPC namespace of its own, a network
    namespace of its own with its loopback up unless `network`, a private `/dev/shm` and
    `/dev/pts`, and a
    read-only `/dev`. Call in a mount namespace of its own, with the capabilities to mount."""
    unshare(CLONE_NEWIPC | (0 if network else CLONE_NEWNET))
    if not network:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            asked = struct.pack(_IFREQ, b"lo", 0)
            flags = struct.unpack(_IFREQ, fcntl.ioctl(probe, _SIOCGIFFLAGS, asked))[1]
            fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
    if os.path.isdir("/dev/shm"):
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=50%")
    if os.path.isdir("/dev/pts"):
        # Its own terminals: another shell's (`pty.spawn`, pexpect) can be neither read nor
        # typed into, and no interpreter takes more than `max` of the machine's.
        data = "newinstance,ptmxmode=0666,mode=0620,max=256"
        mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, data)
    # Devices stay usable: writing to a device node is no write to the mount that holds it.
    mount("none", "/dev", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def bind(source: str, target: str, *, writable: bool) -> None:
    """Bind `source` on `target`, read-only unless `writable`, never with devices or setuid."""
    mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY)
    mount("none", target, None, flags)


def own_user_namespace() -> None:
    """Move into a user namespace of our own, mapping our uid and gid to themselves.

    Capabilities held after this are good only in the new namespace, which owns no mount,
    network or PID namespace: the ones we are in belong to the namespace above. And a
    process limit (`RLIMIT_NPROC`) is counted per user namespace, so per interpreter.
    """
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")


def drop_capabilities() -> None:
    """Drop every capability: bounding set, ambient set, then effective, permitted and
    inheritable; lock the secure bits so that uid 0 gains nothing back on `execve`."""
    last = _last_capability()
    # Best effort while we still can: locking needs CAP_SETPCAP, which we may not hold.
    _libc.prctl(_PR_SET_SECUREBITS, ctypes.c_ulong(_SECUREBITS), 0, 0, 0)
    for cap in range(last + 1):
        _libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)
    _libc.prctl(_PR_CAP_AMBIENT, ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    header = struct.pack("Ii", _CAP_VERSION_3, 0)
    data = bytes(24)  # two zeroed {effective, permitted, inheritable} sets
    _check(_libc.capset(header, data), "capset")


def no_new_privileges() -> None:
    """`PR_SET_NO_NEW_PRIVS`: no `execve` can gain privileges (setuid bits, file caps)."""
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def lock_down() -> None:
    """Everything a kernel does before it serves a script (see the module's docstring)."""
    own_user_namespace()
    drop_capabilities()
    no_new_privileges()
    install_seccomp()


def capabilities_in_effect() -> int:
    """The effective capability set, as `/proc/self/status` shows it (0 once locked down)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return -1


# -- seccomp ---------------------------------------------------------------------------------

# Each architecture's number for the calls refused (EPERM). `clone` is refused only with a
# namespace flag; `clone3` answers ENOSYS, so the C library falls back to `clone`, whose
# flags a filter can read.
_DENIED = [
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "swapon",
    "swapoff",
    "reboot",
    "open_by_handle_at",
    "name_to_handle_at",
    "userfaultfd",
    "acct",
    "syslog",
    "quotactl",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "iopl",
    "ioperm",
    "uselib",
    "_sysctl",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
]

# The new mount API's calls came after Linux 5.1, since when a call has one number on every
# architecture.
_NEW_MOUNT_API = {
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}

# Calls with the same number everywhere since they came (after Linux 5.1).
_COMMON = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "openat2": 437,
    "fchmodat2": 452,
}

# Goal: a file the script makes on a writable mount (its folder, a "rw" mount) can never
# give anyone more rights than they have. What fails: the mounts' `nosuid`, which holds
# only inside the sandbox: when the host runs as root, the script's files are root's on
# the host, and a script could make one setuid (`chmod 4755`), for any user there to run
# as root. What we do: refuse (EPERM) every call that sets a file's setuid or setgid bit,
# by its mode argument: the chmod calls always, the calls that make a file when they make
# one (`O_CREAT`, `O_TMPFILE`). `openat2`, whose mode is in a structure a filter cannot
# read, answers ENOSYS, and the C library falls back to `openat`; io_uring, which opens
# files without these calls, is refused whole.
_SET_ID_BITS = 0o6000
_MAKES_A_FILE = 0o100 | 0o20000000  # O_CREAT, and O_TMPFILE's own bit

# Per architecture: call -> (the argument holding the mode, the one holding the flags that
# say whether the call makes a file, or None when it always uses the mode).
_MODE_ARGUMENTS: dict[str, dict[str, tuple[int, int | None]]] = {
    "x86_64": {
        "chmod": (1, None),
        "fchmod": (1, None),
        "fchmodat": (2, None),
        "fchmodat2": (2, None),
        "mknod": (1, None),
        "mknodat": (2, None),
        "creat": (1, None),
        "open": (2, 1),
        "openat": (3, 2),
    },
    "aarch64": {
        "fchmod": (1, None),
        "fchmodat": (2, None),
        "fchmodat2": (2, None),
        "mknodat": (2, None),
        "openat": (3, 2),
    },
}

_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "unshare": 272,
        "setns": 308,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "bpf": 321,
        "perf_event_open": 298,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "userfaultfd": 323,
        "acct": 163,
        "syslog": 103,
        "quotactl": 179,
        "settimeofday": 164,
        "clock_settime": 227,
        "clock_adjtime": 305,
        "adjtimex": 159,
        "vhangup": 153,
        **_NEW_MOUNT_API,
        "iopl": 172,
        "ioperm": 173,
        "uselib": 134,
        "_sysctl": 156,
        **_COMMON,
        "chmod": 90,
        "fchmod": 91,
        "fchmodat": 268,
        "mknod": 133,
        "mknodat": 259,
        "creat": 85,
        "open": 2,
        "openat": 257,
        "clone": 56,
        "clone3": 435,
    },
    "aarch64": {
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "unshare": 97,
        "setns": 268,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "bpf": 280,
        "perf_event_open": 241,
        "swapon": 224,
        "swapoff": 225,
        "reboot": 142,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "userfaultfd": 282,
        "acct": 89,
        "syslog": 116,
        "quotactl": 60,
        "settimeofday": 170,
        "clock_settime": 112,
        "clock_adjtime": 266,
        "adjtimex": 171,
        "vhangup": 58,
        **_NEW_MOUNT_API,
        **_COMMON,
        "fchmod": 52,
        "fchmodat": 53,
        "mknodat": 33,
        "openat": 56,
        "clone": 220,
        "clone3": 435,
    },
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JSET_K = 0x45
_BPF_JGE_K = 0x35
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_EPERM = 1
_ENOSYS = 38
_X32_BIT = 0x40000000


def _filter(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter's instructions, `(code, jt, jf, k)`; offsets of `seccomp_data`: nr 0,
    arch 4, args from 16 (the low half of args[0] at 16 on little-endian machines)."""
    numbers = _NUMBERS[machine]
    program: list[tuple[int, int, int, int]] = [
        (_BPF_LD_W_ABS, 0, 0, 4),
        (_BPF_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
        (_BPF_RET_K, 0, 0, _RET_KILL_PROCESS),  # another ABI's numbers mean other calls
        (_BPF_LD_W_ABS, 0, 0, 0),
    ]
    if machine == "x86_64":
        program += [(_BPF_JGE_K, 0, 1, _X32_BIT), (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM)]
    program += [
        (_BPF_JEQ_K, 0, 1, numbers["clone3"]),
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _ENOSYS),
        (_BPF_JEQ_K, 0, 4, numbers["clone"]),
        (_BPF_LD_W_ABS, 0, 0, 16),
        (_BPF_JSET_K, 0, 1, _NAMESPACE_FLAGS),
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM),
        (_BPF_RET_K, 0, 0, _RET_ALLOW),
    ]
    program += [(_BPF_JEQ_K, 0, 1, numbers["openat2"]), (_BPF_RET_K, 0, 0, _RET_ERRNO | _ENOSYS)]
    for name, (mode, flags) in _MODE_ARGUMENTS[machine].items():
        program += _refuse_set_id_bits(numbers[name], mode, flags)
    denied = sorted({numbers[name] for name in _DENIED if name in numbers})
    for number in denied:
        program += [(_BPF_JEQ_K, 0, 1, number), (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM)]
    program.append((_BPF_RET_K, 0, 0, _RET_ALLOW))
    return program


def _refuse_set_id_bits(
    number: int, mode: int, flags: int | None
) -> list[tuple[int, int, int, int]]:
    """Instructions that refuse call `number` when the mode in its argument `mode` has the
    setuid or setgid bit (only if its argument `flags` says it makes a file, when given),
    allow it otherwise, and fall through, the call's number still loaded, for other calls."""
    check = [
        (_BPF_LD_W_ABS, 0, 0, 16 + 8 * mode),
        (_BPF_JSET_K, 0, 1, _SET_ID_BITS),
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM),
        (_BPF_RET_K, 0, 0, _RET_ALLOW),
    ]
    if flags is not None:
        # A call that makes no file ignores its mode: allowed, whatever the register holds.
        check = [(_BPF_LD_W_ABS, 0, 0, 16 + 8 * flags), (_BPF_JSET_K, 0, 3, _MAKES_A_FILE), *check]
    return [(_BPF_JEQ_K, 0, len(check), number), *check]


def seccomp_supported() -> bool:
    """Whether this machine's architecture has a filter here."""
    return os.uname().machine in _NUMBERS


def install_seccomp() -> None:
    """Install the filter for this process and every process it starts; needs
    `no_new_privs` (or CAP_SYS_ADMIN)."""
    machine = os.uname().machine
    if machine not in _NUMBERS:
        raise ConfineError(0, f"seccomp: no filter for the {machine} architecture")
    program = _filter(machine)
    instructions = b"".join(struct.pack("HBBI", *item) for item in program)
    buffer = ctypes.create_string_buffer(instructions, len(instructions))

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Program(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    _check(
        _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "prctl(SECCOMP)",
    )


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as file:
            return int(file.read())
    except (OSError, ValueError):
        return 40


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
