"""A script that forks and lets the child run on to its cell's end leaves a copy of the kernel:
the copy never speaks for the kernel. Its end is not taken as the script's, it cannot end a
later script, and a call the parent makes after the copy ended is reported by its script."""

from __future__ import annotations

import pytest

from tests.conftest import MakeRuntime, transfer, transfers


@pytest.mark.timeout(30)
async def test_a_forked_child_that_ends_later_does_not_end_the_next_script(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime()
    first = await runtime.run("import os, time\nif os.fork() == 0:\n    time.sleep(1)\n'a'")
    assert first.status == "ok", first.text
    second = await runtime.run("import time\ntime.sleep(2)\n'b'")
    assert second.status == "ok", second.text
    assert second.value == "'b'"
    assert second.generation == first.generation


@pytest.mark.timeout(30)
async def test_the_parents_call_after_its_childs_copy_ended_is_in_the_scripts_report(
    make_runtime: MakeRuntime,
) -> None:
    transfers.clear()
    runtime = await make_runtime(tools=[transfer])
    result = await runtime.run(
        "import os, time\n"
        "child = os.fork() == 0\n"
        "if not child:\n"
        "    time.sleep(1)\n"
        "    await transfer(amount=100)\n"
        "'child' if child else 'parent'"
    )
    assert result.status == "ok", result.text
    assert result.value == "'parent'"
    assert transfers == [100]
    assert result.calls.by_fate == {"seen": 1}
