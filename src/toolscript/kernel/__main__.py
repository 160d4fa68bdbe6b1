"""Start a kernel: `python -I -m toolscript.kernel FD [CONFIG_JSON]`.

The host usually starts it with a bootstrap that loads this package from its folder under
the private name `toolscript_kernel` (see `toolscript.host.template`), so that the user's
Python needs nothing of toolscript installed.
"""

from __future__ import annotations

import gc
import importlib
import itertools
import json
import os
import resource
import socket
import sys
from typing import Any

_LIMITS = {
    "address_space": resource.RLIMIT_AS,
    "cpu_time": resource.RLIMIT_CPU,
    "processes": resource.RLIMIT_NPROC,
    "file_size": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
}


def apply_limits(limits: dict[str, Any]) -> None:
    """Lower this process's resource limits; a limit is never raised above its hard value."""
    for name, value in limits.items():
        which = _LIMITS.get(name)
        if which is None or value is None:
            continue
        _soft, hard = resource.getrlimit(which)
        wanted = int(value)
        if hard != resource.RLIM_INFINITY:
            wanted = min(wanted, hard)
        ceiling = wanted
        if which == resource.RLIMIT_CPU:
            # At the soft limit the OS sends SIGXCPU, which the result names as the CPU-time
            # limit; at the hard one, SIGKILL, which it cannot tell from a kill from outside.
            # Equal, the SIGKILL comes first: the hard limit is a second later.
            ceiling = wanted + 1 if hard == resource.RLIM_INFINITY else min(wanted + 1, hard)
        resource.setrlimit(which, (wanted, ceiling))


def close_inherited(keep: set[int]) -> None:
    """Close every file descriptor above 2 but `keep`.

    The host's event loop decides what a child inherits, and not every loop closes what it
    should (uvloop's spawn leaks descriptors of the host): the script must not reach the
    host's sockets, so the kernel closes whatever it was not meant to have, first thing.
    """
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = []
    if names:
        for name in names:
            fd = int(name)
            if fd > 2 and fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass  # the listing's own descriptor, closed already
        return
    top = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024
    edges = sorted({2, *keep, top})
    for low, high in itertools.pairwise(edges):
        os.closerange(low + 1, high)


def import_preload(names: list[Any]) -> list[list[str]]:
    """Import the `preload` modules; a failure is not fatal: it is returned, for the host
    (the kernel's `ready` says it), with the module's name."""
    failures: list[list[str]] = []
    for name in names:
        try:
            importlib.import_module(str(name))
        except BaseException as error:
            failures.append([str(name), f"{type(error).__name__}: {error}"[:500]])
    return failures


def main(argv: list[str]) -> None:
    fd = int(argv[0])
    close_inherited({fd})
    config: dict[str, Any] = json.loads(argv[1]) if len(argv) > 1 else {}
    channel = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    apply_limits(config.get("limits", {}))
    failures = import_preload(config.get("preload", []))
    # What the kernel loaded to get here lives as long as it does: out of the collector's
    # way (as in a forked kernel, whose template froze it), so that a full collection in a
    # busy script walks the script's objects, not the standard library's.
    gc.freeze()
    from .runner import Kernel  # not at the top: the template imports this module first

    kernel = Kernel(channel)
    kernel.preload_failures = failures
    kernel.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
