"""The check knows the names a shell's earlier runs defined, as the kernel tells them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime
from toolscript.kernel.names import MAX_NAMES, NameTeller

from .conftest import catalogue_tools


@pytest.mark.timeout(60)
async def test_a_name_from_an_earlier_run_is_known_only_in_its_own_shell(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("refuse")
    defined = await runtime.shell("one").run("add_notes = ['a']")
    assert defined.status == "ok", defined.text
    same = await runtime.shell("one").run("add_notes.append('b')\nadd_notes")
    assert same.status == "ok" and same.value == "['a', 'b']", same.text
    other = await runtime.shell("two").run("add_notes.append('b')")
    assert other.status == "refused"
    assert "<script>:1: `add_notes` is not defined: did you mean `add_note`?" in other.note


@pytest.mark.timeout(60)
async def test_a_key_an_earlier_run_put_in_results_is_no_finding_where_they_are_mixed_in(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("refuse")
    shell = runtime.shell("mixing")
    assert (await shell.run("rows = await search_notes(query='a')")).status == "ok"
    assert (await shell.run("for row in rows:\n    row['score'] = 2")).status == "ok"
    # The checker types `fresh` as the tool's answer, `rows` mixed in or not: the key is
    # the earlier run's, and the script works.
    mixed = "fresh = await search_notes(query='b')\nfresh.extend(rows)\nprint(fresh[-1]['score'])"
    result = await shell.run(mixed)
    assert result.status == "ok" and result.stdout == "2\n", result.text
    # Another shell's runs put nothing in this one's results; a key an earlier run only
    # asked for (`get`) is still a finding; so is one no run of the shell wrote.
    other = runtime.shell("other")
    assert (await other.run("rows = [{'score': 2}]")).status == "ok"
    assert (await other.run(mixed)).status == "refused"
    assert (await shell.run("print(rows[0].get('rank'))")).status == "ok"
    for key in ("rank", "scor"):
        read = await shell.run(f"fresh = await search_notes(query='c')\nprint(fresh[0]['{key}'])")
        assert read.status == "refused", read.text
        assert f'Unknown key "{key}"' in read.note, read.note


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "earlier",
    [
        "xs = [0]\nxs[0] = 1",
        "counts = {}\nword = 'a'\ncounts[word] = 1",
        "d = {'txt': 1}\ndel d['txt']",
        "def double(v):\n    return v * 2\ndouble(3)",
        "d = {}\nd.update(other={})\nd |= dict(more=1)",
    ],
    ids=["list-index", "dict-by-variable", "del", "own-function", "update-by-variable"],
)
async def test_an_earlier_run_that_puts_no_key_by_name_leaves_a_typo_a_finding(
    start_checked: Any, made: list[str], earlier: str
) -> None:
    runtime: Runtime = await start_checked("refuse")
    shell = runtime.shell("typo")
    assert (await shell.run(earlier)).status == "ok"
    typo = await shell.run("fresh = await search_notes(query='c')\nprint(fresh[0]['txt'])")
    assert typo.status == "refused", typo.text
    assert 'Unknown key "txt"' in typo.note, typo.note
    assert made == []


@pytest.mark.timeout(60)
async def test_a_name_deleted_by_a_later_run_is_unknown_again(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("refuse")
    shell = runtime.shell("deleting")
    assert (await shell.run("add_notes = 1")).status == "ok"
    assert (await shell.run("del add_notes")).status == "ok"
    again = await shell.run("print(add_notes.count)")
    assert again.status == "refused", again.text


@pytest.mark.timeout(60)
async def test_a_tool_name_a_run_rebound_is_the_scripts_own_afterwards(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("refuse")
    shell = runtime.shell("rebinding")
    assert (await shell.run("def add_note(*args):\n    return args")).status == "ok"
    result = await shell.run("add_note('positional', 'is fine now')")
    assert result.status == "ok" and result.value == "('positional', 'is fine now')"
    assert made == []


@pytest.mark.timeout(120)
async def test_past_the_names_bound_no_name_is_reported_unknown(
    start_checked: Any, made: list[str]
) -> None:
    runtime: Runtime = await start_checked("refuse")
    shell = runtime.shell("crowded")
    many = await shell.run(f"for i in range({MAX_NAMES + 10}):\n    globals()[f'v{{i}}'] = i")
    assert many.status == "ok", many.text
    result = await shell.run(
        "try:\n    add_notes.append(1)\nexcept NameError:\n    print('unknown')"
    )
    assert result.status == "ok" and result.stdout == "unknown\n", result.text


def test_the_kernel_tells_only_what_changed_and_never_a_tool_holding_its_own_value() -> None:
    teller = NameTeller()
    tool = object()
    namespace: dict[Any, Any] = {"__name__": "__main__", "tools": 1, "search": tool, 3: "x"}
    frame: dict[str, Any] = {}
    teller.tell(namespace, {"search": tool}, frame)  # type: ignore[arg-type]
    assert frame == {"names_new": ["tools"], "names_gone": []}
    frame = {}
    teller.tell(namespace, {"search": tool}, frame)  # type: ignore[arg-type]
    assert frame == {}
    namespace.update({"search": "mine", "class": 1, "a-b": 2, "rows": []})
    del namespace["tools"]
    teller.tell(namespace, {"search": tool}, frame)  # type: ignore[arg-type]
    assert frame == {"names_new": ["rows", "search"], "names_gone": ["tools"]}


def test_past_max_names_the_kernel_says_so_once_then_tells_all_again() -> None:
    teller = NameTeller()
    crowded = {f"v{i}": i for i in range(MAX_NAMES + 1)}
    frame: dict[str, Any] = {}
    teller.tell(crowded, {}, frame)  # type: ignore[arg-type]
    assert frame == {"names_many": True}
    frame = {}
    teller.tell(crowded, {}, frame)  # type: ignore[arg-type]
    assert frame == {}
    teller.tell({"a": 1}, {}, frame)  # type: ignore[arg-type]
    assert frame == {"names_new": ["a"], "names_gone": [], "names_many": False}


@pytest.mark.timeout(60)
async def test_a_server_that_is_down_is_a_known_name_and_its_call_raises_as_it_says(
    make_runtime: MakeRuntime, made: list[str]
) -> None:
    exits_at_once = str(Path(__file__).resolve().parents[1] / "mcp_servers" / "exits_at_once.py")
    runtime = await make_runtime(
        tools=catalogue_tools(made),
        # Named close to a tool, so an unknown name here would be a finding.
        mcp_config={
            "mcpServers": {"add_notes": {"command": sys.executable, "args": [exits_at_once]}}
        },
        check="refuse",
    )
    assert "add_notes" in runtime.mcp_failures
    result = await runtime.run(
        "try:\n    await add_notes.anything()\nexcept ToolError as e:\n    print('down')"
    )
    assert result.status == "ok" and result.stdout == "down\n", result.text
