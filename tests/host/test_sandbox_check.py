"""The machine's sandbox check: remembered when it succeeds, never when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolscript.host import cgroups, sandbox


def a_sandbox(tmp_path: Path) -> sandbox.Sandbox:
    return sandbox.Sandbox(
        bwrap="/nonexistent/bwrap",
        network=False,
        shells_root=tmp_path,
        mounts=[],
        python_paths=[],
        privileged=False,
    )


@pytest.fixture(autouse=True)
def forget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "_probed", {})


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sandbox checks made, each passing, one "checked" apiece."""
    made: list[str] = []

    async def probe(_: sandbox.Sandbox) -> str | None:
        made.append("checked")
        return None

    monkeypatch.setattr(sandbox, "_probe", probe)
    return made


async def test_a_success_is_remembered_and_not_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checks: list[str]
) -> None:
    cache = tmp_path / "state" / "sandbox-checks"
    await sandbox._try(a_sandbox(tmp_path), cache)
    assert checks == ["checked"] and cache.exists()
    monkeypatch.setattr(sandbox, "_probed", {})  # another process
    await sandbox._try(a_sandbox(tmp_path), cache)
    assert checks == ["checked"]


async def test_a_failure_is_not_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def probe(_: sandbox.Sandbox) -> str | None:
        return "user namespaces are forbidden here"

    monkeypatch.setattr(sandbox, "_probe", probe)
    cache = tmp_path / "sandbox-checks"
    with pytest.raises(sandbox.SandboxError, match="forbidden"):
        await sandbox._try(a_sandbox(tmp_path), cache)
    assert not cache.exists()


async def test_a_remembered_success_of_another_machine_state_is_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "sandbox-checks"
    cache.mkdir()
    (cache / "0123456789abcdef01234567").write_text("['another kernel']")

    async def probe(_: sandbox.Sandbox) -> str | None:
        return "it cannot be made"

    monkeypatch.setattr(sandbox, "_probe", probe)
    with pytest.raises(sandbox.SandboxError):
        await sandbox._try(a_sandbox(tmp_path), cache)


async def test_successes_of_two_installs_sharing_a_state_folder_are_both_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checks: list[str]
) -> None:
    cache = tmp_path / "state" / "sandbox-checks"
    fingerprints = iter(["['install a']", "['install b']", "['install a']", "['install b']"])
    monkeypatch.setattr(sandbox, "_fingerprint", lambda _: next(fingerprints))
    for _ in range(4):  # a, b, then a and b again, each as a process of its own
        monkeypatch.setattr(sandbox, "_probed", {})
        await sandbox._try(a_sandbox(tmp_path), cache)
    assert checks == ["checked", "checked"]


def test_the_cgroups_of_gone_hosts_are_removed_unless_a_process_is_left_in_them(
    tmp_path: Path,
) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    gone, alive = ended.pid, os.getpid()
    left = tmp_path / f"toolscript-{gone}-aaaa"
    (left / "i1-000001").mkdir(parents=True)
    busy = tmp_path / f"toolscript-{gone}-bbbb"
    (busy / "i2-000002").mkdir(parents=True)
    (busy / "i2-000002" / "cgroup.procs").write_text("1234")  # a directory rmdir refuses
    mine = tmp_path / f"toolscript-{alive}-cccc"
    (mine / "i3-000003").mkdir(parents=True)
    other = tmp_path / "someone-else"
    other.mkdir()

    assert cgroups.sweep_cgroups(tmp_path) == 1
    assert not left.exists()
    assert (busy / "i2-000002").exists()
    assert (mine / "i3-000003").exists()
    assert other.exists()
