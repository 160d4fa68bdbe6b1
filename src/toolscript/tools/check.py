"""The check before running: a script read against the catalogue's stubs by a type checker.

One concept, though over 500 lines: a script read against the stubs: the checker's
diagnostics and the rewording of each into a finding, which must know the same script.

Goal: a script that calls a tool that does not exist, passes a keyword the tool does not
take, leaves out a required one, passes one by position, forgets an `await` or reads a key
that a result's `TypedDict` does not have is told so before any of its calls take effect.

What fails: a type checker's own verdict on the whole script. Scripts are mostly untyped
code, where `Any` flows everywhere; a checker's complaints about that code are noise, and some
are false (a name made by `globals()`, a module the checker cannot see). A script is also a
notebook cell (top-level `await`), which a checker refuses as a module, and a shell is
persistent, so a name from an earlier run is defined.

What we do: the stubs are the same text `rt.prompt()` shows, written as the module `tools`
(`tools.pyi`), which is what the kernel binds them as. The script becomes the body of an
`async def` (each line after a tab, which keeps every indentation comparison as Python makes
it), after declarations of the names the shell's namespace holds, as `Any`. The checker
(`ty`) is asked only for the rules that can concern a tool, and a diagnostic is kept only
when the script's syntax tree shows that it is about a tool: the call, attribute or name it
points at resolves to a tool or server the script did not rebind, or the `TypedDict` is the
catalogue's. Everything else is dropped. This module is the text on both sides of the
checker; `toolscript.host.checker` runs it.
"""

from __future__ import annotations

import ast
import builtins
import collections
import difflib
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ..kernel.cells import no_collection

__all__ = [
    "RULES",
    "RULES_ASKED",
    "CheckedCatalogue",
    "CheckedScript",
    "Diagnostic",
    "Finding",
]

_ON_A_VALUE = ("not-subscriptable", "not-iterable", "invalid-argument-type", "unsupported-operator")
"""Rules about what a value is used for: kept only when the value is a tool's call not awaited."""

RULES = (
    "unresolved-reference",
    "missing-attribute",
    "unknown-argument",
    "missing-argument",
    "too-many-positional-arguments",
    "unused-awaitable",
    "invalid-typed-dict-key",
    *_ON_A_VALUE,
)
"""The checker's rules whose diagnostics can be findings: the only ones that can concern a tool.
(Those of `_ON_A_VALUE` only where a tool's call, not awaited, is used as its answer.)"""

RULES_ASKED = (*RULES, "invalid-explicit-return")
"""The rules turned on. A `return` with a value at the script's top level (a syntax error in
a cell, valid in the function the script is checked as) breaks the last one, which has the
script parsed."""

SCRIPT_FILE = "<script>"
"""How a finding names the script: `<script>:3: ...`."""

CELL_FUNCTION = "__toolscript_cell__"

_KERNEL_NAMES = ("tools", "ToolError", "ToolTimeout")
"""Names every script has, typed by the stubs rather than declared as `Any`."""

_DYNAMIC_NAMES = frozenset({"globals", "vars", "exec", "builtins", "__builtins__", "setattr"})
"""Names a script can define other names with: where one appears, no name is unknown."""

_TICKED = re.compile(r"`([^`]+)`")
_KEY = re.compile(r'key "([^"]*)"')
_COROUTINE = "`CoroutineType["
_USED_AS_ANSWER = ("missing-attribute", *_ON_A_VALUE)
"""Rules whose diagnostic on a coroutine means a tool's call used as its answer, not awaited."""
_WORD = re.compile(r"[^\W\d]\w*")
_HIDDEN_SYNTAX = re.compile(r"\b(?:yield|return)\b")
_USED = re.compile(r"(?<!\w)([^\W\d]\w*+)\s*+[(.]")
"""A name called or read an attribute of. Only at a name's start, and taken whole: tried at
every letter of a long run of them (a hex literal), with backtracking, it took the event
loop for seconds (a 60,000-character one held a whole `toolscript serve` for 15 s)."""

_MOST_USED = 500
"""Names used so in one script past which the cheap test stops looking for near-misses of
a tool's name (each is compared with every tool's) and has the script checked."""
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One of the checker's diagnostics: its line (from 1), its column in characters (from
    0), its rule and its message."""

    line: int
    column: int
    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem the check found: the script's line (from 1) and what is wrong, in words."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"{SCRIPT_FILE}:{self.line}: {self.message}"


EARLIER_KEYS = 10_000
"""The most keys earlier scripts put in dicts that the check remembers of one interpreter."""


class EarlierRuns(Protocol):
    """What the check knows of the scripts that ran before in an interpreter: those it has
    not read yet, and the keys those it read put in dicts by name (at most `EARLIER_KEYS`).
    The check reads `unread` as it needs to, emptying it into `keys`."""

    unread: collections.deque[str]
    keys: set[str]


class CheckedCatalogue:
    """What the check needs of one catalogue: its stubs as the module `tools`, and the names
    of its tools, servers, parameters and `TypedDict`s."""

    def __init__(self, plans: list[dict[str, Any]], prompt: str, down: Iterable[str] = ()) -> None:
        self.down = frozenset(down)
        """The spellings of servers that did not start (a run that uses one says why)."""
        self.top_level: dict[str, dict[str, Any]] = {}
        self.servers: dict[str, dict[str, dict[str, Any]]] = {}
        for plan in plans:
            if "error" in plan:
                continue
            namespace = plan.get("namespace")
            if namespace is None:
                self.top_level[str(plan["function"])] = plan
            else:
                self.servers.setdefault(str(namespace), {})[str(plan["function"])] = plan
        self.typed_dicts = frozenset(_typed_dict_names(prompt))
        self.stubs = (
            prompt.rstrip("\n")
            + "\n\n\nclass ToolError(Exception): ...\n\n\nclass ToolTimeout(TimeoutError): ...\n"
        )
        """The text of `tools.pyi`: what `rt.prompt()` shows, and the kernel's exceptions."""
        self._words = frozenset({*self.top_level, *self.servers, *self.down, "tools"})

    def names_tools(self, code: str) -> bool:
        """The cheap test: whether `code` awaits anything, names a tool or server, or calls
        or reads an attribute of a name close to one. A script that does none is not checked,
        nor any script when the catalogue has no tool."""
        if not self.top_level and not self.servers:
            return False
        words = set(_WORD.findall(code))
        if "await" in words or not self._words.isdisjoint(words):
            return True
        used = set(_USED.findall(code)) - _BUILTINS
        if len(used) > _MOST_USED:
            return True
        tools = list(self._words)
        return any(difflib.get_close_matches(word, tools, n=1, cutoff=0.75) for word in used)

    def prepare(
        self, code: str, names: frozenset[str] | None, earlier: EarlierRuns | None = None
    ) -> CheckedScript:
        """`code` as the checker reads it, in a shell whose namespace holds `names` (None: too
        many to tell), after the scripts `earlier` ran there."""
        return CheckedScript(self, code, names, earlier)


class CheckedScript:
    """One script as the checker reads it, and its findings from the checker's diagnostics.

    The script is parsed here only when the checker said something that concerns it: a
    script with no such diagnostic (most) costs no syntax tree.
    """

    def __init__(
        self,
        catalogue: CheckedCatalogue,
        code: str,
        names: frozenset[str] | None,
        earlier: EarlierRuns | None = None,
    ) -> None:
        self._catalogue = catalogue
        self._code = code
        self._earlier_runs = earlier
        self._names = names
        self._lines = code.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._explained: set[tuple[int, str, str]] = set()
        self._missing: dict[tuple[int, str], tuple[str, list[str]]] = {}
        self._earlier = frozenset(names or ()) - frozenset(_KERNEL_NAMES)
        imported = [
            name
            for name in ("ToolError", "ToolTimeout", *catalogue.top_level, *catalogue.servers)
            if name not in self._earlier
        ]
        header = [
            "from typing import Any",
            "import tools",
            f"from tools import {', '.join(imported)}",
        ]
        header.extend(
            f"{name}: Any" for name in sorted(self._earlier) if name not in ("Any", CELL_FUNCTION)
        )
        header.append(f"async def {CELL_FUNCTION}() -> None:")
        self._offset = len(header)
        self.source = "\n".join([*header, *("\t" + line for line in self._lines), "\tpass", ""])
        """The text of the file the checker reads."""

    def needs_parse(self, diagnostics: Iterable[Diagnostic]) -> bool:
        """Whether any diagnostic concerns the check, or the script may hide a syntax error
        that the function it is checked as makes valid (a top-level `return` or `yield`)."""
        return (
            any(
                diagnostic.rule in RULES_ASKED or diagnostic.rule == "invalid-syntax"
                for diagnostic in diagnostics
            )
            or _HIDDEN_SYNTAX.search(self._code) is not None
            or bool(self._servers_called)
        )

    @functools.cached_property
    def syntax_error(self) -> Finding | None:
        """The script's syntax error as this Python's parser finds it, if it has one."""
        try:
            with no_collection():
                compile(self._tree, SCRIPT_FILE, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as error:
            return Finding(error.lineno or 1, f"syntax error: {error.msg}")
        return None

    @functools.cached_property
    def _tree(self) -> ast.Module:
        with no_collection():
            return ast.parse(self._code, SCRIPT_FILE)

    @functools.cached_property
    def _shadowed(self) -> frozenset[str]:
        return frozenset(_bound_names(self._tree)) | self._earlier

    @functools.cached_property
    def _keys_added(self) -> frozenset[str]:
        """Keys the script may put in a dict, or asks for without needing them: a result is
        a plain dict, so a key the script adds (`r["city"] = ...`, `setdefault`, `update`)
        is no mistake, nor is reading it afterwards, nor `get` or `pop` with a default. So
        are the keys the shell's earlier scripts added: a result an earlier script changed
        may be mixed into this one's (`fresh.extend(rows)`), where the checker types it as
        fresh."""
        keys = self._keys_added_by(self._tree)
        earlier = self._earlier_runs
        if earlier is not None:
            # Each earlier script is read once, by the first check that needs it.
            while earlier.unread:
                code = earlier.unread.popleft()
                try:
                    with no_collection():
                        tree = ast.parse(code, SCRIPT_FILE)
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    continue  # it did not run, or ran as far as its first line: none added
                added = self._keys_added_by(tree, earlier=True)
                earlier.keys.update(list(added)[: max(EARLIER_KEYS - len(earlier.keys), 0)])
            keys |= earlier.keys
        return frozenset(keys)

    def _keys_added_by(self, tree: ast.Module, earlier: bool = False) -> set[str]:
        """The keys `tree` adds to dicts, and those it asks for without needing them. Of an
        `earlier` script, only the keys it puts in a dict by name (`r["score"] = 2`): what
        it asks for, and a key it puts by a variable (`xs[i] = i`, `counts[word] = 1`), say
        nothing of what this script reads."""
        asked = not earlier
        keys: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
                if earlier and not isinstance(node.ctx, ast.Store):
                    continue  # `del r["text"]` adds nothing
                keys.update(_text(node.slice) or [ANY_KEY])  # `r[k] = ...`: any key
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.BitOr):
                keys.update(_keys_of(node.value))  # `result |= {...}`
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                method = node.func.attr
                if method in ("get", "pop") and node.args and asked:
                    keys.update(_text(node.args[0]))
                elif method in ("setdefault", "__setitem__") and node.args:
                    keys.update(_text(node.args[0]) or [ANY_KEY])
                elif method == "setitem" and len(node.args) >= 2:  # `operator.setitem`
                    keys.update(_text(node.args[1]) or [ANY_KEY])
                elif method == "update":
                    keys.update(keyword.arg or ANY_KEY for keyword in node.keywords)
                    for argument in node.args:
                        keys.update(_keys_of(argument))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "setitem" and len(node.args) >= 2:
                    keys.update(_text(node.args[1]) or [ANY_KEY])
                elif node.func.id in self._earlier:
                    # A function an earlier run defined, which this check cannot read:
                    # it may put any key in a result it is given.
                    keys.add(ANY_KEY)
            elif not asked:
                continue
            elif isinstance(node, ast.Try) and any(_catches_key_error(h) for h in node.handlers):
                # `try: result["maybe"] except KeyError:` asks for a key it may not find.
                keys.update(_keys_read(node.body))
            elif isinstance(node, (ast.With, ast.AsyncWith)) and any(
                _suppresses_key_error(item.context_expr) for item in node.items
            ):
                keys.update(_keys_read(node.body))  # `with suppress(KeyError): result["maybe"]`
        if earlier:
            keys.discard(ANY_KEY)
        return keys

    @functools.cached_property
    def _names_unknowable(self) -> bool:
        return (
            self._names is None
            or not _DYNAMIC_NAMES.isdisjoint(_WORD.findall(self._code))
            or any(
                isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names)
                for node in ast.walk(self._tree)
            )
        )

    def findings(self, diagnostics: Iterable[Diagnostic]) -> list[Finding]:
        """The findings among the checker's diagnostics of `source`: those about tools."""
        found: dict[tuple[int, str], Finding] = {}
        self._explained.clear()
        self._missing.clear()
        for diagnostic in diagnostics:
            if diagnostic.rule not in RULES:
                continue
            line = diagnostic.line - self._offset
            if not 1 <= line <= len(self._lines):
                continue
            # The checker counts characters, the tab before each line included; `ast`, bytes.
            characters = max(diagnostic.column - 1, 0)
            column = len(self._lines[line - 1][:characters].encode("utf-8"))
            said = diagnostic.message.split("\n", 1)[0]  # its first line; hints follow
            message = self._reword(diagnostic.rule, said, line, column)
            if message is not None:
                found.setdefault((line, message), Finding(line, message))
        for (line, message), (name, missing) in self._missing.items():
            # A missing argument that another finding on the call explains (a misspelled
            # keyword, arguments given by position) is not said twice.
            if (line, name, "*") in self._explained or all(
                (line, name, parameter) in self._explained for parameter in missing
            ):
                found.pop((line, message), None)
        for finding in self._servers_called:
            found.setdefault((finding.line, finding.message), finding)
        return sorted(found.values(), key=lambda finding: finding.line)

    # -- what a diagnostic is about ------------------------------------------------------------

    def _reword(self, rule: str, message: str, line: int, column: int) -> str | None:
        ticked = _TICKED.findall(message)
        if _COROUTINE in message and rule in _USED_AS_ANSWER:
            name = self._unawaited_at(line, column)
            if name is None:
                return None
            return (
                f"`{name}(...)` is not awaited, so what is used here is a coroutine, not the "
                f"tool's answer: `await {name}(...)`"
            )
        if rule in _ON_A_VALUE:
            return None
        if rule == "unresolved-reference":
            return self._unknown_name(ticked[0]) if ticked else None
        if rule == "missing-attribute":
            return self._unknown_attribute(line, column, ticked)
        if rule == "invalid-typed-dict-key":
            named = ticked[-1] if ticked else ""
            key = _KEY.search(message)
            added = self._keys_added
            if key is not None and (key.group(1) in added or ANY_KEY in added):
                return None  # a key the script puts in a result itself (or may), then reads
            if named in self._catalogue.typed_dicts and named not in self._shadowed:
                return f"a result's keys: {message}"
            return None
        call = self._tool_call_at(line, column)
        if call is None:
            return None
        name, plan = call
        if rule == "unused-awaitable":
            return f"`{name}(...)` is never awaited, so the call would not run: `await` it"
        if rule == "too-many-positional-arguments":
            self._explained.add((line, name, "*"))
            return f"`{name}` takes keyword arguments only: {_example(name, plan)}"
        if rule == "unknown-argument" and ticked:
            spellings = [str(parameter["spelling"]) for parameter in plan["parameters"]]
            spellings.append(str(plan["timeout"]))
            close = difflib.get_close_matches(ticked[0], spellings, n=1, cutoff=0.6)
            if close:
                self._explained.add((line, name, close[0]))
            return f"`{name}` has no parameter `{ticked[0]}`" + _did_you_mean(
                ticked[0], spellings, "its parameters are"
            )
        if rule == "missing-argument" and len(ticked) > 1:
            missing = ", ".join(f"`{item}`" for item in ticked[:-1])
            message = f"`{name}` needs {missing}: {_example(name, plan)}"
            self._missing[(line, message)] = (name, ticked[:-1])
            return message
        return None

    def _unknown_name(self, name: str) -> str | None:
        if self._names_unknowable or name in self._shadowed:
            return None
        catalogue = self._catalogue
        candidates = [
            *catalogue.top_level,
            *catalogue.servers,
            *(f"{server}.{tool}" for server, tools in catalogue.servers.items() for tool in tools),
            *catalogue.down,
        ]
        by_last = {candidate.rsplit(".", 1)[-1]: candidate for candidate in candidates}
        close = difflib.get_close_matches(name, list(by_last), n=1, cutoff=0.75)
        if not close:
            return None
        meant = by_last[close[0]]
        down = " (a server that did not start)" if meant in catalogue.down else ""
        return f"`{name}` is not defined: did you mean `{meant}`{down}?"

    def _unknown_attribute(self, line: int, column: int, ticked: list[str]) -> str | None:
        if not ticked:
            return None
        node = self._attribute_at(line, column, ticked[-1])
        if node is None:
            return None
        server = self._server_of(node.value)
        if server is not None:
            tools = list(self._catalogue.servers[server])
            return f"the server `{server}` has no tool `{node.attr}`" + _did_you_mean(
                node.attr, tools, "its tools are", prefix=f"{server}."
            )
        if isinstance(node.value, ast.Name) and node.value.id == "tools":
            if "tools" in self._shadowed or node.attr in self._catalogue.down:
                return None  # a server that did not start: the run says so, and why
            names = [*self._catalogue.top_level, *self._catalogue.servers]
            return f"`tools` has no tool or server `{node.attr}`" + _did_you_mean(
                node.attr, names, "it has", prefix="tools."
            )
        return None

    @functools.cached_property
    def _unawaited_names(self) -> dict[str, str]:
        """Names the script binds to a tool's call it does not await (`r = add_note(...)`),
        with the tool's name as the script calls it."""
        found: dict[str, str] = {}
        for node in ast.walk(self._tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                tool = self._tool_of(node.value.func)
                if tool is not None:
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            found[target.id] = tool[0]
        return found

    def _unawaited_at(self, line: int, column: int) -> str | None:
        """The tool whose call, not awaited, is the expression at the position (or the object
        of the attribute, subscript or operation there): the call itself, or a name bound to
        it."""
        for node in ast.walk(self._tree):
            if not isinstance(node, ast.expr) or (node.lineno, node.col_offset) != (line, column):
                continue
            around = [node]
            if isinstance(node, ast.Attribute | ast.Subscript):
                around.append(node.value)
            elif isinstance(node, ast.BinOp):
                around += [node.left, node.right]
            for candidate in around:
                if isinstance(candidate, ast.Call):
                    tool = self._tool_of(candidate.func)
                    if tool is not None:
                        return tool[0]
                elif isinstance(candidate, ast.Name) and candidate.id in self._unawaited_names:
                    return self._unawaited_names[candidate.id]
        return None

    @functools.cached_property
    def _servers_called(self) -> list[Finding]:
        """A server's namespace called as a function (its tools are its attributes), as a
        Python tool of the same name would be: the stubs declare it a class, so the checker
        takes the call for making one, but the script holds no class there."""
        found: list[Finding] = []
        try:
            tree = self._tree
        except SyntaxError:
            return found  # the syntax error is the finding
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            server = self._server_of(node.func)
            if server is None:
                continue
            said = (
                f"`{server}` is the MCP server {server!r}, not a function: call one of its "
                f"tools, `{server}.<tool>(...)`"
            )
            for spelling, plan in self._catalogue.top_level.items():
                if plan.get("name") == server and plan.get("namespace") is None:
                    said += f"; the Python tool {server!r} is bound as `{spelling}`"
            found.append(Finding(node.lineno, said))
        return found

    def _tool_call_at(self, line: int, column: int) -> tuple[str, dict[str, Any]] | None:
        """The innermost call around the position whose function is a tool: its name as the
        script calls it, and its plan."""
        best: tuple[str, dict[str, Any]] | None = None
        best_start = (-1, -1)
        for node in ast.walk(self._tree):
            if not isinstance(node, ast.Call) or not _covers(node, line, column):
                continue
            tool = self._tool_of(node.func)
            start = (node.lineno, node.col_offset)
            if tool is not None and start > best_start:
                best, best_start = tool, start
        return best

    def _tool_of(self, node: ast.expr) -> tuple[str, dict[str, Any]] | None:
        catalogue = self._catalogue
        if isinstance(node, ast.Name) and node.id not in self._shadowed:
            plan = catalogue.top_level.get(node.id)
            return None if plan is None else (node.id, plan)
        if not isinstance(node, ast.Attribute):
            return None
        server = self._server_of(node.value)
        if server is not None:
            plan = catalogue.servers[server].get(node.attr)
            return None if plan is None else (f"{server}.{node.attr}", plan)
        if _is_name(node.value, "tools") and "tools" not in self._shadowed:
            plan = catalogue.top_level.get(node.attr)
            return None if plan is None else (f"tools.{node.attr}", plan)
        return None

    def _server_of(self, node: ast.expr) -> str | None:
        servers = self._catalogue.servers
        if isinstance(node, ast.Name):
            shadowed = node.id in self._shadowed
            return node.id if node.id in servers and not shadowed else None
        if (
            isinstance(node, ast.Attribute)
            and _is_name(node.value, "tools")
            and "tools" not in self._shadowed
            and node.attr in servers
        ):
            return node.attr
        return None

    def _attribute_at(self, line: int, column: int, attribute: str) -> ast.Attribute | None:
        for node in ast.walk(self._tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == attribute
                and (node.lineno, node.col_offset) == (line, column)
            ):
                return node
        return None


ANY_KEY = "\x00any"
"""Among the keys a script adds: some it adds cannot be told (`result.update(other)`)."""


def _keys_of(node: ast.expr) -> list[str]:
    """The keys a dict made from `node` has (`dict.update`'s argument, the right side of
    `|=`): a dict literal's, a list or tuple of pairs' with literal first items; `ANY_KEY`
    for anything else (a variable, a call), whose keys cannot be told."""
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):  # `{**other}`
            return [ANY_KEY]
        return [text for key in node.keys if key is not None for text in _text(key)]
    if isinstance(node, (ast.List, ast.Tuple)):
        keys = []
        for pair in node.elts:
            if not isinstance(pair, (ast.Tuple, ast.List)) or not pair.elts:
                return [ANY_KEY]
            keys += _text(pair.elts[0]) or [ANY_KEY]
        return keys
    return [ANY_KEY]


def _keys_read(body: list[ast.stmt]) -> list[str]:
    """The literal keys `body` subscripts anything with."""
    return [
        key
        for inner in body
        for part in ast.walk(inner)
        if isinstance(part, ast.Subscript)
        for key in _text(part.slice)
    ]


def _suppresses_key_error(manager: ast.expr) -> bool:
    """Whether a `with` item is `suppress(...)` (`contextlib.suppress`) of `KeyError`, a
    parent of it, or `Exception`."""
    if not isinstance(manager, ast.Call):
        return False
    called = manager.func
    name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
    return name == "suppress" and any(
        isinstance(kind, ast.Name) and kind.id in ("KeyError", "LookupError", "Exception")
        for kind in manager.args
    )


def _catches_key_error(handler: ast.ExceptHandler) -> bool:
    """Whether an `except` clause catches `KeyError` (by name, as a parent, or all)."""
    kinds = handler.type
    if kinds is None:
        return True
    names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    return any(
        isinstance(name, ast.Name) and name.id in ("KeyError", "LookupError", "Exception")
        for name in names
    )


def _text(node: ast.expr) -> list[str]:
    """The string `node` is, when it is a literal one."""
    return [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []


def _typed_dict_names(prompt: str) -> Iterable[str]:
    try:
        with no_collection():
            tree = ast.parse(prompt)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            _is_name(base, "TypedDict") for base in node.bases
        ):
            yield node.name


def _bound_names(tree: ast.Module) -> Iterable[str]:
    """Every name the script binds anywhere (it may hide a tool's name)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            yield node.id
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                yield alias.asname or alias.name.split(".")[0]
        elif isinstance(node, ast.arg):
            yield node.arg
        elif (isinstance(node, ast.ExceptHandler) and node.name) or (
            isinstance(node, ast.MatchAs | ast.MatchStar) and node.name
        ):
            yield node.name
        elif isinstance(node, ast.MatchMapping) and node.rest:
            yield node.rest


def _covers(node: ast.expr, line: int, column: int) -> bool:
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
    return start <= (line, column) < end


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _did_you_mean(name: str, candidates: list[str], listing: str, prefix: str = "") -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if close:
        return f": did you mean `{prefix}{close[0]}`?"
    shown = ", ".join(f"`{candidate}`" for candidate in candidates[:12])
    more = f" and {len(candidates) - 12} more" if len(candidates) > 12 else ""
    return f" ({listing} {shown}{more})" if shown else ""


def _example(name: str, plan: dict[str, Any]) -> str:
    required = [str(p["spelling"]) for p in plan["parameters"] if p["required"]]
    return f"`await {name}({', '.join(f'{spelling}=...' for spelling in required)})`"
