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

_LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]")
#: C0 and C1 controls and DEL (line breaks and tabs are handled before), and the bidi
#: embedding, override and isolate controls that can reorder what a reader sees
#: ("Trojan Source", CVE-2021-42574). ESC begins every terminal escape sequence (CSI, OSC,
#: DCS…, and their 8-bit forms, C1 controls too): shown as text, a sequence is inert.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: How a line break inside one value is shown on a single line.
LINE_BREAK_MARK: Final = "↵"


def _shown(match: re.Match[str]) -> str:
    """A control character as the text a reader can see: ``\\x1b``, ``\\x07``, ``\\u202e``."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def clean_text(text: str) -> str:
    """``text`` safe to print on a terminal or in Markdown, on one line: control characters
    shown as their escapes (ESC as ``\\x1b``, BEL as ``\\x07``, so an escape sequence
    shows as text, ``\\x1b[31m``, and is never obeyed), tabs as spaces, line breaks as
    ``↵``.

    Every rendered string goes through it (a body shown with ``--show-private``, an error
    read from a phone, an operator's name): a value can never move the cursor, retitle the
    window, hide text, make a link or forge a line of output, and what the phone was given
    is never shown as something milder (issue 36: "esc red" where the phone got ESC codes).
    """
    if text.isprintable():  # the common case: nothing to do
        return text
    text = _LINE_BREAK.sub(LINE_BREAK_MARK, text).replace("\t", " ")
    return _CONTROL.sub(_shown, text)


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
    return _redacted(value)


#: The exact types ``_redacted`` returns as they are without a look inside.
_LEAVES: Final = frozenset({str, int, bool, float, type(None)})


def _redacted(value: Any) -> Any:
    """``redact_data`` of ``value``, hidden. Plain dicts, lists and strings (what
    ``to_jsonable`` makes) are told by their exact type first: ``isinstance`` against the
    ``Mapping`` ABC costs more than the rest of the walk. A dict's or a list's items of a
    leaf type (``_LEAVES``) are copied without a call each: a summary holds about 90 values,
    most of them leaves."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is dict or isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if key in SENSITIVE_KEYS and isinstance(item, str):
                result[key] = (
                    redact_body(item)
                    if key in ("body", "text", "sms_body")
                    else (redact_number(item))
                )
            elif type(item) in _LEAVES:
                result[key] = item
            else:
                result[key] = _redacted(item)
        return result
    if kind is list or isinstance(value, list | tuple):
        return [item if type(item) in _LEAVES else _redacted(item) for item in value]
    return value
