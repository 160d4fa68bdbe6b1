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


def test_a_script_does_not_inherit_the_kernels_future_imports() -> None:
    # The kernel's own modules have `from __future__ import annotations`; a script compiled
    # there must not: its annotations would be strings, and `get_type_hints` of a class it
    # defines fails. Each of the three ways a cell is compiled.
    for source in (
        "def f(x: int) -> str: ...\n",  # statements only
        "def f(x: int) -> str: ...\nf\n",  # statements, then a last expression
        "def f(x: int) -> str: ...\nf; 1\n",  # the last expression shares its line
    ):
        cell = compile_cell(source, "<script>")
        namespace: dict[str, Any] = {}
        for code in (cell.statements, cell.value):
            if code is not None:
                exec(code, namespace)
        assert namespace["f"].__annotations__ == {"x": int, "return": str}, source
    # A script's own future import is its to make.
    cell = compile_cell("from __future__ import annotations\ndef g(x: int): ...\n", "<script>")
    namespace = {}
    exec(cell.statements, namespace)
    assert namespace["g"].__annotations__ == {"x": "int"}
