"""The command line's head start: the interpreter's sandbox starts before the runtime opens,
the runtime's first interpreter comes from it when the settings agree, and one that nobody
takes, or that was begun for other settings, is ended with nothing left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from toolscript import Runtime
from toolscript import __file__ as PACKAGE
from toolscript.host import headstart, sandbox
from toolscript.host.sandbox import Mount
from toolscript.host.template import Template

from ..conftest import eventually, processes_with

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a new process: no sandbox check remembered in memory, no head start pending."""
    monkeypatch.setattr(sandbox, "_probed", {})
    monkeypatch.setattr(headstart, "_pending", None)


@pytest.fixture
async def state(tmp_path: Path) -> Path:
    """A state folder whose sandbox check has passed (a runtime opened there once)."""
    folder = tmp_path / "state"
    async with Runtime(state_dir=folder, journal=":memory:", pool_size=0, sandbox="required"):
        pass
    assert any((folder / "sandbox-checks").iterdir())
    return folder


def work_mount(folder: Path) -> list[Mount]:
    resolved = str(folder.resolve())
    return [Mount(resolved, resolved, writable=True)]


async def test_the_first_interpreter_comes_from_the_head_start(state: Path, tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("seen")
    assert headstart.begin(env={}, mounts=work_mount(tmp_path), network=False, state=state)
    head = headstart._pending
    assert head is not None and head.process.poll() is None

    async with Runtime(
        state_dir=state, journal=":memory:", fork=False, pool_size=0, workdir=tmp_path
    ) as rt:
        result = await rt.shell("one").run("print(open('data.txt').read())")
        assert result.status == "ok", result.text
        assert result.stdout == "seen\n"
        assert rt.sandbox == "namespaces+seccomp"
        assert head.process.poll() is None  # its template serves the interpreter

    assert head.process.poll() is not None
    assert not head.shells_root.exists()
    assert processes_with(str(head.shells_root)) == []


async def test_a_head_start_begun_for_other_settings_is_ended_and_not_used(
    state: Path, tmp_path: Path
) -> None:
    assert headstart.begin(env={}, mounts=work_mount(tmp_path), network=False, state=state)
    head = headstart._pending
    assert head is not None

    async with Runtime(
        state_dir=state,
        journal=":memory:",
        fork=False,
        pool_size=0,
        workdir=tmp_path,
        env={"OTHER": "1"},
    ) as rt:
        assert head.process.poll() is not None
        assert processes_with(str(head.shells_root)) == []
        result = await rt.shell("one").run("import os; print(os.environ['OTHER'])")
        assert result.stdout == "1\n", result.text


def test_no_head_start_without_a_remembered_sandbox_check(tmp_path: Path) -> None:
    assert not headstart.begin(env={}, mounts=[], network=False, state=tmp_path / "fresh")
    assert headstart._pending is None


def test_a_head_start_nobody_takes_ends_with_the_process(state: Path, tmp_path: Path) -> None:
    source = str(Path(PACKAGE).resolve().parents[1])
    program = (
        f"import sys; sys.path.insert(0, {source!r})\n"
        "from pathlib import Path\n"
        "from toolscript.host import headstart\n"
        f"assert headstart.begin(env={{}}, mounts=[], network=False, state=Path({str(state)!r}))\n"
        "print(headstart._pending.shells_root, headstart._pending.process.pid, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    shells_root, _pid = done.stdout.split()
    assert processes_with(shells_root) == []
    assert not Path(shells_root).exists()


def test_exec_with_its_default_settings_begins_before_it_parses_and_uses_it(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolscript import cli
    from toolscript.cli import early

    (tmp_path / "script.py").write_text("print(open('data.txt').read())")
    (tmp_path / "data.txt").write_text("seen")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLSCRIPT_STATE", str(state))
    abandoned: list[headstart.HeadStart] = []
    abandon = headstart.HeadStart.abandon
    monkeypatch.setattr(
        headstart.HeadStart, "abandon", lambda head: (abandoned.append(head), abandon(head))[1]
    )
    forks: list[object] = []
    fork = Template.fork
    monkeypatch.setattr(Template, "fork", lambda *a, **k: (forks.append(a), fork(*a, **k))[1])
    argv = ["exec", "script.py", "--journal", ":memory:"]

    early.begin_exec(argv)
    head = headstart._pending
    assert head is not None and head.process.poll() is None
    assert head.asked is not None  # the kernel was asked for at once
    assert cli.run(argv) == 0
    assert "seen" in capsys.readouterr().out
    assert abandoned == []  # claimed, and its template served the interpreter
    assert forks == []  # with the kernel it had forked before the runtime opened
    assert head.process.poll() is not None
    assert processes_with(str(head.shells_root)) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "s.py", "--sandbox", "off"],
        ["exec", "s.py", "--sandbox=required"],
        ["exec", "s.py", "--mount", "/data"],
        ["exec", "s.py", "--net"],  # an abbreviation argparse accepts for --network
        ["exec", "s.py", "--cwd", "/elsewhere"],
        ["exec", "--no-cwd", "s.py"],
        ["exec", "-h"],
        ["exec", "--he"],
        ["tools"],
        [],
    ],
)
def test_no_early_head_start_when_the_arguments_may_change_its_settings(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    from toolscript.cli import early

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLSCRIPT_STATE", str(state))
    early.begin_exec(argv)
    assert headstart._pending is None


def test_exec_whose_early_guess_was_wrong_ends_it_and_still_runs(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A head start begun from the raw arguments for settings the runtime then does not open
    with (here: another folder than the one the guess showed) is ended, not used."""
    from toolscript import cli
    from toolscript.cli import early

    (tmp_path / "script.py").write_text("import os; print(os.getcwd())")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLSCRIPT_STATE", str(state))
    early.begin_exec(["exec", "script.py"])
    head = headstart._pending
    assert head is not None

    assert cli.run(["exec", "script.py", "--journal", ":memory:", "--cwd", str(elsewhere)]) == 0
    assert str(elsewhere.resolve()) in capsys.readouterr().out
    assert head.process.poll() is not None
    assert processes_with(str(head.shells_root)) == []


@pytest.mark.parametrize(
    "other",
    [{"limits": {"open_files": 100}}, {"preload": ["fractions"]}],
    ids=["other-limits", "a-preload"],
)
async def test_a_kernel_asked_for_other_settings_is_ended_with_its_head_start(
    state: Path, tmp_path: Path, other: dict[str, object]
) -> None:
    """A head start whose kernel was forked at once for the default limits and no preload is
    not used by a runtime whose first kernel would have other ones: the runtime's kernel
    has what the runtime says."""
    folder = str(tmp_path.resolve())
    assert headstart.begin(
        env={}, mounts=work_mount(tmp_path), network=False, state=state, cwd=folder
    )
    head = headstart._pending
    assert head is not None and head.asked is not None

    async with Runtime(
        state_dir=state, journal=":memory:", fork=False, pool_size=0, workdir=tmp_path, **other
    ) as rt:
        assert head.process.poll() is not None
        assert processes_with(str(head.shells_root)) == []
        result = await rt.shell("one").run(
            "import resource, sys\n"
            "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 'fractions' in sys.modules)"
        )
        assert result.status == "ok", result.text
        limit, preloaded = result.stdout.split()
        assert (limit == "100") == ("limits" in other)
        assert (preloaded == "True") == ("preload" in other)


async def test_a_kernel_forked_before_the_runtime_opens_is_taken_from_its_answer(
    state: Path, tmp_path: Path
) -> None:
    """The template's answer to the fork the head start asked for may come before the
    runtime awaits it (here: the kernel is running before the runtime opens)."""
    folder = str(tmp_path.resolve())
    assert headstart.begin(
        env={}, mounts=work_mount(tmp_path), network=False, state=state, cwd=folder
    )
    head = headstart._pending
    assert head is not None

    def kernel_forked() -> bool:  # bubblewrap, its PID 1, the template, the init, the kernel
        return len(psutil.Process(head.process.pid).children(recursive=True)) >= 4

    await eventually(kernel_forked, 20, "the template did not fork the kernel asked for")
    async with Runtime(
        state_dir=state, journal=":memory:", fork=False, pool_size=0, workdir=tmp_path
    ) as rt:
        result = await rt.shell("one").run("print(6 * 7)")
        assert result.status == "ok", result.text
        assert result.stdout == "42\n"


async def test_a_kernel_asked_for_that_died_before_the_runtime_opened_is_replaced_unseen(
    state: Path, tmp_path: Path
) -> None:
    """The kernel the head start asked for is killed before the runtime takes it: nothing of
    the first run had reached it, so the run is given a new interpreter, and runs."""
    folder = str(tmp_path.resolve())
    assert headstart.begin(
        env={}, mounts=work_mount(tmp_path), network=False, state=state, cwd=folder
    )
    head = headstart._pending
    assert head is not None

    def in_sandbox() -> list[psutil.Process]:
        return psutil.Process(head.process.pid).children(recursive=True)

    await eventually(lambda: len(in_sandbox()) >= 4, 20, "the kernel asked for was not forked")
    kernel = in_sandbox()[-1]  # the init's child
    kernel.kill()
    async with Runtime(
        state_dir=state, journal=":memory:", fork=False, pool_size=0, workdir=tmp_path
    ) as rt:
        first = await rt.shell("one").run("print(6 * 7)")
        assert first.status == "ok", first.text
        assert first.stdout == "42\n"
        second = await rt.shell("one").run("print(6 * 7)")
        assert second.status == "ok", second.text
        assert second.generation == first.generation
