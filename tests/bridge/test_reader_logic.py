"""Reader decisions on scripted device output: probes, changing pages, retries."""

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

    async def run(self, steps: Sequence[str]) -> tuple[StepOutput, ...]:
        self.round_trips += 1
        self.commands.append(steps)
        outputs = self.answers.pop(0)
        assert len(steps) == len(outputs)
        return tuple(StepOutput(output=text, exit_status=0) for text in outputs)


def _ints(*rows: tuple[int, int]) -> str:
    return render_rows(INT_COLUMNS, [(i, 1, t, -1, 1000 + i, 0, 1, 0) for i, t in rows])


def _texts(column: str, *rows: tuple[int, str]) -> str:
    return render_rows(("_id", column), list(rows))


def _page(rows: list[tuple[int, int]], probe: str | None) -> list[str]:
    ints = _ints(*rows)
    outgoing = [(i, t) for i, t in rows if t != 1]  # an inbox anchor's text is never read
    outputs = [ints]
    outputs += [
        _texts(c, *[(i, f"{c}{i}") for i, _ in outgoing]) for c in ("address", "body", "creator")
    ]
    outputs.append(ints)
    if probe is not None:
        outputs.append(probe)
    return outputs


def _reader(device: ScriptedDevice, page_size: int = 10) -> SmsReader:
    return SmsReader(device, page_size=page_size)  # type: ignore[arg-type]


async def test_probe_without_anchor_makes_read_incomplete() -> None:
    """A probe that printed ``No result found.`` proves nothing, so the read is not complete."""
    device = ScriptedDevice([_page([(5, 1), (6, 2)], NO_RESULT)])
    read = await _reader(device).read_since(5)
    expected = (False, [6])
    assert expected == (read.complete, [row.id for row in read.rows])
    assert read.incomplete_reason is not None and "probe" in read.incomplete_reason


async def test_rows_changing_twice_is_incomplete_read() -> None:
    """If the integer query differs before and after the text queries twice, the read refuses."""
    changing = _page([(5, 1), (6, 2)], render_rows(("_id",), [(5,)]))
    changing[4] = _ints((5, 1), (6, 2), (7, 2))
    device = ScriptedDevice([changing, list(changing)])
    with pytest.raises(IncompleteRead):
        await _reader(device).read_since(5)


async def test_rows_changing_once_is_retried() -> None:
    """A page that changed mid-read is read again, costing one more round trip."""
    changing = _page([(5, 1), (6, 2)], render_rows(("_id",), [(5,)]))
    changing[4] = _ints((5, 1), (6, 2), (7, 2))
    stable = _page([(5, 1), (6, 2)], render_rows(("_id",), [(5,)]))
    device = ScriptedDevice([changing, stable])
    read = await _reader(device).read_since(5)
    expected = (True, 2, ["body6"])
    assert expected == (read.complete, read.round_trips, [row.body for row in read.rows])


async def test_later_page_missing_a_probed_row_is_refused() -> None:
    """A later page that lacks a row the probe listed is an incomplete read, not a short one."""
    first = _page([(5, 1), (6, 2)], render_rows(("_id",), [(5,), (20,), (21,)]))
    later = _page([(20, 2)], None)
    device = ScriptedDevice([first, later, list(later)])
    with pytest.raises(IncompleteRead):
        await _reader(device, page_size=10).read_since(5)


async def test_where_clauses_use_only_integers() -> None:
    """Every --where the reader sends is built from the validated integers it was given."""
    device = ScriptedDevice([_page([(5, 1)], render_rows(("_id",), [(5,)]))])
    await _reader(device).read_since(5, since_ms=123)
    expected = "'_id >= 5 AND _id < 15 AND (_id = 5 OR (type IN (2,4,5,6) AND date >= 123))'"
    assert expected in device.commands[0][0]


def test_non_integer_window_is_refused() -> None:
    """A string or bool where an integer belongs never reaches the shell."""
    from android_bridge._reader import window_filter

    with pytest.raises(TypeError):
        window_filter(since_ms="1; DROP", types=(2,))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        window_filter(since_ms=None, types=(True,))
