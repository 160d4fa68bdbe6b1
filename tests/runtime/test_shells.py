"""A shell keeps its namespace across runs; every way a script can end is reported as it was."""

from __future__ import annotations

import asyncio
import linecache
import time
import traceback
from pathlib import Path

import pytest

from tests.conftest import MakeRuntime, wait_for_file
from toolscript import Runtime, tool


@pytest.mark.timeout(20)
async def test_a_variable_set_in_one_run_is_there_in_the_next(runtime: Runtime) -> None:
    shell = runtime.shell()
    first = await shell.run("import math\ncounter = 41\ndef double(x):\n    return 2 * x\n")
    second = await shell.run("counter += 1\ndouble(counter) + math.floor(0.5)")
    assert first.status == "ok" and second.status == "ok"
    assert second.value == "84"
    assert second.generation == first.generation


@pytest.mark.timeout(30)
async def test_twenty_runs_in_a_row_on_one_shell_keep_their_state(runtime: Runtime) -> None:
    shell = runtime.shell()
    await shell.run("seen = []")
    generations = set()
    for n in range(20):
        result = await shell.run(f"seen.append({n})\nprint('run', {n})\nlen(seen)")
        assert result.status == "ok", result.text
        assert result.value == str(n + 1)
        assert result.stdout == f"run {n}\n"
        generations.add(result.generation)
    final = await shell.run("seen")
    assert final.value == repr(list(range(20)))
    assert generations == {final.generation}


@pytest.mark.timeout(20)
async def test_two_shells_have_separate_namespaces(runtime: Runtime) -> None:
    one, two = runtime.shell("one"), runtime.shell("two")
    await one.run("name = 'one'")
    await two.run("name = 'two'")
    assert (await one.run("name")).value == "'one'"
    assert (await two.run("name")).value == "'two'"


@pytest.mark.timeout(20)
async def test_top_level_await_runs_and_tasks_survive_between_runs(runtime: Runtime) -> None:
    shell = runtime.shell()
    result = await shell.run(
        "import asyncio\n"
        "async def later(x):\n"
        "    await asyncio.sleep(0)\n"
        "    return x * 3\n"
        "kept = asyncio.ensure_future(later(5))\n"
        "await later(2)"
    )
    assert result.status == "ok", result.text
    assert result.value == "6"
    after = await shell.run("await kept")
    assert after.value == "15"


@pytest.mark.timeout(20)
async def test_the_last_expression_is_returned_as_its_repr(runtime: Runtime) -> None:
    assert (await runtime.run("{'a': [1, 2]}")).value == "{'a': [1, 2]}"
    assert (await runtime.run("'text'")).value == "'text'"
    assert (await runtime.run("x = 3")).value is None
    assert (await runtime.run("None")).value is None
    assert (await runtime.run("print('only output')")).value is None


@pytest.mark.timeout(20)
async def test_a_repr_that_raises_leaves_value_saying_so_and_the_run_ok(runtime: Runtime) -> None:
    result = await runtime.run(
        "class Awkward:\n"
        "    def __repr__(self):\n"
        "        raise ValueError('no repr for you')\n"
        "Awkward()"
    )
    assert result.status == "ok", result.text
    assert result.value is not None
    assert "repr failed" in result.value and "no repr for you" in result.value
    assert (await runtime.run("1 + 1")).value == "2"


@pytest.mark.timeout(20)
async def test_sys_exit_zero_is_ok_and_keeps_the_interpreter(runtime: Runtime) -> None:
    await runtime.run("kept = 'yes'")
    result = await runtime.run("import sys\nprint('before')\nsys.exit(0)\nprint('after')")
    assert result.status == "ok" and result.exit_code == 0
    assert result.stdout == "before\n"
    assert "sys.exit(0)" in result.note
    after = await runtime.run("kept")
    assert after.value == "'yes'" and after.generation == result.generation


@pytest.mark.timeout(20)
async def test_sys_exit_with_another_code_is_an_error_and_keeps_the_interpreter(
    runtime: Runtime,
) -> None:
    await runtime.run("kept = 'yes'")
    result = await runtime.run("import sys\nsys.exit(3)")
    assert result.status == "error" and result.exit_code == 1
    assert result.error is not None and "sys.exit(3)" in result.error
    after = await runtime.run("kept")
    assert after.value == "'yes'" and after.generation == result.generation
    assert "fresh interpreter" not in after.note


@pytest.mark.timeout(20)
async def test_a_keyboard_interrupt_raised_by_the_script_is_an_error(runtime: Runtime) -> None:
    await runtime.run("kept = 1")
    result = await runtime.run("raise KeyboardInterrupt('my own')")
    assert result.status == "error", result.text
    assert result.error is not None and "KeyboardInterrupt" in result.error
    assert (await runtime.run("kept")).value == "1"


@pytest.mark.timeout(20)
async def test_an_exception_is_an_error_with_the_traceback_of_the_script(
    runtime: Runtime,
) -> None:
    result = await runtime.run("def inner():\n    1 / 0\nprint('so far')\ninner()")
    assert result.status == "error" and result.exit_code == 1
    assert result.stdout == "so far\n"
    assert result.error is not None
    assert "ZeroDivisionError" in result.error and "inner" in result.error
    assert "ZeroDivisionError" in result.text


@pytest.mark.timeout(20)
async def test_a_syntax_error_is_an_error_and_nothing_ran(runtime: Runtime) -> None:
    await runtime.run("kept = 1")
    result = await runtime.run("kept = 2\nthis is not python(")
    assert result.status == "error"
    assert result.error is not None and "SyntaxError" in result.error
    assert (await runtime.run("kept")).value == "1"


@pytest.mark.timeout(20)
async def test_a_busy_shell_refuses_a_second_run_at_once(runtime: Runtime, tmp_path: Path) -> None:
    shell = runtime.shell()
    started, release = tmp_path / "started", tmp_path / "release"
    first = asyncio.create_task(
        shell.run(
            "import time, pathlib\n"
            f"pathlib.Path({str(started)!r}).touch()\n"
            f"while not pathlib.Path({str(release)!r}).exists():\n"
            "    time.sleep(0.005)\n"
            "'done'",
            time_limit=10,
        )
    )
    await wait_for_file(started)
    asked = time.monotonic()
    second = await shell.run("'second'")
    assert time.monotonic() - asked < 0.5
    release.touch()
    assert second.status == "refused" and second.exit_code == 1
    assert "already running" in second.note and "Nothing ran" in second.note
    assert (await first).value == "'done'"
    assert (await shell.run("'again'")).value == "'again'"


@pytest.mark.timeout(20)
async def test_a_time_limit_over_the_maximum_is_refused_saying_why(
    make_runtime,
) -> None:
    runtime = await make_runtime(max_time_limit=5, default_time_limit=5)
    result = await runtime.run("1", time_limit=6)
    assert result.status == "refused"
    assert "maximum" in result.note and "Nothing ran" in result.note
    assert (await runtime.run("1", time_limit=5)).status == "ok"


@pytest.mark.timeout(60)
async def test_a_script_too_large_for_the_channel_is_refused_and_the_shell_kept(
    runtime: Runtime,
) -> None:
    # Sent anyway, the kernel would take the frame for a broken host and exit: a "crash"
    # of a script that never ran, and the shell's variables gone.
    shell = runtime.shell()
    first = await shell.run("kept = 1")
    result = await shell.run("x = 1  # " + "y" * 70_000_000)
    assert result.status == "refused", result.text
    assert "Nothing ran" in result.note and "64 MiB" in result.note
    after = await shell.run("kept")
    assert after.status == "ok" and after.value == "1", after.text
    assert after.generation == first.generation


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("1", "1"),
        ("x = 2\nx * 3", "6"),
        ("x = 1; x", "1"),  # the expression shares its line with a statement
        ("1;", "1"),
        ("y = 5\n(y +\n 1)", "6"),  # an expression over several lines
        ("import asyncio\nawait asyncio.sleep(0)\n'done'  # note\n\n# the end\n", "'done'"),
        ("import asyncio\nawait asyncio.sleep(0, 'awaited')", "'awaited'"),
        ("import asyncio\nasync def f():\n    return 1\nf()", "<coroutine object f at"),
        (
            "from __future__ import annotations\ndef g(a: int): pass\ng.__annotations__",
            "{'a': 'int'}",
        ),
        ("for i in range(3):\n    pass\ni", "2"),
        ("x = (1,\n2)", None),
        ("if True:\n    5\n", None),
        ("# only a comment", None),
    ],
)
@pytest.mark.timeout(20)
async def test_the_value_is_the_last_expressions_whatever_the_script_looks_like(
    runtime: Runtime, code: str, value: str | None
) -> None:
    result = await runtime.shell().run(code)
    assert result.status == "ok", result.text
    if value is None or not value.endswith(" at"):
        assert result.value == value
    else:
        assert result.value is not None and result.value.startswith(value)


@pytest.mark.timeout(20)
async def test_an_error_in_the_last_expression_points_at_its_own_line_and_columns(
    runtime: Runtime,
) -> None:
    source = "x = 1\ny = 0\n\nx  /  y"
    result = await runtime.shell().run(source)
    assert result.status == "error"
    assert result.error is not None
    # The same source compiled whole and formatted here: same line, same carets.
    linecache.cache["<reference>"] = (len(source), None, source.splitlines(True), "<reference>")
    try:
        exec(compile(source, "<reference>", "exec"), {})
    except ZeroDivisionError as error:
        assert error.__traceback__ is not None
        reference = traceback.TracebackException(
            type(error), error, error.__traceback__.tb_next
        ).format()
        expected = "".join(reference).split("<reference>", 1)[1]
    assert "line 4, in <module>\n    x  /  y\n" in expected
    assert expected in result.error


@pytest.mark.timeout(20)
async def test_a_script_holding_a_lone_surrogate_gets_an_answer_and_is_journaled(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # Code from a model arrives as JSON, where "\ud800" is a valid escape; Python cannot
    # compile such text, and says so; the host must neither raise nor lose the record.
    runtime = await make_runtime(journal=str(tmp_path / "journal.sqlite3"))
    result = await runtime.shell().run("x = '\ud800'\nlen(x)")
    assert result.status == "error"
    assert result.error is not None and "UnicodeEncodeError" in result.error
    [script] = [s for s in runtime.journal.scripts() if s.script_id == result.script_id]
    assert script.status == "error"


@pytest.mark.parametrize("name", ["a\nb", "tab\there", "\ud800"])
@pytest.mark.timeout(10)
async def test_a_shell_name_that_is_not_printable_text_is_refused(
    runtime: Runtime, name: str
) -> None:
    with pytest.raises(ValueError, match="printable"):
        runtime.shell(name)


@pytest.mark.timeout(30)
async def test_shells_whose_names_differ_have_folders_of_their_own_even_long_ones(
    runtime: Runtime,
) -> None:
    names = ["a/b", "a_b", "x" * 300, "é" * 200, "x" * 301]
    folders = []
    for name in names:
        shell = runtime.shell(name)
        result = await shell.run(f"open('mine', 'w').write({name!r})\nimport os\nos.getcwd()")
        assert result.status == "ok", result.text
        folders.append(result.value)
    assert len(set(folders)) == len(names), folders
    for name in names:  # each still finds what it wrote, not another's
        mine = await runtime.shell(name).run("open('mine').read()")
        assert mine.value == repr(name), mine.text


def test_an_env_that_is_not_strings_is_refused_when_the_runtime_is_made() -> None:
    for env in ({"A": 1}, {1: "a"}, {"A=B": "c"}, {"A": "b\0"}):
        with pytest.raises(ValueError, match="env"):
            Runtime(env=env)  # type: ignore[dict-item]


@tool
async def doubled(x: int) -> int:
    """Twice x."""
    return 2 * x


def test_tools_that_are_not_a_list_are_refused_saying_how_to_give_one() -> None:
    with pytest.raises(TypeError, match=r"Runtime\(tools=\[my_tool\]\)"):
        Runtime(tools=doubled)  # type: ignore[arg-type]


@pytest.mark.timeout(30)
async def test_the_same_tool_given_twice_is_one_tool(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime(tools=[doubled, doubled])
    result = await runtime.run("await doubled(x=2)")
    assert (result.status, result.value) == ("ok", "4"), result.text
    assert "could not be bound" not in result.note
    assert "could not be bound" not in runtime.prompt()


@tool
async def answer(x: int) -> int:
    """Answer x."""
    return x


@pytest.mark.timeout(30)
async def test_a_shell_closed_before_its_script_began_does_not_begin_it(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = await make_runtime(tools=[answer])
    shell = runtime.shell("main")
    await shell.run("1")
    ran = tmp_path / "ran"
    code = f"await answer(x=1)\nopen({str(ran)!r}, 'w').close()\nimport time\ntime.sleep(20)"
    running = asyncio.ensure_future(shell.run(code, time_limit=25))
    await asyncio.sleep(0)  # the run has begun: its check before running is under way
    started = time.monotonic()
    await shell.close()
    assert time.monotonic() - started < 1.5
    result = await asyncio.wait_for(running, 10)
    assert result.status == "cancelled", result.text
    assert "nothing ran" in result.note and "SIGKILL" not in result.note
    assert not ran.exists()
    assert (await shell.run("2")).status == "ok"


@pytest.mark.timeout(30)
async def test_a_shell_closed_while_its_interpreter_starts_keeps_none(
    make_runtime: MakeRuntime,
) -> None:
    # The run, not begun, is cancelled; the interpreter it was getting must not be left in
    # the closed shell, holding one of `max_interpreters` places until its idle timeout.
    runtime = await make_runtime(fork=False)
    shell = runtime.shell("main")
    running = asyncio.ensure_future(shell.run("print('ran')"))
    await asyncio.sleep(0.02)  # its interpreter is starting
    await shell.close()
    result = await running
    assert result.status == "cancelled" and "nothing ran" in result.note, result.text
    assert shell._interpreter is None
    assert runtime._pool is not None and runtime._pool._live == 0


@pytest.mark.timeout(60)
async def test_no_two_shell_names_share_a_folder(runtime: Runtime) -> None:
    # "a/b" becomes "a_b" and a digest of "a/b"; a name that is already of that form, or
    # the name "a_b" itself, must not land on the same folder (nor see its files).
    import hashlib

    digested = "a_b-" + hashlib.sha256(b"a/b").hexdigest()[:16]
    names = ["a/b", "a_b", digested, digested + "x", "..", "_..", "x" * 300, "x" * 301]
    folders = {}
    for name in names:
        result = await runtime.shell(name).run(
            f"import os\nopen('mine', 'w').write({name!r})\nos.getcwd()"
        )
        assert result.status == "ok", result.text
        folders[name] = result.value
    assert len(set(folders.values())) == len(names), folders
    for name in names:
        seen = await runtime.shell(name).run("open('mine').read()")
        assert seen.value == repr(name), (name, seen.value)


@pytest.mark.timeout(30)
async def test_last_result_keeps_the_result_of_a_run_whose_caller_was_cancelled(
    make_runtime: MakeRuntime,
) -> None:
    entered = asyncio.Event()

    @tool
    async def hold() -> str:
        """Wait until cancelled."""
        entered.set()
        await asyncio.Event().wait()
        return "never"

    runtime = await make_runtime(tools=[hold])
    shell = runtime.shell("main")
    assert shell.last_result is None
    first = await shell.run("1 + 1")
    assert shell.last_result is first
    waiting = asyncio.create_task(shell.run("await hold()"))
    await asyncio.wait_for(entered.wait(), 15)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    kept = shell.last_result
    assert kept is not None and kept is not first
    assert kept.status == "cancelled", kept.text
    assert kept.calls.by_fate == {"pending": 1}
    assert [c.tool for c in runtime.journal.calls(script_id=kept.script_id)] == ["hold"]


@pytest.mark.timeout(30)
async def test_a_run_closed_before_it_began_is_cancelled_giving_the_close_reason(
    runtime: Runtime,
) -> None:
    shell = runtime.shell("closing")
    waiting = asyncio.ensure_future(shell.run("import time\ntime.sleep(5)"))
    await asyncio.sleep(0)  # the run is under way, its interpreter not yet had
    await shell.close("closing now")
    result = await asyncio.wait_for(waiting, 20)
    assert result.status == "cancelled", result.text
    assert "(closing now)" in result.note, result.note
