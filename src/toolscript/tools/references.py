"""Tools named by reference, `MODULE:ATTR`, as the command line takes them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable

from .python import as_spec
from .spec import ToolSpec


class ToolReferenceError(ValueError):
    """A `MODULE:ATTR` that does not name an importable attribute; the message says why."""


def load_tools(references: Iterable[str] | None) -> list[ToolSpec]:
    """Import each `MODULE:ATTR`; the attribute is one tool or a list or tuple of them, each
    made a `ToolSpec` now, so that one that is not a tool is a `ToolReferenceError` too.

    Modules are looked up from the current directory too, as `python -m` would.
    """
    found: list[ToolSpec] = []
    for reference in references or []:
        module_name, _, attribute = reference.partition(":")
        if not module_name or not attribute:
            raise ToolReferenceError(
                f"{reference!r} is not MODULE:ATTR (for example mytools:send_message)"
            )
        if "" not in sys.path:
            sys.path.insert(0, "")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ToolReferenceError(f"cannot import {module_name!r}: {error}") from None
        except Exception as error:  # its own code failed: a syntax error, a bad @tool, ...
            raise ToolReferenceError(
                f"importing {module_name!r} failed: {type(error).__name__}: {error}"
            ) from None
        try:
            value = getattr(module, attribute)
        except AttributeError:
            raise ToolReferenceError(
                f"module {module_name!r} has no attribute {attribute!r}"
            ) from None
        for item in value if isinstance(value, list | tuple) else [value]:
            try:
                found.append(as_spec(item))
            except (TypeError, ValueError) as error:  # not a tool, or one that cannot be
                raise ToolReferenceError(f"{reference}: {error}") from None
    return found
