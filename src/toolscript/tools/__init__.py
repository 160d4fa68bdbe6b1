"""toolscript.tools."""
