"""An MCP server that cannot start: it complains on stderr and exits before the handshake."""

import sys

sys.stderr.write("demo: missing API key, giving up\n")
sys.exit(2)
