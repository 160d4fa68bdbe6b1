"""toolscript.agent."""
