"""`Settings`: every knob of a `Runtime`, each a field with a default, a type and one line.

`Runtime(grace=1.0, ...)` takes the knobs as keyword arguments and keeps them in
`rt.settings`. A bad value raises `ValueError` naming the knob, when the settings are made.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar, overload

from .host.busypoll import DEFAULT_WINDOW
from .host.environment import resolve_limits
from .host.sandbox import Mount, parse_mounts
from .results import TEXT_LIMIT

__all__ = ["Settings"]

MountsMapping = Mapping[str, str] | Mapping[Path, str] | Mapping[str | Path, str]
"""`Runtime(mounts=...)`: host paths, as `str` or `Path`, to how each is shown. (A union: a
`Mapping` is invariant in its keys, so `Mapping[str | Path, str]` alone refuses a
`dict[str, str]`.)"""

CHECK_MODES = ("refuse", "warn", "off")
"""The values of `Settings.check`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """How a `Runtime` runs scripts. Immutable; every field has a default."""

    python: str = sys.executable
    """The Python that scripts run under (default: the one running the host)."""
    state_dir: str | Path | None = None
    """Where logs and the journal live; None: `$TOOLSCRIPT_STATE`, else the user state folder."""
    journal: str | Path | None = None
    """The journal's file, or `":memory:"`; None: `state_dir/journal.sqlite3`."""
    default_time_limit: float = 30.0
    """Seconds a script may run when its run does not say."""
    max_time_limit: float = 600.0
    """The largest `time_limit` a run may ask for, in seconds."""
    grace: float = 5.0
    """Seconds between a stop's interrupt and the kill of an interpreter that did not stop."""
    tool_timeout: float | None = 60.0
    """Seconds a tool call may take unless the tool sets its own; None: no bound."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables for the interpreter, over the allow-listed part of the host's environment."""
    limits: Mapping[str, int | None] = field(default_factory=dict)
    """Resource limits over `toolscript.host.environment.DEFAULT_LIMITS` (completed from it)."""
    output_limit: int = 1_000_000
    """Bytes of each stream the host keeps per script: its head and its tail."""
    text_limit: int = TEXT_LIMIT
    """Characters of `ScriptResult.text`."""
    max_images: int = 8
    """Images a result carries at most (`show()` in the script); the rest are dropped, said."""
    image_limit: int = 5_000_000
    """Bytes of images a result carries at most, in all."""
    start_timeout: float = 20.0
    """Seconds an interpreter has to become ready."""
    preload: Sequence[str] = ()
    """Modules every interpreter starts with imported (the template imports them once)."""
    fork: bool = True
    """Fork interpreters from a template where the system can, else start each afresh."""
    pool_size: int = 2
    """Interpreters kept started and ready for new shells (at most `max_interpreters`)."""
    max_interpreters: int = 64
    """Live interpreters at once, shells' and background scripts'."""
    queue_timeout: float = 30.0
    """Seconds a request over `max_interpreters` waits for a place before it is refused."""
    max_background: int = 8
    """Background scripts running at once; one more is refused."""
    idle_timeout: float | None = 900.0
    """Seconds after which an idle shell's interpreter is reclaimed; None: never."""
    log_limit: int = 64 * 1024 * 1024
    """Bytes of a background script's log file."""
    busy_poll: float = DEFAULT_WINDOW
    """Seconds host and kernel poll for a due reply before they sleep, when a core is spare;
    0: off (see `toolscript.host.busypoll`)."""
    sandbox: str = "auto"
    """"auto": an OS sandbox where the machine allows one; "required": refuse without; "off"."""
    network: bool = False
    """Share the host's network with the sandbox."""
    mounts: MountsMapping = field(default_factory=dict)
    """More of the host shown in the sandbox: `{host_path: "ro" | "rw" | "/path" | "/path:rw"}`."""
    workdir: str | Path | None = None
    """A host folder every shell works in, read-write; None: a private folder per shell."""
    check: str = "warn"
    """The check before running: "warn" (findings first in the text), "refuse" or "off"."""
    keep_interpreters: bool = False
    """Have a keeper process own the interpreters, so shells outlive a host that dies."""
    reattach_window: float = 60.0
    """Seconds a keeper holds a dead host's interpreters for the next host to take back."""
    _mounts: tuple[Mount, ...] = field(init=False, repr=False, compare=False)
    # `mounts` checked and resolved once, when the settings are made (as the runtime did).

    def __post_init__(self) -> None:
        positive_seconds("default_time_limit", self.default_time_limit)
        positive_seconds("max_time_limit", self.max_time_limit)
        positive_seconds("grace", self.grace)
        positive_seconds("tool_timeout", self.tool_timeout, allow_none=True)
        positive_seconds("start_timeout", self.start_timeout)
        if self.default_time_limit > self.max_time_limit:
            raise ValueError(
                f"default_time_limit ({self.default_time_limit:g} s) is over "
                f"max_time_limit ({self.max_time_limit:g} s)"
            )
        if type(self.output_limit) is not int or self.output_limit < 1024:
            raise ValueError("output_limit must be a whole number of bytes, at least 1024")
        if type(self.text_limit) is not int or self.text_limit < 1000:
            raise ValueError("text_limit must be a whole number of characters, at least 1000")
        positive_seconds("queue_timeout", self.queue_timeout)
        positive_seconds("reattach_window", self.reattach_window)
        if type(self.busy_poll) not in (int, float) or not 0 <= self.busy_poll <= 0.01:
            raise ValueError("busy_poll must be a number of seconds from 0 to 0.01")
        positive_seconds("idle_timeout", self.idle_timeout, allow_none=True)
        for knob, value, least in (
            ("pool_size", self.pool_size, 0),
            ("max_interpreters", self.max_interpreters, 1),
            ("max_background", self.max_background, 0),
            ("log_limit", self.log_limit, 0),
            ("max_images", self.max_images, 0),
            ("image_limit", self.image_limit, 0),
        ):
            if type(value) is not int or value < least:
                raise ValueError(f"{knob} must be a whole number, at least {least}")
        if self.sandbox not in ("auto", "required", "off"):
            raise ValueError(f"sandbox must be 'auto', 'required' or 'off', not {self.sandbox!r}")
        if self.check not in CHECK_MODES:
            raise ValueError(f"check must be 'refuse', 'warn' or 'off', not {self.check!r}")
        for knob, flag in (
            ("network", self.network),
            ("fork", self.fork),
            ("keep_interpreters", self.keep_interpreters),
        ):
            if not isinstance(flag, bool):  # "false" from a config file is not False
                raise ValueError(f"{knob} must be True or False, not {flag!r}")
        if isinstance(self.python, Path):  # a path is what this knob names; it worked so
            object.__setattr__(self, "python", str(self.python))
        if not isinstance(self.python, str) or not self.python:
            raise ValueError(f"python must be the path of a Python executable, not {self.python!r}")
        for knob, mapping in (("env", self.env), ("limits", self.limits), ("mounts", self.mounts)):
            if mapping is not None and not isinstance(mapping, Mapping):
                raise ValueError(f"{knob} must be a mapping (a dict), not {type(mapping).__name__}")
        for knob, where in (
            ("state_dir", self.state_dir),
            ("journal", self.journal),
            ("workdir", self.workdir),
        ):
            if where is not None and not isinstance(where, str | Path):
                raise ValueError(f"{knob} must be a path, not {where!r}")
        if isinstance(self.preload, str | bytes) or not isinstance(self.preload, Iterable):
            raise ValueError(
                f"preload must be a list of module names, not {self.preload!r}"
                + (f": preload=[{self.preload!r}] for one" if isinstance(self.preload, str) else "")
            )
        mounts = tuple(parse_mounts(self.mounts))
        workdir = self.workdir
        if workdir is not None:
            workdir = Path(workdir).expanduser().resolve()
            if not workdir.is_dir():
                raise ValueError(f"workdir: {str(workdir)!r} is not a folder")
        for variable, setting in dict(self.env or {}).items():
            if not isinstance(variable, str) or not isinstance(setting, str):
                raise ValueError(
                    f"env: {variable!r}: {setting!r}: names and values must be strings"
                )
            if not variable or "=" in variable or "\0" in variable or "\0" in setting:
                raise ValueError(f"env: {variable!r} is not a variable's name and value")
        preload = tuple(self.preload)
        for module in preload:
            if not isinstance(module, str) or not module.replace(".", "_").isidentifier():
                raise ValueError(f"preload: {module!r} is not a module name")
        normal: dict[str, object] = {
            "_mounts": mounts,
            "workdir": workdir,
            "preload": preload,
            "state_dir": (
                Path(self.state_dir).expanduser().absolute() if self.state_dir is not None else None
            ),
            "default_time_limit": float(self.default_time_limit),
            "max_time_limit": float(self.max_time_limit),
            "grace": float(self.grace),
            "env": dict(self.env or {}),
            "limits": resolve_limits(self.limits),
            "start_timeout": float(self.start_timeout),
            "fork": bool(self.fork),
            "queue_timeout": float(self.queue_timeout),
            "busy_poll": float(self.busy_poll),
        }
        for name, normalized in normal.items():
            object.__setattr__(self, name, normalized)  # frozen: here alone values are normalized

    @property
    def sandbox_mounts(self) -> list[Mount]:
        """`mounts`, checked and resolved: what the sandbox shows of the host."""
        return list(self._mounts)


def positive_seconds(name: str, value: float | None, *, allow_none: bool = False) -> None:
    """Raise `ValueError` naming `name` unless `value` is a positive, finite number."""
    if value is None and allow_none:
        return
    if (
        value is None
        or isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a positive, finite number of seconds, not {value!r}")


def output_limit(limit: object, default: int) -> int:
    """The characters an `output(limit)` call may show: `default` for None; raises
    `TypeError`/`ValueError` for anything but a whole number of at least 0."""
    if limit is None:
        return default
    if type(limit) is not int:
        raise TypeError(f"limit must be a whole number of characters or None, not {limit!r}")
    if limit < 0:
        raise ValueError(f"limit must be at least 0 characters, not {limit}")
    return limit


T = TypeVar("T")


class SupportsSettings(Protocol):
    """An object configured by `Settings`, such as a `Runtime`."""

    @property
    def settings(self) -> Settings: ...


class Knob(Generic[T]):
    """An attribute that reads the field of the same name in its object's `settings`:
    `rt.grace` is `rt.settings.grace`. Read-only."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Knob[T]: ...
    @overload
    def __get__(self, instance: SupportsSettings, owner: type) -> T: ...
    def __get__(self, instance: SupportsSettings | None, owner: type) -> T | Knob[T]:
        if instance is None:
            return self
        value: T = getattr(instance.settings, self._name)
        return value

    def __set__(self, instance: SupportsSettings, value: object) -> None:
        # A data descriptor: an assignment would otherwise shadow the knob on the instance,
        # which would read the new value while the runtime goes on with its settings.
        raise AttributeError(
            f"{self._name} is read-only: it is set when the runtime is made "
            f"(Runtime({self._name}=...))"
        )
