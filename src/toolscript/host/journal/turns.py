"""The agent's turns in the journal: what a turn has said and done, saved as it goes, so that
a turn whose process died can be taken up again by another.

A turn is one row of `turns`, written through once per change of the turn (a step begun, a
reply, a tool call begun or answered), each write its own transaction. The row holds the
messages as the model is sent them, the turn's clocks as they were counted (`steps`,
`step_cap`, `elapsed`) and the rest of its state as the agent gives it (JSON). Turns change a
few times per model request, so these writes go straight to SQLite, not through the call
buffer: when `save` returns, a kill of the process cannot lose it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .schema import _Transaction


@dataclass(frozen=True, slots=True)
class JournalTurn:
    """One agent turn as the journal knows it.

    `messages` is the history the model is sent; `state` the rest the agent saved. `steps`,
    `step_cap` and `elapsed` are the turn's clocks when it was last saved. `ended_at` and
    `stop_reason` are `None` until it ends. `held_elsewhere` is true when a process that is
    still alive (another than this one) has the turn.
    """

    turn_id: str
    task: str
    model: str
    shell: str
    started_at: float
    saved_at: float
    ended_at: float | None
    stop_reason: str | None
    steps: int
    step_cap: int
    elapsed: float
    messages: list[dict[str, Any]]
    state: dict[str, Any]
    held_elsewhere: bool


_COLUMNS = (
    "turn_id, task, model, shell, started_at, saved_at, ended_at, stop_reason, steps, "
    "step_cap, elapsed, messages, state, host_id"
)


class TurnRecords:
    """The journal's record of agent turns (`Journal.turns`)."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        lock: threading.Lock,
        host_id: int,
        check_open: Callable[[], None],
    ) -> None:
        """Made by the `Journal`, which shares its connection, its lock and its host id."""
        self._db = connection
        self._lock = lock
        self._host_id = host_id
        self._check_open = check_open

    def begin(
        self,
        turn_id: str,
        *,
        task: str,
        model: str,
        shell: str,
        steps: int,
        step_cap: int,
        elapsed: float,
        messages: list[dict[str, Any]],
        state: dict[str, Any],
    ) -> None:
        """Record a new turn of this process, with what it has said so far and its clocks:
        `steps` (model requests made), `step_cap`, `elapsed` (seconds of its lifetime used)."""
        now = time.time()
        self._write(
            "INSERT INTO turns (turn_id, host_id, task, model, shell, started_at, saved_at, "
            "steps, step_cap, elapsed, messages, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?)",
            (
                turn_id,
                self._host_id,
                task,
                model,
                shell,
                now,
                now,
                steps,
                step_cap,
                elapsed,
                _json(messages),
                _json(state),
            ),
        )

    def save(
        self,
        turn_id: str,
        *,
        steps: int,
        step_cap: int,
        elapsed: float,
        messages: list[dict[str, Any]],
        state: dict[str, Any],
    ) -> None:
        """Record where a turn of this process stands now."""
        self._write(
            "UPDATE turns SET saved_at = ?, steps = ?, step_cap = ?, elapsed = ?, messages = ?, "
            "state = ? WHERE turn_id = ? AND host_id = ?",
            (
                time.time(),
                steps,
                step_cap,
                elapsed,
                _json(messages),
                _json(state),
                turn_id,
                self._host_id,
            ),
        )

    def end(
        self,
        turn_id: str,
        stop_reason: str,
        *,
        steps: int,
        step_cap: int,
        elapsed: float,
        messages: list[dict[str, Any]],
        state: dict[str, Any],
    ) -> None:
        """Record how a turn of this process ended; an ended turn is never taken up again."""
        now = time.time()
        self._write(
            "UPDATE turns SET saved_at = ?, ended_at = ?, stop_reason = ?, steps = ?, "
            "step_cap = ?, elapsed = ?, messages = ?, state = ? WHERE turn_id = ? "
            "AND host_id = ?",
            (
                now,
                now,
                stop_reason,
                steps,
                step_cap,
                elapsed,
                _json(messages),
                _json(state),
                turn_id,
                self._host_id,
            ),
        )

    def take(self, turn_id: str) -> JournalTurn | None:
        """The turn `turn_id` as it was last saved, or `None` if the journal has no such turn.

        A turn that has not ended and that no live process holds becomes this process's, in
        the same transaction (so two processes cannot both take it up); one that has ended, or
        that a live process holds, is returned as it is, untouched.
        """
        with self._lock:
            self._check_open()
            with _Transaction(self._db):
                row = self._db.execute(
                    f"SELECT {_COLUMNS} FROM turns WHERE turn_id = ?", (turn_id,)
                ).fetchone()
                if row is None:
                    return None
                holder = row[-1]
                alive = (
                    holder != self._host_id
                    and self._db.execute(
                        "SELECT 1 FROM hosts WHERE host_id = ? AND ended_at IS NULL", (holder,)
                    ).fetchone()
                    is not None
                )
                if row[6] is None and not alive:
                    self._db.execute(
                        "UPDATE turns SET host_id = ? WHERE turn_id = ?", (self._host_id, turn_id)
                    )
        (turn, task, model, shell, started_at, saved_at, ended_at, stop_reason) = row[:8]
        (steps, step_cap, elapsed, messages, state) = row[8:13]
        return JournalTurn(
            turn,
            task,
            model,
            shell,
            started_at,
            saved_at,
            ended_at,
            stop_reason,
            steps,
            step_cap,
            elapsed,
            json.loads(messages),
            json.loads(state),
            held_elsewhere=alive,
        )

    def _write(self, statement: str, parameters: tuple[Any, ...]) -> None:
        with self._lock:
            self._check_open()
            with _Transaction(self._db):
                self._db.execute(statement, parameters)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)
