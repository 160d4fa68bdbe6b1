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

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .options import (
    JournalOption,
    JSONOption,
    KeepInterpretersOption,
    MCPConfigOption,
    MountOption,
    NetworkOption,
    SandboxOption,
    sandbox_knobs,
)

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

    def hear(self, event: AgentEvent) -> None:
        """Take one event of the turn."""
        self.step, self.elapsed = event.step, event.elapsed
        detail = event.detail
        if event.kind == "turn_started":
            verb = "resumed" if detail["resumed"] else "started"
            self.console.print(
                f"turn {detail['turn_id']} {verb} (if this process dies: --resume "
                f"{detail['turn_id']})",
                soft_wrap=True,
            )
        elif event.kind == "step":
            self.cap = detail["cap"]
            self.doing = "waiting for the model"
        elif event.kind in ("text", "tool_call"):
            self.doing = "the model is answering"
        elif event.kind == "retry":
            self.console.print(f"[yellow]retry {detail['attempt']}[/]: {detail['why']}")
        elif event.kind == "script_started":
            self.scripts += 1
            self.doing = "running a script" + (" (background)" if detail["background"] else "")
        elif event.kind == "script_ended":
            made = sum(detail["calls"].values())
            self.calls += made
            self.console.print(
                f"script {detail['script_id']}: {detail['status']}, {made} tool call(s)"
            )
        elif event.kind == "background_ended":
            self.console.print(f"background script {detail['script_id']} ended")
        elif event.kind == "terminal_refused":
            self.console.print(f"[yellow]{detail['tool']} refused[/]: results were unread")
        elif event.kind == "before_step":
            self.console.print(f"before_step: {detail['outcome']}")
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


def agent_command(
    model: Annotated[
        str, typer.Option("--model", help="anthropic:MODEL or openai:MODEL.", show_default=False)
    ],
    task: Annotated[
        str | None, typer.Argument(help="What the agent should do.", metavar="TASK")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="Another server of that API (any OpenAI-compatible)."),
    ] = None,
    mcp_config: MCPConfigOption = None,
    max_steps: Annotated[
        int, typer.Option("--max-steps", help="Model requests the turn may make.")
    ] = 50,
    lifetime_timeout: Annotated[
        float | None, typer.Option("--lifetime-timeout", help="Seconds for the whole turn.")
    ] = None,
    request_timeout: Annotated[
        float, typer.Option("--request-timeout", help="Seconds for each model request.")
    ] = 300.0,
    tool_timeout: Annotated[
        float | None,
        typer.Option("--tool-timeout", help="The longest time limit of one script, in seconds."),
    ] = 60.0,
    as_json: JSONOption = False,
    journal: JournalOption = None,
    network: NetworkOption = False,
    sandbox: SandboxOption = "auto",
    mount: MountOption = None,
    keep_interpreters: KeepInterpretersOption = False,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            help="Go on with the turn TURN_ID, whose process died, instead of starting one "
            "(on the same journal; with --keep-interpreters its running script is kept).",
            metavar="TURN_ID",
        ),
    ] = None,
) -> None:
    """Run one agent turn on TASK: the model acts only by running Python scripts.

    With --json, the whole turn is printed, transcript included.
    """
    if (task is None) == (resume is None):
        raise typer.BadParameter("give a TASK, or --resume TURN_ID, not both", param_hint="TASK")
    import asyncio

    from rich.console import Console
    from rich.live import Live

    from ..agent import Agent, ExecutionControl, InvalidControl, ResumeError

    knobs = sandbox_knobs(sandbox, network, mount)
    knobs["keep_interpreters"] = keep_interpreters
    try:
        control = ExecutionControl(
            request_timeout=request_timeout,
            lifetime_timeout=lifetime_timeout,
            tool_timeout=tool_timeout,
            max_steps=max_steps,
        )
    except InvalidControl as error:
        raise typer.BadParameter(
            str(error), param_hint=f"--{error.field.replace('_', '-')}"
        ) from None
    console = Console(stderr=True)
    progress = Progress(console)
    ended: list[Turn] = []
    refused: list[str] = []

    async def main() -> None:
        from ..runtime import Runtime

        async with Runtime(mcp_config=mcp_config, journal=journal, **knobs) as rt:
            for server, reason in rt.mcp_failures.items():
                console.print(f"toolscript: MCP server {server!r} did not start: {reason}")
            try:
                agent = Agent(model, rt, base_url=base_url, control=control, on_event=progress.hear)
            except ValueError as error:
                raise typer.BadParameter(str(error), param_hint="--model") from None
            with Live(progress.status(), console=console, transient=True) as live:
                progress.live = live
                if resume is not None:
                    try:
                        turn = await agent.resume(resume)
                    except ResumeError as error:
                        refused.append(str(error))
                        return
                else:
                    assert task is not None
                    turn = await agent.run(task)
                progress.live = None
            ended.append(turn)
            _show(turn, as_json)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        if not ended:
            console.print("interrupted")
        raise typer.Exit(130) from None
    if refused:
        sys.stderr.write(f"toolscript: {refused[0]}\n")
        raise typer.Exit(2)
    turn = ended[0]
    raise typer.Exit(0 if turn.stop_reason == "end_turn" and turn.blocked is None else 1)


def _show(turn: Turn, as_json: bool) -> None:
    if as_json:
        import json

        json.dump(turn.to_dict(), sys.stdout, indent=2, ensure_ascii=False, default=_json_safe)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(summary(turn) + "\n")
    sys.stdout.flush()


def _json_safe(value: Any) -> str:
    return repr(value)
