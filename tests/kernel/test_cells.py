"""Compiling a script as a cell while the garbage collector runs Python code."""

from __future__ import annotations

import gc
import traceback
from typing import Any

from toolscript.kernel.cells import VALUE_NAME, compile_cell


def test_a_script_compiles_while_a_finalizer_formats_a_traceback() -> None:
    """A collection during the parse may run a finalizer that formats a traceback (an
    earlier script's asyncio future logging an error no one took), which on Python 3.11
    parses source itself: the script must still compile, not fail with `SystemError: AST
    constructor recursion depth mismatch`."""

    def failing() -> int:
        return {"a": 1}["b"] + [1, 2][5]

    def format_a_traceback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            try:
                failing()
            except LookupError as error:
                traceback.format_exception(error)

    items = ", ".join(f"({i}, [{i}, {{'a': {i}}}])" for i in range(3000))
    source = f"x = [{items}]; len(x)\n"  # the last expression shares its line: through the tree
    threshold = gc.get_threshold()
    gc.callbacks.append(format_a_traceback)
    gc.set_threshold(10)
    try:
        cell = compile_cell(source, "<script>")
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(format_a_traceback)
    namespace: dict[str, Any] = {}
    assert cell.statements is not None and cell.value is None
    exec(cell.statements, namespace)
    assert namespace[VALUE_NAME] == 3000
    assert gc.isenabled()
