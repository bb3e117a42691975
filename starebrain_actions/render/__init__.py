"""How records are shown: text tables (rich, no box), Markdown and JSON, redacted and escaped.
Shared by the command line, the nightly report and the MCP server.

Its rooms: ``sanitize`` (cleaning, Markdown escaping, redaction), ``json_output`` (JSON and
JSON errors for click), ``output`` (the ``Output`` class and its table layout), ``values`` (a
record's values in words and as JSON data) and ``records`` (records printed on an
``Output``).

Three promises hold for every renderer here:

- **Ids are never cut.** Action ids, dispatch ids, devices, states and times are never
  wrapped, folded or elided; only free text (last errors, evidence, reasons, bodies) wraps.
  On a terminal too narrow for a table's ids, each row is printed as a block of
  ``column  value`` lines instead. Piped output is never wrapped at all: one line per row.
- **Nothing rendered can drive the terminal.** Every string that reaches text or Markdown
  output goes through ``sanitize.clean_text`` (escape sequences, C0/C1 controls, bidi
  overrides removed; line breaks shown as ``↵``); Markdown additionally escapes its own
  syntax (``sanitize.md_text``). JSON keeps the data exact: JSON escaping is enough there.
- **Personal data stays hidden.** Phone numbers and bodies are redacted unless the operator
  asked to see them (``--show-private``). JSON goes through the package's one cattrs
  converter, so machines read exactly what the records hold (redacted the same way), and
  every JSON object printed carries ``schema_version``.
"""
