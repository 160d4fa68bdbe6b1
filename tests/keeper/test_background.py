"""A background script through its host's death: the keeper keeps its interpreter (and its time
limit), and the next host takes it back as a background script, by its script id
(docs/design.md: the keeper)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from tests.conftest import eventually, wait_for_file
from toolscript import Runtime, ScriptHandle

from .conftest import WAIT, Hosts, gate, interruptible, open_gate, signal_file

BACKGROUND_HOST = textwrap.dedent(
    """
    import asyncio, json, sys
    from toolscript import Runtime

    config = json.loads(sys.argv[1])

    async def main():
        async with Runtime(
            state_dir=config["state_dir"],
            keep_interpreters=True,
            grace=config["grace"],
            sandbox=config["sandbox"],
            mounts={config["shared"]: "rw"},
            pool_size=0,
        ) as rt:
            for shell, code, time_limit, _ in config["scripts"]:
                handle = await rt.shell(shell).start(code, time_limit=time_limit)
                print("started", shell, handle.id, flush=True)
            print("ready", len(rt.background), flush=True)
            await asyncio.Event().wait()  # until killed

    asyncio.run(main())
    """
)
"""A host that starts each of its scripts in the background, printing `started <shell> <id>`,
then `ready <how many background scripts it holds>`."""


def _awaits(hosts: Hosts, name: str) -> str:
    """Python for a script: wait, at `await`s (where a cancel reaches it as it does a
    script of the user's), until the file `name` exists."""
    path = str(hosts.shared / name)
    return (
        f"import asyncio, os\nwhile not os.path.exists({path!r}):\n    await asyncio.sleep(0.02)\n"
    )


def _taken_back(rt: Runtime, script_id: str) -> ScriptHandle:
    found = [handle for handle in rt.background if handle.id == script_id]
    assert len(found) == 1, [handle.id for handle in rt.background]
    return found[0]


async def _started(hosts: Hosts, code: str, time_limit: float) -> tuple[str, Path]:
    """Start `code` in the background in a host, wait until it has begun (it must make the
    file `started`), kill the host, and give the script's id and its log."""
    host = await hosts.start([["main", code, time_limit, False]], program=BACKGROUND_HOST)
    script_id = (await host.line("started"))[2]
    await wait_for_file(hosts.shared / "started", WAIT)
    await host.kill()
    return script_id, hosts.state_dir / "logs" / "background" / f"{script_id.replace(':', '_')}.log"


@pytest.mark.timeout(90)
async def test_a_background_script_that_ended_while_no_host_was_attached_gives_its_real_result(
    hosts: Hosts,
) -> None:
    code = (
        "print('before the kill')\n"
        + signal_file(hosts, "started")
        + gate(hosts, "go")
        + "print('after the kill')\n"
        + signal_file(hosts, "finished")
        + "6 * 7\n"
    )
    script_id, log = await _started(hosts, code, 30)
    await open_gate(hosts, "go")
    await wait_for_file(hosts.shared / "finished", WAIT)  # it ends with no host attached

    async with hosts.runtime() as rt:
        handle = _taken_back(rt, script_id)
        heard: list[str] = []
        handle.add_done_callback(lambda result: heard.append(result.status))
        result = await asyncio.wait_for(handle.result(), WAIT)
        assert (result.status, result.value, result.script_id) == ("ok", "42", script_id)
        assert "after the kill" in result.stdout, result.text
        assert "host restarted" in result.note
        assert result.log_path == str(log)
        await eventually(lambda: heard == ["ok"], WAIT, "the done callback was not called")
        # Its log goes on in the same file (what the dead host had read was its to write).
        assert "after the kill" in log.read_text()
        ended = [s.status for s in rt.journal.scripts(shell="main") if s.script_id == script_id]
        assert ended == ["ok"]
        assert rt.background == []
    await eventually(lambda: not hosts.keeper(), WAIT, "the keeper did not exit")


@pytest.mark.timeout(90)
async def test_a_background_script_still_running_is_taken_back_and_can_be_cancelled(
    hosts: Hosts,
) -> None:
    code = signal_file(hosts, "started") + _awaits(hosts, "never")
    script_id, _ = await _started(hosts, code, 60)

    async with hosts.runtime() as rt:
        handle = _taken_back(rt, script_id)
        assert handle.status() == "running"
        result = await asyncio.wait_for(handle.cancel("cancelled by the test"), WAIT)
        assert result.status in ("cancelled", "stopped"), result.text
        assert "cancelled by the test" in result.text
        assert rt.background == []
        ended = [s.status for s in rt.journal.scripts(shell="main") if s.script_id == script_id]
        assert ended == [result.status]


@pytest.mark.timeout(90)
async def test_the_keeper_holds_a_background_scripts_time_limit_while_no_host_is_attached(
    hosts: Hosts,
) -> None:
    stopped = hosts.shared / "stopped"
    code = interruptible(hosts, "while True:\n        pass\n")
    script_id, _ = await _started(hosts, code, 1.0)
    await wait_for_file(stopped, WAIT)  # no host is attached: only the keeper can stop it

    async with hosts.runtime() as rt:
        result = await asyncio.wait_for(_taken_back(rt, script_id).result(), WAIT)
        assert result.status == "time_limit", result.text


@pytest.mark.timeout(90)
async def test_a_background_script_a_second_restart_finds_again_is_taken_back_again(
    hosts: Hosts,
) -> None:
    code = signal_file(hosts, "started") + _awaits(hosts, "go") + "'done'\n"
    script_id, _ = await _started(hosts, code, 60)
    second = await hosts.start([], program=BACKGROUND_HOST)
    assert (await second.line("ready"))[1] == "1"  # it took the script back
    await second.kill()
    (hosts.shared / "go").touch()

    async with hosts.runtime() as rt:
        result = await asyncio.wait_for(_taken_back(rt, script_id).result(), WAIT)
        assert (result.status, result.value) == ("ok", "'done'"), result.text
