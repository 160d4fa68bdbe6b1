"""A script that replaces `os.write` in the module it shares with the kernel does not stall the
output's markers: its run and the next end at once, with all their output."""

from __future__ import annotations

import time

import pytest

from toolscript import Runtime


@pytest.mark.timeout(30)
async def test_a_script_that_replaces_os_write_does_not_stall_the_runs(runtime: Runtime) -> None:
    started = time.monotonic()
    first = await runtime.run("import os\nos.write = lambda fd, data: len(data)\nprint('one')")
    second = await runtime.run("print('two')")
    assert (first.status, first.stdout) == ("ok", "one\n"), first.text
    assert (second.status, second.stdout) == ("ok", "two\n"), second.text
    assert time.monotonic() - started < 1.5
