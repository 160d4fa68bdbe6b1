"""Compiling a script as a cell while the garbage collector runs Python code."""

from __future__ import annotations

import gc
from typing import Any

from toolscript.kernel.cells import VALUE_NAME, compile_cell

from ..conftest import LONG_LITERAL, collections_that_format_tracebacks


def test_a_script_compiles_while_a_finalizer_formats_a_traceback() -> None:
    """A collection during the parse may run a finalizer that formats a traceback (an
    earlier script's asyncio future logging an error no one took), which on Python 3.11
    parses source itself: the script must still compile, not fail with `SystemError: AST
    constructor recursion depth mismatch`."""
    source = LONG_LITERAL + "; len(x)\n"  # the last expression shares its line: the tree's way
    with collections_that_format_tracebacks():
        cell = compile_cell(source, "<script>")
    namespace: dict[str, Any] = {}
    assert cell.statements is not None and cell.value is None
    exec(cell.statements, namespace)
    assert namespace[VALUE_NAME] == 3000
    assert gc.isenabled()
