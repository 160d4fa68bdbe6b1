"""`toolscript agent "TASK" --model PROVIDER:MODEL`: one agent turn in the terminal.

Progress (the turn's id, steps, scripts, calls, elapsed) goes to standard error while the turn
runs; the summary, or with `--json` the whole turn, goes to standard output. The exit code is 0
when the model ended the turn (and did not `block`), 1 otherwise, 130 when interrupted.
`--resume TURN_ID` goes on with a turn whose process died; a turn that cannot be resumed is
one line on standard error and exit code 2. The agent, its
providers' SDKs and the runtime are imported when the command runs, not when the command line
starts.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from . import options
from .options import UsageError
from .terminal import for_terminal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from ..agent import AgentEvent, Turn


class Progress:
    """Keeps the live status line of a turn and prints what happens, on standard error."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.step = 0
        self.cap = 0
        self.scripts = 0
        self.calls = 0
        self.elapsed = 0.0
        self.doing = "starting"
        self.live: Live | None = None

    def status(self) -> Text:
        """The status line."""
        from rich.text import Text

        return Text(
            f"step {self.step}/{self.cap} · scripts {self.scripts} · calls {self.calls} · "
            f"{self.elapsed:.1f} s · {self.doing}",
            style="dim",
        )

    def _plain(self, text: str) -> str:
        """Words from the model or its API: neither markup nor, on a terminal, control
        sequences."""
        return escape(for_terminal(text, self.console.file))

    def hear(self, event: AgentEvent) -> None:
        """Take one event of the turn."""
        self.step, self.elapsed = event.step, event.elapsed
        detail = event.detail
        if event.kind == "turn_started":
            verb = "resumed" if detail["resumed"] else "started"
            self.console.print(
                escape(
                    f"turn {detail['turn_id']} {verb} (if this process dies: --resume "
                    f"{detail['turn_id']})"
                ),
                soft_wrap=True,
            )
        elif event.kind == "step":
            self.cap = detail["cap"]
            self.doing = "waiting for the model"
        elif event.kind in ("text", "tool_call"):
            self.doing = "the model is answering"
        elif event.kind == "retry":
            # The reason is the model API's words: text, never markup.
            self.console.print(
                f"[yellow]retry {detail['attempt']}[/]: {self._plain(str(detail['why']))}"
            )
        elif event.kind == "script_started":
            self.scripts += 1
            self.doing = "running a script" + (" (background)" if detail["background"] else "")
        elif event.kind == "script_ended":
            made = sum(detail["calls"].values())
            self.calls += made
            self.console.print(
                escape(f"script {detail['script_id']}: {detail['status']}, {made} tool call(s)")
            )
        elif event.kind == "background_ended":
            self.console.print(escape(f"background script {detail['script_id']} ended"))
        elif event.kind == "terminal_refused":
            self.console.print(
                f"[yellow]{self._plain(str(detail['tool']))} refused[/]: results were unread"
            )
        elif event.kind == "before_step":
            self.console.print(escape(f"before_step: {detail['outcome']}"))
        elif event.kind == "reply":
            self.doing = "acting"
        if self.live is not None:
            self.live.update(self.status())


def summary(turn: Turn) -> str:
    """The turn's ending in a few lines."""
    lines = [
        f"stop_reason: {turn.stop_reason}",
        f"steps: {turn.steps} · scripts: {turn.scripts} · elapsed: {turn.elapsed:.1f} s · "
        f"turn: {turn.turn_id}",
    ]
    if turn.summary is not None:
        lines.append(f"finished: {turn.summary}")
    if turn.blocked is not None:
        lines.append(f"blocked: {turn.blocked}")
    if turn.error is not None:
        lines.append(f"why: {turn.error}")
    last = next(
        (e for e in reversed(turn.transcript) if e["role"] == "assistant" and e["text"]), None
    )
    if last is not None and turn.summary is None:
        lines.append(f"the model's last words: {last['text']}")
    return "\n".join(lines)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `agent` command's arguments."""
    parser = options.command(commands, "agent", agent_command.__doc__)
    parser.add_argument("task", nargs="?", metavar="TASK", help="What the agent should do.")
    parser.add_argument(
        "--model", required=True, metavar="PROVIDER:MODEL", help="anthropic:MODEL or openai:MODEL."
    )
    parser.add_argument(
        "--base-url", metavar="URL", help="Another server of that API (any OpenAI-compatible)."
    )
    options.add_mcp_config(parser)
    parser.add_argument(
        "--max-steps", type=int, default=50, metavar="N", help="Model requests the turn may make."
    )
    parser.add_argument(
        "--lifetime-timeout", type=float, metavar="SECONDS", help="Seconds for the whole turn."
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="Seconds for each model request.",
    )
    parser.add_argument(
        "--tool-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="The longest time limit of one script, in seconds.",
    )
    parser.add_argument(
        "--no-images",
        dest="images",
        action="store_false",
        help="Do not send the images scripts show to the model (for a model without image input).",
    )
    options.add_json(parser)
    options.add_journal(parser)
    options.add_sandbox(parser)
    options.add_check(parser)
    options.add_keep_interpreters(parser)
    parser.add_argument(
        "--resume",
        metavar="TURN_ID",
        help="Go on with the turn TURN_ID, whose process died, instead of starting one "
        "(on the same journal; with --keep-interpreters its running script is kept).",
    )
    parser.set_defaults(run=agent_command)


SDKS = {"anthropic": "anthropic", "openai": "openai"}
"""The package each provider's SDK is imported as (the `agent` extra installs them)."""

KEYS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
"""The environment variable each provider's SDK reads its API key from."""


def check_provider(model: str, base_url: str | None) -> None:
    """Refuse, before anything starts, a model that names no provider, a provider whose SDK is
    not installed, or one whose API key is not set (a local server of the OpenAI API, given
    with `--base-url`, needs none)."""
    import importlib.util
    import os

    provider, sep, name = model.partition(":")
    if not sep or provider not in SDKS or not name:
        raise UsageError(f"--model: expected anthropic:MODEL or openai:MODEL, not {model!r}")
    from ..agent.providers import check_base_url

    try:
        check_base_url(base_url)
    except ValueError as error:
        raise UsageError(f"--base-url: {str(error).removeprefix('base_url: ')}") from None
    if importlib.util.find_spec(SDKS[provider]) is None:
        raise UsageError(
            f"the {provider} SDK is not installed; install it with: pip install 'toolscript[agent]'"
        )
    if not os.environ.get(KEYS[provider]) and not (provider == "openai" and base_url):
        raise UsageError(f"{KEYS[provider]} is not set: export it with your {provider} API key")


def agent_command(args: argparse.Namespace) -> int:
    """Run one agent turn on TASK: the model acts only by running Python scripts.

    With --json, the whole turn is printed, transcript included.
    """
    import asyncio

    from rich.console import Console
    from rich.live import Live

    if args.task is None and args.resume is None:
        raise UsageError("give a TASK, or --resume TURN_ID to go on with a turn")
    if args.task is not None and args.resume is not None:
        raise UsageError("give a TASK, or --resume TURN_ID, not both")
    model, base_url, as_json, journal = args.model, args.base_url, args.as_json, args.journal
    check_provider(model, base_url)
    knobs = options.sandbox_knobs(args)
    knobs |= {"check": args.check, "keep_interpreters": args.keep_interpreters}
    mcp_config = options.mcp_config(args.mcp_config)

    from ..agent import Agent, ExecutionControl, InvalidControl, ResumeError

    try:
        control = ExecutionControl(
            request_timeout=args.request_timeout,
            lifetime_timeout=args.lifetime_timeout,
            tool_timeout=args.tool_timeout,
            max_steps=args.max_steps,
        )
    except InvalidControl as error:
        raise UsageError(f"--{error.field.replace('_', '-')}: {error}") from None
    console = Console(stderr=True)
    progress = Progress(console)
    ended: list[Turn] = []

    async def main() -> None:
        from ..runtime import Runtime

        async with Runtime(mcp_config=mcp_config, journal=journal, **knobs) as rt:
            for server, reason in rt.mcp_failures.items():
                console.print(escape(f"toolscript: MCP server {server!r} did not start: {reason}"))
            try:
                agent = Agent(
                    model,
                    rt,
                    base_url=base_url,
                    control=control,
                    images=args.images,
                    on_event=progress.hear,
                )
            except ValueError as error:
                raise UsageError(f"--model: {error}") from None
            with Live(progress.status(), console=console, transient=True) as live:
                progress.live = live
                if args.resume is not None:
                    try:
                        turn = await agent.resume(args.resume)
                    except ResumeError as error:
                        raise UsageError(str(error)) from None
                else:
                    turn = await agent.run(args.task)
                progress.live = None
            ended.append(turn)
            _show(turn, as_json)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        if not ended:
            console.print("interrupted")
        return 130
    turn = ended[0]
    return 0 if turn.stop_reason == "end_turn" and turn.blocked is None else 1


def _show(turn: Turn, as_json: bool) -> None:
    if as_json:
        import json

        json.dump(turn.to_dict(), sys.stdout, indent=2, ensure_ascii=False, default=_json_safe)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(for_terminal(summary(turn), sys.stdout) + "\n")
    sys.stdout.flush()


def _json_safe(value: Any) -> str:
    return repr(value)


def escape(text: str) -> str:
    """`text` as rich prints it as it is: square brackets in it are not markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)
