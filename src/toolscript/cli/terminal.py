"""Text shown on a terminal: what a script wrote, or a tool answered, may hold control
sequences that a terminal would obey (repaint the result's first line to say `exit 0 · ok`,
or set the clipboard with OSC 52). On a terminal they are shown escaped; in a pipe or a
file, and in JSON, the text is left as the script wrote it."""

from __future__ import annotations

from typing import IO

_CONTROLS = {
    code: f"\\x{code:02x}"
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))
    if code not in (0x09, 0x0A)  # tab and newline lay text out; they command nothing
}


def for_terminal(text: str, stream: IO[str]) -> str:
    """`text` with its control characters escaped if `stream` is a terminal."""
    return text.translate(_CONTROLS) if on_terminal(stream) else text


def on_terminal(stream: IO[str]) -> bool:
    """Whether `stream` is a terminal (False when it cannot say: replaced, or closed)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def escaped(text: str) -> str:
    """`text` with its control characters escaped, as `for_terminal` does on a terminal."""
    return text.translate(_CONTROLS)
