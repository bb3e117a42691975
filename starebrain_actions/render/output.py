"""Rendering for the ``starebrain`` CLI: text tables (rich, no box), Markdown and JSON.

Three promises hold for every renderer here:

- **Ids are never cut.** Action ids, dispatch ids, devices, states and times are never
  wrapped, folded or elided; only free text (last errors, evidence, reasons, bodies) wraps.
  On a terminal too narrow for a table's ids, each row is printed as a block of
  ``column  value`` lines instead. Piped output is never wrapped at all: one line per row.
- **Nothing rendered can drive the terminal.** Every string that reaches text or Markdown
  output goes through :func:`clean_text` (escape sequences, C0/C1 controls, bidi overrides
  removed; line breaks shown as ``↵``); Markdown additionally escapes its own syntax
  (:func:`md_text`). JSON keeps the data exact: JSON escaping is enough there.
- **Personal data stays hidden.** Phone numbers and bodies are redacted unless the operator
  asked to see them (``--show-private``). JSON goes through the package's one cattrs
  converter, so machines read exactly what the records hold (redacted the same way), and
  every JSON object printed carries ``schema_version``.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import json
import re
import sys
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import IO, TYPE_CHECKING, Any, Final, TextIO

import attrs
import click
from rich.cells import cell_len  # light: rich.console and the rest are imported when printing

from starebrain_actions._logging import SENSITIVE_KEYS
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.convert import age as age
from starebrain_actions.core.convert import format_time, to_jsonable
from starebrain_actions.core.model import (
    ActionRecord,
    ActionSummary,
    HistoryEntry,
    PhoneHold,
    ProviderKind,
    ReviewReason,
    Status,
    provider_row_name,
)

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

#: Stand-in for the hidden middle of a phone number (a fixed width: it reveals no length).
_MASK = "•••••"

#: Version of every JSON shape the CLI prints (and of the nightly report). Bumped when a
#: field is removed or changes meaning; adding a field does not bump it.
SCHEMA_VERSION: Final = 1


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


# --------------------------------------------------------------------------- JSON

#: Characters JSON allows raw inside strings that a terminal may still act on (C1
#: controls, DEL, bidi controls, Unicode line separators): printed as ``\\uXXXX`` escapes,
#: which decode to exactly the same data.
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def settles_at(summary: ActionSummary) -> datetime | None:
    """When the latest attempt's row settles, while the action is VERIFYING because of it
    (sent by the phone, not yet settled); None otherwise."""
    latest = summary.latest
    if summary.status is not Status.VERIFYING or latest is None:
        return None
    return _core.settling_until(latest)


def status_meaning(summary: ActionSummary) -> str | None:
    """The status in words where the bare word could mislead: a row that has not settled,
    a send the phone showed and then marked failed."""
    due = settles_at(summary)
    if due is not None:
        return (
            "sent by the phone, not yet settled: the app may still mark it failed until"
            f" {when(due)}"
        )
    latest = summary.latest
    if latest is not None and _core.failed_after_sent(latest):
        return "the phone showed it sent, then marked it failed: nothing went out"
    if latest is not None and latest.review_reason is ReviewReason.UNSETTLED:
        return (
            "the phone showed it sent, then its row left the view before it settled (failed,"
            " or deleted by the phone's owner): a person must rule; it is never resent"
        )
    return None


def summary_data(summary: ActionSummary, *, show_private: bool) -> dict[str, Any]:
    """An action summary as JSON-able data: the record fields plus what is derived
    (``settling`` and ``settles_at``: sent by the phone, not yet settled)."""
    data: dict[str, Any] = to_jsonable(summary)
    data["needs_review"] = summary.needs_review
    data["latest"] = data["attempts"][-1] if data["attempts"] else None
    due = settles_at(summary)
    data["settling"] = due is not None
    data["settles_at"] = to_jsonable(due) if due is not None else None
    return dict(redact_data(data, show_private=show_private))


def history_data(entries: Sequence[HistoryEntry], *, show_private: bool) -> list[Any]:
    """History entries as JSON-able data."""
    return list(redact_data(to_jsonable(list(entries)), show_private=show_private))


def versioned(data: Any) -> Any:
    """``data`` with ``schema_version`` set: on an object, or on each object of an array."""
    if isinstance(data, Mapping):
        return {**data, "schema_version": data.get("schema_version", SCHEMA_VERSION)}
    if isinstance(data, list | tuple):
        return [versioned(item) if isinstance(item, Mapping) else item for item in data]
    return data


def json_text(data: Any) -> str:
    """``data`` as indented, key-sorted JSON; characters a terminal could act on are
    ``\\u`` escapes (the decoded data is unchanged)."""
    text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return _JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def emit_json(data: Any) -> None:
    """Print ``data`` (records are unstructured first) as JSON with ``schema_version``."""
    plain = to_jsonable(data) if attrs.has(type(data)) else data
    click.echo(json_text(versioned(plain)))


def error_data(message: str, exit_code: int) -> dict[str, Any]:
    """What ``--json`` prints on stdout for an error: ``error``, ``exit_code``,
    ``schema_version``."""
    return {"error": message, "exit_code": exit_code, "schema_version": SCHEMA_VERSION}


class JsonCliError(click.ClickException):
    """A CLI error under ``--json``: the error as JSON on stdout, and the usual one line
    (``Error: …``, or the usage and the error) on stderr, with the same exit status."""

    def __init__(self, original: click.ClickException) -> None:
        super().__init__(original.format_message())
        # click declares exit_code a class variable; this error takes the original's status
        self.exit_code = original.exit_code  # type: ignore[misc]
        self.original = original

    def show(self, file: Any = None) -> None:
        click.echo(json_text(error_data(self.format_message(), self.exit_code)))
        self.original.show(file)


def json_requested(args: Sequence[str]) -> bool:
    """True when the command line asks for ``--json`` (before a ``--``)."""
    words = list(args)
    if "--" in words:
        words = words[: words.index("--")]
    return "--json" in words


#: The command line of the running command, for errors raised after parsing.
_ARGS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "starebrain_args", default=()
)


class _JsonErrors:
    """Turns every ``click.ClickException`` (usage errors included) of a command run with
    ``--json`` into a :class:`JsonCliError`."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        if parent is None:
            _ARGS.set(tuple(args))
        try:
            return super().make_context(info_name, args, parent=parent, **extra)  # type: ignore[misc, no-any-return]
        except click.ClickException as exc:
            raise _json_error(exc, args) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except click.ClickException as exc:
            raise _json_error(exc, _ARGS.get()) from None


def _json_error(exc: click.ClickException, args: Sequence[str]) -> click.ClickException:
    if isinstance(exc, JsonCliError) or not json_requested(args):
        return exc
    return JsonCliError(exc)


class JsonErrorGroup(_JsonErrors, click.Group):
    """A click group whose errors are JSON on stdout when ``--json`` is given."""


class JsonErrorCommand(_JsonErrors, click.Command):
    """A click command whose errors are JSON on stdout when ``--json`` is given."""


# --------------------------------------------------------------------------- text output

#: Spaces between two table columns.
_GAP: Final = 2
#: Narrowest a free-text column may get before a table is split into bands.
_TEXT_MIN: Final = 16
#: Trailing blanks of a line, with the style codes around them.
_TRAILING_SPACE = re.compile(r"(?:[ \t]|\x1b\[[0-9;]*m)+$")
#: Indent of a row's second and later bands.
_INDENT: Final = 4
#: "No limit": piped output is never wrapped.
_UNLIMITED: Final = 1_000_000


class Output:
    """Where human output goes, and how wide it may be.

    ``rich`` (default: stdout is a terminal) lays text out for a screen: tables fit the
    terminal's width (free text wraps; columns go into bands, or rows into blocks, when
    the ids do not fit side by side) and headings are bold. Otherwise nothing is ever
    wrapped and no escape code is written: one line per table row, for ``grep`` and ``awk``.
    ``width`` forces a width in either mode.
    """

    def __init__(
        self, *, rich: bool | None = None, stream: TextIO | None = None, width: int | None = None
    ) -> None:
        self._stream = stream
        self.rich = sys.stdout.isatty() if rich is None else rich
        self._width = width

    def _console(self) -> Console:
        from rich.console import Console

        # Resolved at print time so click's test runner (which swaps sys.stdout) sees it.
        return Console(
            file=self._stream or sys.stdout,
            width=self._width,
            highlight=False,
            markup=False,
            emoji=False,
        )

    @property
    def width(self) -> int | None:
        """Columns available, or None when nothing may be wrapped (piped output)."""
        if self._width is not None:
            return self._width
        return self._console().width if self.rich else None

    def _text(self, text: str, *, bold: bool = False) -> Any:
        """``text`` for ``_emit``: a rich ``Text`` on a terminal (bold or not); otherwise the
        string itself, which has no style and is printed as it is, as rich would print it."""
        if not self.rich:
            return text
        from rich.text import Text

        return Text(text, style="bold" if bold else "")

    def _emit(self, renderable: RenderableType | str) -> None:
        # Text is printed as it is (soft wrap: the terminal folds a line too long, so an id
        # copied from it stays whole); tables are laid out to the width. Lines lose the
        # padding rich gives their last cell. A string (output that is not a terminal's,
        # laid out here) is printed without rich, which piped output never needs to import.
        if isinstance(renderable, str):
            for text in (renderable + "\n").splitlines():
                click.echo(_TRAILING_SPACE.sub(_keep_reset, text), file=self._stream)
            return
        from rich.console import Console
        from rich.text import Text

        if self.rich:
            console = self._console()
        else:
            console = Console(
                file=io.StringIO(),
                width=self._width or _UNLIMITED,
                color_system=None,
                force_terminal=False,
                highlight=False,
                markup=False,
                emoji=False,
            )
        with console.capture() as captured:
            console.print(renderable, soft_wrap=isinstance(renderable, Text))
        for text in captured.get().splitlines():
            click.echo(_TRAILING_SPACE.sub(_keep_reset, text), file=self._stream)

    def line(self, text: str = "") -> None:
        """Print a line of text (cleaned, no markup), wrapped at spaces to the width, if any:
        a word, which may be an id, is never split."""
        width = self.width
        cleaned = clean_text(text)
        for part in [cleaned] if width is None else _wrap(cleaned, width):
            self._emit(self._text(part))

    def heading(self, text: str) -> None:
        """Print a section heading."""
        self._emit(self._text(clean_text(text), bold=True))

    def fields(self, pairs: Iterable[tuple[str, str]], *, wrap: Collection[str] = ()) -> None:
        """Print ``name: value`` lines, names aligned. Values named in ``wrap`` are free text
        that may wrap under their column; any other value is kept whole, on the next line
        when it does not fit beside its name."""
        given = list(pairs)
        items = [(clean_text(name) + ":", clean_text(value)) for name, value in given]
        label_width = max((cell_len(name) for name, _ in items), default=0) + 1
        width = self.width
        for (name, value), (key, _) in zip(items, given, strict=True):
            label = self._text(name.ljust(label_width), bold=True)
            room = None if width is None else width - label_width
            if room is None or cell_len(value) <= room:
                self._emit(label + self._text(value))
            elif key in wrap and room >= _TEXT_MIN:
                lines = _wrap(value, room)
                self._emit(label + self._text(lines[0]))
                for more in lines[1:]:
                    self._emit(self._text(" " * label_width + more))
            else:
                self._emit(self._text(name, bold=True))
                self._emit(self._text("  " + value))

    def table(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[str]],
        *,
        title: str | None = None,
        wrap: Collection[str] | None = None,
    ) -> None:
        """Print a table: a header line, then one line per row, columns aligned.

        ``wrap`` names the free-text columns, which may wrap to fit the width (default: the
        last column); every other column is kept whole. When the columns do not fit the
        width side by side, they are split into bands, each row taking one line per band
        (the later ones indented) and a blank line between rows; when even one column does
        not fit a line, each row is printed as a block of ``column  value`` lines.
        """
        names = [clean_text(column) for column in columns]
        body = [[clean_text(cell) for cell in row] for row in rows]
        free = {len(columns) - 1} if wrap is None else {columns.index(name) for name in wrap}
        if title:
            self.heading(title)
        bands = _bands(names, body, free, self.width)
        if bands is None:
            self._blocks(names, body, free, self.width or _UNLIMITED)
            return
        if len(bands) == 1:
            self._emit(self._band(names, body, free, bands[0], header=True))
            return
        for band in bands:
            self._emit(self._band(names, [], free, band, header=True))
        for row in body:
            self._emit(self._text(""))
            for band in bands:
                self._emit(self._band(names, [row], free, band, header=False))

    def _band(
        self,
        names: Sequence[str],
        body: Sequence[Sequence[str]],
        free: Collection[int],
        band: _Band,
        *,
        header: bool,
    ) -> RenderableType | str:
        """The columns of one band as a rich table without box, indented; as the text rich
        makes of it (cells padded to their column's width, two spaces apart) when the output
        is not a terminal's and has no width, so that nothing wraps."""
        if not self.rich and self._width is None:
            rows = [names, *body] if header else body
            # rich crops a cell to its column's width: in a column whose every cell is zero
            # cells wide (a lone emoji modifier, say) the text is dropped (rich 15)
            return "\n".join(
                " " * band.indent
                + "  ".join(
                    (row[index] if width else "") + " " * (width - cell_len(row[index]))
                    for index, width in zip(band.columns, band.widths, strict=True)
                )
                for row in rows
            )
        from rich.padding import Padding
        from rich.table import Table
        from rich.text import Text

        table = Table(
            box=None,
            pad_edge=False,
            padding=(0, 1),
            show_edge=False,
            show_header=header,
            header_style="bold" if self.rich else "",
        )
        for index, width in zip(band.columns, band.widths, strict=True):
            if index in free:
                table.add_column(names[index], width=width, overflow="fold")
            else:
                table.add_column(names[index], width=width, no_wrap=True)
        for row in body:
            table.add_row(*(Text(row[index]) for index in band.columns))
        return Padding(table, (0, 0, 0, band.indent), expand=False) if band.indent else table

    def _blocks(
        self, names: Sequence[str], body: Sequence[Sequence[str]], free: Collection[int], width: int
    ) -> None:
        """Each row as ``column  value`` lines, a blank line between rows."""
        label_width = max(cell_len(name) for name in names) + _GAP
        room = width - label_width
        for number, row in enumerate(body):
            if number:
                self._emit(self._text(""))
            for index, (name, value) in enumerate(zip(names, row, strict=True)):
                label = self._text(name.ljust(label_width), bold=True)
                if cell_len(value) <= room:
                    self._emit(label + self._text(value))
                elif index in free and room >= _TEXT_MIN:
                    lines = _wrap(value, room)
                    self._emit(label + self._text(lines[0]))
                    for more in lines[1:]:
                        self._emit(self._text(" " * label_width + more))
                else:  # an id wider than the room beside its name: on its own line, whole
                    self._emit(self._text(name, bold=True))
                    self._emit(self._text("  " + value))


@attrs.frozen
class _Band:
    """Columns printed on one line of a row."""

    #: indices of the columns, in order
    columns: tuple[int, ...]
    #: their widths
    widths: tuple[int, ...]
    #: spaces before the band (the first band has none)
    indent: int


def _keep_reset(match: re.Match[str]) -> str:
    """Trailing blanks dropped; a style reset among them is kept."""
    return "\x1b[0m" if "\x1b[" in match.group() else ""


def _bands(
    names: Sequence[str], body: Sequence[Sequence[str]], free: Collection[int], width: int | None
) -> list[_Band] | None:
    """How to lay a table out in ``width`` columns (None: no limit): its columns split into
    as few bands as fit, in order; None when a single column does not fit a line.

    A whole column is as wide as its widest cell. A free-text column is as wide as its
    widest cell when there is room; otherwise it shares what is left of its band with the
    band's other free columns, never narrower than its longest word (a device or an id
    inside an error stays on one line) nor than ``_TEXT_MIN``.
    """
    longest = [
        max([cell_len(name), *(cell_len(row[index]) for row in body)])
        for index, name in enumerate(names)
    ]
    if width is None:
        return [_Band(columns=tuple(range(len(names))), widths=tuple(longest), indent=0)]
    floor = [
        min(
            size,
            max(
                cell_len(names[index]),
                _TEXT_MIN,
                *(cell_len(word) for row in body for word in row[index].split()),
            ),
        )
        if index in free
        else size
        for index, size in enumerate(longest)
    ]
    groups: list[list[int]] = [[]]
    used = 0
    for index in range(len(names)):
        indent = _INDENT if len(groups) > 1 else 0
        need = floor[index] + (_GAP if groups[-1] else 0)
        if used + need > width - indent:
            if not groups[-1]:
                return None
            groups.append([])
            indent, need = _INDENT, floor[index]
            if need > width - indent:
                return None
        groups[-1].append(index)
        used = used + need if len(groups[-1]) > 1 else need
    bands = []
    for number, group in enumerate(groups):
        indent = _INDENT if number else 0
        widths = {index: floor[index] for index in group}
        spare = width - indent - _GAP * (len(group) - 1) - sum(widths.values())
        growing = sorted((i for i in group if i in free), key=lambda i: longest[i] - floor[i])
        for count, index in enumerate(growing):  # share the spare room, smallest need first
            extra = min(spare // (len(growing) - count), longest[index] - floor[index])
            widths[index] += extra
            spare -= extra
        bands.append(
            _Band(columns=tuple(group), widths=tuple(widths[i] for i in group), indent=indent)
        )
    return bands


def _wrap(text: str, width: int) -> list[str]:
    """Text wrapped at spaces to ``width`` cells. A word is never split (it may be an id):
    one longer than ``width`` gets a line of its own."""
    lines: list[str] = []
    current = ""
    for word in text.split(" "):
        if current and cell_len(current) + 1 + cell_len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(current)
    return lines


# --------------------------------------------------------------------------- formatting


def when(value: datetime | None) -> str:
    """A time as the ledger writes it, or ``-``."""
    return format_time(value) if value is not None else "-"


def hold_data(hold: PhoneHold) -> dict[str, Any]:
    """A phone's hold as JSON: the attempt, since when, and when a pass can free it."""
    return {
        "action_id": hold.action_id,
        "dispatch_id": hold.dispatch_id,
        "device": hold.device,
        "since": when(hold.since),
        "void_from": when(hold.void_from) if hold.void_from is not None else None,
        "review_at": when(hold.review_at),
        "releasable_at": when(hold.releasable_at()),
    }


def gate_data(decision: Any) -> dict[str, Any]:
    """The policy gate's verdict as JSON: verdict, rule, detail, until, the file's digest."""
    return {
        "verdict": decision.verdict.value,
        "rule": decision.rule,
        "detail": decision.detail,
        "until": when(decision.until) if decision.until is not None else None,
        "digest": decision.digest,
    }


def duration_text(delta: timedelta) -> str:
    """A configured duration, exactly and short: ``24h``, ``90m``, ``45s``, ``0.5s``."""
    seconds = delta.total_seconds()
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def provider_row_text(provider_object_id: int | None, kind: ProviderKind | str | None) -> str:
    """A provider row for a table cell: an SMS row as its bare ``_id`` (``812``, as always),
    any other with its table named (``mms _id 12``: MMS ``_id``s are another numbering),
    ``-`` for none. ``kind`` may be the stored text (``"mms"``), as ``Ledger.duplicates``
    gives it; None with an ``_id`` is an SMS row."""
    if provider_object_id is None:
        return "-"
    provider_kind = ProviderKind.SMS if kind is None else ProviderKind(kind)
    if provider_kind is ProviderKind.SMS:
        return str(provider_object_id)
    return provider_row_name(provider_kind, provider_object_id)


def recipient_text(summary: ActionSummary, *, show_private: bool) -> str:
    """The action's recipient, redacted unless shown on purpose."""
    recipient = summary.action.intent.recipient
    return recipient if show_private else redact_number(recipient)


def body_text(summary: ActionSummary, *, show_private: bool) -> str:
    """The action's body, redacted unless shown on purpose."""
    body = summary.action.intent.body
    return body if show_private else redact_body(body)


def reasons_text(summary: ActionSummary) -> str:
    """Review reasons, comma-separated, then superseded ones (``MISMATCH (superseded)``: a
    wrong message went out before a good resend), or ``-``."""
    shown = [reason.value for reason in summary.review_reasons]
    shown += [f"{reason.value} (superseded)" for reason in summary.superseded_reasons]
    return ", ".join(shown) or "-"


def evidence_text(evidence: Mapping[str, Any], *, show_private: bool) -> str:
    """Evidence as compact ``key=value`` text (nested values as JSON), redacted by default."""
    data = redact_data(dict(evidence), show_private=show_private)
    parts = []
    for key in sorted(data):
        value = data[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={shown}")
    return " ".join(parts) or "-"


def render_summary(out: Output, summary: ActionSummary, *, show_private: bool) -> None:
    """Print one action: its intent (redacted by default), status, and every attempt."""
    action = summary.action
    out.fields(
        [
            ("action", action.action_id),
            ("status", summary.status.value),
            *([("meaning", meaning)] if (meaning := status_meaning(summary)) else []),
            (
                "needs review",
                ", ".join(reason.value for reason in summary.review_reasons) or "no",
            ),
            *(
                [("superseded", ", ".join(r.value for r in summary.superseded_reasons))]
                if summary.superseded_reasons
                else []
            ),
            ("to", recipient_text(summary, show_private=show_private)),
            ("body", body_text(summary, show_private=show_private)),
            ("fingerprint", action.fingerprint),
            ("created", when(action.created_at)),
            ("attempts", attempts_text(summary)),
            ("duplicates", str(summary.duplicates)),
        ],
        wrap=("meaning", "needs review", "superseded", "body"),
    )
    if summary.attempts:
        render_attempts(out, summary.attempts)


def spent_attempts(summary: ActionSummary) -> int:
    """The attempts that spent the action's budget (since an operator's grant, if any)."""
    counted = summary.action.counted(summary.attempts)
    return sum(1 for record in counted if _core.spends_budget(record))


def attempts_text(summary: ActionSummary) -> str:
    """``2 of 3 allowed``; after an operator's grant, counted from it, and saying so."""
    action = summary.action
    counted = action.counted(summary.attempts)
    spent = spent_attempts(summary)
    text = f"{spent} of {action.budget} allowed"
    if spent < len(counted):
        text += (
            f" (and {len(counted) - spent} that spent nothing: the phone was not ready or"
            " did not answer)"
        )
    grant = action.grant
    if grant is not None:
        text += (
            f" since attempt {grant.after_attempt} (a retry granted by {grant.granted_by} at"
            f" {when(grant.granted_at)}; its reason is in the history)"
        )
    return text


def render_attempts(out: Output, attempts: Sequence[ActionRecord]) -> None:
    """Print attempts as a table: both axes, the provider row (``mms _id 12`` for an MMS row),
    the version (what ``resolve --expect`` takes) and the last error."""
    out.table(
        [
            "#",
            "v",
            "dispatch id",
            "device",
            "delivery",
            "acceptance",
            "sms _id",
            "dispatched",
            "review",
            "last error",
        ],
        (
            [
                str(record.attempt),
                str(record.version),
                record.dispatch_id,
                record.device,
                record.delivery.value,
                record.acceptance.value,
                provider_row_text(record.provider_object_id, record.provider_kind),
                when(record.dispatched_at),
                record.review_reason.value if record.review_reason else "-",
                record.last_error or "-",
            ]
            for record in attempts
        ),
        title="attempts",
    )


def render_list(
    out: Output, summaries: Sequence[ActionSummary], *, now: datetime, show_private: bool
) -> None:
    """Print actions one per line, newest first."""
    if not summaries:
        out.line("no actions match")
        return
    out.table(LIST_COLUMNS, (list_cells(summary, now, show_private) for summary in summaries))


#: The columns of ``starebrain list``.
LIST_COLUMNS: Final = ("action", "status", "to", "attempts", "device", "age", "review")


def list_cells(summary: ActionSummary, now: datetime, show_private: bool) -> list[str]:
    """One row of ``starebrain list``."""
    return [
        summary.action.action_id,
        summary.status.value,
        recipient_text(summary, show_private=show_private),
        str(len(summary.attempts)),
        summary.latest.device if summary.latest else "-",
        age(now - summary.action.created_at),
        reasons_text(summary),
    ]


async def stream_list(
    out: Output,
    summaries: Callable[[], AsyncIterator[ActionSummary]],
    *,
    now: datetime,
    show_private: bool,
) -> None:
    """``render_list`` over summaries read as they come (``summaries()`` may be called twice,
    and must yield the same actions each time: read them in one snapshot)."""

    def rows() -> AsyncIterator[list[str]]:
        return _cells_of(summaries(), lambda summary: list_cells(summary, now, show_private))

    if not await stream_table(out, LIST_COLUMNS, rows):
        out.line("no actions match")


async def _cells_of(
    summaries: AsyncIterator[ActionSummary], cells: Callable[[ActionSummary], list[str]]
) -> AsyncIterator[list[str]]:
    async for summary in summaries:
        yield cells(summary)


#: Rows ``stream_table`` keeps in memory; the cells of a longer table go to a temporary file.
STREAM_BUFFER_ROWS: Final = 20_000


async def stream_table(
    out: Output,
    columns: Sequence[str],
    rows: Callable[[], AsyncIterator[Sequence[str]]],
    *,
    wrap: Collection[str] | None = None,
    buffer_rows: int = STREAM_BUFFER_ROWS,
) -> int:
    """Print what ``out.table`` prints, byte for byte, in memory that does not grow with the
    number of rows when it can; returns how many rows there were (0: nothing was printed).

    The columns' widths are known only once every row is read. Up to ``buffer_rows`` rows
    are kept in memory; past that, piped output (no width, no styles) whose cells are all
    plain (``_plain_cell``: no tab, no line break) writes its cells to a temporary file, one
    line per row, and prints from it. Any other long table (a terminal, a forced width, a
    cell with a wide or combining character) is read again (``rows()``), whole, and laid
    out by ``out.table``.
    """
    names = [clean_text(column) for column in columns]
    widths = [len(name) for name in names]
    plain = not out.rich and out.width is None and all(_plain_cell(name) for name in names)
    kept: list[list[str]] = []
    with contextlib.ExitStack() as stack:
        spill: IO[str] | None = None
        count = 0
        async for row in rows():
            count += 1
            cells = [clean_text(cell) for cell in row]
            if plain:
                for index, text in enumerate(cells):
                    if not _plain_cell(text):
                        plain = False
                        break
                    widths[index] = max(widths[index], len(text))
            if spill is not None:
                if not plain:
                    break  # read again below, whole
                spill.write("\t".join(cells) + "\n")
                continue
            kept.append(list(row))
            if plain and len(kept) > buffer_rows:
                import tempfile  # only a long listing spills: not paid by the others

                spill = stack.enter_context(
                    tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n")
                )
                spill.writelines(
                    "\t".join(clean_text(cell) for cell in kept_row) + "\n" for kept_row in kept
                )
                kept = []
        if not count:
            return 0
        if not plain:
            if spill is not None:
                kept = [list(row) async for row in rows()]
            out.table(columns, kept, wrap=wrap)
            return len(kept)
        last = len(names) - 1

        def line(cells: Sequence[str]) -> str:
            return "  ".join(
                cell if index == last else cell.ljust(widths[index])
                for index, cell in enumerate(cells)
            ).rstrip(" ")

        lines: Iterable[str]
        if spill is None:
            lines = (line([clean_text(cell) for cell in row]) for row in kept)
        else:
            spill.seek(0)
            lines = (line(text[:-1].split("\t")) for text in spill)
        batch = [line(names)]
        for text in lines:
            batch.append(text)
            if len(batch) >= 512:
                click.echo("\n".join(batch), file=out._stream)
                batch = []
        click.echo("\n".join(batch), file=out._stream)
        return count


def _plain_cell(text: str) -> bool:
    """A cell ``stream_table`` may lay out itself: printable, one terminal cell per character
    (no wide, combining or zero-width character), no space at either end and no two spaces in
    a row (what rich prints as it is, padded with spaces)."""
    return (
        text.isprintable()
        and (text.isascii() or cell_len(text) == len(text))
        and text == text.strip(" ")
        and "  " not in text
    )


async def emit_json_stream(items: AsyncIterator[Mapping[str, Any]]) -> None:
    """Print what ``emit_json(list(items))`` prints, byte for byte, an item at a time."""
    first = True
    async for item in items:
        text = json_text(versioned(item))
        click.echo(("[\n" if first else ",\n") + _indented(text), nl=False)
        first = False
    click.echo("[]" if first else "\n]")


def _indented(text: str) -> str:
    """``text`` with every line indented by two spaces (an array item in ``json_text``)."""
    return "\n".join("  " + line for line in text.split("\n"))


def render_history(out: Output, entries: Sequence[HistoryEntry], *, show_private: bool) -> None:
    """Print every transition: time, attempt, event, both axes before and after, actor, evidence."""
    if not entries:
        out.line("no history (the action has no attempt yet)")
        return
    out.table(
        ["#", "at", "dispatch id", "event", "delivery", "acceptance", "actor", "evidence"],
        (
            [
                str(entry.sequence),
                when(entry.at),
                entry.dispatch_id,
                entry.event.value,
                _arrow(entry.from_delivery, entry.to_delivery),
                _arrow(entry.from_acceptance, entry.to_acceptance),
                entry.actor,
                evidence_text(entry.evidence, show_private=show_private),
            ]
            for entry in entries
        ),
    )


def _arrow(before: Any, after: Any) -> str:
    if before is None:
        return str(after.value)
    if before == after:
        return str(after.value)
    return f"{before.value}->{after.value}"


def render_review(
    out: Output, summaries: Sequence[ActionSummary], *, now: datetime, show_private: bool
) -> None:
    """Print the actions waiting for a person, with why and what to run next."""
    if not summaries:
        out.line("nothing needs review")
        return
    out.table(
        REVIEW_COLUMNS,
        (review_cells(summary, now, show_private) for summary in summaries),
        wrap=("reasons",),
    )
    out.line(_review_footer(len(summaries)))


#: The columns of ``starebrain review``.
REVIEW_COLUMNS: Final = ("action", "status", "reasons", "to", "attempts", "duplicates", "age")


def review_cells(summary: ActionSummary, now: datetime, show_private: bool) -> list[str]:
    """One row of ``starebrain review``."""
    return [
        summary.action.action_id,
        summary.status.value,
        reasons_text(summary),
        recipient_text(summary, show_private=show_private),
        f"{spent_attempts(summary)}/{summary.action.budget}",
        str(summary.duplicates),
        age(now - summary.action.created_at),
    ]


def _review_footer(count: int) -> str:
    return (
        f"{count} action(s) need a person: inspect with `starebrain history ID`, then"
        " `starebrain resolve ID --as sent|not-sent --reason TEXT`; one out of attempts"
        " (BUDGET_EXHAUSTED) gets another chance with `starebrain retry ID --reason TEXT`"
    )


async def stream_review(
    out: Output,
    summaries: Callable[[], AsyncIterator[ActionSummary]],
    *,
    now: datetime,
    show_private: bool,
) -> None:
    """``render_review`` over summaries read as they come (see ``stream_list``)."""

    def rows() -> AsyncIterator[list[str]]:
        return _cells_of(summaries(), lambda summary: review_cells(summary, now, show_private))

    count = await stream_table(out, REVIEW_COLUMNS, rows, wrap=("reasons",))
    if not count:
        out.line("nothing needs review")
        return
    out.line(_review_footer(count))


def render_holds(out: Output, holds: Sequence[PhoneHold], *, now: datetime) -> None:
    """The phones held by unresolved attempts: since when, and when a pass can free each
    (voiding the fence if the send script never ran; moving it to review at the latest)."""
    if not holds:
        return
    out.line("phones held by an unresolved attempt (no other action starts there meanwhile):")
    out.table(
        ["phone", "action", "dispatch id", "held for", "void from", "review at"],
        (
            [
                hold.device,
                hold.action_id,
                hold.dispatch_id,
                age(now - hold.since),
                when(hold.void_from),
                when(hold.review_at),
            ]
            for hold in holds
        ),
    )
    out.line(
        "a send or `starebrain reconcile` on that phone reads it: the attempt is settled by its"
        " row, voided from 'void from' if its script never ran, or moved to review at"
        " 'review at', which frees the phone"
    )


def render_approvals(
    out: Output, summaries: Sequence[ActionSummary], *, now: datetime, show_private: bool
) -> None:
    """The actions the policy gate holds for a person's approval."""
    if not summaries:
        return
    out.line("waiting for a person's approval (the policy gate holds them; nothing was sent):")
    out.table(
        ["action", "to", "rule", "held for"],
        (
            [
                summary.action.action_id,
                recipient_text(summary, show_private=show_private),
                str((summary.action.gate or {}).get("rule", "-")),
                age(now - summary.action.created_at),
            ]
            for summary in summaries
        ),
    )
    out.line("`starebrain approve ID` lets one go; `starebrain deny ID --reason TEXT` stops it")


def status_counts_text(counts: Mapping[Status, int] | Mapping[str, int]) -> str:
    """``SUCCEEDED=3 FAILED=1``: non-zero counts in the status table's order."""
    lookup = {str(key): value for key, value in counts.items()}
    parts = [f"{status.value}={lookup[status.value]}" for status in Status if lookup.get(status)]
    return " ".join(parts) or "none"
