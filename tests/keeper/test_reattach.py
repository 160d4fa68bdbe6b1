"""A host killed with SIGKILL: the keeper keeps its interpreters, and the next host on the
same state directory takes them back by shell name (docs/design.md: the keeper)."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from tests.conftest import FIND_CHANNEL, GRACE, eventually, is_gone, wait_for_file
from toolscript import tool
from toolscript.kernel.keeper import BOARD, SLOT

from .conftest import WAIT, Hosts, gate, interruptible, keeper_notes, open_gate, signal_file


@pytest.mark.timeout(90)
async def test_a_shell_taken_back_keeps_its_variables_and_its_running_script_finishes_once(
    hosts: Hosts,
) -> None:
    code = signal_file(hosts, "started") + gate(hosts, "go") + "print('went on')\nx + 1\n"
    host = await hosts.start([["main", "x = 41", 30, True], ["main", code, 30, False]])
    await host.line("kernel")
    kernel = host.kernels["main"]
    await wait_for_file(hosts.shared / "started", WAIT)
    await host.kill()
    assert not is_gone(kernel), "the kernel died with its host"
    await open_gate(hosts, "go")  # the script goes on while no host is attached

    async with hosts.runtime() as rt:
        shell = rt.shell("main")
        assert shell.generation == 1
        recovered = await asyncio.wait_for(shell.recovered(), WAIT)
        assert recovered is not None
        assert (recovered.status, recovered.value) == ("ok", "42"), recovered.text
        assert "went on" in recovered.stdout
        assert "host restarted" in recovered.note
        after = await shell.run("x")
        assert (after.status, after.value, after.generation) == ("ok", "41", 1), after.text
        assert "fresh interpreter" not in after.note
        ended = [s for s in rt.journal.scripts(shell="main") if s.script_id == recovered.script_id]
        assert [s.status for s in ended] == ["ok"]
    await eventually(lambda: is_gone(kernel), WAIT, "the kernel was left running")


@pytest.mark.timeout(90)
async def test_the_first_script_on_a_shell_taken_back_idle_keeps_its_output(
    hosts: Hosts,
) -> None:
    # The kernel ended its last script with nothing left running, so it would have written
    # no start marker for the next; the new host, which did not see that end, waits for one.
    host = await hosts.start([["main", "x = 41", 30, True]])
    await host.line("kernel")
    await host.kill()

    async with hosts.runtime() as rt:
        shell = rt.shell("main")
        code = "import sys\nprint('x is', x)\nprint('on stderr', file=sys.stderr)\nx"
        first = await shell.run(code)
        assert (first.status, first.value, first.generation) == ("ok", "41", 1), first.text
        assert first.stdout == "x is 41\n", first.text
        assert first.stderr == "on stderr\n", first.text
        second = await shell.run(code)
        assert (second.stdout, second.stderr) == ("x is 41\n", "on stderr\n"), second.text


@pytest.mark.timeout(90)
async def test_the_script_after_one_that_ended_under_the_new_host_has_no_stray_marker(
    hosts: Hosts,
) -> None:
    # The running script ends after the new host took the kernel back but before the
    # kernel read its `held` (its loop was held by blocking code): the `done` the host reads
    # says nothing is left running, so the host expects no start marker for the next.
    code = signal_file(hosts, "started") + gate(hosts, "go") + "'first'\n"
    host = await hosts.start([["main", "x = 1", 30, True], ["main", code, 30, False]])
    await host.line("kernel")
    await wait_for_file(hosts.shared / "started", WAIT)
    await host.kill()

    async with hosts.runtime() as rt:
        shell = rt.shell("main")
        await open_gate(hosts, "go")
        recovered = await asyncio.wait_for(shell.recovered(), WAIT)
        assert recovered is not None and recovered.value == "'first'", recovered
        for code in ("'next'", "print('hello')", "'third'"):
            after = await shell.run(code)
            assert after.status == "ok", after.text
            assert "\x00" not in after.stdout + after.stderr, (code, after.stdout, after.stderr)
            assert after.stdout == ("hello\n" if "print" in code else ""), (code, after.stdout)


@pytest.mark.timeout(90)
async def test_the_keeper_interrupts_a_script_past_its_time_limit_while_no_host_is_attached(
    hosts: Hosts,
) -> None:
    stopped = hosts.shared / "stopped"
    code = interruptible(hosts, "while True:\n        pass\n")
    await hosts.kill_when("started", code, 1.0)
    await wait_for_file(stopped, WAIT)  # no host is attached: only the keeper can stop it

    async with hosts.runtime() as rt:
        recovered = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert recovered is not None and recovered.status == "time_limit", recovered.text
        after = await rt.shell("main").run("x")
        assert (after.status, after.value) == ("ok", "1"), after.text


@pytest.mark.timeout(90)
async def test_a_script_the_keeper_interrupted_is_given_the_rest_of_its_grace_and_no_second_interrupt(
    hosts: Hosts,
) -> None:
    # The next host took the passed deadline as its own to enforce: it interrupted the
    # script again (cutting short the clean-up the first interrupt began) and gave it a new
    # grace period.
    interrupts, cleaned = hosts.shared / "interrupts", hosts.shared / "cleaned"
    code = (
        "import time\n"
        + "try:\n    "
        + signal_file(hosts, "started")
        + "    time.sleep(60)\n"
        + "except KeyboardInterrupt:\n"
        + f"    open({str(interrupts)!r}, 'a').write('i')\n"
        + "    try:\n        time.sleep(2.5)\n"  # its clean-up, within the grace period
        + "    except KeyboardInterrupt:\n"
        + f"        open({str(interrupts)!r}, 'a').write('i')\n        raise\n"
        + f"    open({str(cleaned)!r}, 'w').close()\n"
        + "    raise\n"
    )
    await hosts.kill_when("started", code, 1.0, grace=6.0)
    await wait_for_file(interrupts, WAIT)  # no host is attached: the keeper interrupted it

    async with hosts.runtime() as rt:  # taken back during its clean-up
        recovered = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
    assert recovered is not None and recovered.status == "time_limit", recovered.text
    assert interrupts.read_text() == "i"
    assert cleaned.exists(), "its clean-up was cut short"
    assert "the keeper interrupted the script at its time limit" in recovered.note


FORGED = {
    # Its own `done`: the keeper took one in the channel for the script's end, and never
    # stopped it while no host was attached.
    "done": "body = json.dumps({'t': 'done', 'script': kernel_script, 'status': 'ok'})",
    # Nesting past the stack: the keeper's peek at the channel raised, and it died with
    # every shell's interpreter.
    "nested": "body = '[' * 100_000 + ']' * 100_000",
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("forged", list(FORGED))
async def test_a_frame_a_script_forges_while_no_host_is_attached_does_not_stop_the_keeper(
    hosts: Hosts, forged: str
) -> None:
    stopped = hosts.shared / "stopped"
    code = (
        FIND_CHANNEL
        + "import json, struct, sys, time\n"
        + "kernel_script = sys._getframe().f_code.co_filename[len('<script '):-1]\n"
        + signal_file(hosts, "started")
        + gate(hosts, "go")
        + FORGED[forged]
        + "\nos.write(channel(), struct.pack('>I', len(body)) + body.encode())\n"
        + "try:\n"
        + "    time.sleep(60)\n"
        + "except KeyboardInterrupt:\n"
        + f"    open({str(stopped)!r}, 'w').close()\n"
        + "    raise\n"
    )
    scripts = [
        ["victim", "y = 42", 30, True],
        ["main", "x = 1", 30, True],
        ["main", code, 6, False],
    ]
    host = await hosts.start(scripts)
    await host.line("kernel")
    await wait_for_file(hosts.shared / "started", WAIT)
    await host.kill()
    await open_gate(hosts, "go")
    await wait_for_file(stopped, WAIT)  # the keeper stopped it at its time limit
    assert hosts.keeper(), "the keeper died"

    async with hosts.runtime() as rt:
        # (A forged `done` may say what it likes of the script's own status: docs/security.md.)
        assert await asyncio.wait_for(rt.shell("main").recovered(), WAIT) is not None
        victim = await rt.shell("victim").run("y")
        assert (victim.status, victim.value) == ("ok", "42"), victim.text


@pytest.mark.timeout(90)
async def test_the_keeper_kills_a_script_that_ignores_the_interrupt_after_the_grace_period(
    hosts: Hosts,
) -> None:
    code = (
        signal_file(hosts, "started")
        + "import time\nwhile True:\n    try:\n        time.sleep(10)\n"
        + "    except KeyboardInterrupt:\n        pass\n"
    )
    host = await hosts.start([["main", "x = 1", 30, True], ["main", code, 1.0, False]])
    await host.line("kernel")
    kernel = host.kernels["main"]
    await wait_for_file(hosts.shared / "started", WAIT)
    await host.kill()
    await eventually(lambda: is_gone(kernel), WAIT, "the keeper did not kill the interpreter")

    async with hosts.runtime() as rt:
        recovered = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert recovered is not None and recovered.status == "time_limit", recovered.text
        # Not "the interpreter was kept, and the script went on": the keeper killed it.
        assert "killed the interpreter when it did not stop" in recovered.note, recovered.note
        assert "the script went on" not in recovered.note
        after = await rt.shell("main").run("'x' in globals()")
        assert (after.status, after.value) == ("ok", "False"), after.text
        assert "fresh interpreter" in after.note


@pytest.mark.timeout(60)
async def test_the_keeper_ends_interpreters_no_host_takes_back_in_the_window_and_exits(
    hosts: Hosts,
) -> None:
    host = await hosts.start([["main", "x = 1", 30, True]], reattach_window=1.0)
    await host.line("kernel")
    kernel = host.kernels["main"]
    [keeper] = hosts.keeper()
    await host.kill()
    await eventually(lambda: is_gone(kernel), WAIT, "the interpreter outlived the window")
    await eventually(lambda: is_gone(keeper), WAIT, "the keeper did not exit")
    assert not (hosts.state_dir / "keeper.sock").exists()

    async with hosts.runtime() as rt:
        result = await rt.shell("main").run("'x' in globals()")
        assert (result.status, result.value) == ("ok", "False"), result.text
        # It says so: the variables set before the host died are gone.
        assert "fresh interpreter" in result.note and "not kept" in result.note, result.note
        assert "reattach window" in result.note, result.note
        assert result.generation == 2, result.text  # the state is new: so is its generation
        again = await rt.shell("main").run("1")
        assert "fresh interpreter" not in again.note, again.note
        other = await rt.shell("never-ran").run("1")
        assert "fresh interpreter" not in other.note, other.note


@pytest.mark.timeout(60)
async def test_a_script_whose_interpreter_was_not_kept_ends_once_as_crashed_saying_why(
    hosts: Hosts,
) -> None:
    # Nothing followed it: the journal kept it as running forever, and `recovered()` said
    # there had been no script.
    code = signal_file(hosts, "started") + "import time\ntime.sleep(60)\n"
    host = await hosts.kill_when("started", code, 30, reattach_window=1.0)
    kernel = host.kernels["main"]
    await eventually(lambda: is_gone(kernel), WAIT, "the interpreter outlived the window")
    await eventually(lambda: not hosts.keeper(), WAIT, "the keeper did not exit")

    async with hosts.runtime() as rt:
        recovered = await rt.shell("main").recovered()
        assert recovered is not None and recovered.status == "crashed", recovered
        assert "was not kept for this host" in recovered.note, recovered.note
        assert "reattach window" in recovered.note, recovered.note
        [lost] = [s for s in rt.journal.scripts("main") if s.script_id == recovered.script_id]
        assert lost.status == "host_gone" and lost.ended_at is not None, lost
        assert await rt.shell("never-ran").recovered() is None
    async with hosts.runtime() as rt:  # concluded once: the next host has nothing to say
        assert await rt.shell("main").recovered() is None
        assert [s.status for s in rt.journal.scripts("main")].count(None) == 0


@pytest.mark.timeout(60)
async def test_every_interpreter_dies_with_the_keeper(hosts: Hosts) -> None:
    async with hosts.runtime() as rt:
        await rt.shell("main").run("x = 1")
        kernel = rt.shell("main")._interpreter.kernel_pid()  # type: ignore[union-attr]
        assert kernel is not None
        [keeper] = hosts.keeper()
        os.kill(keeper, 9)
        await eventually(lambda: is_gone(kernel), WAIT, "an interpreter outlived its keeper")
        result = await rt.shell("main").run("'x' in globals()")
        assert result.status != "ok" or result.value == "False", result.text


@pytest.mark.timeout(60)
async def test_a_script_whose_keeper_dies_under_it_is_told_so_and_not_blamed(
    hosts: Hosts,
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    @tool
    async def hold() -> str:
        """Wait until the test says."""
        entered.set()
        await release.wait()
        return "held"

    async with hosts.runtime(tools=[hold]) as rt:
        await rt.shell("main").run("x = 1")
        run = asyncio.ensure_future(rt.shell("main").run("await hold()", time_limit=30))
        await asyncio.wait_for(entered.wait(), WAIT)
        [keeper] = hosts.keeper()
        os.kill(keeper, signal.SIGKILL)
        result = await asyncio.wait_for(run, WAIT)
        release.set()
        assert result.status == "crashed", result.text
        assert "keeper" in result.note and "broke the protocol" not in result.note, result.note
        [script] = [s for s in rt.journal.scripts() if s.script_id == result.script_id]
        assert script.violation is None
        [record] = result.calls.records
        assert (record.tool, record.fate, record.cause) == ("hold", "pending", "interpreter_gone")


@pytest.mark.timeout(60)
async def test_the_keeper_socket_is_private_and_the_keeper_exits_with_the_runtime(
    hosts: Hosts,
) -> None:
    async with hosts.runtime() as rt:
        result = await rt.run("1 + 1")
        assert result.value == "2", result.text
        socket_path = hosts.state_dir / "keeper.sock"
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
        assert stat.S_ISSOCK(socket_path.stat().st_mode)
        [keeper] = hosts.keeper()
        with pytest.raises(Exception, match="another host is attached"):
            await hosts.runtime().start()
    await eventually(lambda: is_gone(keeper), WAIT, "the keeper outlived its last host")
    assert not Path(socket_path).exists()


@pytest.mark.timeout(60)
async def test_no_second_keeper_starts_while_one_lives_whose_socket_is_gone(
    hosts: Hosts,
) -> None:
    # A second keeper on the folder would leave the first one's interpreters, and their
    # shells' variables, out of reach with nothing said.
    async with hosts.runtime() as rt:
        assert (await rt.run("x = 1")).status == "ok"
        (hosts.state_dir / "keeper.sock").unlink()
        with pytest.raises(Exception, match=r"still runs, but its socket keeper\.sock is gone"):
            await hosts.runtime().start()
        assert len(hosts.keeper()) <= 1


@pytest.mark.timeout(60)
async def test_a_script_whose_end_the_dead_host_read_and_never_reported_is_not_killed(
    hosts: Hosts,
) -> None:
    host = await hosts.start([["main", "x = 7\nx * 6", 30, True]])
    await host.line("kernel")
    kernel = host.kernels["main"]
    status, script_id, value = host.results["main"]
    assert (status, value) == ("ok", "42")
    # As a host that read the script's `done` and was killed before it said, on the
    # keeper's board, that the script had ended: the board still says it runs, for 0.2 s.
    board = (hosts.state_dir / BOARD).read_bytes()
    sequence = SLOT.unpack_from(board, 0)[0]
    with open(hosts.state_dir / BOARD, "r+b") as file:
        file.write(SLOT.pack(sequence + 2, time.time() + 0.2, GRACE, 30.0, script_id.encode(), b""))
    await host.kill()
    # The keeper interrupts it at the deadline; the idle kernel says its last `done` again,
    # which the keeper finds in the channel: nothing is killed.
    await eventually(
        lambda: keeper_notes(hosts)[0]["meta"].get("keeper_saw_done") == "again",
        WAIT,
        "the keeper did not see the script's end said again",
    )
    assert not is_gone(kernel)

    async with hosts.runtime() as rt:
        recovered = await asyncio.wait_for(rt.shell("main").recovered(), WAIT)
        assert recovered is not None
        assert (recovered.status, recovered.script_id) == ("ok", script_id), recovered.text
        after = await rt.shell("main").run("x")
        assert (after.status, after.value, after.generation) == ("ok", "7", 1), after.text
