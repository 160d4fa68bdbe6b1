"""toolscript.serve."""
