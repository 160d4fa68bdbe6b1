"""A script needs no start marker when nothing the last one started can still write.

The kernel says in `done` whether anything is left running (a task, a timer, a thread, a
child process); when nothing is, the next script's output is taken from the last end marker
on. These tests hold both sides of that bargain: output still belongs to its own script.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from toolscript import Runtime


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with Runtime(journal=":memory:", grace=0.5) as runtime:
        yield runtime


@pytest.mark.timeout(30)
async def test_scripts_that_leave_nothing_running_keep_their_own_output(rt: Runtime) -> None:
    shell = rt.shell("s")
    for n in range(20):
        result = await shell.run(f"print('line {n}')\nimport os\nos.write(2, b'err {n}\\n')")
        assert result.stdout == f"line {n}\n"
        assert result.stderr == f"err {n}\n"
    interpreter = shell._interpreter
    assert interpreter is not None and interpreter._quiet


@pytest.mark.timeout(30)
async def test_a_timer_left_behind_prints_into_no_script(rt: Runtime, tmp_path: Path) -> None:
    shell = rt.shell("s")
    printed = tmp_path / "printed"
    left = await shell.run(
        "import asyncio\n"
        "def later():\n"
        "    print('from the timer')\n"
        f"    open({str(printed)!r}, 'w').close()\n"
        "asyncio.get_running_loop().call_later(0.2, later)\n"
        "'armed'"
    )
    assert left.value == "'armed'"
    interpreter = shell._interpreter
    assert interpreter is not None and not interpreter._quiet
    deadline = 100
    while not printed.exists() and deadline:
        await shell.run("import asyncio\nawait asyncio.sleep(0.05)")
        deadline -= 1
    assert printed.exists()
    after = await shell.run("print('mine')")
    assert after.stdout == "mine\n"


@pytest.mark.timeout(30)
async def test_a_task_left_running_makes_the_next_script_wait_for_its_start_marker(
    rt: Runtime,
) -> None:
    shell = rt.shell("s")
    await shell.run(
        "import asyncio\n"
        "async def chatter():\n"
        "    while True:\n"
        "        print('chatter')\n"
        "        await asyncio.sleep(0.001)\n"
        "task = asyncio.create_task(chatter())"
    )
    interpreter = shell._interpreter
    assert interpreter is not None and not interpreter._quiet
    # The task chatters between the scripts too: none of that may open the next result.
    result = await shell.run("print('first')\ntask.cancel()")
    lines = result.stdout.splitlines()
    assert lines.count("first") == 1
    assert set(lines) <= {"first", "chatter"}  # nothing but its own line and the task's
    quiet = await shell.run("import asyncio\nawait asyncio.sleep(0.01)\nprint('alone')")
    assert quiet.stdout == "alone\n"
    assert interpreter._quiet
