# ruff: noqa: F704, F821  (a toolscript script: top-level await, and `notes` is bound by toolscript)
# An agent-style script for `toolscript exec examples/notes_demo.py --mcp-config examples/mcp.json`.
# `notes` is the MCP server of that name in examples/mcp.json; each of its tools is an async
# function. Top-level await is allowed.

ideas = [
    ("Groceries", "Milk, eggs, coffee beans.", ["home"]),
    ("Release checklist", "Tag the release, update the changelog, announce it.", ["work"]),
    ("Coffee grinder", "Try a finer grind for the espresso.", ["home", "coffee"]),
]
for title, text, tags in ideas:
    note = await notes.add_note(title=title, text=text, tags=tags)
    print(f"added #{note['id']}: {note['title']}")

home = await notes.list_notes(tag="home")
print(f"{home['count']} notes tagged home:", ", ".join(n["title"] for n in home["notes"]))

found = await notes.search_notes(query="coffee")
print(f"{found['count']} notes mention coffee:", ", ".join(n["title"] for n in found["notes"]))

print(await notes.delete_note(id=found["notes"][0]["id"]))

everything = await notes.list_notes()
{"notes left": everything["count"], "titles": [n["title"] for n in everything["notes"]]}
