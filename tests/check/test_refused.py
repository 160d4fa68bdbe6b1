"""`check="refuse"`: a script with a finding never runs, and the result names each line."""

from __future__ import annotations

from typing import Any

import pytest

from toolscript import Runtime

from .conftest import journaled_calls

FIRST = "await add_note(text='made first')\n"
"""A good call before the bad line: under "refuse" it must not be made either."""

CASES = [
    (
        "an unknown tool",
        "await add_noet(text='x')",
        "`add_noet` is not defined: did you mean `add_note`?",
    ),
    ("an unknown server", "await dem.echo(text='x')", "`dem` is not defined: did you mean `demo`?"),
    (
        "a server's tool it has not",
        "await demo.ecko(text='x')",
        "the server `demo` has no tool `ecko`: did you mean `demo.echo`?",
    ),
    (
        "an unknown server under tools",
        "await tools.dmo.echo(text='x')",
        "`tools` has no tool or server `dmo`: did you mean `tools.demo`?",
    ),
    (
        "a tool's name without its server",
        "await echo(text='x')",
        "`echo` is not defined: did you mean `demo.echo`?",
    ),
    (
        "an unknown keyword",
        "await add_note(text='x', tag=['a'])",
        "`add_note` has no parameter `tag`: did you mean `tags`?",
    ),
    (
        "a missing keyword",
        "await demo.add(a=1)",
        "`demo.add` needs `b`: `await demo.add(a=..., b=...)`",
    ),
    (
        "a positional argument",
        "await search_notes('x')",
        "`search_notes` takes keyword arguments only: `await search_notes(query=...)`",
    ),
    (
        "a call never awaited",
        "add_note(text='x')",
        "`add_note(...)` is never awaited, so the call would not run: `await` it",
    ),
    (
        "a key the result's TypedDict lacks",
        "print((await add_note(text='x'))['txt'])",
        'a result\'s keys: Unknown key "txt" for TypedDict `Note` - did you mean "text"?',
    ),
    ("a syntax error", "await add_note(text='x'", "syntax error: '(' was never closed"),
    ("a return outside a function", "return 1", "syntax error: 'return' outside function"),
    ("a bare return outside a function", "return", "syntax error: 'return' outside function"),
    ("a yield outside a function", "yield 1", "syntax error: 'yield' outside function"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("kind", "line", "finding"), CASES, ids=[case[0] for case in CASES])
async def test_each_kind_of_finding_refuses_the_script_with_its_line_and_nothing_runs(
    start_checked: Any, made: list[str], kind: str, line: str, finding: str
) -> None:
    runtime: Runtime = await start_checked("refuse")
    result = await runtime.shell("checked").run(FIRST + "x = 1\n" + line + "\nprint('ran')\n")
    assert result.status == "refused", result.text
    assert f"<script>:3: {finding}" in result.note.splitlines(), result.note
    assert result.note.startswith("Nothing ran: the check before running found")
    assert made == [] and result.calls.made == 0 and result.stdout == ""
    assert journaled_calls(runtime, result.script_id) == 0
    [script] = [s for s in runtime.journal.scripts() if s.script_id == result.script_id]
    assert script.status == "refused"


@pytest.mark.timeout(60)
async def test_every_finding_of_a_script_is_listed_in_line_order(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("refuse")
    code = "await demo.ecko(text='a')\nfor n in range(2):\n    add_note(text='b')\n"
    result = await runtime.run(code)
    assert result.status == "refused"
    lines = [line for line in result.note.splitlines() if line.startswith("<script>:")]
    assert [line.split(":")[1] for line in lines] == ["1", "3"], result.note
    assert "found 2 problems" in result.note
    assert made == []


@pytest.mark.timeout(60)
async def test_a_refused_script_leaves_the_shell_ready_for_the_next_one(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("refuse")
    shell = runtime.shell("again")
    refused = await shell.run("await add_note(txt='a')")
    assert refused.status == "refused"
    fixed = await shell.run("(await add_note(text='a'))['text']")
    assert fixed.status == "ok", fixed.text
    assert fixed.value == "'a'" and made == ["add_note"]
