"""Reader decisions on scripted device output: page anchors, changing pages, retries."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from android_bridge import IncompleteRead, SmsReader
from android_bridge._parser import render_rows
from android_bridge._reader import INT_COLUMNS
from android_bridge._shell import StepOutput

NO_RESULT = "No result found.\n"


class ScriptedDevice:
    """Stands in for Device: answers each round trip with the next scripted step outputs."""

    serial = "scripted:5555"
    content_prefix = ""

    def __init__(self, answers: list[list[str]]) -> None:
        self.answers = answers
        self.round_trips = 0
        self.known_max_id = 0
        self.commands: list[Sequence[str]] = []

    async def mode(self) -> str:
        return "shell"

    async def full_view(self) -> bool:
        return False

    async def run(self, steps: Sequence[str], *, one_write: bool = False) -> tuple[StepOutput, ...]:
        self.round_trips += 1
        self.commands.append(steps)
        outputs = self.answers.pop(0)
        assert len(steps) == len(outputs)
        return tuple(StepOutput(output=text, exit_status=0) for text in outputs)


def _ints(*rows: tuple[int, int]) -> str:
    return render_rows(INT_COLUMNS, [(i, 1, t, -1, 1000 + i, 0, 1, 0) for i, t in rows])


def _texts(column: str, *rows: tuple[int, str]) -> str:
    return render_rows(("_id", column), list(rows))


def _page(rows: list[tuple[int, int]], anchor: int | None = None) -> list[str]:
    ints = _ints(*rows)
    # neither an inbox row's text nor the page anchor's is read
    outgoing = [(i, t) for i, t in rows if t != 1 and i != anchor]
    outputs = [ints]
    outputs += [
        _texts(c, *[(i, f"{c}{i}") for i, _ in outgoing]) for c in ("address", "body", "creator")
    ]
    outputs.append(ints)
    return outputs


def _reader(device: ScriptedDevice, page_size: int = 10) -> SmsReader:
    return SmsReader(device, page_size=page_size)  # type: ignore[arg-type]


async def test_a_page_without_its_anchor_makes_the_read_incomplete() -> None:
    """A first page that printed no anchor row (``No result found.``, the row deleted) proves
    nothing, so the read is not complete, whatever rows it holds."""
    device = ScriptedDevice([_page([(6, 2)])])
    read = await _reader(device).read_since(5)
    assert (False, [6]) == (read.complete, [row.id for row in read.rows])
    assert read.incomplete_reason is not None and "anchor" in read.incomplete_reason


async def test_a_later_page_without_its_anchor_makes_the_read_incomplete() -> None:
    """A full page is followed by one anchored at its last row; when that row does not come
    back (deleted between the round trips, or a query that silently failed), the read is not
    complete: the rows between the pages are not proven whole."""
    first = _page([(5, 1), (6, 2), (7, 2)], anchor=5)
    later = _page([(9, 2)], anchor=7)
    device = ScriptedDevice([first, later])
    read = await _reader(device, page_size=2).read_since(5)
    assert (False, [6, 7, 9]) == (read.complete, [row.id for row in read.rows])
    assert read.incomplete_reason is not None and "_id=7" in read.incomplete_reason


async def test_pages_are_chained_by_their_anchors() -> None:
    """Pages of 2: the second is anchored at the first's last row, whose text it does not
    read again; a short page ends the read, complete."""
    first = _page([(5, 1), (6, 2), (7, 2)], anchor=5)
    later = _page([(7, 2), (8, 2)], anchor=7)
    device = ScriptedDevice([first, later])
    read = await _reader(device, page_size=2).read_since(5)
    assert (True, [6, 7, 8], 2) == (
        read.complete,
        [row.id for row in read.rows],
        read.round_trips,
    )
    assert ["body6", "body7", "body8"] == [row.body for row in read.rows]
    assert (
        "'_id >= 7 AND (_id = 7 OR (type IN (2,4,5,6)))' --sort '_id ASC LIMIT 3'"
        in (device.commands[1][0])
    )


async def test_a_missing_anchor_lets_one_more_row_in_which_waits_for_the_next_page() -> None:
    """LIMIT n+1 with the anchor gone returns one window row more than the text queries
    (LIMIT n) read: it is left to the next page, never read without its text."""
    texts_of = _page([(6, 2), (7, 2)])
    first = [_ints((6, 2), (7, 2), (8, 2)), *texts_of[1:4], _ints((6, 2), (7, 2), (8, 2))]
    later = _page([(7, 2), (8, 2)], anchor=7)
    device = ScriptedDevice([first, later])
    read = await _reader(device, page_size=2).read_since(5)
    assert (False, [6, 7, 8]) == (read.complete, [row.id for row in read.rows])
    assert ["body6", "body7", "body8"] == [row.body for row in read.rows]


async def test_rows_changing_twice_is_incomplete_read() -> None:
    """If the integer query differs before and after the text queries twice, the read refuses."""
    changing = _page([(5, 1), (6, 2)])
    changing[4] = _ints((5, 1), (6, 2), (7, 2))
    device = ScriptedDevice([changing, list(changing)])
    with pytest.raises(IncompleteRead):
        await _reader(device).read_since(5)


async def test_rows_changing_once_is_retried() -> None:
    """A page that changed mid-read is read again, costing one more round trip."""
    changing = _page([(5, 1), (6, 2)])
    changing[4] = _ints((5, 1), (6, 2), (7, 2))
    stable = _page([(5, 1), (6, 2)])
    device = ScriptedDevice([changing, stable])
    read = await _reader(device).read_since(5)
    expected = (True, 2, ["body6"])
    assert expected == (read.complete, read.round_trips, [row.body for row in read.rows])


async def test_where_clauses_use_only_integers() -> None:
    """Every --where and --sort the reader sends is built from the validated integers it was
    given."""
    device = ScriptedDevice([_page([(5, 1)])])
    await _reader(device).read_since(5, since_ms=123)
    expected = "'_id >= 5 AND (_id = 5 OR (type IN (2,4,5,6) AND date >= 123))'"
    assert expected in device.commands[0][0]
    assert "--sort '_id ASC LIMIT 11'" in device.commands[0][0]
    assert "--sort '_id ASC LIMIT 10'" in device.commands[0][1]


def test_non_integer_window_is_refused() -> None:
    """A string or bool where an integer belongs never reaches the shell."""
    from android_bridge._reader import window_filter

    with pytest.raises(TypeError):
        window_filter(since_ms="1; DROP", types=(2,))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        window_filter(since_ms=None, types=(True,))
