"""The call journal: every script and every tool call, written down before it is acted on.

The host's call table decides each call's fate; this package only keeps the record, durably,
and answers questions about it. It is SQLite (standard library `sqlite3`) in WAL mode, in a
file under the state directory by default, or in memory when the caller asks.

What is durable, and when:

- When `record_calls`, `record_answers`, `settle_calls` or `begin_script` returns, what it
  recorded is in this host's intent file, an append-only file beside the database
  (`<journal>-host<N>-a.intents` and `-b.intents`): copied into the file's shared map (or,
  where the file system cannot map it, written with one `write`), so in the operating
  system's page cache, and a kill of the host process (even by SIGKILL) cannot lose it.
  The next `Journal.open` of the same file (or the next query for uncertain calls) by another
  host replays the intent files of a host that is gone into the database, then marks its
  calls left in flight `host_gone`.
- Everything reaches SQLite through one buffer, in the order it was recorded: scripts begun,
  calls made, answers (`record_answers`), fates (`settle_calls`) and scripts ended
  (`end_script`). A flush thread writes it in one transaction: within `FLUSH_INTERVAL`
  seconds while no script of this journal runs, and within `MAX_DEFER` while one does (so
  that its inserts do not run beside the script's calls; docs/design.md, "Why the journal's
  flush waits while a script runs"). `flush()`, every query and `close()` write it at once,
  so this process always reads its own writes. Other processes (the `toolscript calls`
  command) see a call within those bounds. Once written, the intent file's lines are
  dropped, so it stays small.
- A script's end lost to a kill (it was only in the buffer, without `durable_ends`) leaves
  its script without a status, which is the truthful state.
- An answer is journaled with its frame, as it is sent to the kernel, and the frame is kept
  while code in the kernel may still take the answer (up to `ANSWER_KEPT` bytes; of a longer
  answer only its start is kept): a host that takes the interpreter back delivers it from
  there if the host before died before sending it. A call seen, or one whose code stopped
  waiting for it, lets its frame go.
- Nothing here survives a power loss or a kernel crash: that would need an fsync per call,
  which the hot path cannot afford. SQLite runs with WAL and `synchronous=NORMAL`.

An in-memory journal (`":memory:"`) has no intent files: it lives as long as the object.

The agent's turns are kept here too (`Journal.turns`, `toolscript.host.journal.turns`), each
saved as it goes so that a turn whose process died can be resumed.

Uncertain calls are those whose effect is unknown: settled `pending` when their script ended
and never answered since (reason `pending_at_settle`), or left in flight (no answer and no
fate, or settled `pending`) by a host that is gone (reason `host_gone`).
"""

from __future__ import annotations

from ..state import state_dir
from .buffer import FLUSH_INTERVAL, MAX_DEFER
from .records import (
    ANSWER_KEPT,
    AnswerRow,
    CallAnswer,
    CallFate,
    CallStart,
    FateRow,
    JournalAccessError,
    JournalCall,
    JournalClosedError,
    JournalFileError,
    JournalOpenError,
    JournalScript,
    JournalVersionError,
    ReplayedStream,
    ServeSession,
    StartRow,
    StoredResult,
    StreamEvent,
    TakenCall,
)
from .schema import SCHEMA_VERSION
from .serving import EVENTS_KEPT, EVENTS_KEPT_FOR
from .store import JOURNAL_FILE_NAME, MEMORY, Journal
from .turns import JournalTurn, TurnRecords

__all__ = [
    "ANSWER_KEPT",
    "EVENTS_KEPT",
    "EVENTS_KEPT_FOR",
    "FLUSH_INTERVAL",
    "JOURNAL_FILE_NAME",
    "MAX_DEFER",
    "MEMORY",
    "SCHEMA_VERSION",
    "AnswerRow",
    "CallAnswer",
    "CallFate",
    "CallStart",
    "FateRow",
    "Journal",
    "JournalAccessError",
    "JournalCall",
    "JournalClosedError",
    "JournalFileError",
    "JournalOpenError",
    "JournalScript",
    "JournalTurn",
    "JournalVersionError",
    "ReplayedStream",
    "ServeSession",
    "StartRow",
    "StoredResult",
    "StreamEvent",
    "TakenCall",
    "TurnRecords",
    "state_dir",
]
