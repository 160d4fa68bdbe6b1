"""Python functions as tools: the `@tool` decorator.

One concept, though over 500 lines: a Python function made a tool (its schema, its
arguments' conversion, its handler and the threads synchronous tools run on).

```python
@tool
async def send_message(channel_id: str, text: str) -> str:
    \"\"\"Send a message to a channel.

    Args:
        channel_id: The channel to post in.
        text: What to say.
    \"\"\"
```

The input schema comes from the type hints (through pydantic), the descriptions from the
docstring (Google, reST or NumPy style), the output schema from the return annotation. The
decorated object is still the function for ordinary Python (`await send_message(...)` in a
unit test calls it directly) and carries the tool as `.spec`.

When the host calls the tool, arguments have already been checked against the schema. The
handler converts the arguments whose annotation is not plain JSON data (a pydantic model, a
`datetime`, a tuple) to the annotated type, calls the function (a sync one in a worker thread,
off the event loop), and turns its return value into JSON-safe data. An exception from the
function becomes an error result, `"<ExceptionType>: <message>"`; `ToolFailure` gives its
message alone, and `SourceGone` and cancellation pass through. A sync function cannot be
interrupted: when the host gives up on it at its timeout, its thread runs on to its end,
and its outcome is journaled then as the call's late answer (`left_running`)."""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import contextvars
import functools
import inspect
import math
import queue
import sys
import threading
import types
import typing
import warnings
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

import typing_extensions

from toolscript.tools.spec import (
    NEVER_RAN,
    CallContext,
    DataOutcome,
    SourceGone,
    ToolAnnotations,
    ToolFailure,
    ToolOutcome,
    ToolSpec,
    call_context,
    left_running,
)

P = ParamSpec("P")
R = TypeVar("R")

_JSON_SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})
"""Results that are JSON as they are: no conversion, nothing to await."""

# Goal: a synchronous tool that hangs holds up its own calls, not the rest of the host, nor
# its exit.
# What fails: in the event loop's default executor (`asyncio.to_thread`), a few hung calls
# (each given up at its tool timeout, its thread still blocked) take every one of its
# cpus + 4 threads; then every other synchronous tool never starts and times out, and so
# does whatever else the host runs there (the DNS lookup of an HTTP MCP server, the keeper's
# lock). And a `ThreadPoolExecutor`'s threads are joined at the process's exit: one hung tool
# keeps a host that closed its runtime from ever exiting.
# What we do: synchronous tools have threads of their own, more of them, that are daemons.
TOOL_THREADS = 64
"""Threads for synchronous tools' calls, shared by every runtime of the process."""


class _ToolThreads:
    """Up to `most` daemon threads that run synchronous tools' calls, started as needed; a
    call finds an idle one, or a new one, or (with `most` busy) waits in line."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._work: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._idle = 0  # threads waiting for work that no call has counted on yet

    def run(self, function: Callable[[], Any]) -> _Job:
        """`function()` in a tool thread; its result (or exception) in the job's future."""
        job = _Job(function, asyncio.get_running_loop().create_future(), self._lock)
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif self._started < self._most:
                self._started += 1
                name = f"toolscript-tool-{self._started}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()
        self._work.put(job)
        return job

    def _serve(self) -> None:
        while True:
            job = self._work.get()
            with self._lock:
                if job.state != _QUEUED:  # given up while it waited for a thread: never run
                    self._idle += 1
                    continue
                job.state = _RUNNING
            try:
                result: Any = job.function()
                error: BaseException | None = None
            except BaseException as raised:  # the tool's: the caller raises it
                result, error = None, raised
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                job.future.get_loop().call_soon_threadsafe(_settle, job, result, error)
            del job, result, error
            with self._lock:
                self._idle += 1


_QUEUED, _RUNNING, _DROPPED = 0, 1, 2
"""A job's states: waiting for a thread, begun in one, given up before it began."""


class _Job:
    """A call's function for a tool thread, and the future of its outcome. A caller that
    stops waiting takes the outcome from `late()` instead, whenever it comes."""

    __slots__ = ("_ended", "_late", "_lock", "function", "future", "state")

    def __init__(
        self, function: Callable[[], Any], future: asyncio.Future[Any], lock: threading.Lock
    ) -> None:
        self.function = function
        self.future = future
        self.state = _QUEUED
        self._lock = lock  # the threads' lock, which guards `state`
        self._late: asyncio.Future[ToolOutcome] | None = None
        self._ended: ToolOutcome | None = None  # ended after the caller stopped waiting

    # Goal: a call the host gave up on has an effect only if it had begun. What fails: the
    # call that waited in line for a thread (all of them busy with hung calls) past its
    # timeout, then ran anyway, whenever a thread came free: an effect long after the
    # script was told the call timed out. What we do: a call given up before a thread took
    # it never runs, and its late answer says so at once, so its fate is no longer in doubt.
    def late(self) -> asyncio.Future[ToolOutcome]:
        """The outcome, for a caller that stopped waiting for `future` (in the event loop's
        thread, like `_settle`): it may have come already, or come later; a call no thread
        had begun never runs, and its outcome says so."""
        late = self._late = self.future.get_loop().create_future()
        future = self.future
        with self._lock:
            dropped = self.state == _QUEUED
            self.state = _DROPPED if dropped else self.state
        if dropped:
            self.function = _never_run
            message = (
                f"{NEVER_RAN}it waited for a free tool thread until the host gave up on it "
                "(every tool thread was busy)"
            )
            late.set_result(ToolOutcome(value=message, is_error=True))
        elif self._ended is not None:
            late.set_result(self._ended)
        elif future.done() and not future.cancelled():  # it ended just before the cancel
            error = future.exception()
            late.set_result(_outcome(future.result() if error is None else _Raised(error)))
        return late


def _never_run() -> None:
    """What a job given up before it began holds instead of its call."""


def _settle(job: _Job, result: Any, error: BaseException | None) -> None:
    future = job.future
    if future.done():  # given up at its timeout, or cancelled
        outcome = _outcome(result if error is None else _Raised(error))
        late = job._late
        if late is None:
            job._ended = outcome  # for `late()`, if the caller is still on its way there
        elif not late.done():
            late.set_result(outcome)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


_threads: _ToolThreads | None = None


def _tool_threads() -> _ToolThreads:
    global _threads
    if _threads is None:
        _threads = _ToolThreads(TOOL_THREADS)
    return _threads


_PLAIN_JSON: frozenset[object] = frozenset(
    {str, int, float, bool, Any, object, inspect.Parameter.empty}
)


class Tool(Generic[P, R]):
    """A function that is also a tool: call it as the function, or hand `.spec` to a `Runtime`."""

    spec: ToolSpec

    def __init__(self, function: Callable[P, R], spec_options: dict[str, Any]) -> None:
        functools.update_wrapper(self, function)
        self.function = function
        described = _described(function)
        self.is_async = inspect.iscoroutinefunction(function) or (
            inspect.iscoroutinefunction(described)
        )
        signature = inspect.signature(function)
        name = spec_options.get("name") or _default_name(function)
        if name == "<lambda>":
            raise ValueError(
                "tool: a lambda has no name a script could call it by: give it one, "
                "tool(name='...')(lambda ...)"
            )
        for parameter in signature.parameters.values():
            if parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD and (
                parameter.kind is not inspect.Parameter.KEYWORD_ONLY
            ):
                raise TypeError(
                    f"the tool {name!r} has the parameter {parameter}: tools are called with "
                    "named arguments only, so *args, **kwargs and positional-only parameters "
                    "cannot be part of one"
                )
        try:
            hints = typing.get_type_hints(described, include_extras=True)
        except Exception as error:
            raise TypeError(
                f"the type hints of the tool {name!r} cannot be resolved: {error}"
            ) from error
        if described is not function:
            # A partial's bound arguments, a callable object's `self`: not the tool's.
            hints = {
                key: hint
                for key, hint in hints.items()
                if key == "return" or key in signature.parameters
            }
        # pydantic and docstring_parser load with the first tool, not with the package: a
        # command that runs no Python tool never pays for them.
        import docstring_parser
        from pydantic import TypeAdapter

        self.context_parameter = next(
            (key for key, hint in hints.items() if hint is CallContext and key != "return"), None
        )
        """The parameter that receives the call's `CallContext`, if the function has one."""
        try:
            self.converters = {
                parameter_name: TypeAdapter(_pydantic_ready(hint))
                for parameter_name, hint in hints.items()
                if parameter_name not in ("return", self.context_parameter)
                and hint not in _PLAIN_JSON
            }
        except Exception as error:
            raise TypeError(
                f"the parameters of the tool {name!r} cannot be checked: {_message(error)}"
            ) from error
        docstring = docstring_parser.parse(
            inspect.getdoc(described) or inspect.getdoc(function) or ""
        )
        input_schema = _input_schema(_schema_ready(function, hints, name), name)
        properties = input_schema.get("properties", {})
        if self.context_parameter is not None:
            # The host fills it in; the script never passes it.
            properties.pop(self.context_parameter, None)
            required = input_schema.get("required")
            if isinstance(required, list) and self.context_parameter in required:
                required.remove(self.context_parameter)
        for parameter_doc in docstring.params:
            target = properties.get(parameter_doc.arg_name)
            if (
                isinstance(target, dict)
                and parameter_doc.description
                and "description" not in target
            ):
                target["description"] = parameter_doc.description
        description = spec_options.get("description")
        if description is None:
            parts = [docstring.short_description, docstring.long_description]
            description = "\n\n".join(part for part in parts if part)
        self.spec = ToolSpec(
            name=name,
            description=description,
            input_schema=input_schema,
            handler=self.handle,
            output_schema=_output_schema(hints.get("return", inspect.Parameter.empty)),
            annotations=ToolAnnotations(
                read_only=spec_options.get("read_only"),
                destructive=spec_options.get("destructive"),
                idempotent=spec_options.get("idempotent"),
            ),
            timeout=spec_options.get("timeout"),
        )

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself, as if it were not a tool."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.spec.name!r}>"

    # What the tool is, as `spec` has it, read on the tool itself (`search.name`).
    @property
    def name(self) -> str:
        """The tool's name, as scripts and the journal name it."""
        return self.spec.name

    @property
    def description(self) -> str:
        """What the model reads of the tool: the docstring's summary."""
        return self.spec.description

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of its arguments, from the function's annotations."""
        return self.spec.input_schema

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of its answer, when its return annotation gives one."""
        return self.spec.output_schema

    @property
    def annotations(self) -> ToolAnnotations:
        """Its hints: `read_only`, `destructive`, `idempotent`, `open_world`, `title`."""
        return self.spec.annotations

    @property
    def timeout(self) -> float | None:
        """Seconds the host waits for its answer; None: the runtime's `tool_timeout`."""
        return self.spec.timeout

    async def handle(self, arguments: dict[str, Any]) -> ToolOutcome:
        """The tool's handler: call the function with `arguments` and give its answer."""
        converters = self.converters
        converted = arguments  # plain JSON types only: validated already, nothing to convert
        if converters:
            converted = dict(arguments)
            for name, value in arguments.items():
                converter = converters.get(name)
                if converter is None:
                    continue
                try:
                    converted[name] = converter.validate_python(value)
                except (Exception, SystemExit, KeyboardInterrupt) as error:  # a validator's own
                    return ToolOutcome(
                        value=f"the argument `{name}` could not be converted: "
                        f"{_conversion_words(error)}",
                        is_error=True,
                    )
        if self.context_parameter is not None:
            converted = {**converted, self.context_parameter: call_context()}
        call: Callable[..., Any] = self.function
        try:
            if self.is_async:
                result = await call(**converted)
            else:
                context = contextvars.copy_context()
                job = _tool_threads().run(
                    functools.partial(context.run, _in_thread, call, converted)
                )
                try:
                    result = await job.future
                except asyncio.CancelledError:
                    # Given up (at its timeout): the thread cannot be stopped, and its end
                    # is the call's late answer, which the host journals (`left_running`).
                    left_running.set(job.late())
                    raise
                if type(result) is _Raised:
                    return _outcome(result)
            if type(result) not in _JSON_SCALARS:
                if inspect.isawaitable(result):
                    result = await result
                elif inspect.isasyncgen(result):  # its items, as a generator's are
                    result = [item async for item in result]
        except (SourceGone, asyncio.CancelledError):
            raise
        except BaseException as error:
            # `SystemExit` (argparse on a bad command line, `sys.exit` in a library) and
            # `KeyboardInterrupt` raised by a tool are its failure, not the host's: let out,
            # asyncio would end the host's event loop with them.
            return _outcome(_Raised(error))
        if type(result) in _JSON_SCALARS:
            return ToolOutcome(value=result)
        return _outcome(result)


def _outcome(result: Any) -> ToolOutcome:
    """The outcome a tool's return value makes once nothing is left to await in it; a
    `_Raised` is its failure (`ToolFailure` gives its message alone)."""
    if type(result) in _JSON_SCALARS:
        return ToolOutcome(value=result)
    if isinstance(result, ToolOutcome):
        return result
    if type(result) is _Raised:
        error = result.error
        return ToolOutcome(
            value=_message(error, with_type=not isinstance(error, ToolFailure)), is_error=True
        )
    from pydantic_core import to_jsonable_python

    try:
        return DataOutcome(value=to_jsonable_python(result))
    except Exception as error:
        return ToolOutcome(
            value=f"the tool's return value could not be turned into JSON data: {_message(error)}",
            is_error=True,
        )


@overload
def tool(function: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    read_only: bool | None = None,
    destructive: bool | None = None,
    idempotent: bool | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    function: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    read_only: bool | None = None,
    destructive: bool | None = None,
    idempotent: bool | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Make a sync or async function a tool, as `@tool` or `@tool(name=..., timeout=...)`.

    `name` and `description` replace the function's name and docstring; `timeout` bounds one
    call in seconds (default: the runtime's `tool_timeout`); `read_only`, `destructive` and
    `idempotent` are hints about its behaviour. Raises `TypeError` for a function that cannot
    be a tool (`*args`, unresolvable type hints, a type with no JSON Schema), and
    `ValueError` naming the option for a `timeout` that is not a positive number of seconds,
    or a `name` or `description` that is not a string.
    """
    if not _timeout_or_none(timeout):
        raise ValueError(
            f"tool: timeout must be a positive, finite number of seconds, not {timeout!r}"
        )
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"tool: name must be a non-empty string, not {name!r}")
    if description is not None and not isinstance(description, str):
        raise ValueError(f"tool: description must be a string, not {description!r}")
    for knob, flag in (
        ("read_only", read_only),
        ("destructive", destructive),
        ("idempotent", idempotent),
    ):
        if flag is not None and not isinstance(flag, bool):  # "yes" would read as True
            raise ValueError(f"tool: {knob} must be True, False or None, not {flag!r}")
    options = {
        "name": name,
        "description": description,
        "timeout": timeout,
        "read_only": read_only,
        "destructive": destructive,
        "idempotent": idempotent,
    }

    def decorate(function: Callable[P, R]) -> Tool[P, R]:
        return Tool(function, options)

    return decorate if function is None else decorate(function)


def _described(function: Callable[..., Any]) -> Callable[..., Any]:
    """The function whose annotations and docstring describe `function`: itself, a
    partial's function, or a callable object's `__call__`."""
    if isinstance(function, functools.partial):
        return _described(function.func)
    if inspect.isroutine(function) or isinstance(function, type):
        return function
    call = getattr(type(function), "__call__", None)  # noqa: B004 (the method, not callable())
    return call if inspect.isroutine(call) else function


def _default_name(function: Callable[..., Any]) -> str:
    """A tool's name when none is given: the function's, a partial's function's, or a
    callable object's class's."""
    if isinstance(function, functools.partial):
        return _default_name(function.func)
    name = getattr(function, "__name__", None)
    return name if isinstance(name, str) else type(function).__name__


def _schema_ready(
    function: Callable[..., Any], hints: dict[str, Any], name: str
) -> Callable[..., Any]:
    """`function`, or a stand-in with its signature whose parameters' annotations pydantic
    takes (`_pydantic_ready`), for the input schema alone. A partial or a callable object
    always gets one: pydantic reads a plain function's annotations only."""
    ready = {key: _pydantic_ready(hint) for key, hint in hints.items() if key != "return"}
    plain = inspect.isroutine(function) or isinstance(function, type)
    if plain and all(ready[key] is hints[key] for key in ready):
        return function
    signature = inspect.signature(function)

    def stand_in(**arguments: Any) -> None:
        return None

    stand_in.__name__ = name
    stand_in.__qualname__ = name
    stand_in.__module__ = getattr(function, "__module__", None) or __name__
    stand_in.__annotations__ = ready
    stand_in.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            parameter.replace(annotation=ready.get(parameter.name, parameter.annotation))
            for parameter in signature.parameters.values()
        ],
        return_annotation=inspect.Signature.empty,
    )
    return stand_in


def _input_schema(function: Callable[..., Any], name: str) -> dict[str, Any]:
    try:
        from pydantic import TypeAdapter

        schema: dict[str, Any] = TypeAdapter(cast(Any, function)).json_schema()
    except Exception as error:
        raise TypeError(
            f"the parameters of the tool {name!r} have no JSON Schema: {error}"
        ) from error
    schema.setdefault("properties", {})
    return schema


_ITERATORS = frozenset(
    (
        collections.abc.Iterator,
        collections.abc.Iterable,
        collections.abc.Generator,
        collections.abc.AsyncIterator,
        collections.abc.AsyncIterable,
        collections.abc.AsyncGenerator,
    )
)
"""Return types whose items a tool answers as a list (a generator's, an async one's)."""


def _output_schema(annotation: object) -> dict[str, Any] | None:
    if annotation in (inspect.Parameter.empty, Any, object, ToolOutcome):
        return None
    if typing.get_origin(annotation) in _ITERATORS:
        item = (typing.get_args(annotation) or (Any,))[0]
        annotation = list[item]  # type: ignore[valid-type]
    try:
        from pydantic import TypeAdapter

        schema: dict[str, Any] = TypeAdapter(cast(Any, _pydantic_ready(annotation))).json_schema(
            mode="serialization"
        )
    except Exception as error:
        warnings.warn(
            f"the return annotation {annotation!r} gives no schema ({_message(error)}): the "
            "tool's stub says it returns Any",
            stacklevel=4,
        )
        return None
    return schema


# Goal: `-> Weather` with `class Weather(typing.TypedDict)`, the natural way to write it on
# Python 3.11, gives the stub its keys. What fails: pydantic, which refuses
# `typing.TypedDict` before Python 3.12, so the stub said `Any` with no word why. What we
# do: rebuild such a class (and any inside the annotation) as `typing_extensions.TypedDict`,
# with the same keys, required or not, for the schema alone.
def _pydantic_ready(annotation: Any) -> Any:
    """`annotation` with every `typing.TypedDict` in it rebuilt as `typing_extensions`'."""
    if sys.version_info >= (3, 12):
        return annotation
    if typing.is_typeddict(annotation) and type(annotation).__module__ == "typing":
        return _rebuilt_typeddict(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is None or not args:
        return annotation
    ready = tuple(_pydantic_ready(arg) for arg in args)
    if ready == args:
        return annotation
    if origin in (typing.Union, types.UnionType):
        return typing.Union[ready]  # noqa: UP007 (a tuple of types, built at run time)
    if origin is typing.Annotated:
        return typing.Annotated[ready]
    try:
        return annotation.copy_with(ready) if hasattr(annotation, "copy_with") else origin[ready]
    except TypeError:
        return annotation


@functools.lru_cache(maxsize=256)
def _rebuilt_typeddict(cls: Any) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    required = getattr(cls, "__required_keys__", frozenset(hints))
    fields = {
        name: _pydantic_ready(hint)
        if name in required
        else typing_extensions.NotRequired[_pydantic_ready(hint)]
        for name, hint in hints.items()
    }
    make: Any = typing_extensions.TypedDict
    rebuilt = make(cls.__name__, fields)
    rebuilt.__doc__ = cls.__doc__
    rebuilt.__module__ = cls.__module__
    return rebuilt


class _Raised:
    """What a synchronous tool raised in its thread, carried out as a value."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


# Goal: whatever a synchronous tool raises becomes its error answer.
# What fails: its thread's exception reaches the host's task through two futures, and
# neither carries every exception: asyncio refuses to set `StopIteration` on a future (the
# call then never ends: `next()` on an empty iterator is a common way to raise it), and a
# `GeneratorExit` thrown into the awaiting task closes the handler's coroutine at its
# `await` instead of being raised there, past the handler's own `except`.
# What we do: the thread catches those two and returns them as a value.
def _in_thread(call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    try:
        return call(**arguments)
    except (StopIteration, GeneratorExit) as error:
        return _Raised(error)


def _conversion_words(error: BaseException) -> str:
    """What pydantic found wrong with an argument, in its own words but without its links."""
    from pydantic import ValidationError  # loaded with the first tool already

    if isinstance(error, ValidationError):
        try:
            found = error.errors(include_url=False)[:3]
            return "; ".join(
                (".".join(str(part) for part in item["loc"]) + ": " if item["loc"] else "")
                + str(item["msg"])
                for item in found
            )
        except Exception:
            pass
    return _message(error)


def _message(error: BaseException, with_type: bool = True) -> str:
    try:
        text = str(error)
    except BaseException:  # its `__str__` is the tool's code: SystemExit there is the tool's too
        text = "(its message could not be read)"
    kind = type(error).__name__
    if not with_type:
        return text or kind
    return f"{kind}: {text}" if text else kind


def as_spec(item: Any) -> ToolSpec:
    """A tool given to a `Runtime` as its `ToolSpec`: a `ToolSpec`, a `@tool` function, or a
    plain function (made a tool here). Raises `TypeError` for anything else."""
    if isinstance(item, ToolSpec):
        _check_built(item)
        return item
    spec = getattr(item, "spec", None)
    if isinstance(spec, ToolSpec):
        return spec
    if callable(item):
        made: ToolSpec = tool(item).spec
        return made
    raise TypeError(f"tools: {item!r} is not a tool, a ToolSpec or a function")


def _check_built(spec: ToolSpec) -> None:
    """Raise `TypeError`/`ValueError` naming the field for a hand-built `ToolSpec` that no
    call could reach: each would otherwise fail only when the script called it."""
    if not isinstance(spec.name, str) or not spec.name:
        raise ValueError(f"tools: a ToolSpec's name must be a non-empty string, not {spec.name!r}")
    if not callable(spec.handler):
        raise TypeError(
            f"tools: {spec.name!r}: handler must be an async function, not {spec.handler!r}"
        )
    if inspect.isfunction(spec.handler) and not inspect.iscoroutinefunction(spec.handler):
        # A plain `def` (or an async generator): what it gives is not awaitable, and every
        # call would fail.
        raise TypeError(
            f"tools: {spec.name!r}: handler must be an async function (`async def`), not the "
            f"plain function {spec.handler.__name__!r}; for a function of its own arguments, "
            "`@tool` makes the spec (and runs sync code off the event loop)"
        )
    schema = spec.input_schema
    kind = schema.get("type", "object") if isinstance(schema, dict) else None
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise ValueError(
            f"tools: {spec.name!r}: input_schema must be a JSON Schema of an object (the "
            f"call's named arguments), not {schema!r}"[:500]
        )
    if not _timeout_or_none(spec.timeout):
        raise ValueError(
            f"tools: {spec.name!r}: timeout must be a positive, finite number of seconds or "
            f"None, not {spec.timeout!r}"
        )
    if not isinstance(spec.annotations, ToolAnnotations):
        raise TypeError(
            f"tools: {spec.name!r}: annotations must be a ToolAnnotations, not {spec.annotations!r}"
        )


def _timeout_or_none(timeout: object) -> bool:
    """Whether `timeout` is None or a positive, finite number of seconds."""
    return timeout is None or (
        not isinstance(timeout, bool)
        and isinstance(timeout, int | float)
        and math.isfinite(timeout)
        and timeout > 0
    )
