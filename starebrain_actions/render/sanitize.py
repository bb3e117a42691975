"""What every rendered string passes through: cleaning for a terminal (:func:`clean_text`),
Markdown escaping (:func:`md_text`, :func:`md_code`, :func:`md_table`) and the redaction of
personal data (phone numbers and bodies) unless the operator asked to see it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from starebrain_actions._logging import SENSITIVE_KEYS

#: Stand-in for the hidden middle of a phone number (a fixed width: it reveals no length).
_MASK = "•••••"


# --------------------------------------------------------------------------- cleaning

#: Terminal escape sequences: CSI (``ESC [`` or 8-bit ``0x9b``), OSC (``ESC ]`` / ``0x9d``,
#: ended by BEL or ST), DCS/SOS/PM/APC strings (ended by ST), and two-character escapes.
#: A string's payload stops at the next control character, so matching stays linear on
#: hostile input.
_ESCAPE_SEQUENCE = re.compile(
    r"""
      (?:\x1b\[|\x9b) [0-?]* [ -/]* [@-~]
    | (?:\x1b\]|\x9d) [^\x00-\x1f\x7f-\x9f]* (?:\x07|\x1b\\|\x9c)
    | (?:\x1b[PX^_]|[\x90\x98\x9e\x9f]) [^\x00-\x1f\x7f-\x9f]* (?:\x1b\\|\x9c)
    | \x1b [ -/]* [0-~]
    """,
    re.VERBOSE | re.DOTALL,
)
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]")
#: C0 and C1 controls and DEL (line breaks and tabs are handled before), and the bidi
#: embedding, override and isolate controls that can reorder what a reader sees
#: ("Trojan Source", CVE-2021-42574).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: How a line break inside one value is shown on a single line.
LINE_BREAK_MARK: Final = "↵"


def clean_text(text: str) -> str:
    """``text`` safe to print on a terminal or in Markdown, on one line: escape sequences
    and control characters removed, tabs as spaces, line breaks as ``↵``.

    Every rendered string goes through it (a body shown with ``--show-private``, an error
    read from a phone, an operator's name): a value can never move the cursor, retitle the
    window, hide text, make a link or forge a line of output.
    """
    if text.isprintable():  # the common case: nothing to do
        return text
    text = _ESCAPE_SEQUENCE.sub("", text)
    text = _LINE_BREAK.sub(LINE_BREAK_MARK, text).replace("\t", " ")
    return _CONTROL.sub("", text)


#: Markdown syntax escaped in any text: backslash, code, emphasis, links and images, raw
#: HTML and autolinks, entities, headings, strikethrough, table cells.
_MD_SPECIAL = re.compile(r"[\\`*\[\]<>&#~|]")
#: ``_`` opens or closes emphasis only at a word's edge (``IN_FLIGHT`` is safe as it is).
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
#: What would start a list item, a thematic break or a setext heading at a block's start:
#: ``-``, ``+``, ``=``, or the ``.``/``)`` of ``12.`` (a backslash before a digit is no escape).
_MD_BLOCK_START = re.compile(r"^(\s*)([-+=]|\d{1,9}(?=[.)]))")


def md_text(text: str, *, block_start: bool = False) -> str:
    """``text`` as literal Markdown inline text on one line: cleaned (:func:`clean_text`),
    then every character with a Markdown meaning backslash-escaped, so a value can never
    become a link, an image, HTML, a heading, emphasis or a new table cell. With
    ``block_start`` (the text begins a block, as a list item's does) a leading ``-``, ``+``,
    ``=`` or ``12.`` is escaped too."""
    text = _MD_SPECIAL.sub(lambda match: "\\" + match.group(), clean_text(text))
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    match = _MD_BLOCK_START.match(text) if block_start else None
    if match is None:
        return text
    if match.group(2)[0].isdigit():  # 12. -> 12\.
        return text[: match.end()] + "\\" + text[match.end() :]
    return text[: match.start(2)] + "\\" + text[match.start(2) :]


def md_code(text: str) -> str:
    """``text`` as a Markdown code span (cleaned), fenced with more backticks than it holds."""
    text = clean_text(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") or not text else text
    return f"{fence}{padded}{fence}"


def md_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table (every cell through :func:`md_text`), then a blank
    line; ``_none_`` for no rows."""
    if not rows:
        return ["_none_", ""]
    out = ["| " + " | ".join(md_text(column) for column in columns) + " |"]
    out.append("|" + "---|" * len(columns))
    out += ["| " + " | ".join(md_text(value) for value in row) + " |" for row in rows]
    return [*out, ""]


# --------------------------------------------------------------------------- redaction


def redact_number(number: str) -> str:
    """``+12025550100`` -> ``+1•••••0100``: enough to tell numbers apart, not to dial one."""
    text = number.strip()
    if len(text) <= 6:
        return _MASK
    return text[:2] + _MASK + text[-4:]


def redact_body(body: str) -> str:
    """A body's length and a short hash: two equal bodies look equal, the text stays hidden."""
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()[:8]
    return f"<{len(body)} chars sha256:{digest}>"


def redact_data(value: Any, *, show_private: bool) -> Any:
    """A copy of JSON-able ``value`` with personal fields (``SENSITIVE_KEYS``) redacted."""
    if show_private:
        return value
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if key in SENSITIVE_KEYS and isinstance(item, str):
                result[key] = (
                    redact_body(item)
                    if key in ("body", "text", "sms_body")
                    else (redact_number(item))
                )
            else:
                result[key] = redact_data(item, show_private=False)
        return result
    if isinstance(value, list | tuple):
        return [redact_data(item, show_private=False) for item in value]
    return value
