"""What a tool is, below the public face: private.

Specs, sources (Python callables, MCP servers), binding plans and the rendering of stubs.
Nothing here is a stable API except what `toolscript` re-exports (`tool`, `Tool`, `ToolSpec`,
`ToolAnnotations`). This package does not know that processes exist.
"""
