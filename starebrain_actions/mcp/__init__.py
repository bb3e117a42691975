"""The MCP server behind ``starebrain mcp``: the tools, who may call them over HTTP, and
what each result tells a model."""
