"""Busy polling: each side polls for a reply before it sleeps, bounded, and only with a core
spare; the host's event loop is left as it was found."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeRuntime, wait_for_file
from toolscript import Runtime
from toolscript.host import busypoll
from toolscript.kernel import busypoll as busypoll_module
from toolscript.kernel.busypoll import (
    MAX_DOUBLINGS,
    MISSES_BEFORE_BACKING_OFF,
    RETRY_BURST,
    RETRY_PERIOD,
    RETRY_SLOT,
    RETRY_WORTH,
    WORTH,
    BusyPoll,
)

CORES = len(os.sched_getaffinity(0))


class FakeSelect:
    """A selector's `select`: nothing ready for `empty` polls, then one event."""

    def __init__(self, empty: int | None) -> None:
        self.empty = empty
        self.calls: list[float | None] = []

    def __call__(self, timeout: float | None) -> list[Any]:
        self.calls.append(timeout)
        if self.empty is not None and len(self.calls) > self.empty:
            return ["event"]
        return []


def test_a_due_reply_is_polled_for_without_sleeping_and_found() -> None:
    poll = BusyPoll(window=10.0)
    poll.expect()
    select = FakeSelect(empty=5)
    assert poll.select(select, None) == ["event"]
    assert select.calls == [0] * 6  # never slept
    assert poll.misses == 0


def test_without_a_due_reply_the_selector_sleeps_at_once() -> None:
    poll = BusyPoll(window=10.0)
    select = FakeSelect(empty=None)
    assert poll.select(select, 2.5) == []
    assert select.calls == [2.5]


def test_polling_ends_with_the_window_then_sleeps_and_counts_a_miss() -> None:
    poll = BusyPoll(window=0.002)
    poll.expect()
    select = FakeSelect(empty=None)
    assert poll.select(select, None) == []
    assert select.calls[-1] is None  # slept, with no bound, once the window ended
    assert set(select.calls[:-1]) == {0} and len(select.calls) > 1
    assert poll.misses == 1


def test_a_reply_found_after_more_polling_than_a_wake_up_costs_counts_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter(range(10**6))  # each reading of the clock is a microsecond later
    monkeypatch.setattr(busypoll_module.time, "perf_counter", lambda: next(clock) * 1e-6)
    poll = BusyPoll(window=10.0)
    poll.expect()
    assert poll.select(FakeSelect(empty=int(WORTH * 1e6) + 10), None) == ["event"]
    assert poll.misses == 1  # found, but it cost more than the wake-up it saved
    poll.expect()
    assert poll.select(FakeSelect(empty=3), None) == ["event"]
    assert poll.misses == 0


def test_polling_never_outlasts_the_callers_timeout() -> None:
    poll = BusyPoll(window=10.0)
    poll.expect()
    select = FakeSelect(empty=None)
    assert poll.select(select, 0.002) == []
    last = select.calls[-1]
    assert last is not None and 0 <= last <= 0.002
    assert poll.misses == 0  # the timeout ended it, not the window


def test_a_zero_timeout_keeps_the_due_reply_for_the_real_sleep() -> None:
    poll = BusyPoll(window=10.0)
    poll.expect()
    select = FakeSelect(empty=None)
    poll.select(select, 0)
    assert select.calls == [0]
    assert poll.due  # still due: the loop had work, it did not sleep yet


class Clock:
    """`time.perf_counter` for `busypoll`, read from `now`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(busypoll_module.time, "perf_counter", lambda: self.now)

    def to_a_slot(self) -> float:
        """Move to just after the start of a retry slot of every period; return that time."""
        longest = RETRY_PERIOD * (1 << MAX_DOUBLINGS)
        self.now = (self.now // longest + 1) * longest + STEP / 2
        return self.now


STEP = RETRY_SLOT / 5
"""Expects this far apart: five in each retry slot, more than a retry's `RETRY_BURST`."""


def late_replies(poll: BusyPoll, clock: Clock, reply: str, count: int) -> None:
    """`count` replies of kind `reply` expected, each late if it was polled for."""

    def nothing_in_time(timeout: float | None) -> list[Any]:
        clock.now += RETRY_PERIOD * 5 / 8  # the window passes with nothing ready, past the slot
        return []

    for _ in range(count):
        poll.expect(reply)
        if poll.due:
            poll.select(nothing_in_time, None)


def armed_over(poll: BusyPoll, clock: Clock, reply: str, seconds: float) -> list[float]:
    """The times, over `seconds` from a slot's start, at which an expected reply of kind
    `reply` would have been polled for, expecting one every `STEP` (found at once)."""
    start = clock.to_a_slot()
    armed = []
    for i in range(round(seconds / STEP)):
        clock.now = start + i * STEP
        poll.expect(reply)
        if poll.due:
            armed.append(round(i * STEP, 9))
        poll.due = 0.0
    return armed


def at_slots(numbers: list[int]) -> list[float]:
    """The times `armed_over` finds armed when retries begin in the slots `numbers` (counted
    from its start), and nothing else: the first `RETRY_BURST` expects of each."""
    return [round(n * RETRY_PERIOD + i * STEP, 9) for n in numbers for i in range(RETRY_BURST)]


def backed_off(window: float, reply: str = "") -> BusyPoll:
    poll = BusyPoll(window=window)
    for _ in range(MISSES_BEFORE_BACKING_OFF):
        poll.expect(reply)
        poll.select(FakeSelect(empty=None), None)
    assert poll.misses == MISSES_BEFORE_BACKING_OFF
    return poll


def test_replies_that_keep_coming_late_make_it_poll_only_in_the_retry_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    poll = backed_off(window=0.0005)
    clock = Clock(monkeypatch)
    # A retry of RETRY_BURST replies begins in the first RETRY_SLOT of a RETRY_PERIOD: at the
    # same moments as the other side's, whose clock is the same. It did not bring polling
    # back, so the next is two periods on.
    assert armed_over(poll, clock, "", 3 * RETRY_PERIOD) == at_slots([0, 2])
    clock.to_a_slot()
    poll.expect()
    assert poll.due
    assert poll.select(FakeSelect(empty=0), None) == ["event"]
    assert (poll.misses, poll.late) == (0, 0)  # a reply in time: polling is back
    assert len(armed_over(poll, clock, "", RETRY_PERIOD)) == round(RETRY_PERIOD / STEP)


def test_a_tool_whose_replies_keep_coming_late_does_not_stop_polling_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    poll = backed_off(window=0.0005, reply="slow_server.search")
    clock = Clock(monkeypatch)
    assert armed_over(poll, clock, "slow_server.search", RETRY_PERIOD) == at_slots([0])
    expected = round(RETRY_PERIOD / STEP)
    assert len(armed_over(poll, clock, "lookup", RETRY_PERIOD)) == expected  # every time
    # Still backed off, its own count of slots kept: two so far, so the next is four on.
    assert armed_over(poll, clock, "slow_server.search", 8 * RETRY_PERIOD) == at_slots([0, 4])


def test_each_retry_slot_that_does_not_bring_polling_back_doubles_the_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    poll = backed_off(window=0.0005, reply="slow")
    clock = Clock(monkeypatch)
    longest = 1 << MAX_DOUBLINGS
    assert armed_over(poll, clock, "slow", 4 * longest * RETRY_PERIOD) == at_slots(
        [0, *(1 << k for k in range(1, MAX_DOUBLINGS)), *range(longest, 4 * longest, longest)]
    )


def test_a_retry_whose_first_reply_is_late_polls_for_the_next_past_its_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # When both sides retry, the first reply is late for one of them (the other woke from a
    # sleep to send it, which can take longer than the slot); the next finds both awake.
    poll = backed_off(window=0.0005, reply="noop")
    clock = Clock(monkeypatch)
    clock.to_a_slot()
    late_replies(poll, clock, "noop", 1)
    assert poll.misses == MISSES_BEFORE_BACKING_OFF + 1
    assert clock.now % RETRY_PERIOD > RETRY_SLOT  # the slot is over
    poll.expect("noop")
    assert poll.due
    assert poll.select(FakeSelect(empty=0), None) == ["event"]
    assert (poll.misses, poll.late, poll.burst) == (0, 0, 0)


def test_a_retrys_reply_counts_in_time_up_to_retry_worth_and_a_polled_one_up_to_worth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A side that has just woken answers slower than one that polls all along.
    between = (WORTH + RETRY_WORTH) / 2
    poll = backed_off(window=0.0005, reply="noop")
    clock = Clock(monkeypatch)
    ticks = iter(range(10**6))
    start = clock.to_a_slot()
    poll.expect("noop")
    assert poll.due

    def found_after(seconds: float) -> Any:
        """A selector with nothing ready until `seconds` of polling have passed."""

        def select(timeout: float | None) -> list[Any]:
            tick = next(ticks)
            if tick == 1:
                clock.now = start + seconds
            return ["event"] if tick >= 2 else []

        return select

    assert poll.select(found_after(between), None) == ["event"]
    assert (poll.misses, poll.late) == (0, 0)  # a retry's reply in time: polling is back
    clock.now = start = clock.to_a_slot()
    ticks = iter(range(10**6))
    poll.expect("noop")
    assert poll.select(found_after(between), None) == ["event"]
    assert poll.misses == 1  # polling all along, the same wait is late


def test_a_retry_polls_for_a_reply_no_longer_than_a_retrys_reply_is_worth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A reply found later could not bring polling back: a slow tool's retries cost little.
    poll = backed_off(window=0.01, reply="slow")
    clock = Clock(monkeypatch)
    start = clock.to_a_slot()
    poll.expect("slow")
    assert poll.due == pytest.approx(start + RETRY_WORTH)
    poll.due = 0.0
    poll.misses = 0
    poll.expect("slow")
    assert poll.due == pytest.approx(start + 0.01)  # polling all along: the whole window


def test_a_window_of_zero_never_polls() -> None:
    poll = BusyPoll(window=0.0)
    poll.expect()
    select = FakeSelect(empty=None)
    poll.select(select, None)
    assert select.calls == [None]


@pytest.mark.timeout(10)
async def test_the_hosts_loop_gets_its_selector_back_when_the_last_runtime_closes() -> None:
    loop = asyncio.get_running_loop()
    selector: Any = getattr(loop, "_selector", None)
    if not isinstance(loop, asyncio.SelectorEventLoop) or selector is None:
        shared = busypoll.attach(0.0003)  # another loop (uvloop): its selector is not touched
        assert shared is None or shared._selector is None
        if shared is not None:
            busypoll.detach(shared)
        return
    first = busypoll.attach(0.0003)
    second = busypoll.attach(0.0003)
    if CORES < 2:
        assert first is None and second is None
        return
    assert first is second is not None
    assert "select" in vars(selector)
    busypoll.detach(first)
    assert "select" in vars(selector)  # the other runtime still uses it
    busypoll.detach(second)
    assert "select" not in vars(selector)


@pytest.mark.timeout(10)
async def test_a_window_of_zero_leaves_the_hosts_loop_alone() -> None:
    selector = getattr(asyncio.get_running_loop(), "_selector", None)
    before = dict(vars(selector)) if selector is not None else None
    assert busypoll.attach(0.0) is None
    assert (dict(vars(selector)) if selector is not None else None) == before


@pytest.mark.timeout(30)
async def test_a_kernel_is_told_to_poll_while_a_core_is_spare_and_not_when_it_is_off(
    make_runtime: MakeRuntime,
) -> None:
    window = "asyncio.get_running_loop()._selector.busy.window"
    polling = await make_runtime(busy_poll=0.0004)
    result = await polling.shell().run(f"import asyncio\n{window}")
    assert result.status == "ok", result.text
    assert float(result.value or "nan") == (0.0004 if CORES >= 2 else 0.0)
    quiet = await make_runtime(busy_poll=0)
    result = await quiet.shell().run(f"import asyncio\n{window}")
    assert float(result.value or "nan") == 0.0


@pytest.mark.timeout(60)
async def test_with_every_core_taken_by_a_script_no_kernel_is_told_to_poll(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = await make_runtime(busy_poll=0.0004, pool_size=CORES + 1)
    shells = [runtime.shell() for _ in range(CORES)]
    holders = []
    for index, shell in enumerate(shells[:-1]):
        started = tmp_path / f"started-{index}"
        holders.append(
            asyncio.ensure_future(
                shell.run(
                    f"import asyncio, pathlib\npathlib.Path({str(started)!r}).touch()\n"
                    "await asyncio.sleep(30)"
                )
            )
        )
        await wait_for_file(started)
    # Every core but one has a script; this one takes the last.
    last = await shells[-1].run("import asyncio\nasyncio.get_running_loop()._selector.busy.window")
    assert float(last.value or "nan") == 0.0
    for holder in holders:
        holder.cancel()
    await asyncio.gather(*holders, return_exceptions=True)
    after = await shells[-1].run("asyncio.get_running_loop()._selector.busy.window")
    assert float(after.value or "nan") == 0.0004  # the cores are spare again


@pytest.mark.parametrize("bad", [-0.001, 0.5, "fast", None])
def test_a_bad_busy_poll_is_refused_naming_the_knob(bad: Any) -> None:
    with pytest.raises(ValueError, match="busy_poll"):
        Runtime(busy_poll=bad)
