"""Helpers of the core runtime's behaviour tests (the runtimes come from `tests.conftest`)."""

from __future__ import annotations

import time
from pathlib import Path

from toolscript import Runtime


def wait_for_file_holding_the_loop(path: Path, timeout: float = 10.0) -> None:
    """Wait until `path` exists while holding the event loop, so the host reads no pipe."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout:g} s")
        time.sleep(0.002)


def kernel_pid(runtime: Runtime, shell: str = "default") -> int:
    """The pid of the kernel process behind a shell (it must have run a script)."""
    interpreter = runtime.shell(shell)._interpreter
    assert interpreter is not None
    pid = interpreter.kernel_pid()  # in a sandbox, not the pid the script sees
    assert pid is not None
    return pid
