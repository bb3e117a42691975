"""Piped output is laid out without rich, and is exactly the text rich laid out before."""

from __future__ import annotations

import io

from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from starebrain_actions.render.output import (
    _TRAILING_SPACE,
    Output,
    _bands,
    _keep_reset,
)
from starebrain_actions.render.sanitize import clean_text

#: Any text but lone surrogates (no terminal, file or SQLite value holds one).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
CELLS = st.lists(TEXT, min_size=1, max_size=5)


def rich_printed(renderable: RenderableType) -> str:
    """What ``Output._emit`` printed, through rich, for piped output with no width."""
    console = Console(
        file=io.StringIO(),
        width=1_000_000,
        color_system=None,
        force_terminal=False,
        highlight=False,
        markup=False,
        emoji=False,
    )
    with console.capture() as captured:
        console.print(renderable, soft_wrap=isinstance(renderable, Text))
    return "".join(
        _TRAILING_SPACE.sub(_keep_reset, line) + "\n" for line in captured.get().splitlines()
    )


def rich_table(columns: list[str], rows: list[list[str]]) -> str:
    """The rich table ``Output.table`` printed for piped output (one band, every column as
    wide as its widest cell, the last one free text)."""
    names = [clean_text(column) for column in columns]
    body = [[clean_text(cell) for cell in row] for row in rows]
    free = {len(columns) - 1}
    bands = _bands(names, body, free, None)
    assert bands is not None
    assert 1 == len(bands)
    table = Table(
        box=None, pad_edge=False, padding=(0, 1), show_edge=False, show_header=True, header_style=""
    )
    for index, width in zip(bands[0].columns, bands[0].widths, strict=True):
        if index in free:
            table.add_column(names[index], width=width, overflow="fold")
        else:
            table.add_column(names[index], width=width, no_wrap=True)
    for row in body:
        table.add_row(*(Text(cell) for cell in row))
    return rich_printed(table)


@settings(max_examples=300, deadline=None)
# a column whose every cell is zero cells wide: rich 15 drops its text (a lone skin-tone
# modifier, U+1F3FB, found by hypothesis)
@example((["", "\U0001f3fb"], []))
@example((["a", "\U0001f3fb", "b"], [["c", "\u0301", "d"]]))
@given(
    st.integers(min_value=1, max_value=5).flatmap(
        lambda width: st.tuples(
            st.lists(TEXT, min_size=width, max_size=width),
            st.lists(st.lists(TEXT, min_size=width, max_size=width), max_size=4),
        )
    )
)
def test_a_piped_table_is_the_text_rich_printed(table: tuple[list[str], list[list[str]]]) -> None:
    """A table printed for a pipe is, character for character, what rich printed."""
    columns, rows = table
    stream = io.StringIO()
    Output(rich=False, stream=stream).table(columns, rows)
    assert rich_table(columns, rows) == stream.getvalue()


@settings(max_examples=300, deadline=None)
@given(TEXT, st.lists(st.tuples(TEXT, TEXT), max_size=4))
def test_piped_lines_and_fields_are_the_text_rich_printed(
    text: str, pairs: list[tuple[str, str]]
) -> None:
    """Lines, headings and ``name: value`` fields printed for a pipe are what rich printed."""
    stream = io.StringIO()
    out = Output(rich=False, stream=stream)
    out.line(text)
    out.heading(text)
    out.fields(pairs)
    items = [(clean_text(name) + ":", clean_text(value)) for name, value in pairs]
    label_width = max((len_cells(name) for name, _ in items), default=0) + 1
    expected = rich_printed(Text(clean_text(text))) * 2 + "".join(
        rich_printed(Text(name.ljust(label_width)) + Text(value)) for name, value in items
    )
    assert expected == stream.getvalue()


def len_cells(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def test_piped_output_does_not_import_rich_console() -> None:
    """A table, lines and fields printed for a pipe need nothing of rich but its cell
    widths."""
    import subprocess
    import sys

    script = (
        "import sys, io\n"
        "from starebrain_actions.render.output import Output\n"
        "out = Output(rich=False, stream=io.StringIO())\n"
        "out.table(['a', 'b'], [['x', 'y']], title='t'); out.line('l'); out.fields([('n', 'v')])\n"
        "print('rich.console' in sys.modules, 'rich.table' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "False False" == done.stdout.strip()
