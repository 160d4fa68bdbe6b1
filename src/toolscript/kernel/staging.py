"""Where a sandbox stages what each interpreter's init puts in place (`toolscript.kernel.init`).

Shared by the host, which builds the sandbox (`toolscript.host.sandbox`), and the init, which
takes the staging folders out of view once it has used them. Standard library only, and
nothing else: the host imports it without loading the kernel's confinement (ctypes).
"""

from __future__ import annotations

STAGING = "/.toolscript"
"""Where the sandbox shows the runtime's shell folders (`shells`), extra mounts (`mounts/N`)
and the process-count cgroup (`cgroup`) to the init, until it has put them in place."""
TEMPLATE_CGROUP = "template"
"""The cgroup a sandboxed template is in, under its runtime's."""
