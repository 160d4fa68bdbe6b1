"""Tools as real Python functions inside the script, built from the host's binding plans.

The host decides everything about a tool's Python face (its spelling, parameters, defaults,
annotations, docstring) in a binding plan (see `toolscript.tools.binding`); this module only
builds what the plan says. Each tool becomes a real `async def` compiled from source, so
`inspect.signature`, `help()` and Python's own argument errors (a missing required argument,
an unexpected keyword) work as for any function. The body maps identifier spellings back to
the tool's own names and awaits `invoke(key, arguments, timeout)`.

Only what the caller passed is sent: an optional parameter whose value is the very default
object of the signature is left out, so the tool applies its own default.

A plan that cannot be built (a malformed plan, a name that is not an identifier, a name taken
twice) is listed in `Bound.failures` with the reason; it never stops the other tools, and
`bind` never raises.
"""

from __future__ import annotations

import keyword
import types
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

from .calls import ToolError

Invoke = Callable[[str, dict[str, Any], "float | None"], Awaitable[Any]]

_ANNOTATION_NAMES: dict[str, Any] = {
    "Any": Any,
    "Literal": Literal,
    "NotRequired": NotRequired,
    "TypedDict": TypedDict,
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": list,
    "dict": dict,
    "None": None,
}


@dataclass
class Bound:
    """The tools of one binding, ready to put into a script's namespace.

    `top_level` maps names to objects for the script's namespace: Python tools by their
    spelling, and one `ServerTools` per server by its spelling. `servers` holds the servers
    alone. `failures` lists `(tool key, why)` for each plan that could not be built.
    `qualnames` holds the `__qualname__` of every generated function (`"memory.read_graph"`,
    or the spelling of a top-level tool), to recognize tool coroutines. `types` holds the
    `TypedDict`s the annotations name (also in `top_level`, as the stubs define them).
    """

    top_level: dict[str, Any] = field(default_factory=dict)
    servers: dict[str, ServerTools] = field(default_factory=dict)
    types: dict[str, Any] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)
    qualnames: frozenset[str] = frozenset()
    renamed: dict[str, str] = field(default_factory=dict)
    """Each server bound under another spelling than its own name, by name (`time` →
    `time_`, which leaves `import time` to the module)."""


class ServerTools(types.ModuleType):
    """The tools of one MCP server, as attributes: `await github.create_issue(...)`.

    A module object, so `help(github)` lists every tool with its signature and docstring.
    """

    def __init__(self, spelling: str, server: str) -> None:
        super().__init__(f"tools.{spelling}", f"Tools of the MCP server {server!r}.")
        self._server = server
        self._tools: dict[str, Any] = {}
        self._unbound: dict[str, str] = {}
        self.__all__: list[str] = []

    def _add(self, spelling: str, function: Any) -> None:
        self._tools[spelling] = function
        setattr(self, spelling, function)
        self.__all__ = sorted(self._tools)

    def __repr__(self) -> str:
        names = ", ".join(sorted(self._tools)) or "none"
        return f"<tools of server {self._server!r}: {names}>"

    def __dir__(self) -> list[str]:
        return sorted(self._tools)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        known = ", ".join(sorted(self._tools)) or "none"
        message = f"server {self._server!r} has no tool {name!r}; its tools are: {known}"
        if self._unbound:
            unbound = "; ".join(f"{tool!r}: {why}" for tool, why in self._unbound.items())
            message += f". Tools that could not be bound: {unbound}"
        raise AttributeError(message)


class DownServer(types.ModuleType):
    """An MCP server that did not start, under its name: using any tool of it raises
    `ToolError` with the reason, where a missing name would raise a bare `NameError`."""

    def __init__(self, spelling: str, message: str) -> None:
        super().__init__(f"tools.{spelling}", message)
        self._message = message

    def __repr__(self) -> str:
        return f"<server that did not start: {self._message.partition(chr(10))[0]}>"

    def __dir__(self) -> list[str]:
        return []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ToolError(self._message)


def bind(
    plans: list[dict[str, Any]], invoke: Invoke, down: Mapping[str, str] | None = None
) -> Bound:
    """Build every tool of `plans`, and a `DownServer` under each name of `down` (a server
    that did not start, with the message its use raises). Never raises; what cannot be built
    is in `failures`."""
    bound = Bound()
    qualnames: set[str] = set()
    annotations: dict[str, Any] = {}
    for plan in plans:
        key = _key_of(plan)
        try:
            if isinstance(plan, Mapping) and "error" in plan:
                _note_unbound(bound, plan)
                raise _Unbuildable(str(plan["error"]))
            _build_types(bound, plan.get("types") or (), annotations)
            function, qualname = _build(plan, invoke, annotations, bound.types)
            _place(bound, plan, function)
            qualnames.add(qualname)
            server, namespace = plan.get("server"), plan.get("namespace")
            if isinstance(server, str) and isinstance(namespace, str) and server != namespace:
                bound.renamed[server] = namespace
        except _Unbuildable as error:
            bound.failures.append((key, str(error)))
        except Exception as error:
            bound.failures.append((key, f"its plan could not be built: {error!r}"))
    bound.qualnames = frozenset(qualnames)
    for spelling, message in (down or {}).items():
        if (
            isinstance(spelling, str)
            and spelling.isidentifier()
            and spelling not in bound.top_level
        ):
            bound.top_level[spelling] = DownServer(spelling, str(message))
    return bound


class _Unbuildable(Exception):
    """A plan that cannot become a function, with the reason in words."""


def _key_of(plan: object) -> str:
    if isinstance(plan, Mapping) and isinstance(plan.get("key"), str):
        return str(plan["key"])
    return "<a plan without a key>"


def _note_unbound(bound: Bound, plan: Mapping[str, Any]) -> None:
    """Let the tool's server, if it has one, name the tool when the script asks for it."""
    namespace = plan.get("namespace")
    if not isinstance(namespace, str) or not namespace.isidentifier():
        return
    server = _server(bound, namespace, str(plan.get("server")))
    server._unbound[str(plan.get("name"))] = str(plan["error"])


def _server(bound: Bound, namespace: str, name: str) -> ServerTools:
    server = bound.servers.get(namespace)
    if server is None:
        if namespace in bound.top_level:
            raise _Unbuildable(f"its server's name {namespace!r} is already taken by a tool")
        server = bound.servers[namespace] = ServerTools(namespace, name)
        bound.top_level[namespace] = server
    return server


def _identifier(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.isidentifier() or keyword.iskeyword(value):
        raise _Unbuildable(f"its {what} {value!r} is not a Python identifier")
    return value


def _build(
    plan: Mapping[str, Any], invoke: Invoke, annotations: dict[str, Any], types: Mapping[str, Any]
) -> tuple[Any, str]:
    if not isinstance(plan, Mapping):
        raise _Unbuildable("its plan is not a mapping")
    key = plan["key"]
    if not isinstance(key, str):
        raise _Unbuildable("its key is not a string")
    name = _identifier(plan["function"], "name")
    namespace = plan.get("namespace")
    if namespace is not None:
        _identifier(namespace, "server name")
    timeout = _identifier(plan["timeout"], "timeout keyword")
    catch_all = plan.get("catch_all")
    if catch_all is not None:
        _identifier(catch_all, "catch-all name")

    parameters = list(plan["parameters"])
    spellings = [_identifier(p["spelling"], "parameter name") for p in parameters]
    originals = [p["name"] for p in parameters]
    if not all(isinstance(original, str) for original in originals):
        raise _Unbuildable("a parameter's own name is not a string")
    own = [*spellings, timeout, *([catch_all] if catch_all else [])]
    if len(set(own)) != len(own):
        raise _Unbuildable("two of its parameters have the same spelling")

    send_name = "_send"
    while {send_name, f"{send_name}key"} & {*own, name}:
        send_name += "_"
    scope: dict[str, Any] = {"__builtins__": __builtins__}
    defaults: dict[str, object] = {}
    signature: list[str] = []
    for index, (parameter, spelling) in enumerate(zip(parameters, spellings, strict=True)):
        if parameter["required"]:
            signature.append(spelling)
        else:
            scope[f"_default_{index}"] = defaults[parameter["name"]] = parameter["default"]
            signature.append(f"{spelling}=_default_{index}")
    signature.append(f"{timeout}=None")
    if catch_all:
        signature.append(f"**{catch_all}")
    values = ", ".join(
        f"{original!r}: {spelling}" for original, spelling in zip(originals, spellings, strict=True)
    )
    qualname = name if namespace is None else f"{namespace}.{name}"
    if defaults or catch_all:
        scope[send_name] = _sender(key, qualname, defaults, invoke)
        call = f"{send_name}({{{values}}}, {catch_all or '{}'}, {timeout})"
    else:
        # Every argument is required and none is extra: nothing to sort out, so the call
        # goes to `invoke` itself, without a function in between (one per call saved).
        scope[send_name] = invoke
        scope[f"{send_name}key"] = key
        call = f"{send_name}({send_name}key, {{{values}}}, {timeout})"
    source = f"async def {name}(*, {', '.join(signature)}):\n    return await {call}\n"
    exec(compile(source, f"<tool {qualname}>", "exec", dont_inherit=True), scope)
    function = scope[name]
    function.__qualname__ = qualname
    function.__module__ = "tools"
    function.__doc__ = str(plan["doc"])
    hints = {
        s: _annotation(p["annotation"], annotations, types)
        for s, p in zip(spellings, parameters, strict=True)
    }
    hints[timeout] = _annotation("float | None", annotations, types)
    if catch_all:
        hints[catch_all] = Any
    hints["return"] = _annotation(plan["returns"], annotations, types)
    function.__annotations__ = hints
    return function, qualname


def _build_types(bound: Bound, definitions: Any, cache: dict[str, Any]) -> None:
    """Build the `TypedDict`s a plan names that no earlier plan built (the host names each
    shape once, so a name seen before is the same type)."""
    for definition in definitions:
        name = _identifier(definition["name"], "type name")
        if name in bound.types:
            continue
        if name in bound.top_level:
            raise _Unbuildable(f"its type name {name!r} is already taken by a tool or server")
        fields: dict[str, Any] = {}
        for item in definition["fields"]:
            hint = _annotation(item["annotation"], cache, bound.types)
            fields[str(item["key"])] = hint if item["required"] else NotRequired[hint]
        made: Any = TypedDict(name, fields)  # type: ignore[misc]
        made.__module__ = "tools"
        bound.types[name] = bound.top_level[name] = made


def _annotation(text: object, cache: dict[str, Any], types: Mapping[str, Any]) -> Any:
    """The annotation `text` names, or the text itself when this Python cannot evaluate it."""
    if not isinstance(text, str):
        raise _Unbuildable(f"an annotation {text!r} is not text")
    if text not in cache:
        try:
            cache[text] = eval(text, {"__builtins__": {}}, {**_ANNOTATION_NAMES, **types})
        except Exception:
            cache[text] = text
    return cache[text]


def _sender(
    key: str, qualname: str, defaults: dict[str, object], invoke: Invoke
) -> Callable[[dict[str, Any], dict[str, Any], float | None], Awaitable[Any]]:
    def send(
        values: dict[str, Any], extra: dict[str, Any], timeout: float | None
    ) -> Awaitable[Any]:
        arguments = {
            name: value
            for name, value in values.items()
            if name not in defaults or value is not defaults[name]
        }
        for name, value in extra.items():
            if name in arguments:
                raise TypeError(f"{qualname}() got the argument {name!r} twice")
            arguments[name] = value
        return invoke(key, arguments, timeout)

    return send


def _place(bound: Bound, plan: Mapping[str, Any], function: Any) -> None:
    name = plan["function"]
    namespace = plan.get("namespace")
    if namespace is None:
        if name in bound.top_level:
            raise _Unbuildable(f"its name {name!r} is already taken by another tool or server")
        bound.top_level[name] = function
        return
    server = _server(bound, namespace, str(plan.get("server")))
    if name in server._tools:
        raise _Unbuildable(f"its name {name!r} is already taken in server {namespace!r}")
    server._add(name, function)
