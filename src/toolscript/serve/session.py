"""One MCP client's session: its actions (its shell and background scripts), and how to reach
the client.

A session's background results stay retrievable by id for `keep_results_for` seconds after
the script ends, and at most `keep_results` ended ones are kept (the oldest go first); scripts
still running are always kept (the runtime bounds how many run at once). `toolscript.actions`
keeps them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..actions import Actions, Answer
from ..results import SHELL_CLOSING
from ..runtime import Shell

__all__ = ["KEPT_NOTE", "RESTARTED_NOTE", "Notifier", "Session"]

RESTARTED_NOTE = (
    "Note: toolscript serve restarted since this session's last run, and this shell's "
    "interpreter did not outlive the restart: variables, imports and functions defined "
    "before are gone."
)
"""What the first run after a session was taken back by a restarted server says first, when
its shell's interpreter is a new one."""

KEPT_NOTE = (
    "Note: toolscript serve restarted since this session's last run, and this shell's "
    "interpreter was kept through the restart: variables, imports and functions defined "
    "before are still there."
)
"""What it says first instead when the interpreter the shell had before the restart ran it
(the server keeps its interpreters: `--keep-interpreters`)."""


class Notifier(Protocol):
    """Where notifications to the client go: the SDK's `Connection` has this method."""

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send one notification; best effort, never raises."""


class Session:
    """An MCP client session's shell, and the actions it takes on it. `recall` answers for
    background scripts it started before the server restarted (`serve.past`)."""

    def __init__(
        self,
        shell: Shell,
        *,
        max_time_limit: float,
        keep_for: float,
        keep_count: int,
        recall: Callable[[str], Answer | None] | None = None,
    ) -> None:
        self.shell = shell
        self.actions = Actions(
            shell,
            max_time_limit=max_time_limit,
            keep_for=keep_for,
            keep_count=keep_count,
            recall=recall,
        )
        self.notifier: Notifier | None = None
        self.closed = False
        self.abandoned: asyncio.Task[Any] | None = None
        """The last foreground run the client gave up on, while the runtime stops it."""
        self.restarted = False
        """The server restarted since this session's shell last ran (a session taken back):
        the next run's answer says whether the variables set before are still there."""
        self._kept_generation: int | None = None

    @property
    def name(self) -> str:
        """The shell's name, which the journal records with every script and call."""
        return self.shell.name

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send a notification to the client, if it can still be reached."""
        notifier = self.notifier
        if notifier is not None and not self.closed:
            await notifier.notify(method, params)

    def came_back(self) -> None:
        """A restarted server took this session back: its next run's answer says so. A shell
        whose interpreter the runtime took back from its keeper has a generation already."""
        self.restarted = True
        self._kept_generation = self.shell.generation or None

    def tell_restart(self, answer: Answer) -> Answer:
        """`answer`, saying first, once, that the server restarted since the shell last ran,
        and whether the variables set before are still there: only if the run was in the
        interpreter the shell had before (a refusal is passed as it is)."""
        if not self.restarted or answer.data is None:
            return answer
        self.restarted = False
        kept = self._kept_generation is not None and (
            answer.data.get("generation") == self._kept_generation
        )
        return dataclasses.replace(
            answer,
            text=f"{KEPT_NOTE if kept else RESTARTED_NOTE}\n\n{answer.text}",
            data={**answer.data, "server_restarted": True, "variables_kept": kept},
        )

    async def close(self, reason: str = "the MCP client's session ended") -> None:
        """Cancel its running background scripts, giving `reason`, and stop its
        interpreter. Bounded."""
        if self.closed:
            return
        self.closed = True
        # Nobody cancelled its scripts: what they ran in is closing, and their notes say so.
        stopped = f"{SHELL_CLOSING} because {reason}"
        await self.actions.close(stopped)
        await self.shell.close(stopped)
