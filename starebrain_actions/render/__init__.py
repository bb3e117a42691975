"""How records are shown: text tables, Markdown and JSON, redacted and escaped. Shared by
the command line, the nightly report and the MCP server."""
