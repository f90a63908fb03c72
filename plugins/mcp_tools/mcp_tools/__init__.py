"""slime-mcp-tools: MCP servers' tools as the tool source ``mcp``."""
