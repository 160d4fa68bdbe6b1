"""What every test shares: how the runtimes under test are sandboxed.

`TOOLSCRIPT_TEST_SANDBOX` (default "required") is the `sandbox` knob of the runtimes the
suites make, so CI runs the suite with the sandbox on and once more with it off. The
sandbox shows a test's `tmp_path` to its scripts (read-write), where tests and scripts
leave each other files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SANDBOX = os.environ.get("TOOLSCRIPT_TEST_SANDBOX", "required")


def sandbox_knobs(knobs: dict[str, Any], *shared: Path) -> dict[str, Any]:
    """`knobs` with the suite's sandbox and `shared` folders mounted read-write."""
    knobs.setdefault("sandbox", SANDBOX)
    mounts = dict(knobs.get("mounts") or {})
    for folder in shared:
        mounts.setdefault(str(folder), "rw")
    knobs["mounts"] = mounts
    return knobs
