"""The three actions a model takes on a runtime: `run_python`, `script_status`, `cancel_script`.

One concept, though a little over 500 lines: the actions' rules and words, defined once for
both faces, so that neither can drift from the other.

`toolscript serve` offers them to an MCP client and `toolscript.agent` to its model. Both take
the rules and the words from here, and keep only their transport: MCP content, structured
content and progress for one; messages, the transcript and the turn's clocks for the other.
An `Actions` serves one conversation (an MCP session, an agent's turn): its shell, and the
background scripts started in it.

The rules, the same for both faces:

- `run_python` takes `code` (a string of Python source; empty runs nothing), `time_limit_s`
  (null for the runtime's default, or a number of seconds above 0 and at most the runtime's
  `max_time_limit`) and `background` (true or false, default false). `script_status` and
  `cancel_script` take `script_id`, the non-empty string `run_python` gave. Any other argument
  is refused. A refusal names every problem at once, and nothing runs.
- A background script is found by its id only in the conversation that started it: while it
  runs, and for `keep_for` seconds after it ends (the last `keep_count` that ended).
- An answer is text for the model and the same facts as JSON-safe `data`: a settled result's
  `text` and `to_dict()` (which holds the text too); for a script still running, its `script_id`, `status: running`,
  and (from `script_status`) the last lines of its `output` so far.
  It `is_error` when nothing was done as asked, or the script did not end `ok`.

Only the runtime's public face is used, through the protocols below (`Shell`, `ScriptHandle`
and `ScriptResult` fit them), so a test can stand a fake in for the runtime.

One concept, though a little over 500 lines: the three actions' rules and words, which both
faces must share to the letter; split, the two halves would drift apart.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ACTION_NAMES",
    "CANCEL_REASON",
    "Actions",
    "Answer",
    "BackgroundScript",
    "BackgroundShell",
    "CallCounts",
    "RunRequest",
    "ScriptOutcome",
    "ScriptShell",
    "ShownImage",
    "no_such_tool",
    "run_python_schema",
    "script_id_schema",
    "unknown_arguments",
]

ACTION_NAMES = ("run_python", "script_status", "cancel_script")

CANCEL_REASON = "cancel_script was called"
"""Why a script stopped by `cancel_script` was cancelled, as its result says."""

KEEP_FOR = 3600.0
"""Seconds an ended background script stays findable, by default."""

KEEP_COUNT = 100
"""Ended background scripts an `Actions` keeps at most, by default (the oldest go first)."""

KNOWN_NAMED = 10
"""Ids a refusal names when it lists the background scripts it knows."""

_RUN_ARGUMENTS = ("code", "time_limit_s", "background")
_SCRIPT_ARGUMENTS = ("script_id",)


# -- what the actions use of the runtime -----------------------------------------------------


class CallCounts(Protocol):
    """A script's call report, as far as the faces read it."""

    @property
    def by_fate(self) -> Mapping[str, int]:
        """A count per call fate (`seen`, `unread`, `late`, `pending`, `refused`)."""
        ...


class ShownImage(Protocol):
    """An image a script showed (the runtime's `ScriptImage`)."""

    @property
    def mime_type(self) -> str:
        """`image/png`, `image/jpeg`, `image/gif` or `image/webp`."""
        ...

    @property
    def data(self) -> bytes:
        """The image's bytes."""
        ...


class ScriptOutcome(Protocol):
    """A settled script result (the runtime's `ScriptResult`)."""

    @property
    def images(self) -> Sequence[ShownImage]:
        """The images the script showed."""
        ...

    @property
    def status(self) -> str:
        """`ok`, `error`, `time_limit`, `cancelled`, `crashed` or `refused`."""
        ...

    @property
    def text(self) -> str:
        """What the model reads."""
        ...

    @property
    def script_id(self) -> Any:
        """The script's id in the journal."""
        ...

    @property
    def calls(self) -> CallCounts:
        """The script's call report."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """The result, structured and JSON-safe."""
        ...


class BackgroundScript(Protocol):
    """A script started with `Shell.start` (the runtime's `ScriptHandle`)."""

    @property
    def id(self) -> Any:
        """The script's id."""
        ...

    def status(self) -> str:
        """`running` until the script ends, then its result's status."""
        ...

    def output(self, limit: int | None = None) -> str:
        """The last lines of what it has written so far, within `limit` characters."""
        ...

    async def result(self) -> ScriptOutcome:
        """Wait for the script to end and return its result."""
        ...

    async def cancel(self, reason: str = ...) -> ScriptOutcome:
        """Stop the script and return its result, which gives `reason`."""
        ...


class ScriptShell(Protocol):
    """A shell: a persistent namespace that runs one foreground script at a time."""

    async def run(self, code: str, *, time_limit: float | None = None) -> ScriptOutcome:
        """Run `code` and return its settled result."""
        ...

    def output(self, limit: int | None = None) -> str:
        """The last lines of what the script running now has written, within `limit`
        characters ("" when none runs)."""
        ...


@runtime_checkable
class BackgroundShell(ScriptShell, Protocol):
    """A shell that can also start scripts in the background."""

    async def start(
        self,
        code: str,
        *,
        time_limit: float | None = None,
        on_done: Callable[[Any], Any] | None = None,
    ) -> BackgroundScript:
        """Start `code` in the background and return at once."""
        ...


# -- requests and answers --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A `run_python` call whose arguments passed: the code, its time limit (`None`: the
    runtime's default) and whether it runs in the background."""

    code: str
    time_limit: float | None
    background: bool


@dataclass(frozen=True, slots=True)
class Answer:
    """What an action answers.

    `text` is what the model reads; `data` the same facts, JSON-safe (`None` for a refusal,
    whose text says it all); `is_error` is true when nothing was done as asked, or the script
    did not end `ok`. `script_id` names the script the answer is about; `result` is its
    settled result when the answer carries one; `handle` the background script a start
    answered for, while it runs; `images`, the images the script showed, for the face to
    send beside the text.
    """

    text: str
    data: dict[str, Any] | None = None
    is_error: bool = False
    script_id: str | None = None
    result: ScriptOutcome | None = None
    handle: BackgroundScript | None = None
    images: tuple[ShownImage, ...] = ()

    @classmethod
    def of(cls, result: ScriptOutcome) -> Answer:
        """The answer that is a settled result: its text and its `to_dict()`."""
        return cls(
            result.text,
            result.to_dict(),
            is_error=result.status != "ok",
            script_id=str(result.script_id),
            result=result,
            images=tuple(result.images),
        )

    @classmethod
    def refusal(cls, text: str) -> Answer:
        """An answer saying why nothing was done."""
        return cls(text, is_error=True)


def said_back(words: str, most: int = 200) -> str:
    """A client's own words (a name, an id, a query) as an answer says them back: quoted,
    and cut at `most` characters, so a huge one does not come back whole."""
    return repr(words if len(words) <= most else words[:most] + "…")


def no_such_tool(name: str, offered: Iterable[str]) -> Answer:
    """The refusal of a call to a tool the face does not offer."""
    return Answer.refusal(
        f"There is no tool named {said_back(name)}; the tools are {', '.join(offered)}."
    )


def run_python_schema(
    *, default_time_limit: float | None = None, max_time_limit: float | None = None
) -> dict[str, Any]:
    """The JSON Schema of `run_python`'s arguments; the limits, when given, are stated in it."""
    limits = [
        f"default {default_time_limit:g}" if default_time_limit is not None else "",
        f"at most {max_time_limit:g}" if max_time_limit is not None else "",
    ]
    said = ", ".join(limit for limit in limits if limit)
    time_limit: dict[str, Any] = {
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "description": "Seconds before the script is stopped" + (f" ({said})." if said else "."),
    }
    if max_time_limit is not None:
        time_limit["maximum"] = max_time_limit
    return {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "The Python code to run."},
            "time_limit_s": time_limit,
            "background": {
                "type": "boolean",
                "default": False,
                "description": "Start it in the background and return its script_id at once.",
            },
        },
        "required": ["code"],
        "additionalProperties": False,
    }


def script_id_schema() -> dict[str, Any]:
    """The JSON Schema of `script_status`'s and `cancel_script`'s arguments."""
    return {
        "type": "object",
        "properties": {"script_id": {"type": "string", "description": "The id run_python gave."}},
        "required": ["script_id"],
        "additionalProperties": False,
    }


# -- the actions -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Tracked:
    handle: BackgroundScript
    started: float
    ended: float | None = None


class Actions:
    """The actions of one conversation: its shell, and the background scripts started in it.

    `run_python` is two steps, so that a face can put its own bounds around the run:
    `check_run(arguments)` gives a `RunRequest` or the refusal, then `run(request)` runs it in
    the foreground, or `start(request)` in the background. `script_status(arguments)` and
    `cancel_script(arguments)` are one step each. `close(reason)` cancels what still runs.

    `recall(script_id)`, when given, answers `script_status` and `cancel_script` for a
    script this conversation does not hold (one started before the face restarted), or
    gives `None` to refuse as for an unknown id.
    """

    def __init__(
        self,
        shell: ScriptShell,
        *,
        max_time_limit: float,
        keep_for: float = KEEP_FOR,
        keep_count: int = KEEP_COUNT,
        recall: Callable[[str], Answer | None] | None = None,
    ) -> None:
        self.shell = shell
        self.max_time_limit = max_time_limit
        self.keep_for = keep_for
        self.keep_count = keep_count
        self.recall = recall
        self._scripts: OrderedDict[str, _Tracked] = OrderedDict()
        self._forgotten: OrderedDict[str, None] = OrderedDict()
        """Ids of scripts started here and forgotten since (the newest `_FORGOTTEN_KEPT`):
        `recall` is not asked of them, whose answer is for scripts of an earlier face."""

    # -- run_python ----------------------------------------------------------------------

    def check_run(self, arguments: Mapping[str, Any]) -> RunRequest | Answer:
        """The request `run_python`'s arguments make, or the refusal naming every problem."""
        problems: list[str] = []
        code = arguments.get("code")
        if not isinstance(code, str):
            problems.append("`code` must be a string of Python source")
        limit = arguments.get("time_limit_s")
        if limit is not None and not _is_seconds(limit, self.max_time_limit):
            problems.append(
                "`time_limit_s` must be a number of seconds above 0 and at most "
                f"{self.max_time_limit:g}, or null for the default"
            )
        background = arguments.get("background", False)
        if not isinstance(background, bool):
            problems.append("`background` must be true or false")
        elif background and not isinstance(self.shell, BackgroundShell):
            problems.append(
                "this runtime cannot run scripts in the background; run it without background=true"
            )
        problems.extend(unknown_arguments(arguments, _RUN_ARGUMENTS))
        if problems or not isinstance(code, str):
            return _refused("run_python", problems)
        return RunRequest(code, None if limit is None else float(limit), background)

    async def run(self, request: RunRequest) -> Answer:
        """Run the request in the foreground, in the shell, and answer with its result.

        Cancelling the awaiting task stops the script, as `Shell.run` does.
        """
        if getattr(self.shell, "busy", False):
            # The shell's own words offer "another shell", which whoever calls an action
            # (a model, an MCP client) has no way to pick.
            beside = (
                ", or pass background=true to run this one beside it"
                if isinstance(self.shell, BackgroundShell)
                else ""
            )
            return _refused(
                "run_python",
                [
                    "a script is already running in the foreground (scripts run one at a "
                    f"time, sharing their variables); wait for its answer{beside}"
                ],
            )
        return Answer.of(await self.shell.run(request.code, time_limit=request.time_limit))

    def output(self, limit: int | None = None) -> str:
        """The last lines of what the foreground script running now has written, within
        `limit` characters ("" when none runs): what a face shows while it waits."""
        return self.shell.output(limit)

    async def start(
        self, request: RunRequest, *, on_done: Callable[[Any], Any] | None = None
    ) -> Answer:
        """Start the request in the background and answer with its id at once.

        `on_done(result)` is called once when it ends (as `Shell.start` does). A start the
        runtime refuses at once is answered with that result.
        """
        shell = self.shell
        if not isinstance(shell, BackgroundShell):  # check_run refuses this first
            return _refused("run_python", ["this runtime cannot run scripts in the background"])

        def ended(result: Any) -> Any:
            tracked = self._scripts.get(str(result.script_id))
            if tracked is not None and tracked.ended is None:
                tracked.ended = time.monotonic()
            return None if on_done is None else on_done(result)

        handle = await shell.start(request.code, time_limit=request.time_limit, on_done=ended)
        script_id = str(handle.id)
        self._forget_old()
        self._scripts[script_id] = _Tracked(handle, time.monotonic())
        if handle.status() != "running":
            return Answer.of(await handle.result())
        return Answer(
            f"Started background script {script_id}. It runs in an interpreter of its own, "
            "beside this shell, and does not see its variables. You will be told when it "
            f'ends; script_status(script_id="{script_id}") shows where it is, and '
            f'cancel_script(script_id="{script_id}") stops it.',
            {"script_id": script_id, "status": "running", "background": True},
            script_id=script_id,
            handle=handle,
        )

    def track(self, handle: BackgroundScript, running_for: float = 0.0) -> None:
        """Answer for `handle` as for a script `start` gave, from now on: a background script
        of this conversation that a restarted runtime took back, `running_for` seconds after
        it started."""
        self._forget_old()
        self._scripts[str(handle.id)] = _Tracked(handle, time.monotonic() - running_for)

    # -- script_status and cancel_script -------------------------------------------------

    async def script_status(self, arguments: Mapping[str, Any]) -> Answer:
        """Whether a background script still runs (and for how long), or its result."""
        found = self._find("script_status", arguments)
        if isinstance(found, Answer):
            return found
        script_id, tracked = found
        handle = tracked.handle
        if handle.status() == "running":
            running_for = time.monotonic() - tracked.started
            output = handle.output()
            said = f"Its output so far:\n\n{output}" if output else "It has written nothing yet."
            return Answer(
                f"Background script {script_id} is still running ({running_for:.1f} s so far). "
                f"Ask again later, or stop it with cancel_script. {said}",
                {
                    "script_id": script_id,
                    "status": "running",
                    "running_for": round(running_for, 3),
                    "output": output,
                },
                script_id=script_id,
            )
        return Answer.of(await handle.result())

    async def cancel_script(self, arguments: Mapping[str, Any]) -> Answer:
        """Stop a background script (an interrupt, then a kill) and answer with its result;
        the result of one that already ended."""
        found = self._find("cancel_script", arguments)
        if isinstance(found, Answer):
            return found
        script_id, tracked = found
        ended = tracked.handle.status() != "running"
        result = await tracked.handle.cancel(CANCEL_REASON)
        if tracked.ended is None:
            tracked.ended = time.monotonic()
        answer = Answer.of(result)
        if not ended:
            return answer
        # Its result alone would not say whether this cancel stopped anything.
        return replace(
            answer,
            text=f"Background script {script_id} had already ended {result.status}; nothing "
            f"was cancelled. Its result:\n\n{answer.text}",
            data={**(answer.data or {}), "already_ended": True},
        )

    async def close(self, reason: str) -> None:
        """Cancel the background scripts still running, giving `reason`, and forget them all.

        Each cancel is bounded by the runtime's stop; one that fails is passed over.
        """
        for tracked in list(self._scripts.values()):
            if tracked.handle.status() == "running":
                with contextlib.suppress(Exception):
                    await tracked.handle.cancel(reason)
        self._scripts.clear()

    def _find(self, action: str, arguments: Mapping[str, Any]) -> tuple[str, _Tracked] | Answer:
        script_id = arguments.get("script_id")
        problems = [] if isinstance(script_id, str) and script_id else [_SCRIPT_ID_WORDS]
        problems.extend(unknown_arguments(arguments, _SCRIPT_ARGUMENTS))
        if problems or not isinstance(script_id, str):
            return _refused(action, problems)
        self._forget_old()
        tracked = self._scripts.get(script_id)
        recalled = (
            None
            if tracked or self.recall is None or script_id in self._forgotten
            else self.recall(script_id)
        )
        if recalled is not None:
            return recalled
        if tracked is None:
            return Answer.refusal(
                f"There is no background script {said_back(script_id)} here (known: {self._known()}). "
                "A background script can be found only where it was started: while it runs, "
                f"and for {self.keep_for / 60:g} minutes after it ends (the last "
                f"{self.keep_count} that ended)."
            )
        return script_id, tracked

    def _known(self) -> str:
        ids = list(reversed(self._scripts))
        if not ids:
            return "none"
        named = ", ".join(ids[:KNOWN_NAMED])
        more = len(ids) - KNOWN_NAMED
        return named if more <= 0 else f"{named}, and {more} more"

    def _forget_old(self) -> None:
        now = time.monotonic()
        for tracked in self._scripts.values():
            if tracked.ended is None and tracked.handle.status() != "running":
                tracked.ended = now  # its on_done has not run yet, or the shell has none
        ended = sorted(  # by when they ended, then by when they started
            (
                (tracked.ended, script_id)
                for script_id, tracked in self._scripts.items()
                if tracked.ended is not None
            ),
            key=lambda item: item[0],
        )
        too_many = max(0, len(ended) - self.keep_count)
        for number, (when, script_id) in enumerate(ended):
            if number < too_many or now - when > self.keep_for:
                del self._scripts[script_id]
                self._forgotten[script_id] = None
                if len(self._forgotten) > _FORGOTTEN_KEPT:
                    self._forgotten.popitem(last=False)


_FORGOTTEN_KEPT = 10_000
"""Ids of forgotten scripts a conversation remembers it forgot."""

_SCRIPT_ID_WORDS = "`script_id` must be the id run_python gave, a string"


def _refused(action: str, problems: list[str]) -> Answer:
    return Answer.refusal(f"{action} was not run: {'; '.join(problems)}.")


def unknown_arguments(arguments: Mapping[str, Any], known: tuple[str, ...]) -> list[str]:
    """The problem of `arguments` holding names outside `known`, said once; none if not."""
    unknown = sorted(str(name) for name in arguments if name not in known)
    if not unknown:
        return []
    takes = ", ".join(known[:-1]) + f" and {known[-1]}" if len(known) > 1 else known[0]
    named = ", ".join(repr(name[:40]) for name in unknown[:5])
    if len(unknown) > 5:
        named += f" and {len(unknown) - 5} more"
    return [f"it takes only {takes}, not {named}"]


def _is_seconds(value: object, most: float) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 < value <= most
    )
