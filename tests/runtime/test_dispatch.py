"""How the host runs the handlers of calls that arrive together (a `gather`'s burst).

They share a task until one has to wait; each must still behave as if it had a task of its
own: its own context, its own timeout, and a wait that holds up none of the calls after it.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from pathlib import Path

import pytest

from tests.conftest import MakeRuntime
from toolscript import tool

pytestmark = pytest.mark.timeout(60)

_mark: contextvars.ContextVar[int | None] = contextvars.ContextVar("mark", default=None)


@tool
async def mark(x: int) -> int | None:
    """Set a context variable and give back what it held before."""
    before = _mark.get()
    _mark.set(x)
    return before


async def test_each_handler_runs_in_its_own_context(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime(tools=[mark])
    result = await runtime.run(
        "import asyncio\nawait asyncio.gather(*[mark(x=i) for i in range(200)])"
    )
    assert result.status == "ok", result.text
    assert result.value == repr([None] * 200)
    assert result.calls.by_fate == {"seen": 200}


def _door_tools() -> list[object]:
    doors: dict[int, asyncio.Event] = {}

    @tool
    async def wait_open(x: int) -> str:
        """Wait until door `x` is opened."""
        await doors.setdefault(x, asyncio.Event()).wait()
        return f"opened {x}"

    @tool
    async def open_up(x: int) -> int:
        """Open door `x`."""
        doors.setdefault(x, asyncio.Event()).set()
        return x

    return [wait_open, open_up]


async def test_a_handler_that_waits_holds_up_none_of_the_calls_after_it(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(tools=_door_tools())
    # The first call waits for the last: if the calls after it waited for it, this would
    # never end.
    result = await runtime.run(
        "import asyncio\nawait asyncio.gather(wait_open(x=99), *[open_up(x=i) for i in range(100)])"
    )
    assert result.status == "ok", result.text
    assert result.value == repr(["opened 99", *range(100)])
    assert result.calls.by_fate == {"seen": 101}


async def test_many_waiting_handlers_in_one_burst_each_get_their_own_answer(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(tools=_door_tools())
    # Each waiting call hands the calls after it to a new task; each door opens only when
    # the call after its waiter runs.
    result = await runtime.run(
        "import asyncio\n"
        "calls = []\n"
        "for i in range(30):\n"
        "    calls += [wait_open(x=i), open_up(x=i)]\n"
        "await asyncio.gather(*calls)"
    )
    assert result.status == "ok", result.text
    assert result.value == repr([item for i in range(30) for item in (f"opened {i}", i)])
    assert result.calls.by_fate == {"seen": 60}


async def test_a_burst_of_calls_to_a_tool_that_waits_is_in_flight_all_at_once(
    make_runtime: MakeRuntime,
) -> None:
    passes = 0
    started_at: list[int] = []  # the pass of the host's loop in which each call started

    def count_passes() -> None:
        nonlocal passes
        passes += 1
        if len(started_at) < 50:
            asyncio.get_running_loop().call_soon(count_passes)

    @tool
    async def slow(x: int) -> int:
        """Note the pass of the loop it started in, and wait."""
        if not started_at:
            asyncio.get_running_loop().call_soon(count_passes)
        started_at.append(passes)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return x

    runtime = await make_runtime(tools=[slow])
    # Like a gather of MCP calls: each call must reach its server without waiting for the
    # calls before it to start one by one. The kernel sends a burst's first call at once and
    # the other 49 together, in one write, at the end of its pass: those 49 must all start in
    # the pass of the host's loop that reads them. (Started one per pass, as before, the last
    # of them would start some 48 passes after the first.)
    result = await runtime.run(
        "import asyncio\nawait asyncio.gather(*[slow(x=i) for i in range(50)])"
    )
    assert result.status == "ok", result.text
    assert result.value == repr(list(range(50)))
    assert len(started_at) == 50
    assert max(started_at[1:]) - min(started_at[1:]) <= 1, started_at


async def test_a_waiting_handler_in_a_burst_times_out_on_its_own(
    make_runtime: MakeRuntime,
) -> None:
    never = asyncio.Event()

    @tool(timeout=0.2)
    async def stuck() -> str:
        """Never answers."""
        await never.wait()
        return "never"

    @tool
    async def quick(x: int) -> int:
        """Answer at once."""
        return x

    runtime = await make_runtime(tools=[stuck, quick])
    result = await runtime.run(
        "import asyncio\n"
        "results = await asyncio.gather(\n"
        "    *[quick(x=i) for i in range(20)], stuck(), *[quick(x=i) for i in range(20)],\n"
        "    return_exceptions=True,\n"
        ")\n"
        "[type(r).__name__ if isinstance(r, Exception) else r for r in results]"
    )
    assert result.status == "ok", result.text
    assert result.value == repr([*range(20), "ToolTimeout", *range(20)])
    [record] = [record for record in result.calls.records if record.tool == "stuck"]
    assert (record.fate, record.cause) == ("pending", "tool_timeout")


async def test_a_handler_that_raises_cancelled_error_itself_is_an_error_not_a_hang(
    make_runtime: MakeRuntime,
) -> None:
    @tool
    async def gives_up_at_once() -> str:
        """Raises CancelledError in its first step."""
        raise asyncio.CancelledError

    @tool
    async def gives_up_later() -> str:
        """Awaits a task that someone else cancels."""
        inner = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
        asyncio.get_running_loop().call_soon(inner.cancel)
        await inner
        return "never"

    @tool
    async def quick(x: int) -> int:
        """Answer at once."""
        return x

    runtime = await make_runtime(tools=[gives_up_at_once, gives_up_later, quick])
    result = await runtime.run(
        "import asyncio\n"
        "results = await asyncio.gather(\n"
        "    quick(x=1), gives_up_at_once(), quick(x=2), gives_up_later(), quick(x=3),\n"
        "    return_exceptions=True,\n"
        ")\n"
        "[str(r) if isinstance(r, Exception) else r for r in results]",
        time_limit=20,
    )
    assert result.status == "ok", result.text
    values = eval(result.value or "[]")
    assert values[0::2] == [1, 2, 3]
    assert "gives_up_at_once: the tool's handler was cancelled" in values[1]
    assert "gives_up_later: the tool's handler was cancelled" in values[3]
    assert result.calls.by_fate == {"seen": 5}  # return_exceptions: the errors were taken


async def test_a_handler_that_exits_or_is_interrupted_is_an_error_and_the_host_lives_on(
    make_runtime: MakeRuntime,
) -> None:
    # asyncio ends its event loop with a task's SystemExit or KeyboardInterrupt: the host's.
    @tool
    def exits(code: int) -> str:
        """Calls sys.exit, as argparse does on a bad command line."""
        raise SystemExit(code)

    @tool
    async def interrupted() -> str:
        """Raises KeyboardInterrupt."""
        raise KeyboardInterrupt

    runtime = await make_runtime(tools=[exits, interrupted])
    result = await runtime.run(
        "import asyncio\n"
        "results = await asyncio.gather(exits(code=2), interrupted(), return_exceptions=True)\n"
        "[str(r) for r in results]",
        time_limit=20,
    )
    assert result.status == "ok", result.text
    assert eval(result.value or "[]") == ["SystemExit: 2", "KeyboardInterrupt"]
    again = await runtime.run("await exits(code=0)")
    assert again.status == "error", again.text
    assert "ToolError: SystemExit: 0" in (again.error or ""), again.text


async def test_a_tools_timeout_holds_for_a_handler_that_ignores_its_cancellation(
    make_runtime: MakeRuntime,
) -> None:
    # A handler may catch the cancellation to clean up, for a moment; one that goes on
    # waiting is left where it waits, and the call ends at its timeout all the same.
    cleaned: list[str] = []

    @tool(timeout=0.5)
    async def deaf() -> str:
        """Ignores cancellation."""
        while True:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass

    @tool(timeout=0.5)
    async def tidy() -> str:
        """Cleans up when cancelled, then gives up."""
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
            cleaned.append("tidy")
            raise
        return "never"

    runtime = await make_runtime(tools=[deaf, tidy])
    code = (
        "said = []\n"
        "for call in (deaf, tidy):\n"
        "    try:\n"
        "        await call()\n"
        "    except ToolTimeout as error:\n"
        "        said.append(type(error).__name__)\n"
        "said"
    )
    result = await runtime.run(code, time_limit=20)
    assert result.status == "ok", result.text
    assert result.value == "['ToolTimeout', 'ToolTimeout']", result.text
    assert [(r.tool, r.fate, r.cause) for r in result.calls.records] == [
        ("deaf", "pending", "tool_timeout"),
        ("tidy", "pending", "tool_timeout"),
    ]
    assert cleaned == ["tidy"]


async def test_a_sync_handler_raising_stop_iteration_or_generator_exit_is_an_error_not_a_hang(
    make_runtime: MakeRuntime,
) -> None:
    # A future cannot carry StopIteration (`next()` on an empty iterator), and GeneratorExit
    # thrown into the waiting task closed the handler instead of reaching its `except`.
    @tool(timeout=15)
    def first_match(items: list[str], prefix: str) -> str:
        """The first item with the prefix."""
        return next(item for item in items if item.startswith(prefix))

    @tool(timeout=15)
    def closes() -> str:
        """Raises GeneratorExit."""
        raise GeneratorExit("closed")

    runtime = await make_runtime(tools=[first_match, closes])
    result = await runtime.run(
        "import asyncio\n"
        "results = await asyncio.gather(first_match(items=['a'], prefix='b'), closes(),"
        " return_exceptions=True)\n"
        "[str(r) for r in results]",
        time_limit=10,
    )
    assert result.status == "ok", result.text
    assert eval(result.value or "[]") == ["StopIteration", "GeneratorExit: closed"]
    assert result.calls.by_fate == {"seen": 2}


async def test_sync_handlers_that_hang_leave_threads_for_the_other_tools(
    make_runtime: MakeRuntime,
) -> None:
    # The loop's default executor has cpus + 4 threads: hung calls used to take them all.
    import os
    import threading

    release = threading.Event()

    @tool(timeout=1)
    def hangs(n: int) -> str:
        """Blocks until released."""
        release.wait(30)
        return "late"

    @tool(timeout=5)
    def quick(a: int) -> int:
        """Answers at once."""
        return a + 1

    runtime = await make_runtime(tools=[hangs, quick])
    try:
        hung = (os.cpu_count() or 1) + 5
        result = await runtime.run(
            "import asyncio\n"
            f"await asyncio.gather(*(hangs(n=i) for i in range({hung})), return_exceptions=True)\n"
            "await quick(a=1)",
            time_limit=10,
        )
        assert result.status == "ok", result.text
        assert result.value == "2"
    finally:
        release.set()


async def test_closing_the_runtime_cancels_a_burst_still_waiting(
    make_runtime: MakeRuntime,
) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def hang(x: int) -> int:
        """Wait until cancelled."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return x

    runtime = await make_runtime(tools=[hang])
    shell = runtime.shell("burst")
    run = asyncio.create_task(
        shell.run("import asyncio\nawait asyncio.gather(*[hang(x=i) for i in range(10)])")
    )
    await started.wait()
    await runtime.aclose()
    assert cancelled.is_set()
    result = await run
    assert result.status != "ok"


async def test_a_script_may_put_the_kernels_loop_in_debug_mode(make_runtime: MakeRuntime) -> None:
    # The kernel's loop makes callbacks its own quicker way; in debug mode asyncio's own code
    # makes them, with its checks and their tracebacks.
    runtime = await make_runtime(tools=[mark])
    result = await runtime.run(
        "import asyncio\n"
        "loop = asyncio.get_running_loop()\n"
        "loop.set_debug(True)\n"
        "handle = loop.call_soon(print, 'called')\n"
        "quick = await asyncio.gather(*[mark(x=i) for i in range(20)])\n"
        "loop.set_debug(False)\n"
        "(quick, handle._source_traceback is not None, type(handle).__name__)"
    )
    assert result.status == "ok", result.text
    assert result.value == repr(([None] * 20, True, "Handle"))
    assert result.stdout == "called\n"


async def test_callbacks_run_in_order_in_the_context_they_were_given(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime()
    result = await runtime.run(
        "import asyncio, contextvars\n"
        "var = contextvars.ContextVar('var', default='outside')\n"
        "seen = []\n"
        "loop = asyncio.get_running_loop()\n"
        "context = contextvars.copy_context()\n"
        "context.run(var.set, 'given')\n"
        "loop.call_soon(lambda: seen.append(('first', var.get())))\n"
        "loop.call_soon(lambda: seen.append(('second', var.get())), context=context)\n"
        "cancelled = loop.call_soon(lambda: seen.append('cancelled'))\n"
        "cancelled.cancel()\n"
        "await asyncio.sleep(0)\n"
        "seen"
    )
    assert result.status == "ok", result.text
    assert result.value == repr([("first", "outside"), ("second", "given")])


async def test_the_kernel_forgets_a_call_once_its_answer_is_taken(
    make_runtime: MakeRuntime,
) -> None:
    # A kernel that runs for days makes millions of calls: what it keeps of each must go
    # when the call is over, answered, timed out or cancelled alike.
    never = asyncio.Event()

    @tool
    async def stuck() -> str:
        """Never answers."""
        await never.wait()
        return "never"

    runtime = await make_runtime(tools=[mark, stuck])
    result = await runtime.run(
        "import asyncio, sys\n"
        "await asyncio.gather(*[mark(x=i) for i in range(300)])\n"
        "for i in range(20):\n"
        "    await mark(x=i)\n"
        "try:\n"
        "    await stuck(timeout=0.05)\n"
        "except TimeoutError:\n"
        "    pass\n"
        "task = asyncio.ensure_future(stuck())\n"
        "await asyncio.sleep(0.05)\n"
        "task.cancel()\n"
        "await asyncio.gather(task, return_exceptions=True)\n"
        "[len(module._table._waiting) for name, module in sys.modules.items()\n"
        " if name.endswith('kernel.calls')]"
    )
    assert result.status == "ok", result.text
    assert result.value == "[0]"


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_burst_of_handlers_of_every_kind_gets_every_answer_right(
    make_runtime: MakeRuntime, seed: int
) -> None:
    # Handlers that answer at once, wait, fail, time out in the host or cancel themselves,
    # mixed in one gather: each call gets its own answer, and only its own.
    never = asyncio.Event()

    @tool
    async def fast(x: int) -> int:
        """Answer at once."""
        return x

    @tool
    async def waits(x: int) -> int:
        """Answer after a pass of the loop."""
        await asyncio.sleep(0)
        return -x

    @tool
    async def fails(x: int) -> int:
        """Fail at once."""
        raise ValueError(f"no {x}")

    @tool(timeout=0.1)
    async def stuck(x: int) -> int:
        """Never answer."""
        await never.wait()
        return x

    @tool
    async def gives_up(x: int) -> int:
        """Cancel itself."""
        raise asyncio.CancelledError

    kinds = ["fast", "waits", "fails", "stuck", "gives_up"]
    rng = random.Random(seed)
    plan = [(rng.choice(kinds), i) for i in range(200)]
    runtime = await make_runtime(tools=[fast, waits, fails, stuck, gives_up])
    result = await runtime.run(
        "import asyncio\n"
        f"plan = {plan!r}\n"
        "tools_by_kind = {'fast': fast, 'waits': waits, 'fails': fails, 'stuck': stuck,\n"
        "                 'gives_up': gives_up}\n"
        "results = await asyncio.gather(*[tools_by_kind[k](x=i) for k, i in plan],\n"
        "                               return_exceptions=True)\n"
        "[type(r).__name__ if isinstance(r, Exception) else r for r in results]",
        time_limit=30,
    )
    assert result.status == "ok", result.text
    expected = {
        "fast": lambda i: i,
        "waits": lambda i: -i,
        "fails": lambda i: "ToolError",
        "stuck": lambda i: "ToolTimeout",
        "gives_up": lambda i: "ToolError",
    }
    assert result.value == repr([expected[kind](i) for kind, i in plan])
    stuck_count = sum(kind == "stuck" for kind, _ in plan)
    assert result.calls.by_fate == {"seen": 200 - stuck_count, "pending": stuck_count}
    assert all(
        record.cause == "tool_timeout" for record in result.calls.records if record.tool == "stuck"
    )


@pytest.mark.timeout(60)
def test_a_host_with_a_hung_synchronous_tool_exits_once_its_runtime_closed(
    tmp_path: Path,
) -> None:
    # The tool's thread is still blocked when the runtime closes: a thread the process joins
    # at exit would keep the host from ever exiting.
    import subprocess
    import sys

    script = tmp_path / "host.py"
    script.write_text(
        "import asyncio, threading\n"
        "from toolscript import Runtime, tool\n"
        "@tool(timeout=0.5)\n"
        "def hang() -> str:\n"
        "    threading.Event().wait(3600)\n"
        "    return 'x'\n"
        "async def main():\n"
        "    async with Runtime(tools=[hang], sandbox='off', pool_size=0, journal=':memory:') as rt:\n"
        "        print((await rt.run('await tools.hang()')).status, flush=True)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "error"


async def test_a_tool_that_blocks_before_its_first_await_costs_the_script_no_more_than_that(
    make_runtime: MakeRuntime,
) -> None:
    # Its first step runs while the host handles the kernel's frame, and the host rests a
    # kernel whose frames took long to handle (a defence against costly frames): the tool's
    # own time was counted as the frames', and the script waited as long again.
    import time

    @tool
    async def blocker(seconds: float) -> str:
        """Block, then answer."""
        time.sleep(seconds)
        await asyncio.sleep(0)
        return "done"

    runtime = await make_runtime(tools=[blocker])
    await runtime.run("1")
    result = await runtime.run(
        "import time\nstarted = time.monotonic()\n"
        "for _ in range(3):\n    await blocker(seconds=0.4)\n"
        "time.monotonic() - started"
    )
    assert result.status == "ok", result.text
    assert float(result.value or 0) < 1.7, result.value  # 1.2 s of blocking; 2.0-2.4 s before


async def test_an_answer_json_cannot_carry_says_so_not_to_ask_for_less(
    make_runtime: MakeRuntime,
) -> None:
    from toolscript import ToolSpec
    from toolscript.tools.spec import ToolOutcome

    async def odd(arguments: dict[str, object]) -> ToolOutcome:
        return ToolOutcome({1, 2})

    runtime = await make_runtime(tools=[ToolSpec("odd", "Answer a set.", {"type": "object"}, odd)])
    result = await runtime.run(
        "try:\n    await odd()\nexcept ToolError as error:\n    said = str(error)\nsaid"
    )
    assert result.status == "ok", result.text
    said = result.value or ""
    assert "could not be sent as JSON" in said and "must be JSON data" in said, said
    assert "less at a time" not in said
