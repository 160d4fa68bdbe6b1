"""A corpus of valid scripts, dynamic ones included, that the check must let through.

Each runs under `check="refuse"` in one shell, in order (later scripts use what earlier ones
defined), and must end `ok`: a finding would refuse it, and a script that does not work would
not be a valid one.
"""

from __future__ import annotations

from typing import Any

import pytest

from toolscript import Runtime

CORPUS: list[tuple[str, str]] = [
    ("a plain call", "await add_note(text='a')"),
    ("keyword arguments with a default", "await add_note(text='b', tags=['x'])"),
    ("the per-call timeout", "await search_notes(query='a', timeout=5)"),
    ("a server's tool", "await demo.echo(text='hi')"),
    ("a server through tools", "await tools.demo.echo(text='hi')"),
    ("a top-level tool through tools", "await tools.add_note(text='c')"),
    ("a result kept for later runs", "kept = await search_notes(query='k')"),
    ("a name from an earlier run", "print(kept[0]['text'])"),
    ("a name close to a tool, defined", "add_notes = [1, 2]\nprint(len(add_notes))"),
    ("that name in a later run", "print(add_notes)"),
    (
        "getattr with a dynamic name",
        "name = 'ec' + 'ho'\nawait getattr(tools.demo, name)(text='x')",
    ),
    ("getattr on the server", "await getattr(demo, 'echo')(text='y')"),
    ("keyword arguments from a dict", "kw = {'text': 'd', 'tags': []}\nawait add_note(**kw)"),
    ("some from a dict", "extra = {'tags': ['t']}\nawait add_note(text='e', **extra)"),
    (
        "a result through a helper",
        "def first_text(rows):\n    return rows[0]['text']\n"
        "print(first_text(await search_notes(query='h')))",
    ),
    (
        "an async helper",
        "async def note(t):\n    return await add_note(text=t)\n(await note('f'))['id']",
    ),
    ("a loop", "for word in ['a', 'b']:\n    await add_note(text=word)"),
    ("a comprehension", "[n['text'] for n in await search_notes(query='c')]"),
    (
        "an async comprehension",
        "[await add_note(text=t) for t in 'xy']",
    ),
    (
        "gather",
        "import asyncio\nrows = await asyncio.gather("
        "*(add_note(text=str(i)) for i in range(3)), demo.echo(text='z'))\nlen(rows)",
    ),
    (
        "a task group",
        "import asyncio\nasync with asyncio.TaskGroup() as group:\n"
        "    task = group.create_task(search_notes(query='g'))\ntask.result()",
    ),
    (
        "a task awaited later",
        "import asyncio\nt = asyncio.ensure_future(add_note(text='t'))\nawait t",
    ),
    ("a coroutine kept, then awaited", "pending = add_note(text='p')\nawait pending"),
    (
        "try/except ToolError",
        "try:\n    await demo.fail(message='no')\nexcept ToolError as error:\n    print(error)",
    ),
    (
        "except ToolTimeout and tools.ToolError",
        "try:\n    await demo.echo(text='a', timeout=5)\n"
        "except (ToolTimeout, tools.ToolError):\n    raise",
    ),
    ("wait_for", "import asyncio\nawait asyncio.wait_for(search_notes(query='w'), 5)"),
    ("a tool held in a variable", "f = demo.echo\nawait f(text='v')"),
    ("tools listed", "sorted(n for n in dir(tools.demo) if not n.startswith('_'))[:3]"),
    ("a lambda and map", "texts = list(map(lambda n: n['text'], await search_notes(query='m')))"),
    (
        "a class of the script's own",
        "class Box:\n    notes = []\nBox.notes.append(await add_note(text='b'))",
    ),
    (
        "a tool's name rebound by the script",
        "def search(**kw):\n    return kw\nsearch(query=1, other=2)",
    ),
    (
        "the script's own function named like a tool",
        "async def echo(text, loud=False):\n    return text\nawait echo('quiet', loud=True)",
    ),
    (
        "untyped code around a result",
        "r = await add_note(text='u')\nr.get('missing', 0) or r['text']",
    ),
    ("a key the TypedDict has", "(await add_note(text='k'))['tags']"),
    ("names made with globals()", "globals()['made_here'] = 1\nprint(made_here)"),
    ("a star import", "from os.path import *\nprint(join('a', 'b'))"),
    ("an import the checker cannot see", "import json\njson.dumps(await demo.add(a=1, b=2))"),
    ("print without a tool", "print('no tools here')"),
    (
        "a future import first",
        "from __future__ import annotations\ndef f(n: Later) -> None:\n    pass\n"
        "await add_note(text='future')",
    ),
    (
        "a while loop with break",
        "i = 0\nwhile True:\n    i += 1\n    if i > 2:\n        break\nawait add_note(text=str(i))",
    ),
    (
        "a match statement",
        "match await search_notes(query='s'):\n    case [first, *rest]:\n        print(first['id'])",
    ),
]


@pytest.mark.timeout(300)
async def test_valid_scripts_run_with_no_finding_under_refuse(
    start_checked: Any, made: list[str]
) -> None:
    assert len(CORPUS) >= 30
    runtime: Runtime = await start_checked("refuse")
    shell = runtime.shell("corpus")
    failed: list[str] = []
    for what, code in CORPUS:
        result = await shell.run(code)
        if result.status != "ok" or "check before running" in result.note:
            failed.append(f"{what}:\n{result.text}")
    assert failed == [], "\n\n".join(failed)
    assert len(made) > 20
