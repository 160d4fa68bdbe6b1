"""One MCP client's session: its shell, its background scripts, and how to reach the client.

A session's background results stay retrievable by id for `keep_for` seconds after the
script ends, and at most `keep_count` ended ones are kept (the oldest go first); scripts still
running are always kept (the runtime bounds how many run at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..runtime import ScriptHandle, Shell

__all__ = ["Notifier", "Session"]


class Notifier(Protocol):
    """Where notifications to the client go: the SDK's `Connection` has this method."""

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send one notification; best effort, never raises."""


@dataclass
class _Tracked:
    handle: ScriptHandle
    started: float
    ended: float | None = None


class Session:
    """An MCP client session's shell and background scripts."""

    def __init__(self, shell: Shell, *, keep_for: float, keep_count: int) -> None:
        self.shell = shell
        self.keep_for = keep_for
        self.keep_count = keep_count
        self.notifier: Notifier | None = None
        self.closed = False
        self.abandoned: asyncio.Task[Any] | None = None
        """The last foreground run the client gave up on, while the runtime stops it."""
        self._scripts: OrderedDict[str, _Tracked] = OrderedDict()

    @property
    def name(self) -> str:
        """The shell's name, which the journal records with every script and call."""
        return self.shell.name

    def track(self, handle: ScriptHandle) -> None:
        """Keep a background script findable by its id."""
        self._forget_old()
        self._scripts[handle.id] = _Tracked(handle, time.monotonic())
        if handle.status() != "running":
            self.ended(handle.id)

    def ended(self, script_id: str) -> None:
        """Note that a tracked script ended (its retention clock starts)."""
        tracked = self._scripts.get(script_id)
        if tracked is not None and tracked.ended is None:
            tracked.ended = time.monotonic()
        self._forget_old()

    def find(self, script_id: str) -> tuple[ScriptHandle, float] | None:
        """The handle of a background script and the seconds since it started, if still kept."""
        self._forget_old()
        tracked = self._scripts.get(script_id)
        if tracked is None:
            return None
        return tracked.handle, time.monotonic() - tracked.started

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send a notification to the client, if it can still be reached."""
        notifier = self.notifier
        if notifier is not None and not self.closed:
            await notifier.notify(method, params)

    async def close(self) -> None:
        """Cancel its running background scripts and stop its interpreter. Bounded."""
        if self.closed:
            return
        self.closed = True
        for tracked in list(self._scripts.values()):
            if tracked.handle.status() == "running":
                with contextlib.suppress(Exception):
                    await tracked.handle.cancel("the MCP client's session ended")
        self._scripts.clear()
        await self.shell.close()

    def _forget_old(self) -> None:
        now = time.monotonic()
        ended = sorted(
            (tracked.ended, script_id)
            for script_id, tracked in self._scripts.items()
            if tracked.ended is not None
        )
        too_many = max(0, len(ended) - self.keep_count)
        for number, (when, script_id) in enumerate(ended):
            if number < too_many or now - when > self.keep_for:
                del self._scripts[script_id]
