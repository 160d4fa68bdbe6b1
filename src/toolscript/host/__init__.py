"""toolscript.host."""
