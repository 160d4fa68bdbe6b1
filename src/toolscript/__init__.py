"""toolscript: run agent-written Python that calls tools, and report exactly what it did."""
