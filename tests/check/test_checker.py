"""`ScriptChecker` on its own: what it checks, what it skips, and stubs with `TypedDict`s."""

from __future__ import annotations

import asyncio
import gc
import os
import select
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from toolscript.host import checker as checker_module
from toolscript.host.catalogue import ToolCatalogue
from toolscript.host.checker import EARLIER_SCRIPT_LONGEST, EarlierRuns, ScriptChecker
from toolscript.tools.check import CheckedCatalogue, CheckedScript, Diagnostic
from toolscript.tools.spec import ToolSpec

from ..conftest import LONG_LITERAL, collections_that_format_tracebacks
from .conftest import catalogue_tools


@pytest.fixture(autouse=True)
async def checkers_closed(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """Every `ScriptChecker` a test makes is closed after it: each runs a type server."""
    made: list[ScriptChecker] = []
    init = ScriptChecker.__init__

    def made_here(self: ScriptChecker, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(ScriptChecker, "__init__", made_here)
    yield
    for checker in made:
        await checker.close()


def specs() -> list[ToolSpec]:
    return [item.spec for item in catalogue_tools([])]  # add_note, then search_notes


@pytest.mark.timeout(60)
async def test_a_key_the_results_typeddict_lacks_is_a_finding(tmp_path: Path) -> None:
    catalogue = ToolCatalogue(specs(), None)
    assert "-> Note:" in catalogue.prompt() and "-> list[Note]:" in catalogue.prompt()
    code = (
        "note = await add_note(text='a')\n"
        "print(note['text'])\n"
        "print(note['txt'])\n"
        "for found in await search_notes(query='a'):\n"
        "    found['tag']\n"
    )
    outcome = await ScriptChecker(tmp_path).check(catalogue, code, frozenset(), None)
    assert outcome.ran and outcome.failure is None
    assert [str(finding) for finding in outcome.findings] == [
        '<script>:3: a result\'s keys: Unknown key "txt" for TypedDict `Note` - did you mean '
        '"text"?',
        '<script>:5: a result\'s keys: Unknown key "tag" for TypedDict `Note` - did you mean '
        '"tags"?',
    ]


@pytest.mark.timeout(60)
async def test_keys_the_script_adds_to_a_result_are_no_finding(tmp_path: Path) -> None:
    # A result is a plain dict: adding a key, then reading it, is valid code.
    code = (
        "note = await add_note(text='a')\n"
        "note['city'] = 'London'\n"
        "print(note['city'])\n"
        "note.setdefault('seen', 0)\n"
        "note['seen'] += 1\n"
        "note.update({'town': 1}, extra=2)\n"
        "print(note.pop('gone', None), note.get('absent'), note['town'], note['extra'])\n"
        "for found in await search_notes(query='a'):\n"
        "    found['length'] = len(found['text'])\n"
        "    del found['length']\n"
        "print(note['txt'])\n"  # still a misspelled read of the tool's own key
    )
    outcome = await ScriptChecker(tmp_path).check(ToolCatalogue(specs(), None), code, None, None)
    assert outcome.ran and outcome.failure is None
    assert [str(finding) for finding in outcome.findings] == [
        '<script>:11: a result\'s keys: Unknown key "txt" for TypedDict `Note` - did you mean '
        '"text"?'
    ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("adds", "known"),
    [
        ("note |= {'city': 'London'}", True),
        ("note.update([('city', 'London')])", True),
        ("extra = {'city': 'London'}\nnote.update(extra)", False),
        ("note |= dict(city='London')", False),
        ("note.update({**{'city': 'London'}})", False),
        ("note.update(**{'city': 'London'})", False),
        ("key = 'city'\nnote[key] = 'London'", False),
        ("for key in ['city', 'zip']:\n    note[key] = ''", False),
        ("note.setdefault(''.join(['ci', 'ty']), 'London')", False),
        ("import operator\noperator.setitem(note, 'city', 'London')", True),
        ("from operator import setitem\nsetitem(note, 'ci' + 'ty', 'London')", False),
        ("note.__setitem__('city', 'London')", True),
    ],
    ids=[
        *("ior-literal", "update-pairs", "update-name", "ior-call", "update-unpacked", "kwargs"),
        *("store-name", "store-loop", "setdefault-call", "setitem", "setitem-call", "dunder"),
    ],
)
async def test_keys_added_in_ways_whose_keys_cannot_all_be_told_are_no_finding(
    tmp_path: Path, adds: str, known: bool
) -> None:
    code = f"note = await add_note(text='a')\n{adds}\nprint(note['city'])\nprint(note['txt'])\n"
    outcome = await ScriptChecker(tmp_path).check(ToolCatalogue(specs(), None), code, None, None)
    assert outcome.ran and outcome.failure is None
    said = [finding.message for finding in outcome.findings]
    # Where the keys added are told, a misspelled read of the tool's own key still is one.
    assert said == (
        ['a result\'s keys: Unknown key "txt" for TypedDict `Note` - did you mean "text"?']
        if known
        else []
    ), said


@pytest.mark.timeout(60)
async def test_a_server_called_as_a_function_is_a_finding_that_names_the_python_tool(
    tmp_path: Path,
) -> None:
    # A Python tool named like a server is bound under another spelling; the script calls
    # the server's namespace, which the stubs declare a class (a call makes one, for ty).
    async def answer(arguments: dict[str, Any]) -> Any:
        return "pong"

    server_tool = ToolSpec("hello", "Say hello.", {"type": "object"}, answer, server="ping")
    own = ToolSpec("ping", "My own ping.", {"type": "object"}, answer)
    catalogue = ToolCatalogue([server_tool, own], None)
    assert "Renamed because another binding has the name: `ping_2`" in catalogue.prompt()
    checker = ScriptChecker(tmp_path)
    outcome = await checker.check(catalogue, "x = 1\nprint(await ping())\n", None, None)
    assert [(finding.line, finding.message) for finding in outcome.findings] == [
        (
            2,
            "`ping` is the MCP server 'ping', not a function: call one of its tools, "
            "`ping.<tool>(...)`; the Python tool 'ping' is bound as `ping_2`",
        )
    ]
    fine = "print(await ping.hello(), await ping_2())\nping = print\nping('shadowed')\n"
    assert (await checker.check(catalogue, fine, None, None)).findings == []
    assert (await checker.check(catalogue, "ping(", None, None)).findings[0].line == 1


@pytest.mark.timeout(60)
async def test_a_key_read_where_a_key_error_is_caught_is_no_finding(tmp_path: Path) -> None:
    code = (
        "note = await add_note(text='a')\n"
        "try:\n"
        "    print(note['maybe'])\n"
        "except KeyError:\n"
        "    pass\n"
        "print(note['txt'])\n"
    )
    outcome = await ScriptChecker(tmp_path).check(ToolCatalogue(specs(), None), code, None, None)
    assert [finding.line for finding in outcome.findings] == [6], outcome.findings


@pytest.mark.timeout(60)
async def test_a_key_read_where_suppress_catches_a_key_error_is_no_finding(tmp_path: Path) -> None:
    code = (
        "import contextlib\n"
        "note = await add_note(text='a')\n"
        "with contextlib.suppress(KeyError):\n"
        "    print(note['maybe'])\n"
        "print(note['txt'])\n"
    )
    outcome = await ScriptChecker(tmp_path).check(ToolCatalogue(specs(), None), code, None, None)
    assert [finding.line for finding in outcome.findings] == [5], outcome.findings


@pytest.mark.timeout(60)
async def test_a_result_given_to_a_function_an_earlier_run_defined_may_gain_any_key(
    tmp_path: Path,
) -> None:
    # `def enrich(note): note['score'] = 1` ran before: this check cannot see what it adds.
    code = "note = await add_note(text='a')\nenrich(note)\nprint(note['score'])\n"
    checker = ScriptChecker(tmp_path)
    catalogue = ToolCatalogue(specs(), None)
    outcome = await checker.check(catalogue, code, frozenset({"enrich"}), None)
    assert outcome.ran and outcome.findings == [], outcome.findings
    alone = await checker.check(catalogue, code.replace("enrich(", "len("), frozenset(), None)
    assert [finding.line for finding in alone.findings] == [3], alone.findings


@pytest.mark.timeout(60)
async def test_the_earlier_runs_of_an_interpreter_are_read_once_and_kept_bounded(
    tmp_path: Path,
) -> None:
    earlier = EarlierRuns()
    earlier.remember("total = 1 + 1")  # puts no key by name: not kept
    earlier.remember("x = " + "1" * (EARLIER_SCRIPT_LONGEST + 1) + "\nrow['score'] = 1")
    assert list(earlier.unread) == []  # too long to keep: nothing said of it
    earlier.remember("for row in rows:\n    row['score'] = 2")
    earlier.remember("row['rank'] = (")  # a syntax error: it never ran, nothing added
    assert len(earlier.unread) == 2

    code = "note = await add_note(text='a')\nprint(note['score'], note['rank'])\n"
    checker, catalogue = ScriptChecker(tmp_path), ToolCatalogue(specs(), None)
    outcome = await checker.check(catalogue, code, frozenset({"rows"}), None, earlier)
    assert [str(finding) for finding in outcome.findings] == [
        '<script>:2: a result\'s keys: Unknown key "rank" for TypedDict `Note`'
    ], outcome.findings
    # Read, and remembered as keys: the next check reads no script again.
    assert (list(earlier.unread), earlier.keys) == ([], {"score"})
    again = await checker.check(catalogue, code, frozenset({"rows"}), None, earlier)
    assert [finding.line for finding in again.findings] == [2]


@pytest.mark.timeout(60)
async def test_a_tools_call_used_as_its_answer_without_await_is_a_finding(tmp_path: Path) -> None:
    code = (
        "note = add_note(text='a')\n"
        "print(note['text'])\n"
        "for found in search_notes(query='a'):\n"
        "    pass\n"
        "notes = search_notes(query='b')\n"
        "notes.append(1)\n"
        "print(len(notes), 'x' + note)\n"
        "later = add_note(text='b')\n"
        "print((await later)['text'])\n"  # awaited where it is used: no finding
    )
    outcome = await ScriptChecker(tmp_path).check(ToolCatalogue(specs(), None), code, None, None)
    assert outcome.ran and outcome.failure is None
    said = "is not awaited, so what is used here is a coroutine, not the tool's answer"
    assert [(finding.line, said in finding.message) for finding in outcome.findings] == [
        (2, True),
        (3, True),
        (6, True),
        (7, True),
        (7, True),
    ], outcome.findings
    assert "`await search_notes(...)`" in outcome.findings[1].message


@pytest.mark.timeout(60)
async def test_a_server_that_did_not_start_is_no_unknown_server_and_is_offered_when_misspelled(
    tmp_path: Path,
) -> None:
    catalogue = ToolCatalogue(specs(), None, {"github": "it exited at once"})
    code = (
        "print(await tools.github.list_repos())\n"  # the run says the server did not start
        "print(await gihub.list_repos())\n"
        "await add_note(text='a')\n"
    )
    outcome = await ScriptChecker(tmp_path).check(catalogue, code, frozenset(), None)
    assert outcome.ran and outcome.failure is None
    assert [str(finding) for finding in outcome.findings] == [
        "<script>:2: `gihub` is not defined: did you mean `github` (a server that did not start)?"
    ]


@pytest.mark.timeout(60)
async def test_a_typeddict_of_the_scripts_own_is_not_the_catalogues(tmp_path: Path) -> None:
    code = (
        "from typing import TypedDict\n"
        "class Note(TypedDict):\n    n: int\n"
        "mine: Note = {'n': 1}\nmine['other']\nawait add_note(text='a')\n"
    )
    outcome = await ScriptChecker(tmp_path).check(ToolCatalogue(specs(), None), code, None, None)
    assert outcome.ran and outcome.findings == []


@pytest.mark.timeout(60)
async def test_a_script_that_names_no_tool_is_not_checked(tmp_path: Path) -> None:
    checker = ScriptChecker(tmp_path)
    catalogue = ToolCatalogue(specs(), None)
    for code in (
        "print(1)",
        "x = [i * 2 for i in range(10)]\nsum(x)",
        "import json\njson.dumps({})",
    ):
        outcome = await checker.check(catalogue, code, frozenset(), None)
        assert not outcome.ran and outcome.findings == [] and outcome.failure is None
    for code in (
        "await add_note(text='a')",
        "f = search_notes",
        "add_noet.x",
        "import asyncio\nawait asyncio.sleep(0)",
    ):
        outcome = await checker.check(catalogue, code, frozenset(), None)
        assert outcome.ran, code
    nothing = await checker.check(ToolCatalogue([], None), "await tools.x()", frozenset(), None)
    assert not nothing.ran


@pytest.mark.timeout(60)
async def test_the_stubs_are_written_once_per_catalogue(tmp_path: Path) -> None:
    checker = ScriptChecker(tmp_path)
    catalogue = ToolCatalogue(specs(), None)
    await checker.check(catalogue, "await add_note(text='a')", frozenset(), None)
    [folder] = tmp_path.iterdir()
    stubs = folder / "tools.pyi"
    written = stubs.stat().st_mtime_ns
    await checker.check(ToolCatalogue(specs(), None), "await add_note(text='b')", None, None)
    assert [path.name for path in tmp_path.iterdir()] == [folder.name]
    assert stubs.stat().st_mtime_ns == written
    assert sorted(path.name for path in folder.iterdir()) == ["tools.pyi", "ty.toml"]


@pytest.mark.timeout(60)
async def test_a_syntax_error_found_by_another_pythons_grammar_is_left_to_that_python(
    tmp_path: Path,
) -> None:
    catalogue = ToolCatalogue(specs(), None)
    code = "type Pair = tuple[int, int]\nawait add_note(text='a')"  # Python 3.12 syntax
    here = await ScriptChecker(tmp_path).check(catalogue, code, frozenset(), None)
    other = await ScriptChecker(tmp_path).check(catalogue, code, frozenset(), "9.99.0")
    assert (len(here.findings), len(other.findings)) == (1, 0), here


def test_each_finding_is_read_from_the_checkers_line_and_column() -> None:
    catalogue = CheckedCatalogue(ToolCatalogue(specs(), None).plans, "")
    line = "e = 'é'; await tools.add_noet(text=1)"
    prepared = catalogue.prepare("x = 1\n" + line, frozenset())
    assert isinstance(prepared, CheckedScript)
    at = prepared.source.splitlines().index("\t" + line) + 1
    # The checker counts characters from 0, the tab included: `tools` begins at 16.
    message = "Module `tools` has no member `add_noet`"
    diagnostics = [
        Diagnostic(at, 16, "missing-attribute", message),
        Diagnostic(at, 16, "invalid-return-type", "not a rule the check asks for"),
        Diagnostic(1, 0, "missing-attribute", "in the header, not the script: `x`"),
    ]
    [finding] = prepared.findings(diagnostics)
    assert str(finding) == (
        "<script>:2: `tools` has no tool or server `add_noet`: did you mean `tools.add_note`?"
    )


@pytest.mark.timeout(60)
async def test_a_type_server_that_died_is_started_again_by_the_next_check(tmp_path: Path) -> None:
    checker = ScriptChecker(tmp_path)
    catalogue = ToolCatalogue(specs(), None)
    first = await checker.check(catalogue, "await add_note(txt='a')", frozenset(), None)
    assert len(first.findings) == 1
    server = checker._server
    assert server is not None and server._process is not None
    server._process.kill()  # and checked again at once, before its end may have been seen
    again = await checker.check(catalogue, "await add_note(txt='b')", frozenset(), None)
    assert again.failure is None and len(again.findings) == 1
    await checker.close()


@pytest.mark.timeout(60)
async def test_a_check_that_cannot_run_says_why_and_the_script_runs(
    start_checked: Any, made: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checker_module, "_ty_binary", lambda: "/nonexistent/ty")
    runtime = await start_checked("refuse")
    result = await runtime.run("await add_note(txt='a')")
    assert made == [] and result.status == "error", result.text  # Python's own TypeError
    assert "The check before running could not run: ty server failed:" in result.note


@pytest.mark.timeout(60)
async def test_a_write_to_a_server_that_died_leaves_no_error_unretrieved(tmp_path: Path) -> None:
    """A server that died while the checker still wrote to it leaves the write's error on
    its pipe; closing the checker takes it. Left for the collector, Python 3.11.2 logs it as
    never retrieved, and can turn the log into a `SystemError` raised by whatever
    `ast.parse` runs at that moment."""
    reports: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: reports.append(context))
    checker = ScriptChecker(tmp_path)
    catalogue = ToolCatalogue(specs(), None)
    assert (await checker.check(catalogue, "await add_note(text='a')\n", None, None)).ran
    server = checker._server
    assert server is not None and server._process is not None
    # Dead before the event loop has looked at its pipes again: the next write is the one
    # that finds its reader gone.
    pidfd = os.pidfd_open(server._process.pid)
    server._process.kill()
    select.select([pidfd], [], [], 10.0)  # readable once it has ended
    os.close(pidfd)
    server._notify("exit", {})
    await checker.close()
    del server
    gc.collect()
    assert [context["message"] for context in reports] == []


def test_the_check_parses_whole_while_a_finalizer_formats_a_traceback() -> None:
    """A collection during the check's parse may run a finalizer that formats a traceback,
    which on Python 3.11 parses source itself: the check's own parse must not fail for it
    (`SystemError: AST constructor recursion depth mismatch`)."""
    code = LONG_LITERAL + "\n"
    prompt = "from typing import TypedDict\nclass Note(TypedDict):\n    text: str\n" + code
    with collections_that_format_tracebacks():
        checked = CheckedCatalogue([], prompt)
        script = checked.prepare(code, None)
        assert script.syntax_error is None
    assert checked.typed_dicts == frozenset({"Note"})


@pytest.mark.timeout(60)
async def test_a_wrong_keyword_is_found_on_a_servers_tool_after_one_named_staticmethod(
    tmp_path: Path,
) -> None:
    # The tool's stub shadowed `@staticmethod` for every stub after it in the server's
    # class, and the check let `a.foo(bogus=1)` through.
    async def answer(arguments: dict[str, Any]) -> Any:
        raise AssertionError("the check runs nothing")

    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    tools = [
        ToolSpec(name=name, description=".", input_schema=schema, handler=answer, server="a")
        for name in ("staticmethod", "foo")
    ]
    checker = ScriptChecker(tmp_path)
    outcome = await checker.check(
        ToolCatalogue(tools, None), "await a.foo(bogus=1)\n", frozenset(), None
    )
    assert outcome.ran and outcome.failure is None
    assert [finding.line for finding in outcome.findings] == [1], outcome.findings
    assert "bogus" in str(outcome.findings[0])


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("code", "checked"),
    [
        ("x = bytes.fromhex('" + "deadbeef" * 100_000 + "')\n", False),  # a long run of letters
        ("y = 0x" + "f" * 200_000 + "\n", False),
        ("\n".join(f"v{n}.a" for n in range(20_000)), True),  # too many names to compare
    ],
    ids=["hex-literal", "hex-number", "many-names"],
)
def test_the_cheap_test_of_a_huge_script_takes_no_time(code: str, checked: bool) -> None:
    # It runs on the event loop: one script holding it held every shell (and a whole
    # `toolscript serve`) for as long as it took, 15 s for a 40 kB hex literal.
    # The test's timeout is the bound: a quadratic pass takes it many times over.
    catalogue = CheckedCatalogue(ToolCatalogue(specs(), None).plans, "")
    assert catalogue.names_tools(code) is checked
