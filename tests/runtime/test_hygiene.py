"""The interpreter gets a scrubbed environment, its own directory, process group and limits."""

from __future__ import annotations

import ast
import os
from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime


@pytest.mark.timeout(20)
async def test_the_hosts_secrets_stay_out_of_the_interpreters_environment(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSCRIPT_TEST_SECRET", "hunter2-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hunter2")
    runtime = await make_runtime(env={"EXTRA_SETTING": "passed on"})
    result = await runtime.run("import os\ndict(os.environ)")
    assert result.status == "ok"
    assert result.value is not None
    assert "hunter2" not in result.value
    environment = ast.literal_eval(result.value)
    assert "TOOLSCRIPT_TEST_SECRET" not in environment
    assert "OPENAI_API_KEY" not in environment
    assert environment["EXTRA_SETTING"] == "passed on"
    assert environment.get("PATH") == os.environ.get("PATH")


@pytest.mark.timeout(20)
async def test_each_shell_works_in_its_own_directory(runtime: Runtime) -> None:
    one = await runtime.shell("one").run("import os\nopen('mine.txt', 'w').write('1')\nos.getcwd()")
    two = await runtime.shell("two").run("import os\nos.path.exists('mine.txt'), os.getcwd()")
    assert one.value is not None and two.value is not None
    first = ast.literal_eval(one.value)
    exists, second = ast.literal_eval(two.value)
    assert first != second and first != os.getcwd() and second != os.getcwd()
    assert exists is False


@pytest.mark.timeout(20)
async def test_the_interpreter_leads_its_own_process_group_and_session(runtime: Runtime) -> None:
    result = await runtime.run(
        "import os\nos.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid(), os.getpgid(0)"
    )
    assert result.value is not None
    leads_group, leads_session, group = ast.literal_eval(result.value)
    assert leads_group and leads_session
    assert group != os.getpgid(0)


LIMITS = (
    "import resource\n"
    "{name: resource.getrlimit(getattr(resource, name))[0] for name in "
    "('RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_CPU')}"
)


@pytest.mark.timeout(20)
async def test_default_resource_limits_are_applied(runtime: Runtime) -> None:
    import resource

    result = await runtime.run(LIMITS)
    assert result.value is not None
    limits = ast.literal_eval(result.value)
    assert limits["RLIMIT_AS"] == 8 * 1024**3
    assert limits["RLIMIT_FSIZE"] == 1024**3
    assert limits["RLIMIT_NOFILE"] == min(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    assert limits["RLIMIT_NPROC"] == min(1024, resource.getrlimit(resource.RLIMIT_NPROC)[1])
    assert limits["RLIMIT_CPU"] == resource.getrlimit(resource.RLIMIT_CPU)[0]


@pytest.mark.timeout(20)
async def test_resource_limits_the_caller_sets_are_applied(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime(
        limits={
            "address_space": 2 * 1024**3,
            "cpu_time": 300,
            "file_size": 1024**2,
            "open_files": 256,
            "processes": 512,
        }
    )
    result = await runtime.run(LIMITS)
    assert result.value is not None
    assert ast.literal_eval(result.value) == {
        "RLIMIT_AS": 2 * 1024**3,
        "RLIMIT_NPROC": 512,
        "RLIMIT_FSIZE": 1024**2,
        "RLIMIT_NOFILE": 256,
        "RLIMIT_CPU": 300,
    }


@pytest.mark.timeout(20)
async def test_a_file_written_over_the_file_size_limit_is_stopped(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(limits={"file_size": 1024**2})
    result = await runtime.run(
        "import signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "with open('big.bin', 'wb') as f:\n"
        "    f.write(b'x' * (2 * 1024**2))\n"
    )
    assert result.status == "error"
    assert result.error is not None and "File too large" in result.error


@pytest.mark.timeout(20)
async def test_an_unknown_limit_or_bad_knob_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="memory"):
        Runtime(limits={"memory": 1})
    with pytest.raises(ValueError, match="grace"):
        Runtime(grace=0)
    with pytest.raises(ValueError, match="output_limit"):
        Runtime(output_limit=10)


@pytest.mark.parametrize(
    ("knobs", "named"),
    [
        ({"preload": "json"}, "preload"),  # a string is not its letters' modules
        ({"preload": None}, "preload"),
        ({"fork": "no"}, "fork"),
        ({"keep_interpreters": "false"}, "keep_interpreters"),  # not a keeper
        ({"python": 3}, "python"),
        ({"env": "A=1"}, "env"),
        ({"limits": 3}, "limits"),
        ({"mounts": ["/tmp"]}, "mounts"),
        ({"state_dir": 3}, "state_dir"),
        ({"journal": 3}, "journal"),
    ],
)
def test_a_knob_of_the_wrong_kind_is_refused_naming_it(knobs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named} must be"):
        Runtime(**knobs)


@pytest.mark.timeout(30)
async def test_the_interpreter_holds_no_descriptor_of_the_host(runtime: Runtime) -> None:
    # Only stdin/stdout/stderr, its event loop's own (epoll and the wake-up pair), its
    # channel and its copies of stdout and stderr: nothing the host's event loop may have let
    # it inherit.
    result = await runtime.run(
        "import os\n"
        "kinds = []\n"
        "for name in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        kinds.append(os.readlink(f'/proc/self/fd/{name}').split(':')[0])\n"
        "    except OSError:\n"
        "        pass\n"
        "sorted(kinds)"
    )
    kinds = ast.literal_eval(result.value or "[]")
    # 0-2, epoll, the wake-up pair, the channel, the copies of fd 1 and 2
    assert len(kinds) == 3 + 1 + 2 + 1 + 2, kinds
    assert kinds.count("socket") in (3, 5, 7), (
        kinds
    )  # more when a host on uvloop made stdio sockets


@pytest.mark.timeout(30)
async def test_what_a_kernel_loaded_before_the_script_is_out_of_the_collectors_way(
    runtime: Runtime,
) -> None:
    # A full collection in a busy script should walk the script's objects only: the first
    # kernel freezes what it loaded, and later ones are forked from a frozen template.
    script = "import gc\n(gc.get_freeze_count(), len(gc.get_objects()))"
    for shell in ("first", "second", "third"):
        result = await runtime.shell(shell).run(script)
        assert result.status == "ok", result.text
        frozen, tracked = ast.literal_eval(result.value or "()")
        assert frozen > 5_000 and tracked < frozen, (shell, frozen, tracked)


def test_a_knob_cannot_be_changed_on_the_runtime_it_was_made_with() -> None:
    # It would read the new value while the runtime goes on with its settings.
    runtime = Runtime(max_time_limit=600)
    with pytest.raises(AttributeError, match="read-only"):
        runtime.max_time_limit = 1000
    assert runtime.max_time_limit == runtime.settings.max_time_limit == 600


@pytest.mark.timeout(30)
async def test_a_script_over_the_cpu_time_limit_is_said_to_have_used_it_up(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(limits={"cpu_time": 1})
    result = await runtime.run("while True:\n    pass", time_limit=20)
    assert result.status == "crashed", result.text
    assert "SIGXCPU" in result.note and "CPU-time limit" in result.note, result.note
    assert "out-of-memory" not in result.note


@pytest.mark.parametrize("method", ["prompt", "tool_names", "tool_summaries"])
async def test_matching_words_that_are_not_text_are_refused_naming_them(
    make_runtime: MakeRuntime, method: str
) -> None:
    runtime = await make_runtime()
    with pytest.raises(TypeError, match=r"^matching must be"):
        getattr(runtime, method)(3)


def test_python_given_as_a_path_is_taken() -> None:
    # The knob names a path; `Path(sys.executable)` was taken before knobs were checked.
    import sys
    from pathlib import Path

    from toolscript import Settings

    assert Settings(python=Path(sys.executable)).python == sys.executable  # type: ignore[arg-type]
    assert Runtime(python=Path(sys.executable)).python == sys.executable  # type: ignore[arg-type]


@pytest.mark.timeout(20)
async def test_a_script_sees_an_empty_command_line_as_in_an_interactive_interpreter(
    make_runtime: MakeRuntime,
) -> None:
    # The kernel's own arguments (its source folder, its settings) are not the script's: a
    # script that parses its command line must find nothing there.
    runtime = await make_runtime(pool_size=1)
    code = (
        "import argparse, sys\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--n', type=int, default=3)\n"
        "print(sys.argv, parser.parse_args().n)\n"
    )
    for shell in ("fresh", "from-the-pool"):
        result = await runtime.shell(shell).run(code)
        assert result.status == "ok", result.text
        assert result.stdout == "[''] 3\n"


@pytest.mark.timeout(20)
async def test_a_script_read_from_a_file_saved_with_a_byte_order_mark_runs(
    runtime: Runtime,
) -> None:
    # Read as plain UTF-8, such a file begins with U+FEFF, which Python refuses in source text
    # but skips in a file it runs itself.
    result = await runtime.run("\ufeffprint('ran')\n6 * 7")
    assert result.status == "ok", result.text
    assert (result.stdout, result.value) == ("ran\n", "42")
    started = await runtime.shell("background").start("\ufeff6 * 7")
    assert (await started.result()).value == "42"
