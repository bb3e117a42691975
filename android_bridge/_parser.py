"""An exact parser for ``content query`` output, refusing whatever it cannot read for certain.

``content query`` prints ``Row: <n> <col>=<value>, <col>=<value>`` per row with strings raw:
a body may hold ``, x=``, newlines or a whole fake ``Row: 1 _id=…`` line, and SQL NULL prints
as the bare word ``NULL``, the same as the text ``NULL``. So the bridge never asks for more than
one free-text column per query:

* an *integer query* projects only integer columns; every line must match one strict pattern,
  so its output is unambiguous and gives the exact list of row ``_id`` values;
* a *text query* projects ``_id`` and one text column over the same window. With the expected
  ``_id`` list known, row ``k`` starts at the one place where ``\\nRow: k _id=<id k>, col=``
  occurs. If that header occurs more than once (a body quoting it), the parser refuses.

A text value that reads exactly ``NULL`` is reported as ambiguous for the caller to resolve.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from android_bridge._shell import posix_quote
from android_bridge.exceptions import IncompleteRead, ProviderError, UnparseableOutput

NO_RESULT = "No result found."
PROVIDER_ERROR_MARK = "Error while accessing provider:"

_INT_VALUE = r"(-?\d{1,19}|NULL)"
_pattern_cache: dict[tuple[str, ...], re.Pattern[str]] = {}


def _int_row_pattern(columns: Sequence[str]) -> re.Pattern[str]:
    key = tuple(columns)
    pattern = _pattern_cache.get(key)
    if pattern is None:
        fields = ", ".join(f"{re.escape(name)}={_INT_VALUE}" for name in columns)
        pattern = re.compile(rf"Row: (\d+) {fields}")
        _pattern_cache[key] = pattern
    return pattern


def _check_provider_error(output: str) -> None:
    if PROVIDER_ERROR_MARK in output:
        first_line = output[output.index(PROVIDER_ERROR_MARK) :].split("\n", 1)[0]
        raise ProviderError(f"content provider failed: {first_line[:200]}")


def is_no_result(output: str) -> bool:
    """Whether ``output`` is exactly the "no rows (or a rejected query)" answer."""
    return output == NO_RESULT + "\n"


def parse_int_rows(output: str, columns: Sequence[str]) -> list[tuple[int | None, ...]]:
    """Parse the output of a query that projects only integer ``columns``.

    Returns one tuple per row, values in ``columns`` order (``None`` for SQL NULL). An empty
    list means ``No result found.``: zero rows *or* a rejected query, which proves nothing.

    Raises:
        ProviderError: the provider printed an error.
        UnparseableOutput: any line does not match the strict row pattern.
    """
    _check_provider_error(output)
    if is_no_result(output):
        return []
    if not output.endswith("\n"):
        raise UnparseableOutput("integer query output does not end with a newline")
    pattern = _int_row_pattern(columns)
    lines = output[:-1].split("\n")
    rows: list[tuple[int | None, ...]] = []
    for index, line in enumerate(lines):
        match = pattern.fullmatch(line)
        if match is None:
            raise UnparseableOutput(
                f"row {index} of an integer query does not match its projection"
            )
        if int(match.group(1)) != index:
            raise UnparseableOutput(f"row number {match.group(1)} where {index} was expected")
        rows.append(tuple(None if value == "NULL" else int(value) for value in match.groups()[1:]))
    return rows


def parse_text_column(output: str, column: str, expected_ids: Sequence[int]) -> dict[int, str]:
    """Parse a query projecting ``_id`` and one text ``column`` whose rows are ``expected_ids``.

    ``expected_ids`` come from an integer query over the same window, in the same order.
    Returns ``_id`` → raw printed value (``"NULL"`` may be SQL NULL or the text; the caller
    resolves it).

    Raises:
        ProviderError: the provider printed an error anywhere in the output.
        IncompleteRead: the rows are not the expected ones (the data changed, or a row is missing).
        UnparseableOutput: a row header occurs more than once, so the split is ambiguous.
    """
    _check_provider_error(output)
    if not expected_ids:
        if is_no_result(output):
            return {}
        raise IncompleteRead(f"{column} query returned rows the integer query did not")
    if is_no_result(output) or not output:
        raise IncompleteRead(f"{column} query returned no rows where the integer query had some")
    if not output.endswith("\n"):
        raise UnparseableOutput(f"{column} query output does not end with a newline")
    first = f"Row: 0 _id={expected_ids[0]}, {column}="
    if not output.startswith(first):
        raise IncompleteRead(f"{column} query does not start with the expected first row")
    header = re.compile(rf"\nRow: (\d+) _id=(\d+), {re.escape(column)}=")
    wanted: Mapping[tuple[int, int], int] = {
        (index, row_id): index for index, row_id in enumerate(expected_ids)
    }
    starts: list[int | None] = [len(first)] + [None] * (len(expected_ids) - 1)
    header_ends: list[int] = [0] * len(expected_ids)
    for match in header.finditer(output):
        key = (int(match.group(1)), int(match.group(2)))
        index = wanted.get(key)
        if index is None or index == 0:
            continue
        if starts[index] is not None:
            raise UnparseableOutput(f"row {index} header occurs twice in {column}: ambiguous split")
        starts[index] = match.end()
        header_ends[index] = match.start()
    for index, row_id in enumerate(expected_ids):
        if starts[index] is None:
            raise IncompleteRead(f"row {index} (_id {row_id}) missing from the {column} query")
    values: dict[int, str] = {}
    previous_end = len(first)
    for index, row_id in enumerate(expected_ids):
        start = starts[index]
        assert start is not None
        if start < previous_end:
            raise UnparseableOutput(f"rows of the {column} query out of order")
        stop = header_ends[index + 1] if index + 1 < len(expected_ids) else len(output) - 1
        if stop < start:
            raise UnparseableOutput(f"rows of the {column} query out of order")
        values[row_id] = output[start:stop]
        previous_end = stop
    return values


def render_rows(columns: Sequence[str], rows: Sequence[Sequence[int | str | None]]) -> str:
    """Render rows as ``content query`` prints them (for tests and the benchmark)."""
    if not rows:
        return NO_RESULT + "\n"
    lines = []
    for index, row in enumerate(rows):
        fields = ", ".join(
            f"{name}={'NULL' if value is None else value}"
            for name, value in zip(columns, row, strict=True)
        )
        lines.append(f"Row: {index} {fields}\n")
    return "".join(lines)


def content_query(
    uri: str, projection: Iterable[str], where: str, sort: str = "_id ASC", *, prefix: str = ""
) -> str:
    """The ``content query`` command line, every argument POSIX-quoted (``prefix``: ``su 1000 ``
    to read with the system uid's full view)."""
    return " ".join(
        [
            f"{prefix}content query --uri",
            posix_quote(uri),
            "--projection",
            posix_quote(":".join(projection)),
            "--where",
            posix_quote(where),
            "--sort",
            posix_quote(sort),
        ]
    )
