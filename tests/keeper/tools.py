"""Tools that record their effects in a SQLite database of their own, in the shared folder,
so a test can count how many times each call took effect across hosts.

`effects` has one row per effect; `attempts` one row per time a handler was entered, with the
idempotency key it was given. With `hold`, a handler, once its effect is recorded, says so
with a file `entered-<key>` and never answers (its host is to be killed there).
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path
from typing import Any

from toolscript import CallContext, tool


def _db(shared: str) -> sqlite3.Connection:
    db = sqlite3.connect(Path(shared) / "effects.sqlite3", timeout=30)
    db.execute("CREATE TABLE IF NOT EXISTS effects (tool TEXT, key TEXT, idempotency_key TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS attempts (tool TEXT, key TEXT, idempotency_key TEXT)")
    db.execute("CREATE UNIQUE INDEX IF NOT EXISTS once ON effects (idempotency_key)")
    return db


def count(shared: Path, table: str, tool_name: str, key: str) -> list[str]:
    """The idempotency keys of the rows of `table` for one tool and key."""
    with _db(str(shared)) as db:
        rows = db.execute(
            f"SELECT idempotency_key FROM {table} WHERE tool = ? AND key = ?", (tool_name, key)
        ).fetchall()
    return [row[0] for row in rows]


def effect_tools(shared: str, *, hold: bool, gate_for: float = 0.0) -> list[Any]:
    """`transfer` (a repeat is not safe) and `put` (idempotent, deduplicating by key).

    `gate_for`: without `hold`, each handler answers only once a gate it opens after a random
    time up to that many seconds is open (so a host killed at a random moment may hold it)."""
    randoms = random.Random()

    async def enter(name: str, key: str, context: CallContext, dedupe: bool) -> None:
        with _db(shared) as db:
            db.execute(
                "INSERT INTO attempts VALUES (?, ?, ?)", (name, key, context.idempotency_key)
            )
            verb = "INSERT OR IGNORE" if dedupe else "INSERT"
            # A non-idempotent tool records each effect under a key of its own making.
            idempotency = context.idempotency_key if dedupe else f"{context.call_id}@{id(db)}"
            db.execute(f"{verb} INTO effects VALUES (?, ?, ?)", (name, key, idempotency))
        if hold:
            (Path(shared) / f"entered-{key}").touch()
            await asyncio.Event().wait()
        elif gate_for:
            gate = asyncio.Event()
            asyncio.get_running_loop().call_later(randoms.uniform(0, gate_for), gate.set)
            await gate.wait()

    @tool
    async def transfer(key: str, context: CallContext) -> str:
        """Move money: each call is a new effect."""
        await enter("transfer", key, context, dedupe=False)
        return f"transferred {key}"

    @tool(idempotent=True)
    async def put(key: str, context: CallContext) -> str:
        """Store a value: a repeat with the same idempotency key changes nothing."""
        await enter("put", key, context, dedupe=True)
        return f"put {key}"

    @tool
    async def record(key: str, context: CallContext) -> str:
        """Record an effect and answer at once."""
        with _db(shared) as db:
            db.execute("INSERT INTO effects VALUES (?, ?, ?)", ("record", key, context.call_id))
        return f"recorded {key}"

    @tool
    async def open_account(key: str, context: CallContext, padding: int = 0) -> dict[str, Any]:
        """Record an effect and answer at once with the account (its `note` `padding`
        characters long); a key that starts with "taken" fails after the effect."""
        with _db(shared) as db:
            db.execute(
                "INSERT INTO effects VALUES (?, ?, ?)", ("open_account", key, context.call_id)
            )
        if key.startswith("taken"):
            raise KeyError(f"{key} is taken")
        return {"key": key, "balance": 12.5, "tags": ["new", None], "note": "x" * padding}

    return [transfer, put, record, open_account]
