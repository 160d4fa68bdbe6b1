"""A script needs no start marker when nothing the last one started can still write, and no
end marker when, besides, its pipes were read to the end when it ended.

The kernel says in `done` whether anything is left running (a task, a timer, a thread, a
child process); when nothing is, the next script's output is taken from the last end on.
These tests hold both sides of that bargain: output still belongs to its own script.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime
from toolscript.host.output import StreamCapture


@pytest.fixture
async def rt(make_runtime: MakeRuntime) -> Runtime:
    return await make_runtime()


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


@pytest.mark.timeout(30)
async def test_a_silent_script_that_leaves_nothing_running_needs_no_end_marker(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended_here: list[int] = []
    original = StreamCapture.end_here

    def end_here(capture: StreamCapture) -> None:
        ended_here.append(1)
        original(capture)

    monkeypatch.setattr(StreamCapture, "end_here", end_here)
    shell = rt.shell("s")
    await shell.run("1")  # the first script ends its pipes' start-up output
    ended_here.clear()
    for _ in range(5):
        result = await shell.run("x = 1\nx")
        assert (result.status, result.value, result.stdout) == ("ok", "1", "")
    assert ended_here == [1] * 10  # both pipes, five scripts: no end marker waited for


@pytest.mark.timeout(60)
async def test_output_written_up_to_the_last_moment_stays_with_its_script(rt: Runtime) -> None:
    # Whether the kernel finds its pipes read to the end (no end marker) or not (a marker),
    # every byte lands in the script that wrote it: small writes, writes larger than a pipe
    # holds, a child process's, and nothing at all, in turns.
    shell = rt.shell("s")
    for n in range(40):
        size = (0, 1, 100, 70_000, 300_000)[n % 5]
        result = await shell.run(
            "import os, subprocess\n"
            f"data = b'{n % 10}' * {size}\n"
            "view = memoryview(data)\n"
            "while view:\n"
            "    view = view[os.write(1, view):]\n"
            f"subprocess.run(['printf', 'child {n}'])\n"
            f"os.write(2, b'e' * {size // 2})\n"
        )
        assert result.status == "ok", result.text
        assert result.stdout == f"{n % 10}" * size + f"child {n}"
        assert result.stderr == "e" * (size // 2)


@pytest.mark.timeout(30)
async def test_a_script_that_leaves_a_thread_running_still_ends_with_a_marker(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended_here: list[int] = []
    monkeypatch.setattr(StreamCapture, "end_here", lambda capture: ended_here.append(1))
    shell = rt.shell("s")
    result = await shell.run(
        "import threading\n"
        "stop = threading.Event()\n"
        "threading.Thread(target=stop.wait, daemon=True).start()\n"
        "print('started')"
    )
    assert result.stdout == "started\n"
    assert ended_here == []
    await shell.run("stop.set()")
