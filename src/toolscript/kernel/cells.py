"""A script as a cell: compiled so its last expression's value is kept, run in the shell's
namespace, and its end put in words for the host (status, value, traceback)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import gc
import inspect
import linecache
import os
import traceback
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .wire import DoneFrame

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
VALUE_NAME = "__toolscript_value__"


class Cell(NamedTuple):
    """A script compiled: its statements, then (when it ends with one) its last expression,
    whose value is the script's. With `value` None, the value is left under `VALUE_NAME`."""

    statements: types.CodeType | None
    value: types.CodeType | None

    @property
    def awaits(self) -> bool:
        """Whether the script has a top-level `await` (so it must run in a task)."""
        return any(
            code is not None and code.co_flags & inspect.CO_COROUTINE
            for code in (self.statements, self.value)
        )


def compile_cell(source: str, filename: str) -> Cell:
    """Compile a script so that running it gives the value of its last expression.

    Goal: a short script compiles in a few microseconds. What fails: turning the last
    expression into an assignment in the syntax tree and compiling the tree, since Python
    then converts the tree's objects back to its own, several times slower than compiling
    the text. What we do: the tree only says where the last statement starts; the lines
    before it and the expression itself are compiled from the source text, the expression
    padded with newlines so line numbers stay the script's own. An expression that shares
    its line with another statement (`x = 1; x`) goes through the tree.

    The garbage collector is paused meanwhile: a finalizer it runs that formats a traceback
    (an earlier script's asyncio future logging an error no one took) parses source itself on
    Python 3.11, and an `ast.parse` inside another one's AST conversion makes the outer raise
    `SystemError` ("AST constructor recursion depth mismatch"): the script would fail to
    compile for nothing of its own.
    """
    with no_collection():
        return _compile_cell(source, filename)


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No garbage collection while the parser builds an AST (see `compile_cell`): on Python
    3.11.2 and 3.11.7 alike, an `ast.parse` run by a finalizer inside another one's AST
    conversion makes the outer raise `SystemError`. The check's parses use it too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _compile_cell(source: str, filename: str) -> Cell:
    tree = ast.parse(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    # `dont_inherit`: this module's own `from __future__ import annotations` is not the
    # script's (its annotations would be strings, and `get_type_hints` of its classes fail).
    body = tree.body
    if not body or not isinstance(body[-1], ast.Expr):
        return Cell(compile(source, filename, "exec", flags=flags, dont_inherit=True), None)
    last = body[-1]
    if last.col_offset == 0 and (len(body) == 1 or (body[-2].end_lineno or 0) < last.lineno):
        lines = source.splitlines(keepends=True)
        start = last.lineno - 1
        head = "".join(lines[:start])
        try:
            return Cell(
                compile(head, filename, "exec", flags=flags, dont_inherit=True)
                if head.strip()
                else None,
                compile(
                    "\n" * start + "".join(lines[start:]),
                    filename,
                    "eval",
                    flags=flags,
                    dont_inherit=True,
                ),
            )
        except SyntaxError:
            pass  # the expression's line holds more than it (`1;`): the tree can say
    # Only the two new nodes need a location: no walk over the whole tree for it.
    target = ast.copy_location(ast.Name(VALUE_NAME, ast.Store()), last)
    body[-1] = ast.copy_location(ast.Assign(targets=[target], value=last.value), last)
    return Cell(compile(tree, filename, "exec", flags=flags, dont_inherit=True), None)


async def run_cell(cell: Cell, namespace: dict[str, Any]) -> Any:
    """Run a cell that awaits, in a task; its value."""
    if cell.statements is not None:
        result = eval(cell.statements, namespace)
        if type(result) is types.CoroutineType:
            await result
    if cell.value is None:
        return namespace.pop(VALUE_NAME, None)
    value = eval(cell.value, namespace)
    if cell.value.co_flags & inspect.CO_COROUTINE:
        value = await value  # the expression itself awaits something
    return value


def ending(value: Any, error: BaseException | None, stop_reason: str | None) -> DoneFrame:
    """How a cell ended, for the script's `done`: its value, or what it raised.

    Never raises: the value and the error are the script's objects, whose methods (`__repr__`,
    `__class__`, `SystemExit.code`, `__eq__`) may raise or lie; what cannot be described is
    said so, and the interpreter goes on.
    """
    try:
        return _ending(value, error, stop_reason)
    except BaseException as failure:  # the script's own objects misbehaved while read
        return {
            "status": "error",
            "error": (
                "The script ended, but how it ended could not be described: "
                f"{_type_name(failure)} while reading its "
                f"{'value' if error is None else 'error'}."
            ),
        }


def _ending(value: Any, error: BaseException | None, stop_reason: str | None) -> DoneFrame:
    report: DoneFrame
    kind = type(error)  # never the object's own `__class__`, which the script may forge
    if stop_reason is not None:
        report = {"status": "stopped", "reason": stop_reason}
        if error is not None and not issubclass(kind, (KeyboardInterrupt, asyncio.CancelledError)):
            report["error"] = format_exception(error)
    elif error is not None and issubclass(kind, asyncio.CancelledError):
        report = {"status": "error", "error": "The script's own task was cancelled."}
    elif error is None:
        report = {"status": "ok", "value": _safe_repr(value)}
    elif issubclass(kind, SystemExit):
        code = _EXIT_CODE.__get__(error)  # SystemExit's own field, not a subclass's property
        if code is None or (type(code) in (int, bool) and code == 0):
            report = {"status": "ok", "exit": 0}
        else:
            report = {
                "status": "error",
                "exit": int(code) if type(code) in (int, bool) and -(2**31) <= code < 2**31 else 1,
                "error": f"The script called sys.exit({_safe_repr(code) or 'None'}).",
            }
    else:
        report = {"status": "error", "error": format_exception(error)}
        if issubclass(kind, MemoryError) and (kind is not MemoryError or not error.args):
            # An allocation that failed: Python's own has no message, a library's (NumPy's
            # `_ArrayMemoryError`) is a subclass. `raise MemoryError("...")` is the script's.
            report["memory"] = True
    return report


_TYPE_NAME = type.__dict__["__name__"]
_EXIT_CODE = SystemExit.__dict__["code"]


def _type_name(value: object) -> str:
    try:
        return str.__str__(_TYPE_NAME.__get__(type(value)))
    except BaseException:
        return "an object"


VALUE_KEPT = 1_000_000
"""The most characters of a script's value (its last expression's repr), or of its error's
traceback, that its `done` carries: the start and the end of a longer one, with what was
cut said between them. Unbounded, an 80 MB repr made a frame over the channel's bound."""


def bounded(text: str, what: str) -> str:
    """`text`, or its start and end with what was cut said between them when it is longer
    than `VALUE_KEPT`."""
    if len(text) <= VALUE_KEPT:
        return text
    head = VALUE_KEPT * 2 // 3
    tail = VALUE_KEPT - head
    cut = len(text) - head - tail
    return (
        f"{text[:head]}\n… [{what} was {len(text):,} characters: {cut:,} are cut here] …\n"
        f"{text[-tail:]}"
    )


def _safe_repr(value: Any) -> str | None:
    if value is None:
        return None
    try:
        text = repr(value)
        if not isinstance(text, str):
            return f"<the value's repr returned {_type_name(text)}, not str>"
        # A str subclass may override `__len__`, slicing or `__str__`: take its plain text.
        return bounded(str.__str__(text), "the value's repr")
    except BaseException as error:
        return f"<the value's repr failed: {_type_name(error)}: {_safe_str(error)}>"


def _safe_str(error: BaseException) -> str:
    try:
        return bounded(str.__str__(str(error)), "the message")
    except BaseException:
        return "(its message could not be read)"


def format_exception(error: BaseException) -> str:
    """The traceback of `error` from the script's own frames on, without the kernel's."""
    tb = error.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<script"):
        tb = tb.tb_next
    try:
        summary = traceback.TracebackException(type(error), error, tb)
        _drop_internal_frames(summary)
        return bounded("".join(summary.format()) + _renamed_hint(error), "the traceback")
    except BaseException:
        return f"{_type_name(error)} (its traceback could not be formatted)"


renamed_servers: dict[str, str] = {}
"""The servers bound under another spelling than their own name, by name (set at binding)."""


# Goal: a script that reaches a server by its own name where it is bound under another
# (`time`, whose name is the standard module's, is `time_`) is told where it is. What fails:
# Python's own words, "module 'time' has no attribute 'get_current_time'", which point
# nowhere near `time_`. What we do: an `AttributeError` on a module named like such a
# server, or on `tools` for such a name, gets a line that names the server's spelling.
def _renamed_hint(error: BaseException) -> str:
    if not renamed_servers or not isinstance(error, AttributeError):
        return ""
    owner, name = getattr(error, "obj", None), getattr(error, "name", None)
    if not isinstance(owner, types.ModuleType):
        return ""
    module = owner.__name__
    if module == "tools" and isinstance(name, str) and name in renamed_servers:
        spelling = renamed_servers[name]
        return f"Hint: the MCP server {name!r} is bound as `{spelling}` (`tools.{spelling}`).\n"
    if module in renamed_servers and not module.startswith("tools."):
        spelling = renamed_servers[module]
        return (
            f"Hint: `{module}` here is the module {module!r}; the MCP server {module!r} is "
            f"bound as `{spelling}` (`await {spelling}.{name}(...)`).\n"
        )
    return ""


def _drop_internal_frames(summary: traceback.TracebackException) -> None:
    # A tool's error is raised inside the kernel's call machinery; the script's reader only
    # needs the script's own frames, so the kernel's and the bound tools' are left out.
    seen: set[int] = set()
    while summary is not None and id(summary) not in seen:
        seen.add(id(summary))
        frames = [
            frame
            for frame in summary.stack
            if not frame.filename.startswith((KERNEL_DIR, "<tool "))
        ]
        summary.stack = traceback.StackSummary.from_list(frames)
        summary = summary.__cause__ or summary.__context__  # type: ignore[assignment]


def format_compile_error(error: BaseException) -> str:
    """A script that did not compile, in the words Python uses for it."""
    return "".join(traceback.format_exception_only(type(error), error))
