"""The command line that starts a kernel module under a chosen Python.

Standard library only, and no asyncio: the command line's head start (`headstart`) builds
this command before the host has imported anything heavy.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sandbox import Sandbox

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernel"

# Loads the kernel folder as a standalone package named `toolscript_kernel` and runs one of
# its modules' `main`: the chosen Python needs nothing of toolscript installed, and never
# imports the host's modules. `-I` ignores PYTHONPATH; the interpreter's environment is
# already scrubbed, so a PYTHONPATH there was set by the caller (`Runtime(env=...)`) on
# purpose, and is honoured.
BOOTSTRAP = (
    "import sys, os, importlib, importlib.util as u\n"
    "sys.path[:0] = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]\n"
    "s = u.spec_from_file_location('toolscript_kernel', sys.argv[1] + '/__init__.py',"
    " submodule_search_locations=[sys.argv[1]])\n"
    "m = u.module_from_spec(s); sys.modules['toolscript_kernel'] = m; s.loader.exec_module(m)\n"
    "importlib.import_module('toolscript_kernel.' + sys.argv[2]).main(sys.argv[3:])\n"
)


def kernel_command(python: str, entry: str, *args: str) -> list[str]:
    """The command line that runs `toolscript_kernel.<entry>.main(args)` under `python`; the
    kernel's bytecode is brought up to date first (`compile_kernel`)."""
    compile_kernel()
    return [python, "-I", "-c", BOOTSTRAP, str(KERNEL_DIR), entry, *args]


def template_command(
    python: str,
    preload: Sequence[str],
    sandbox: Sandbox | None,
    control: str,
    *,
    kept: bool,
    alone: bool = False,
    cgroup: str | None = None,
) -> list[str]:
    """The command that starts a template whose control socket is descriptor `control`;
    `kept`: a keeper starts it, and its unconfined kernels die with it; `alone`: it will fork
    a single kernel; `cgroup`: that kernel's cgroup (under the sandbox's), which the template
    moves into as it starts."""
    settings: dict[str, Any] = {"preload": list(preload)}
    if sandbox is not None:
        settings["sandbox"] = sandbox.template_config()
        if cgroup is not None:
            settings["cgroup"] = cgroup
    if alone:
        settings["alone"] = True
    if kept:
        settings["kept"] = True
    command = kernel_command(python, "template", control, json.dumps(settings))
    return sandbox.command(command) if sandbox is not None else command


_kernel_compiled = False
"""Whether this process has looked at the kernel's bytecode (once is enough)."""


def compile_kernel() -> None:
    """Compile the kernel's modules if their bytecode is missing or older than their source.

    The sandboxed interpreter reads the kernel from a folder it cannot write, so it can never
    cache the bytecode itself; without it, every interpreter that starts (not forks) compiles
    the kernel from source. Python writes it on import unless told not to
    (`PYTHONDONTWRITEBYTECODE`); this writes it once either way, as an install would. A
    folder that cannot be written is left as it is.
    """
    global _kernel_compiled
    if _kernel_compiled:
        return
    _kernel_compiled = True
    import importlib.util

    try:
        probe = KERNEL_DIR / "runner.py"
        cached = Path(importlib.util.cache_from_source(str(probe)))
        if cached.stat().st_mtime >= probe.stat().st_mtime:
            return
    except (OSError, NotImplementedError, ValueError):
        pass
    import compileall

    with contextlib.suppress(Exception):
        compileall.compile_dir(KERNEL_DIR, quiet=2)
