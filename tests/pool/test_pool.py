"""Warm interpreters, the template, idle reclaim, generations and the cap on interpreters."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import MakeRuntime, eventually, is_gone, wait_for_file
from toolscript import tool
from toolscript.host.template import Template


@tool
async def echo(x: int) -> int:
    """Answer x."""
    return x


@pytest.mark.timeout(30)
async def test_shells_get_interpreters_forked_from_the_template_with_preloaded_modules(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(preload=["json", "decimal"])
    assert await asyncio.wait_for(rt.template_ready(), 20) is True
    result = await rt.shell("a").run("import sys\n'decimal' in sys.modules")
    assert result.value == "True"
    interpreter = rt.shell("a")._interpreter
    assert interpreter is not None and interpreter.forked


@pytest.mark.timeout(30)
async def test_without_fork_interpreters_are_spawned_and_preload_still_applies(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(preload=["decimal"], fork=False)
    assert await rt.template_ready() is False
    result = await rt.shell("a").run("import sys\n'decimal' in sys.modules")
    assert result.value == "True"
    interpreter = rt.shell("a")._interpreter
    assert interpreter is not None and not interpreter.forked


@pytest.mark.timeout(30)
async def test_a_preload_that_starts_threads_is_not_forked_from_and_runs_still_work(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    (tmp_path / "threaded_module.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    rt = await make_runtime(preload=["threaded_module"], env={"PYTHONPATH": str(tmp_path)})
    assert await asyncio.wait_for(rt.template_ready(), 20) is False
    assert rt.template_failure is not None
    assert "started Python threads" in rt.template_failure
    result = await rt.shell("a").run("import sys\n'threaded_module' in sys.modules")
    assert result.value == "True"  # spawned, with the module preloaded all the same
    interpreter = rt.shell("a")._interpreter
    assert interpreter is not None and not interpreter.forked


@pytest.mark.timeout(30)
async def test_a_preload_that_cannot_be_imported_is_named(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime(preload=["json", "no_such_module_here"])
    assert await asyncio.wait_for(rt.template_ready(), 20) is True
    [(name, why)] = rt.preload_failures
    assert name == "no_such_module_here" and "ModuleNotFoundError" in why
    assert (await rt.shell("a").run("1")).status == "ok"


@pytest.mark.timeout(30)
async def test_a_preload_that_cannot_be_imported_without_a_template_is_named_too(
    make_runtime: MakeRuntime,
) -> None:
    # Started afresh, each kernel imports `preload` itself: what it could not import comes to
    # the host in its `ready`, and the first result of that interpreter says so.
    rt = await make_runtime(fork=False, preload=["json", "no_such_module_here"])
    first = await rt.shell("a").run("1")
    assert first.status == "ok", first.text
    assert "no_such_module_here (ModuleNotFoundError" in first.note, first.note
    [(name, why)] = rt.preload_failures
    assert name == "no_such_module_here" and "ModuleNotFoundError" in why
    assert "no_such_module_here" not in (await rt.shell("a").run("2")).note


@pytest.mark.timeout(30)
async def test_a_new_shell_takes_a_warm_interpreter_and_the_pool_refills(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(pool_size=2)
    pool = rt._pool
    assert pool is not None
    deadline = time.monotonic() + 20
    while pool.warm < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert pool.warm == 2
    first = await rt.shell("a").run("1")
    assert first.status == "ok" and first.generation == 1
    while pool.warm < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert pool.warm == 2
    assert pool.live == 1


@pytest.mark.timeout(30)
async def test_an_idle_shell_is_reclaimed_and_its_next_run_says_the_state_was_reset(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(idle_timeout=0.3)
    shell = rt.shell("a")
    first = await shell.run("x = 41")
    assert first.generation == 1
    pool = rt._pool
    assert pool is not None
    deadline = time.monotonic() + 10
    while shell._interpreter is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert shell._interpreter is None
    while pool.live and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert pool.live == 0
    second = await shell.run("'x' in globals()")
    assert second.value == "False"
    assert second.generation == 2
    assert "fresh interpreter" in second.note and "idle for 0.3 s" in second.note


@pytest.mark.timeout(30)
async def test_a_busy_shell_is_not_reclaimed_while_it_runs(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime(idle_timeout=0.2)
    shell = rt.shell("a")
    await shell.run("x = 1")
    result = await shell.run("import time\ntime.sleep(0.6)\nx")
    assert result.status == "ok" and result.value == "1"


@pytest.mark.timeout(30)
async def test_generations_tell_a_reset_from_a_continuation(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime()
    shell = rt.shell("a")
    assert (await shell.run("1")).generation == 1
    assert (await shell.run("2")).generation == 1
    crashed = await shell.run("import os\nos._exit(1)")
    assert crashed.status == "crashed" and crashed.generation == 1
    after = await shell.run("3")
    assert after.generation == 2 and "fresh interpreter" in after.note


@pytest.mark.timeout(30)
async def test_a_run_over_the_interpreter_cap_waits_its_turn_then_is_refused_with_the_reason(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime(max_interpreters=1, queue_timeout=0.5, pool_size=0)
    assert (await rt.shell("a").run("1")).status == "ok"
    started = time.monotonic()
    refused = await rt.shell("b").run("2")
    waited = time.monotonic() - started
    assert refused.status == "refused"
    assert "all 1 interpreters this runtime allows are in use" in refused.note
    # The one in use is only kept by a shell that runs nothing: the note says how to free it.
    assert "Of those, 1 is kept by a shell that runs nothing now ('a')" in refused.note
    assert "await rt.shell(name).close()" in refused.note
    assert 0.4 < waited < 5
    # Once the first shell lets go, the next in line gets through.
    await rt.shell("a").close()
    assert (await rt.shell("b").run("2")).value == "2"


@pytest.mark.timeout(30)
async def test_a_run_waiting_in_line_gets_the_interpreter_freed_while_it_waits(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime(max_interpreters=1, queue_timeout=10, pool_size=0)
    assert (await rt.shell("a").run("1")).status == "ok"
    waiting = asyncio.create_task(rt.shell("b").run("2"))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await rt.shell("a").close()
    result = await asyncio.wait_for(waiting, 10)
    assert result.value == "2"


@pytest.mark.timeout(60)
async def test_one_shells_crash_and_flood_never_disturb_another(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime(echo)
    calm = rt.shell("calm")
    await calm.run("kept = 'here'")
    started = tmp_path / "started"
    flood = asyncio.create_task(
        rt.shell("flood").run(
            f"open({str(started)!r}, 'w').close()\nfor i in range(200_000): print('x' * 100)",
            time_limit=30,
        )
    )
    await wait_for_file(started)
    crash = await rt.shell("crash").run("import ctypes\nctypes.string_at(0)")
    assert crash.status == "crashed"
    during = await calm.run("print(await echo(x=3))\nkept")
    assert during.status == "ok" and during.value == "'here'" and during.stdout == "3\n"
    flooded = await asyncio.wait_for(flood, 30)
    assert flooded.status == "ok" and "bytes of output cut" in flooded.stdout
    after = await calm.run("kept")
    assert after.value == "'here'" and after.generation == 1


@pytest.mark.timeout(60)
async def test_closing_the_runtime_while_shells_get_interpreters_refuses_them_and_leaves_none(
    make_runtime: MakeRuntime,
) -> None:
    # Only the processes this runtime starts: others of the test process are not its own.
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    rt = await make_runtime(pool_size=0, fork=False)
    runs = [asyncio.ensure_future(rt.shell(f"s{n}").run("'ran'")) for n in range(6)]
    pool = rt._pool
    assert pool is not None
    await eventually(lambda: pool.live == 6, 10, "the runs did not ask for interpreters")

    def starting() -> list[int]:
        return [c.pid for c in psutil.Process().children(recursive=True) if c.pid not in before]

    await eventually(lambda: len(starting()) >= 6, 10, "no kernel began to start")
    started = starting()
    await asyncio.wait_for(rt.aclose(), 30)
    left = [pid for pid in started if not is_gone(pid)]
    assert left == [], f"processes left after aclose: {left}"
    for result in await asyncio.wait_for(asyncio.gather(*runs), 10):
        assert result.status == "refused", result.text
        assert "the runtime was closed" in result.note


@pytest.mark.timeout(60)
async def test_a_template_killed_from_outside_is_not_blamed_on_its_interpreters_scripts(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = await make_runtime(pool_size=1)
    assert await asyncio.wait_for(rt.template_ready(), 20) is True
    if rt.sandbox == "process only":
        pytest.skip("without a sandbox, forked kernels outlive their template")
    started = tmp_path / "started"
    code = f"import pathlib, time\npathlib.Path({str(started)!r}).write_text('')\ntime.sleep(30)"
    run = asyncio.ensure_future(rt.shell("a").run(code, time_limit=40))
    await wait_for_file(started)
    template = rt._template
    assert template is not None
    os.kill(template._process.pid, signal.SIGKILL)  # type: ignore[union-attr]
    result = await asyncio.wait_for(run, 20)
    assert result.status == "crashed", result.text
    assert "broke the protocol" not in result.note and "template" in result.note, result.note
    again = await asyncio.wait_for(rt.shell("a").run("1"), 20)
    assert again.status == "ok", again.text
    assert "broke the protocol" not in again.note and "template" in again.note, again.note
    # A new template is started in its place, and interpreters are forked from it again.
    assert await asyncio.wait_for(rt.template_ready(), 20) is True, rt.template_failure
    assert rt._template is not None and rt._template is not template
    assert rt.template_failure is None
    # Interpreters the pool began while the template was down are started afresh; once they
    # are taken, the pool refills from the new template (pool_size 1: at most two of them).
    pool = rt._pool
    assert pool is not None
    forked = []
    for name in ("b", "c", "d"):
        await eventually(lambda: pool.warm == 1, 20, "the pool did not refill")
        later = await asyncio.wait_for(rt.shell(name).run("1"), 20)
        assert later.status == "ok", later.text
        interpreter = rt.shell(name)._interpreter
        assert interpreter is not None
        forked.append(interpreter.forked)
    assert forked[-1], forked


@pytest.mark.timeout(60)
async def test_an_interpreter_start_cancelled_while_its_kernel_is_forked_leaves_nothing_running(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = await make_runtime(pool_size=0, fork=False)
    if rt.sandbox == "process only":
        pytest.skip("without a sandbox, an interpreter is spawned, not forked")
    pool = rt._pool
    assert pool is not None
    host = psutil.Process()
    before = {child.pid for child in host.children(recursive=True)}
    fork = Template.fork

    async def slow_fork(self: Template, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.5)  # the moment a busy machine takes, made long enough to hit
        return await fork(self, *args, **kwargs)

    monkeypatch.setattr(Template, "fork", slow_fork)
    interpreter = pool._make()
    starting = asyncio.ensure_future(interpreter.start())
    # Its sandbox's own template is up, and is asked for the kernel.
    await eventually(
        lambda: interpreter._process._own_template is not None, 20, "no template of its own"
    )
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting

    def none_left() -> bool:
        return {child.pid for child in host.children(recursive=True)} <= before

    await eventually(none_left, 10, "the processes of a cancelled start were left")


@pytest.mark.timeout(60)
async def test_no_more_warm_interpreters_are_kept_than_may_be_live_at_once(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(pool_size=50, max_interpreters=2)
    pool = rt._pool
    assert pool is not None and pool.size == 2
    await eventually(lambda: pool.warm == 2, 30, "the pool did not fill")
    assert (await rt.shell("a").run("1")).status == "ok"


async def test_every_warm_interpreter_killed_at_once_is_replaced_for_the_next_run(
    make_runtime: MakeRuntime,
) -> None:
    # Killed together (from outside) a moment before a run: the pool still hands them out,
    # each one's adoption fails, and one retry was not enough for two.
    runtime = await make_runtime(pool_size=3)
    assert (await runtime.run("1")).status == "ok"
    pool = runtime._pool
    assert pool is not None
    await eventually(lambda: pool.warm == 3, 30, "the pool was not filled")
    for _ in range(5):
        warm = list(pool._ready)
        for interpreter in warm:
            assert interpreter.pid is not None
            os.kill(interpreter.pid, signal.SIGKILL)
        result = await runtime.shell(f"s{_}").run("'fresh'")
        assert (result.status, result.value) == ("ok", "'fresh'"), result.text
        await eventually(lambda: pool.warm == 3, 30, "the pool was not filled again")
