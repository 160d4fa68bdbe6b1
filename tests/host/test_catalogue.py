"""How the host runs one call's handler: its first step at once, in the call's own task, and
the tool's timeout over whatever it then waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import sniffio

from toolscript.host.catalogue import ToolCatalogue
from toolscript.tools.spec import ToolOutcome, ToolSpec

Handler = Callable[[dict[str, Any]], Awaitable[ToolOutcome]]


def catalogue(handler: Handler, timeout: float | None = 5.0) -> ToolCatalogue:
    spec = ToolSpec(
        name="t",
        description="a test tool",
        input_schema={"type": "object"},
        handler=handler,
        timeout=timeout,
    )
    return ToolCatalogue([spec], default_timeout=60.0)


async def call(handler: Handler, timeout: float | None = 5.0) -> Any:
    # As the host does: each call in a task of its own.
    return await asyncio.get_running_loop().create_task(catalogue(handler, timeout).call("t", {}))


@pytest.mark.timeout(10)
async def test_a_handler_that_answers_without_waiting_sees_its_own_task() -> None:
    seen: list[object] = []

    async def handler(args: dict[str, Any]) -> ToolOutcome:
        seen.append(asyncio.current_task())
        seen.append(sniffio.current_async_library())  # what anyio and httpx ask
        return ToolOutcome(value="now")

    answer = await call(handler)
    assert (answer.kind, answer.value) == ("value", "now")
    assert seen[0] is not None and seen[1] == "asyncio"


@pytest.mark.timeout(10)
async def test_timeouts_and_anyio_inside_a_handler_work_in_its_first_step() -> None:
    async def handler(args: dict[str, Any]) -> ToolOutcome:
        async with asyncio.timeout(5):
            await asyncio.sleep(0)
        with anyio.fail_after(5):
            await anyio.sleep(0)
        return ToolOutcome(value="fine")

    answer = await call(handler)
    assert (answer.kind, answer.value) == ("value", "fine")


@pytest.mark.timeout(10)
async def test_a_handler_that_waits_past_the_tools_timeout_is_stopped_and_told() -> None:
    stopped = asyncio.Event()

    async def handler(args: dict[str, Any]) -> ToolOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            raise
        return ToolOutcome(value="never")

    answer = await call(handler, timeout=0.05)
    assert answer.kind == "tool_timeout"
    assert "did not answer within its timeout of 0.05 s" in answer.message
    assert stopped.is_set()


@pytest.mark.timeout(10)
async def test_a_handler_that_catches_the_timeouts_cancellation_may_still_answer() -> None:
    async def handler(args: dict[str, Any]) -> ToolOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # it goes on waiting once more, then answers
            return ToolOutcome(value="cleaned up")
        return ToolOutcome(value="never")

    answer = await call(handler, timeout=0.05)
    # The handler swallowed the cancellation and answered: the timeout did not fire as
    # far as the handler's result goes, and its answer is what it said.
    assert (answer.kind, answer.value) == ("value", "cleaned up")


@pytest.mark.timeout(10)
async def test_cancelling_the_calls_task_reaches_a_waiting_handler() -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(args: dict[str, Any]) -> ToolOutcome:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ToolOutcome(value="never")

    task = asyncio.get_running_loop().create_task(catalogue(handler).call("t", {}))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


@pytest.mark.timeout(10)
async def test_a_handler_that_raises_at_once_or_returns_no_awaitable_is_an_error_answer() -> None:
    async def raises(args: dict[str, Any]) -> ToolOutcome:
        raise RuntimeError("broken at once")

    answer = await call(raises)
    assert answer.kind == "error" and "RuntimeError: broken at once" in answer.message

    def not_async(args: dict[str, Any]) -> Any:
        return ToolOutcome(value="not awaitable")

    answer = await call(not_async)
    assert answer.kind == "error" and "failed in the host" in answer.message


@pytest.mark.timeout(10)
async def test_a_handler_returning_a_future_is_awaited_through_it() -> None:
    def handler(args: dict[str, Any]) -> Awaitable[ToolOutcome]:
        future: asyncio.Future[ToolOutcome] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.set_result, ToolOutcome(value="later"))
        return future

    answer = await call(handler)
    assert (answer.kind, answer.value) == ("value", "later")


def test_a_call_to_a_tool_of_a_server_that_did_not_start_is_refused_saying_so() -> None:
    async def answer(args: dict[str, Any]) -> ToolOutcome:
        raise AssertionError("not called")

    tools = ToolCatalogue(catalogue(answer).specs, 60.0, down={"files": "it exited at once"})
    assert tools.check("files/read", {}) == (
        "there is no tool 'files/read': server 'files' did not start: it exited at once"
    )
    assert tools.check("mail/send", {}) == "there is no tool 'mail/send'"
    assert tools.check("t", {}) is None
