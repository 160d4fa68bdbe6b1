"""The host's machinery below the public face: private.

Interpreters (their processes, channels and the answering of their calls), the sandbox, the
template and pool, the call ledger and the journal. Nothing here is a stable API: import the
public names from `toolscript` (`Runtime`, `Shell`, `ScriptResult`, `Journal`, ...). An
import-linter contract keeps `toolscript.serve` and `toolscript.agent` off this package.
"""
