"""Where toolscript keeps its state: the journal, logs, the sandbox check's memory."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """The directory where toolscript keeps its state (the journal, logs).

    `$TOOLSCRIPT_STATE` when set and not empty, else the platform's user state directory
    for "toolscript". The directory is not created here.
    """
    configured = os.environ.get("TOOLSCRIPT_STATE")
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return platformdirs.user_state_path("toolscript")
