"""A call that a task an earlier script left running made while no script ran is named in
the next script's text, even when it was seen and that script ended ok: the model did not
make it in this script, and its effect happened."""

from __future__ import annotations

import pytest

from tests.conftest import MakeRuntime, eventually, transfer, transfers


@pytest.mark.timeout(30)
async def test_a_call_made_between_scripts_is_named_in_the_next_text(
    make_runtime: MakeRuntime,
) -> None:
    transfers.clear()
    runtime = await make_runtime(tools=[transfer])
    shell = runtime.shell()
    first = await shell.run(
        "import asyncio\n"
        "async def later():\n"
        "    await asyncio.sleep(0.3)\n"
        "    await transfer(amount=1)\n"
        "kept = asyncio.get_running_loop().create_task(later())"
    )
    assert first.status == "ok", first.text
    await eventually(lambda: transfers == [1], 10, "the task the script left made no call")
    second = await shell.run("'next'")
    assert transfers == [1]
    assert second.calls.made_before_start == 1
    assert "made before this script started" in second.text
    assert "transfer(amount=1)" in second.text
