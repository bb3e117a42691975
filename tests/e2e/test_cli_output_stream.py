"""Tables printed a row at a time are byte for byte the tables printed whole."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from starebrain_actions.render.output import Output, stream_table

#: Cells mixing ASCII, one-cell non-ASCII (the redaction dot), wide and combining characters,
#: spaces and control characters; most tables hold only a few of the unusual ones.
CELLS = st.one_of(
    st.text(alphabet=st.sampled_from(list("ab1-_:.•é→")), max_size=8),
    st.text(alphabet=st.sampled_from(list("ab1-_:. •é→漢\u0301\u200b\t\x1b")), max_size=12),
    st.sampled_from(["漢字", "a  b", " x", "e\u0301"]),
)
NAMES = st.text(alphabet=st.sampled_from(list("abcdef")), min_size=1, max_size=8)


def _streamed(
    out: Output,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    buffer_rows: int,
    page: int | None = None,
) -> int:
    """``stream_table`` over ``rows``, one at a time, or (``page``) in lists of that many."""

    async def source() -> AsyncIterator[Sequence[str]]:
        for row in rows:
            yield row

    async def pages() -> AsyncIterator[Sequence[Sequence[str]]]:
        for start in range(0, len(rows), page or 1):
            yield rows[start : start + (page or 1)]

    if page is None:
        return asyncio.run(stream_table(out, columns, source, buffer_rows=buffer_rows))
    return asyncio.run(stream_table(out, columns, pages, buffer_rows=buffer_rows, pages=True))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=1, max_value=6).flatmap(
        lambda width: st.tuples(
            st.lists(NAMES, min_size=width, max_size=width),
            st.lists(st.lists(CELLS, min_size=width, max_size=width), max_size=6),
        )
    ),
    st.sampled_from([None, 40]),
    st.sampled_from([0, 2, 100]),
    st.sampled_from([None, 1, 2, 4]),
)
def test_streamed_table_is_the_table(
    table: tuple[list[str], list[list[str]]],
    width: int | None,
    buffer_rows: int,
    page: int | None,
) -> None:
    """Whatever the cells (wide, combining or control characters, runs of spaces), the width,
    the rows kept in memory (past them: two passes) and whether the rows come one at a time
    or in pages, ``stream_table`` prints exactly what ``Output.table`` prints, and counts
    the rows."""
    columns, rows = table
    whole, streamed = io.StringIO(), io.StringIO()
    if rows:
        Output(rich=False, stream=whole, width=width).table(columns, rows)
    count = _streamed(
        Output(rich=False, stream=streamed, width=width), columns, rows, buffer_rows, page
    )
    assert whole.getvalue() == streamed.getvalue()
    assert len(rows) == count
