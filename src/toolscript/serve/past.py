"""What a restarted `toolscript serve` knows of the background scripts a session started
before the restart: the journal's word, never a guess.

- A script that ended while its server lived has its result in the journal (the server
  keeps it there when the script ends, before it tells the client): `script_status` and
  `cancel_script` answer with it, as they did before the restart.
- A script that was still running when its server died was stopped with its interpreter:
  it is answered as such, with the journal's count of its calls whose effect is unknown.
- A script that ended without its result being kept (its server died in between) is
  answered with the status the journal has.

With `--keep-interpreters`, a script still running when its server died (or one that ended
while no server ran) is not in the past: the runtime takes it back from its keeper, and the
server gives its handle to the session when the session comes back (`Actions.track`), so
`recall` is asked only for the scripts nobody holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from ..actions import Answer
from ..runtime import Runtime

__all__ = ["HOST_RESTARTED", "recall_for"]

HOST_RESTARTED = "host_restarted"
"""The status a background script is given when its server died while it ran."""


def recall_for(runtime: Runtime, shell: str, keep_for: float) -> Callable[[str], Answer | None]:
    """The `recall` of a session whose shell is named `shell`: it answers for the scripts
    that shell started, and for no other; for an ended one, within `keep_for` seconds of its
    end, as the session itself does."""

    def recall(script_id: str) -> Answer | None:
        if not script_id.startswith(f"{shell}:"):
            return None
        journal = runtime.journal
        stored = journal.stored_result(script_id)
        if stored is not None:
            if time.time() - stored.ended_at > keep_for:
                return None
            return Answer(
                stored.text,
                json.loads(stored.data),
                is_error=stored.status != "ok",
                script_id=script_id,
            )
        found = [script for script in journal.scripts(shell=shell) if script.script_id == script_id]
        if not found:
            return None
        script = found[0]
        if script.status in (None, "host_gone"):  # a later runtime ends it `host_gone`
            uncertain = len(journal.calls(script_id=script_id, uncertain=True))
            calls = (
                f" {uncertain} of its tool calls may have taken effect; "
                "`toolscript calls --uncertain` lists them."
                if uncertain
                else ""
            )
            return Answer(
                f"exit 1 · {HOST_RESTARTED}\n\nBackground script {script_id} was running when "
                "toolscript serve stopped (its process ended or was killed), and its "
                f"interpreter ended with it: the script did not finish, and its result is "
                f"lost.{calls} Run it again if it is still needed.",
                {
                    "script_id": script_id,
                    "status": HOST_RESTARTED,
                    "exit_code": 1,
                    "uncertain_calls": uncertain,
                },
                is_error=True,
                script_id=script_id,
            )
        return Answer(
            f"exit {0 if script.status == 'ok' else 1} · {script.status}\n\nBackground script "
            f"{script_id} ended {script.status}, but toolscript serve stopped before it kept "
            "the result, so only its status is known.",
            {"script_id": script_id, "status": script.status},
            is_error=script.status != "ok",
            script_id=script_id,
        )

    return recall
