"""Where human output goes: :class:`Output` prints lines, fields and tables, laid out for a
terminal's width or, piped, one line per row and never wrapped (ids are never cut); and
:func:`stream_table` prints the same table from rows read as they come."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any, Final, TextIO

import attrs
import click
from rich.cells import cell_len  # light: rich.console and the rest are imported when printing

from starebrain_actions.render.sanitize import clean_text

if TYPE_CHECKING:
    from rich.console import Console, RenderableType


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


class _ReaderGone(io.RawIOBase):
    """A process's stdout or stderr that outlives its reader: once the pipe is closed
    (``starebrain status X | head -1``), what is written after goes nowhere instead of
    raising ``BrokenPipeError``, so the command finishes and exits with its own status."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        #: the reader closed the pipe: nothing is written any more
        self.gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: Any) -> int:
        size = len(memoryview(data))
        if self.gone:
            return size
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            self.gone = True  # nobody reads any more: the rest is dropped, as `| head` means
            return size


def _outliving(stream: TextIO) -> TextIO:
    """``stream`` (a standard stream on a file descriptor) as a text stream of the same
    encoding and buffering that drops its output once its reader has gone."""
    return io.TextIOWrapper(
        io.BufferedWriter(_ReaderGone(stream.fileno())),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=bool(stream.line_buffering),
        write_through=getattr(stream, "write_through", False),
    )


def survive_closed_pipes() -> None:
    """A closed pipe is not an error (issue 36): every command writes stdout and stderr
    through :func:`_outliving` streams, so ``| head`` never turns a command's exit status
    into 1 (click's answer to ``EPIPE``) and ``set -o pipefail`` scripts see the command's
    own status. Only the process's real streams are replaced (a test runner's are left)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or stream is not getattr(sys, f"__{name}__"):
            continue
        try:
            stream.flush()
            replaced = _outliving(stream)
        except (OSError, ValueError, AttributeError):
            continue  # no file descriptor under it: left as it is
        setattr(sys, name, replaced)


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


STREAM_BUFFER_ROWS: Final = 20_000
#: Lines ``stream_table`` writes at a time (to its spill file, and to the output).
_SPILL_BATCH: Final = 2048
#: Bytes of the spill file ``stream_table`` reads and prints at a time.
_SPILL_BYTES: Final = 256 * 1024


async def stream_table(
    out: Output,
    columns: Sequence[str],
    rows: Callable[[], AsyncIterator[Any]],
    *,
    wrap: Collection[str] | None = None,
    buffer_rows: int = STREAM_BUFFER_ROWS,
    pages: bool = False,
) -> int:
    """Print what ``out.table`` prints, byte for byte, in memory that does not grow with the
    number of rows when it can; returns how many rows there were (0: nothing was printed).

    The columns' widths are known only once every row is read. Up to ``buffer_rows`` rows
    are kept in memory; past that, piped output (no width, no styles) whose cells are all
    plain (``_plain_cell``: no tab, no line break) writes its cells to a temporary file, one
    line per row, and prints from it. Any other long table (a terminal, a forced width, a
    cell with a wide or combining character) is read again (``rows()``), whole, and laid
    out by ``out.table``. ``pages``: ``rows()`` yields lists of rows (a page at a time,
    each looked at and measured at once) instead of rows.
    """
    names = [clean_text(column) for column in columns]
    widths = [len(name) for name in names]
    plain = not out.rich and out.width is None and all(_plain_cell(name) for name in names)
    kept: list[Sequence[str]] = []
    #: while every row is plain: the kept rows' cells, cleaned, joined by tabs
    kept_lines: list[str] = []
    #: lines not written to the spill file yet (written a batch at a time)
    spilled: list[str] = []
    with contextlib.ExitStack() as stack:
        spill: IO[str] | None = None
        count = 0
        async for chunk in rows() if pages else _one_each(rows()):
            if not chunk:
                continue
            lines = _plain_page(chunk) if plain else None
            if lines is not None:
                # printable: ``clean_text`` leaves each cell as it is
                count += len(chunk)
                widths = [
                    max(width, *map(len, column))
                    for width, column in zip(widths, zip(*chunk, strict=False), strict=False)
                ]
                if spill is not None:
                    spilled += lines
                else:
                    kept.extend(chunk)
                    kept_lines += lines
            else:
                for row in chunk:
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
                        spilled.append("\t".join(cells))
                        continue
                    kept.append(row)
                    if plain:
                        kept_lines.append("\t".join(cells))
            if spill is not None:
                if not plain:
                    break  # read again below, whole
                if len(spilled) >= _SPILL_BATCH:
                    spilled.append("")  # the last line's end
                    spill.write("\n".join(spilled))
                    spilled = []
                continue
            if plain and len(kept) > buffer_rows:
                import tempfile  # only a long listing spills: not paid by the others

                spill = stack.enter_context(
                    tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n")
                )
                kept_lines.append("")  # the last line's end
                spill.write("\n".join(kept_lines))
                kept, kept_lines = [], []
        if not count:
            return 0
        if not plain:
            if spill is not None:
                kept = [
                    row async for chunk in (rows() if pages else _one_each(rows())) for row in chunk
                ]
            out.table(columns, kept, wrap=wrap)
            return len(kept)
        last = len(names) - 1

        # each cell but the last left-aligned in its column's width (``str.ljust``)
        layout = "  ".join([*(f"{{:<{width}}}" for width in widths[:last]), "{}"])

        form = layout.format

        def line(cells: Sequence[str]) -> str:
            return form(*cells).rstrip(" ")

        click.echo(line(names), file=out._stream)
        if spill is None:
            for start in range(0, len(kept_lines), _SPILL_BATCH):
                click.echo(
                    "\n".join(
                        [
                            form(*text.split("\t")).rstrip(" ")
                            for text in kept_lines[start : start + _SPILL_BATCH]
                        ]
                    ),
                    file=out._stream,
                )
            return count
        if spilled:
            spilled.append("")
            spill.write("\n".join(spilled))
        spill.seek(0)
        while texts := spill.readlines(_SPILL_BYTES):
            # each line ends with its line break
            click.echo(
                "\n".join([form(*text[:-1].split("\t")).rstrip(" ") for text in texts]),
                file=out._stream,
            )
        return count


async def _one_each(rows: AsyncIterator[Sequence[str]]) -> AsyncIterator[list[Sequence[str]]]:
    """Each row as a page of its own (``stream_table`` without ``pages``)."""
    async for row in rows:
        yield [row]


def _plain_page(rows: Sequence[Sequence[str]]) -> list[str] | None:
    """Each row's cells joined by tabs when every cell of every row is ``_plain_cell``
    (else None), looked at in a few steps over the whole page: printable (no tab nor
    line break, so that tabs and line breaks show where each cell starts and ends), no space
    at a cell's ends, no two spaces in a row, and each non-ASCII character one cell wide."""
    joined = "".join([cell for row in rows for cell in row])
    if not joined.isprintable():
        return None
    lines = ["\t".join(row) for row in rows]
    page = "\n".join(lines)
    if (
        "  " in page
        or " \t" in page
        or "\t " in page
        or " \n" in page
        or "\n " in page
        or page[:1] == " "
        or page[-1:] == " "
    ):
        return None
    if joined.isascii() or _one_cell("".join(sorted(set(_ASCII_RUN.sub("", joined))))):
        return lines
    return None


#: Runs of ASCII characters (``_plain_page`` looks at what is left).
_ASCII_RUN: Final = re.compile(r"[\x00-\x7f]+")
#: The non-ASCII characters of a row (as ``_ASCII_RUN`` leaves them), by whether each takes
#: one terminal cell; a listing's rows share a few (the redaction dot).
_ONE_CELL: dict[str, bool] = {}


def _one_cell(rest: str) -> bool:
    """Whether each of these (non-ASCII) characters takes one terminal cell."""
    one_cell = _ONE_CELL.get(rest)
    if one_cell is None:
        one_cell = all(cell_len(character) == 1 for character in rest)
        if len(_ONE_CELL) >= 4096:
            _ONE_CELL.clear()
        _ONE_CELL[rest] = one_cell
    return one_cell


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
