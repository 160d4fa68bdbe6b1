"""What an interpreter inherits from the host: a scrubbed environment and resource limits.

The script is untrusted, and the host's environment holds secrets (API keys, tokens). The
interpreter gets only the variables on an allowlist, plus what the caller passes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ALLOWED_VARIABLES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "TERM",
)
"""Variables the interpreter inherits from the host when they are set."""

GIB = 1024**3

DEFAULT_LIMITS: dict[str, int | None] = {
    "address_space": 8 * GIB,
    "cpu_time": None,
    "processes": 1024,
    "file_size": 1 * GIB,
    "open_files": 1024,
}
"""Resource limits per interpreter: bytes, CPU seconds (cumulative over the interpreter's life,
so off by default), processes of the user, bytes per file, open files. `None` leaves the
host's own limit."""


def scrubbed_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of the host's environment, plus `extra`."""
    env = {name: os.environ[name] for name in ALLOWED_VARIABLES if name in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    if extra:
        env.update(extra)
    return env


def interpreter_environment(extra: Mapping[str, str], sandboxed: bool) -> dict[str, str]:
    """An interpreter's environment: the scrubbed host environment plus `extra`; in a sandbox,
    HOME and TMPDIR are its own /tmp unless `extra` sets them (the host's home and temporary
    folder are not in the sandbox; its /tmp is, private and writable, where libraries look
    for a home to keep caches in)."""
    env = scrubbed_environment(extra)
    if sandboxed:
        for name in ("HOME", "TMPDIR"):
            if name not in extra:
                env[name] = "/tmp"
    return env


def resolve_limits(overrides: Mapping[str, int | None] | None) -> dict[str, int | None]:
    """The default limits with the caller's overrides; an unknown name is a `ValueError`."""
    limits = dict(DEFAULT_LIMITS)
    for name, value in (overrides or {}).items():
        if name not in DEFAULT_LIMITS:
            known = ", ".join(DEFAULT_LIMITS)
            raise ValueError(f"limits: unknown limit {name!r}; the known ones are {known}")
        if value is not None and (type(value) is not int or value <= 0):
            raise ValueError(f"limits: {name} must be a positive whole number or None")
        limits[name] = value
    return limits
