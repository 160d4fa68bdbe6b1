"""A short, one-line summary of a tool call's arguments.

Goal: the call report names each call with its arguments, so a reader can tell one call from
another. What fails: `repr()` or `json.dumps()` of the whole value. Script code can pass a
50 MB string, nest a list 100,000 levels deep, hand over objects whose `__repr__`, `__len__` or
`__iter__` raise or never return, or containers that hold themselves; serializing such a value
costs unbounded time and memory, overflows the stack, or raises. What we do: walk the value
with an explicit stack and a budget of steps and characters, read only what fits, use the
built-in types' own methods (never an override a subclass may have), name other objects by
their type without calling into them, and catch whatever still goes wrong. Strings go through
`str.__repr__`, which escapes lone surrogates, so the brief always encodes as UTF-8.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_ELLIPSIS = "…"
_MARK_ROOM = len(f", {_ELLIPSIS} 999,999 more")
"""Room kept, for each container open, for what says how many entries it leaves out."""
_SPARE = 8
"""Room kept for the `…` of an entry cut short, and for rounding."""
_INT_MAX_BITS = 128
_TYPE_NAME = type.__dict__["__name__"]


def brief(value: object, limit: int = 120) -> str:
    """Summarize `value` in one line of about `limit` characters (never more than `limit`).

    A dict of names to values, as a call's arguments are, reads like the call:
    `title='Bug', labels=['a', 'b']`. Long strings and containers are cut with their size
    stated (`… 9,998 more`). Never raises.
    """
    if limit < 8:
        limit = 8
    quick = _quick(value, limit)
    if quick is not None:
        return quick
    try:
        text = _Briefer(limit).run(value)
    except Exception as error:  # the walk is defensive, but a brief must never raise
        text = f"<arguments could not be summarized: {_type_name(error)}>"
    if len(text) > limit:
        text = text[: limit - 1] + _ELLIPSIS
    return text


_PLAIN = (bool, float, type(None))
_str_repr = str.__repr__
_int_repr = int.__repr__
_INT_QUICK = 2**62


def _quick(value: object, limit: int) -> str | None:
    """The brief of the common case (a few short scalars), or None to take the full walk.

    Every call's arguments and answer are briefed on the host's hot path; most are a handful
    of short strings and numbers, for which the walk's budget machinery costs ten times the
    work. The result is the same text the walk gives.
    """
    kind = type(value)
    if kind is dict:
        quick = _quick_dict(value, limit)
        # Within the room the walk keeps free while its keywords are open: then no entry of
        # it is cut, and the texts are the same.
        room = limit - _SPARE - _MARK_ROOM
    else:
        quick = _quick_scalar(value, kind)
        room = limit - _SPARE
    return quick if quick is not None and len(quick) <= room else None


def _quick_dict(value: Any, limit: int) -> str | None:
    if len(value) > 6:
        return None
    parts = []
    size = 0
    for key, item in value.items():
        if type(key) is not str or not key.isidentifier():
            return None
        kind = type(item)
        if kind is int and -_INT_QUICK < item < _INT_QUICK:
            text = _int_repr(item)
        elif kind is str and len(item) <= 40:
            text = _str_repr(item)
        else:
            quick = _quick_scalar(item, kind)
            if quick is None:
                return None
            text = quick
        size += len(key) + len(text) + 3
        if size > limit:
            return None
        parts.append(f"{key}={text}")
    return ", ".join(parts)


def _quick_scalar(value: Any, kind: type) -> str | None:
    if kind is str:
        return _str_repr(value) if len(value) <= 40 else None
    if kind is int:
        return _int_repr(value) if -_INT_QUICK < value < _INT_QUICK else None
    if kind in _PLAIN:
        return repr(value)
    return None


def _type_name(value: object) -> str:
    try:
        name = _TYPE_NAME.__get__(type(value), type)
    except Exception:
        return "object"
    return name if isinstance(name, str) and len(name) < 60 else "object"


class _Container:
    """A container being walked: its items, how many are left, and how each one is written."""

    __slots__ = ("closer", "first", "items", "remaining", "style")

    def __init__(self, items: Iterator[Any], size: int, closer: str, style: str) -> None:
        self.items = items
        self.remaining = size
        self.closer = closer
        self.style = style
        self.first = True


class _Pending:
    """A value still to be written, after what is above it on the stack."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


_Work = _Container | _Pending | str


class _Briefer:
    """One walk over one value, bounded by `limit` characters and a number of steps."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0
        self.steps = 0
        self.max_steps = 4 * limit + 64
        self.open_ids: set[int] = set()
        self.reserved = 0  # room kept for closing the containers open (`close_all`)

    def emit(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def room(self) -> int:
        """Room left for what is written, after the room kept for closing."""
        return self.limit - self.size - self.reserved

    def push(self, container: _Container, stack: list[_Work]) -> None:
        self.reserved += len(container.closer) + _MARK_ROOM
        stack.append(container)

    def run(self, value: object) -> str:
        stack: list[_Work] = []
        self.reserved = _SPARE
        if type(value) is dict and _reads_as_keyword_arguments(value):
            self.open_ids.add(id(value))
            keywords = _Container(iter(dict.items(value)), dict.__len__(value), "", "keywords")
            self.push(keywords, stack)
        else:
            stack.append(_Pending(value))
        while stack:
            self.steps += 1
            if self.room() < 0 or self.steps > self.max_steps:
                self.close_all(stack)
                break
            top = stack[-1]
            if isinstance(top, str):
                stack.pop()
                self.emit(top)
            elif isinstance(top, _Pending):
                stack.pop()
                self.value(top.value, stack)
            else:
                self.next_entry(top, stack)
        return "".join(self.parts)

    def next_entry(self, container: _Container, stack: list[_Work]) -> None:
        try:
            entry = next(container.items)
        except StopIteration:
            stack.pop()
            self.reserved -= len(container.closer) + _MARK_ROOM
            self.emit(container.closer)
            return
        container.remaining -= 1
        if not container.first:
            self.emit(", ")
        container.first = False
        if container.style == "sequence":
            self.value(entry, stack)
            return
        key, item = entry
        stack.append(_Pending(item))
        if container.style == "keywords" and type(key) is str and key.isidentifier():
            self.emit(key[:40] + "=")
            return
        stack.append("=" if container.style == "keywords" else ": ")
        stack.append(_Pending(key))

    def close_all(self, stack: list[_Work]) -> None:
        """Close every open container, saying what each leaves out: an entry whose key or
        value was not written yet reads `…`, and the entries not reached `… N more`. What
        is written left room for that (`reserved`)."""
        elided = False
        while stack:
            top = stack.pop()
            if isinstance(top, _Pending):
                elided = True
                continue
            if isinstance(top, str):
                continue
            if elided:
                self.elide(top)
                elided = False
            if top.remaining > 0:
                self.emit(f"{'' if top.first else ', '}{_ELLIPSIS} {top.remaining:,} more")
            self.emit(top.closer)
        self.reserved = 0

    def elide(self, container: _Container) -> None:
        """The entry of `container` begun last was cut before its value: its key, if
        written, is followed by `…`; an entry of which nothing was written is counted with
        those not reached."""
        last = self.parts[-1] if self.parts else ""
        if last.endswith(("=", ": ")):
            self.emit(_ELLIPSIS)
        elif last == ", ":
            self.parts.pop()
            self.size -= len(last)
            container.remaining += 1
        elif last.endswith(("{", "[", "(")):
            container.remaining += 1
            container.first = True
        else:  # a key, not yet followed by its separator
            self.emit(f": {_ELLIPSIS}")

    def value(self, value: Any, stack: list[_Work]) -> None:
        """Emit a scalar at once, or open a container on the stack."""
        kind = type(value)
        if value is None or kind is bool:
            self.emit(repr(value))
        elif issubclass(kind, int):
            self.emit(_int_text(value))
        elif issubclass(kind, float):
            self.emit(float.__repr__(value))
        elif issubclass(kind, str):
            self.emit(self.text(value, str.__len__(value), str.__getitem__, str.__repr__, "chars"))
        elif issubclass(kind, bytes):
            self.emit(
                self.text(value, bytes.__len__(value), bytes.__getitem__, bytes.__repr__, "bytes")
            )
        elif issubclass(kind, bytearray):
            self.emit(
                self.text(
                    value, bytearray.__len__(value), _bytearray_slice, bytes.__repr__, "bytes"
                )
            )
        elif issubclass(kind, (list, tuple, dict, set, frozenset)):
            self.open(value, kind, stack)
        else:
            self.emit(f"<{_type_name(value)}>")

    def text(self, value: Any, length: int, cut: Any, represent: Any, unit: str) -> str:
        room = max(self.room(), 8)
        if length <= room:
            whole: str = represent(cut(value, slice(0, length)))
            if len(whole) <= room:
                return whole
        note = f"{_ELLIPSIS} ({length:,} {unit})"
        shown: str = represent(cut(value, slice(0, max(room - len(note), 4))))
        return shown[: max(room - len(note), 4)] + note

    def open(self, value: Any, kind: type, stack: list[_Work]) -> None:
        if id(value) in self.open_ids:
            self.emit("[...]" if issubclass(kind, list) else "{...}")
            return
        self.open_ids.add(id(value))
        if issubclass(kind, dict):
            container = _Container(iter(dict.items(value)), dict.__len__(value), "}", "mapping")
            opener = "{"
        elif issubclass(kind, list):
            container = _Container(list.__iter__(value), list.__len__(value), "]", "sequence")
            opener = "["
        elif issubclass(kind, tuple):
            container = _Container(tuple.__iter__(value), tuple.__len__(value), ")", "sequence")
            opener = "("
        elif issubclass(kind, set):
            container = _Container(set.__iter__(value), set.__len__(value), "}", "sequence")
            opener = "{"
        else:
            container = _Container(
                frozenset.__iter__(value), frozenset.__len__(value), "})", "sequence"
            )
            opener = "frozenset({"
        if container.remaining == 0 and issubclass(kind, (set, frozenset)):
            self.emit("set()" if issubclass(kind, set) else "frozenset()")
            return
        self.emit(opener)
        self.push(container, stack)


def _bytearray_slice(value: bytearray, part: slice) -> bytes:
    return bytes(bytearray.__getitem__(value, part))


def _reads_as_keyword_arguments(value: dict[Any, Any]) -> bool:
    """Whether the first few keys are strings, so the dict reads as a call's arguments."""
    for count, key in enumerate(dict.__iter__(value)):
        if type(key) is not str:
            return False
        if count >= 8:
            break
    return True


def _int_text(value: int) -> str:
    bits = int.bit_length(value)
    if bits > _INT_MAX_BITS:
        digits = int(bits * 0.30103) + 1
        return f"<int of about {digits:,} digits>"
    return int.__repr__(value)
