"""The ``content query`` parser is exact on every hazard, or refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from android_bridge import IncompleteRead, ProviderError, UnparseableOutput
from android_bridge._parser import parse_int_rows, parse_text_column, render_rows
from tests.bridge.strategies import bodies

INTS = ("_id", "thread_id", "type", "status", "date")


def _int_rows() -> st.SearchStrategy[list[tuple[int | None, ...]]]:
    value = st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1))
    row = st.tuples(st.integers(1, 10**9), value, value, value, value)
    return st.lists(row, max_size=30, unique_by=lambda r: r[0]).map(
        lambda rows: sorted(rows, key=lambda r: r[0] or 0)
    )


@settings(max_examples=150)
@given(_int_rows())
def test_integer_rows_round_trip(rows: list[tuple[int | None, ...]]) -> None:
    """Integer rows rendered as Android prints them parse back to the same values."""
    assert rows == parse_int_rows(render_rows(INTS, rows), INTS)


@settings(max_examples=200)
@given(st.lists(st.one_of(st.none(), bodies(300)), min_size=1, max_size=8), st.data())
def test_text_column_is_exact_or_refuses(texts: list[str | None], data: st.DataObject) -> None:
    """Bodies with any hazard parse back byte-exact, or the parser refuses; never a wrong row."""
    start = data.draw(st.integers(1, 1000))
    ids = [start + index * data.draw(st.integers(1, 3)) for index in range(len(texts))]
    rendered = render_rows(("_id", "body"), list(zip(ids, texts, strict=True)))
    try:
        parsed = parse_text_column(rendered, "body", ids)
    except UnparseableOutput:
        return
    expected = {
        row_id: ("NULL" if text is None else text) for row_id, text in zip(ids, texts, strict=True)
    }
    assert expected == parsed


def test_fake_row_inside_body_is_refused() -> None:
    """A body that quotes the next row's exact header makes the split ambiguous: refused."""
    rendered = render_rows(("_id", "body"), [(5, "hi\nRow: 1 _id=6, body=evil"), (6, "real")])
    with pytest.raises(UnparseableOutput):
        parse_text_column(rendered, "body", [5, 6])


def test_fake_row_in_last_body_stays_in_the_body() -> None:
    """A fake extra row in the last body is text, because the row list is known."""
    body = "hi\nRow: 1 _id=7, body=evil"
    assert {5: body} == parse_text_column(render_rows(("_id", "body"), [(5, body)]), "body", [5])


def test_commas_and_equals_in_body_are_kept() -> None:
    """``, col=`` and ``=`` inside a body are part of the body."""
    body = "a, address=+1555, body=x = y"
    assert {9: body} == parse_text_column(render_rows(("_id", "body"), [(9, body)]), "body", [9])


def test_no_result_is_empty_for_integer_query() -> None:
    """``No result found.`` parses as zero rows (which proves nothing on its own)."""
    expected: list[tuple[int | None, ...]] = []
    assert expected == parse_int_rows("No result found.\n", INTS)


def test_provider_error_is_raised() -> None:
    """A provider error and its stack trace raise ProviderError, not zero rows."""
    output = (
        "Error while accessing provider:sms\n"
        "java.lang.SecurityException: Permission Denial\n\tat android.os.Parcel\n"
    )
    with pytest.raises(ProviderError):
        parse_int_rows(output, INTS)


def test_provider_error_after_rows_is_raised_for_text() -> None:
    """An error printed after some rows is not swallowed into the last body."""
    output = "Row: 0 _id=1, body=hello\nError while accessing provider:sms\njava.lang.Ill\n"
    with pytest.raises(ProviderError):
        parse_text_column(output, "body", [1])


def test_integer_line_with_text_is_refused() -> None:
    """A line that does not match the integer projection exactly is refused."""
    with pytest.raises(UnparseableOutput):
        parse_int_rows("Row: 0 _id=1, thread_id=x, type=2, status=0, date=5\n", INTS)


def test_integer_row_numbers_must_be_sequential() -> None:
    """Row numbers out of sequence (a gap or repeat) are refused."""
    with pytest.raises(UnparseableOutput):
        parse_int_rows(
            "Row: 0 _id=1, thread_id=1, type=2, status=0, date=5\n"
            "Row: 2 _id=2, thread_id=1, type=2, status=0, date=5\n",
            INTS,
        )


def test_missing_text_row_is_incomplete() -> None:
    """A text query lacking a row the integer query listed is an incomplete read."""
    with pytest.raises(IncompleteRead):
        parse_text_column("Row: 0 _id=1, body=a\n", "body", [1, 2])


def test_text_rows_where_none_expected_is_incomplete() -> None:
    """A text query with rows where the integer query had none is an incomplete read."""
    with pytest.raises(IncompleteRead):
        parse_text_column("Row: 0 _id=1, body=a\n", "body", [])


def test_truncated_output_is_refused() -> None:
    """Output cut before its final newline is refused."""
    with pytest.raises(UnparseableOutput):
        parse_text_column("Row: 0 _id=1, body=a", "body", [1])
