"""The kernel's own descriptors, kept out of a script's way and checked.

Goal: whatever a script does to file descriptors, its own result is truthful, and the next
run either works or starts on a fresh interpreter with a note that says why; nothing hangs.

What fails: the kernel's event loop lives on descriptors the script shares its process with:
the channel to the host, the selector's epoll, the loop's wake-up socket pair. A script that
closes or overwrites low descriptors (`os.closerange(3, 1024)`, `os.dup2(f, n)` over each, or
just `os.close` of the epoll) takes them away. The loop then fails on every pass, or sleeps
on an epoll that holds nothing of its own; the script was reported `ok`, and the next
script's `exec` was never read: an innocent run waited out its time limit and was reported
as a script that did not stop.

What we do:

- Each descriptor the kernel owns is moved to the top of the table, just under the
  open-files limit (at most `CEILING`), where a script's own files never land and a script
  that reuses low numbers does not reach. Placement alone is not enough: `close` reaches any
  number.
- What each one is gets remembered (its device and inode; for the selector, also that it
  still holds the loop's wake-up socket, since every epoll shares one anonymous inode), and
  checked when a script ends (before `done`), when a script arrives, when the loop fails,
  when a stop comes, and when the channel is lost: a few system calls per script, none per
  tool call.
- When one is broken the loop cannot be trusted. If the channel still works, the kernel
  says so in `done` (`broken`, in words) and waits for the host to end it (the host kills an
  interpreter that says this, so the word always arrives before the exit); if the channel is
  what broke, it exits at once with `BROKEN_EXIT`, which the host reads the same way.
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
from collections.abc import Callable

BROKEN_EXIT = 71
"""The exit code of a kernel that found its own descriptors closed or replaced."""

CEILING = 1024
"""The highest slot used, when the open-files limit is higher (each slot costs table room)."""


class OwnDescriptors:
    """The descriptors the kernel owns: moved to the top of the table, and checked."""

    def __init__(self) -> None:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        top = CEILING if soft == resource.RLIM_INFINITY else min(soft, CEILING)
        self._next = top - 1
        self._held: list[tuple[int, str, tuple[int, int], Callable[[], object] | None]] = []

    def place(self, fd: int, what: str) -> int:
        """A copy of `fd` at the highest free slot, not inherited, held as `what`; `fd` itself
        is left open for its owner to close. `fd` itself when no slot above it is free."""
        slot = self._next
        while slot > fd and _in_use(slot):
            slot -= 1
        if slot > fd:
            os.dup2(fd, slot, inheritable=False)
            self._next = slot - 1
            fd = slot
        self.hold(fd, what)
        return fd

    def hold(self, fd: int, what: str, probe: Callable[[], object] | None = None) -> None:
        """Check `fd` as `what` from now on (again, with `probe`, if held already): it must
        stay the same file; or, given `probe`, `probe()` must not raise (it is asked instead,
        and its errno says what became of `fd`: EBADF closed, ENOENT another of its kind)."""
        self._held = [entry for entry in self._held if entry[0] != fd]
        info = os.fstat(fd)
        self._held.append((fd, what, (info.st_dev, info.st_ino), probe))

    def damage(self) -> dict[int, str]:
        """Each held descriptor that is broken, with what became of it in words."""
        found: dict[int, str] = {}
        for fd, what, identity, probe in self._held:
            if probe is not None:
                try:
                    probe()
                except OSError as error:
                    found[fd] = f"fd {fd} ({what}) {_BECAME.get(error.errno or 0, _REPLACED)}"
                except ValueError:
                    found[fd] = f"fd {fd} ({what}) was closed"
                continue
            try:
                info = os.fstat(fd)
            except OSError:
                found[fd] = f"fd {fd} ({what}) was closed"
                continue
            if (info.st_dev, info.st_ino) != identity:
                found[fd] = f"fd {fd} ({what}) {_REPLACED}"
        return found


_REPLACED = "was replaced by another file"
_BECAME = {errno.EBADF: "was closed", errno.ENOENT: "was replaced by another one of its kind"}


def _in_use(fd: int) -> bool:
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
    except OSError:
        return False
    return True
