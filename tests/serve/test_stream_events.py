"""The event store of `toolscript serve`'s resumable streams, kept in the journal."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCResponse

from toolscript.host.journal import Journal
from toolscript.serve.events import RESTARTED_MID_REQUEST, SessionEvents

pytestmark = pytest.mark.timeout(30)


def progress(number: int) -> JSONRPCNotification:
    return JSONRPCNotification(
        jsonrpc="2.0",
        method="notifications/progress",
        params={"progressToken": 1, "progress": number},
    )


def answer(request_id: int) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"n": request_id})


def events_of(journal: Journal, session: str) -> SessionEvents:
    """The store of one session over `journal`, as the server makes it from its runtime."""
    return SessionEvents(cast(Any, SimpleNamespace(journal=journal)), session)


async def replay(store: SessionEvents, after: str) -> tuple[str | None, list[EventMessage]]:
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    return await store.replay_events_after(after, send), sent


async def test_a_stream_is_replayed_in_order_after_the_last_event_seen(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        store = events_of(journal, "session-a")
        start = await store.store_event("7", None)
        first = await store.store_event("7", progress(1))
        await store.store_event("8", progress(99))  # another request's stream
        second = await store.store_event("7", progress(2))
        end = await store.store_event("7", answer(7))

        stream, sent = await replay(store, start)
        assert stream == "7"
        assert [event.event_id for event in sent] == [first, second, end]
        assert [event.message for event in sent] == [progress(1), progress(2), answer(7)]
        assert int(start) < int(first) < int(second) < int(end)

        stream, sent = await replay(store, second)
        assert (stream, [event.message for event in sent]) == ("7", [answer(7)])


async def test_an_unknown_id_or_another_sessions_id_replays_nothing(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        mine, theirs = events_of(journal, "session-a"), events_of(journal, "session-b")
        their_start = await theirs.store_event("1", None)
        await theirs.store_event("1", answer(1))
        await mine.store_event("1", None)

        for unknown in (their_start, "999999", "not-a-number", ""):
            assert await replay(mine, unknown) == (None, [])
        stream, sent = await replay(theirs, their_start)
        assert (stream, [event.message for event in sent]) == ("1", [answer(1)])


async def test_old_events_are_pruned_by_count_and_by_age_and_ids_are_not_reused(
    tmp_path: Path,
) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        store = events_of(journal, "session-a")
        ids = [await store.store_event("1", progress(n)) for n in range(5)]

        journal.prune_events(keep=2)
        assert await replay(store, ids[2]) == (None, [])  # pruned: unknown now
        stream, sent = await replay(store, ids[3])
        assert (stream, [event.event_id for event in sent]) == ("1", [ids[4]])

        journal.prune_events(older_than=time.time() + 1)
        assert await replay(store, ids[3]) == (None, [])
        after = await store.store_event("1", progress(5))
        assert int(after) > int(ids[-1])


async def test_a_stream_left_unanswered_by_a_gone_server_ends_with_an_error_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as before:
        old = events_of(before, "session-a")
        start = await old.store_event("5", None)
        seen = await old.store_event("5", progress(1))
        await old.store_event("6", None)
        await old.store_event("6", answer(6))

    with Journal.open(path) as after:
        store = events_of(after, "session-a")
        stream, sent = await replay(store, start)
        assert stream == "5"
        assert sent[0].message == progress(1)
        ended = sent[1].message
        assert isinstance(ended, JSONRPCError)
        assert ended.id == 5
        assert ended.error.message == RESTARTED_MID_REQUEST

        # The error is stored: replayed again, it comes once, under its own id.
        _, again = await replay(store, seen)
        assert [event.message for event in again] == [ended]
        assert again[0].event_id == sent[1].event_id

        # A stream that has its answer is replayed as it is.
        _, answered = await replay(store, str(int(seen) + 1))
        assert [event.message for event in answered] == [answer(6)]


async def test_a_stream_of_this_server_is_not_ended_early(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal.sqlite3") as journal:
        store = events_of(journal, "session-a")
        start = await store.store_event("3", None)
        stream, sent = await replay(store, start)
        assert (stream, sent) == ("3", [])  # its answer is still to come, live


def test_sessions_and_background_results_outlive_the_journal_that_kept_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as before:
        before.remember_session("abc", "mcp-abc", "2025-11-25", '{"clientInfo": {}}')
        before.remember_session("gone", "mcp-gone", "2025-11-25", "{}")
        before.forget_session("gone")
        before.record_result("mcp-abc:bg-1", "mcp-abc", "ok", "exit 0 · ok", '{"value": "42"}')
    with Journal.open(path) as after:
        kept = after.serve_session("abc")
        assert kept is not None
        assert (kept.shell, kept.protocol_version, kept.client) == (
            "mcp-abc",
            "2025-11-25",
            '{"clientInfo": {}}',
        )
        assert after.serve_session("gone") is None
        result = after.stored_result("mcp-abc:bg-1")
        assert result is not None
        assert (result.status, result.text, result.data) == ("ok", "exit 0 · ok", '{"value": "42"}')
        assert after.stored_result("mcp-abc:bg-2") is None


async def test_an_event_that_cannot_be_stored_is_sent_without_an_id(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "journal.sqlite3")
    journal.close()
    assert await events_of(journal, "session-a").store_event("1", progress(1)) == ""
