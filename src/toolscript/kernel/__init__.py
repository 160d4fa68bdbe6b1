"""toolscript.kernel."""
