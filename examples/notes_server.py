"""A small MCP server that keeps notes: add, list, search and delete them.

Notes live in the JSON file named by the NOTES_FILE environment variable, or in memory when it
is not set. Run it over stdio (what `examples/mcp.json` does):

    python examples/notes_server.py
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field


class Note(BaseModel):
    """One note."""

    id: int
    title: str
    text: str
    tags: list[str] = Field(default_factory=list)
    created: str


class Notes(BaseModel):
    """Some notes, and how many."""

    notes: list[Note]
    count: int


class NoteBook:
    """The notes, kept in memory and, when given a path, saved to it after every change."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.notes: list[Note] = []
        if path is not None and path.exists():
            self.notes = [Note(**item) for item in json.loads(path.read_text(encoding="utf-8"))]

    def add(self, title: str, text: str, tags: list[str]) -> Note:
        next_id = max((note.id for note in self.notes), default=0) + 1
        created = datetime.now(UTC).isoformat(timespec="seconds")
        note = Note(id=next_id, title=title, text=text, tags=tags, created=created)
        self.notes.append(note)
        self.save()
        return note

    def delete(self, note_id: int) -> Note:
        for note in self.notes:
            if note.id == note_id:
                self.notes.remove(note)
                self.save()
                return note
        raise ToolError(f"There is no note with id {note_id}.")

    def save(self) -> None:
        if self.path is not None:
            data = [note.model_dump() for note in self.notes]
            self.path.write_text(json.dumps(data, indent=2), encoding="utf-8")


notes_file = os.environ.get("NOTES_FILE")
book = NoteBook(Path(notes_file) if notes_file else None)
server = MCPServer("notes", instructions="Keeps short notes with optional tags.")


def _found(notes: list[Note]) -> Notes:
    return Notes(notes=notes, count=len(notes))


@server.tool()
def add_note(title: str, text: str, tags: list[str] | None = None) -> Note:
    """Add a note and return it with its id."""
    return book.add(title, text, tags or [])


@server.tool()
def list_notes(tag: str | None = None) -> Notes:
    """List every note, or only those carrying `tag`."""
    return _found([note for note in book.notes if tag is None or tag in note.tags])


@server.tool()
def search_notes(query: str) -> Notes:
    """Find the notes whose title or text contains `query` (case does not matter)."""
    needle = query.casefold()
    return _found(
        [
            note
            for note in book.notes
            if needle in note.title.casefold() or needle in note.text.casefold()
        ]
    )


@server.tool(structured_output=False)
def delete_note(id: int) -> str:
    """Delete the note with this id."""
    note = book.delete(id)
    return f"Deleted note {note.id} ({note.title!r})."


if __name__ == "__main__":
    server.run()
