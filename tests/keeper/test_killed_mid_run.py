"""A host killed at any step of a script's start or end: the journal and the keeper's board
record a run at different moments, and whichever step the kill follows, the next host ends
the script exactly once, in the journal and in at most one result (docs/design.md: the
keeper). The chaos test finds these moments by chance; here each is hit on purpose."""

from __future__ import annotations

import asyncio
import signal

import pytest

from .conftest import STEPS, WAIT, Hosts

NOTHING_RAN = "none of it ran"

# After each step of the second script's run: what `recovered()` gives the next host (its
# status and value, or None when the dead host had finished with it), and `x` after.
EXPECTED = {
    "board_written": (("error", None), "1"),
    "journal_begun": (("error", None), "1"),
    "journal_ended": (("ok", "2"), "2"),
    "board_cleared": (None, "2"),
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("step", STEPS)
async def test_a_host_killed_right_after_any_step_of_a_run_leaves_the_script_ended_once(
    hosts: Hosts, step: str
) -> None:
    host = await hosts.start(
        [["main", "x = 1", 30, True], ["main", "x = 2\nx", 30, True]], die_at=[step, 2]
    )
    assert await asyncio.wait_for(host.process.wait(), WAIT) == -signal.SIGKILL
    recovered_expected, x_after = EXPECTED[step]

    async with hosts.runtime() as rt:
        shell = rt.shell("main")
        recovered = await asyncio.wait_for(shell.recovered(), WAIT)
        after = await shell.run("x")
        scripts = rt.journal.scripts(shell="main")

    if recovered_expected is None:
        assert recovered is None, recovered.text
    else:
        assert recovered is not None
        assert (recovered.status, recovered.value) == recovered_expected, recovered.text
        assert (recovered.status == "error") == (NOTHING_RAN in recovered.text), recovered.text
    assert (after.status, after.value, after.generation) == ("ok", x_after, 1), after.text
    assert [s.status for s in scripts] == [
        "ok",
        "ok" if x_after == "2" else "error",
        "ok",
    ], scripts
    if recovered is not None:
        assert scripts[1].script_id == recovered.script_id
