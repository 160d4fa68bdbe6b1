"""An integer argument longer than the channel carries (the script lifted Python's own bound
on printing one) is refused in the script with a `ToolError` that says so: the interpreter is
kept, and the host never reads a frame it would take for a broken one."""

from __future__ import annotations

import pytest

from tests.conftest import MakeRuntime
from toolscript import tool

received: list[object] = []


@tool
async def echo(x: object = None) -> object:
    """Echo."""
    received.append(x)
    return "ok"


@pytest.mark.timeout(30)
async def test_an_integer_over_the_wire_bound_is_refused_and_the_interpreter_kept(
    make_runtime: MakeRuntime,
) -> None:
    received.clear()
    runtime = await make_runtime(tools=[echo])
    await runtime.run("import sys\nsys.set_int_max_str_digits(0)\nkept = 1")
    result = await runtime.run("await echo(x=10**5000)")
    assert result.status == "error", result.text
    assert "digits" in (result.error or ""), result.error
    assert result.calls.by_fate == {"refused": 1}
    assert received == []
    after = await runtime.run("await echo(x=10**4000) and kept")
    assert after.status == "ok", after.text
    assert after.generation == result.generation
    assert received == [10**4000]
    assert (await runtime.run("len(str(10**5000))")).value == "5001"  # the script's bound stays


@pytest.mark.timeout(60)
async def test_a_call_does_not_change_the_bound_under_the_scripts_other_threads(
    make_runtime: MakeRuntime,
) -> None:
    # The bound is the whole process's: lowered for a moment while a call is encoded, it
    # makes a thread that prints a long integer the script allowed fail meanwhile.
    runtime = await make_runtime(tools=[echo])
    code = (
        "import sys, threading\n"
        "sys.set_int_max_str_digits(0)\n"
        "big = 10 ** 6000\n"
        "failures = []\n"
        "done = False\n"
        "def convert():\n"
        "    while not done:\n"
        "        try:\n"
        "            str(big)\n"
        "        except ValueError:\n"
        "            failures.append(1)\n"
        "t = threading.Thread(target=convert)\n"
        "t.start()\n"
        "for i in range(100):\n"
        "    await echo(x=[i] * 100_000)\n"
        "done = True\n"
        "t.join()\n"
        "len(failures)"
    )
    result = await runtime.run(code, time_limit=50)
    assert (result.status, result.value) == ("ok", "0"), result.text
