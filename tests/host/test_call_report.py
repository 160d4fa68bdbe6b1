"""A script's call report: immutable, and its records made only when they are read."""

from __future__ import annotations

import dataclasses

import pytest

from toolscript import CallRecord, CallReport
from toolscript.results import describe_call


def row(n: int, fate: str) -> tuple[object, ...]:
    return (f"i.{n}", "send", f"x={n}", fate, None, None, False, 1.0 + n, 2.0 + n, False, False)


def test_an_empty_report_has_no_calls() -> None:
    report = CallReport()
    assert (report.made, report.made_before_start, report.by_fate) == (0, 0, {})
    assert report.records == () and report.unlisted == {} and report.not_seen == []
    assert report.all_seen
    assert report == CallReport()


def test_a_report_cannot_be_changed() -> None:
    report = CallReport(made=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.made = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del report.by_fate
    assert report.made == 1


def test_records_made_from_rows_are_the_records_the_rows_hold() -> None:
    rows = [row(1, "seen"), row(2, "unread"), row(3, "seen")]
    report = CallReport._of_rows(3, 0, {"seen": 2, "unread": 1}, rows, {})  # type: ignore[arg-type]
    # Read before the records are made: only the calls not seen.
    assert report.not_seen == [CallRecord(*row(2, "unread"))]  # type: ignore[arg-type]
    assert report.records == tuple(CallRecord(*r) for r in rows)  # type: ignore[arg-type]
    assert report.records is report.records  # made once
    assert report.not_seen == [CallRecord(*row(2, "unread"))]  # type: ignore[arg-type]
    assert not report.all_seen


def test_reports_compare_by_what_they_say_however_their_records_were_made() -> None:
    rows = [row(1, "seen"), row(2, "late")]
    lazy = CallReport._of_rows(2, 0, {"seen": 1, "late": 1}, rows, {"send": 3})  # type: ignore[arg-type]
    made = CallReport(
        made=2,
        by_fate={"seen": 1, "late": 1},
        records=[CallRecord(*r) for r in rows],  # type: ignore[arg-type]
        unlisted={"send": 3},
    )
    assert lazy == made
    assert repr(lazy) == repr(made)
    assert "records=(CallRecord(id='i.1'" in repr(lazy)
    assert lazy != CallReport(made=2)
    assert lazy.to_dict() == made.to_dict()
    assert lazy.to_dict()["records"][1]["fate"] == "late"


def test_a_call_answered_from_the_journal_after_a_restart_says_so() -> None:
    record = CallRecord("i.1", "send", "x=1", "unread", None, "'ok'", False, 1.0, 2.0)
    restarted = dataclasses.replace(record, answered_from_journal=True)
    assert "journal" not in describe_call(record)
    assert describe_call(restarted) == (
        "send(x=1): unread: answered, but no code took the answer; it happened; the answer "
        "began: 'ok' (the host restarted before sending the answer; the next host sent it "
        "from the journal)"
    )
    assert restarted.to_dict()["answered_from_journal"] is True
    assert record.to_dict()["answered_from_journal"] is False
