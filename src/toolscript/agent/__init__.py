"""toolscript.agent: a model whose only action is running scripts, with a true ending.

```python
from toolscript.agent import Agent, ExecutionControl

agent = Agent("anthropic:MODEL", runtime=rt, control=ExecutionControl(request_timeout=120))
turn = await agent.run("the task")
turn.stop_reason  # end_turn | aborted | time_limit | step_cap | truncated | error
turn = await agent.resume(turn.turn_id)  # a turn whose process died goes on
```
"""

from __future__ import annotations

from .checkpoint import ResumeError
from .control import ExecutionControl, InvalidControl, StepState
from .loop import Agent, AgentEvent, StopReason, Turn

__all__ = [
    "Agent",
    "AgentEvent",
    "ExecutionControl",
    "InvalidControl",
    "ResumeError",
    "StepState",
    "StopReason",
    "Turn",
]
