"""``starebrain list``'s own read (``Ledger.iter_listed``): every row it gives is the row the
action's summary gives, on both backends, whatever the shape of the action, the page size,
the limit and whether private values are shown."""

from __future__ import annotations

from datetime import timedelta

import pytest

from starebrain_actions import Ledger, MatchVerdict, SmsIntent, confirm_delivery, try_accept
from starebrain_actions.core.model import ActionSummary, QuietSuccess
from starebrain_actions.render.records import list_cells, listed_cells, listed_page_cells
from tests.ledger.test_ledger_reads import LATER, T0, seed_spread


async def _rows(
    ledger: Ledger, *, page_size: int, limit: int | None, show_private: bool
) -> tuple[list[list[str]], list[list[str]], int]:
    """(rows from every summary, rows from ``iter_listed``, how many came as QuietSuccess)."""
    summaries = [
        summary
        async for summary in ledger.iter_summaries(now=LATER, page_size=page_size, limit=limit)
    ]
    listed = [
        item async for item in ledger.iter_listed(now=LATER, page_size=page_size, limit=limit)
    ]
    expected = [list_cells(summary, LATER, show_private) for summary in summaries]
    found = [listed_cells(item, LATER, show_private) for item in listed]
    # a page at a time, as ``starebrain list`` lays them out: the same rows
    paged = [
        row
        async for page in ledger.iter_listed_pages(now=LATER, page_size=page_size, limit=limit)
        for row in listed_page_cells(page, LATER, show_private, {})
    ]
    assert paged == found
    return expected, found, sum(type(item) is QuietSuccess for item in listed)


async def test_listed_rows_are_the_summaries_rows(ledger: Ledger) -> None:
    """Every shape of action (sent, failed then sent, spent, mismatched, duplicated, ruled,
    denied, expired, in flight...), any page size (pages breaking inside ties of created_at)
    and limit: ``iter_listed`` gives the rows, in order, that the summaries give, and takes
    its quick way for the clean successes only."""
    await seed_spread(ledger)
    everything = [summary async for summary in ledger.iter_summaries(now=LATER)]
    quiet = [
        summary
        for summary in everything
        if summary.attempts
        and all(
            record.delivery.value == "CONFIRMED"
            and record.acceptance.value == "ACCEPTED"
            and record.review_reason is None
            for record in summary.attempts
        )
    ]
    assert 0 < len(quiet) < len(everything)
    for page_size in (1, 3, 7, 1000):
        for limit in (None, 1, 4, 50):
            for show_private in (False, True):
                expected, found, quick = await _rows(
                    ledger, page_size=page_size, limit=limit, show_private=show_private
                )
                assert expected == found, (page_size, limit, show_private)
                assert len(expected) == (len(everything) if limit is None else limit)
                if limit is None:
                    assert len(quiet) == quick


@pytest.mark.parametrize("stored", ["+1 202-555-0143", "12025550143", "(202) 555-0143"])
async def test_a_recipient_its_fingerprint_does_not_vouch_for_is_read_as_the_summary_reads_it(
    ledger: Ledger, stored: str
) -> None:
    """A clean success whose stored recipient is not the canonical one (a ledger written
    before recipients were normalized) shows the recipient its summary shows, and a clean
    success that shares a vouched-for recipient still shows its own."""
    intent = SmsIntent(recipient="+12025550143", body="hello")
    for index, action_id in enumerate(("vouched", "rewritten")):
        created = T0 + timedelta(minutes=index)
        await ledger.create_action(action_id, intent, now=created)
        record = await ledger.begin_attempt(action_id, "10.0.0.1:5555", now=created)
        record = await ledger.apply(
            confirm_delivery(record, provider_object_id=index + 1, now=created)
        )
        await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=created))

    def rewrite(db: object) -> None:  # around the API: as an older version stored it
        db.execute(  # type: ignore[attr-defined]
            "UPDATE actions SET intent_json = ? WHERE action_id = ?",
            (
                '{"body":"hello","extras":{},"recipient":' + f'"{stored}","region":"US"' + "}",
                "rewritten",
            ),
        )

    await ledger._run(rewrite)
    summaries: dict[str, ActionSummary] = {
        summary.action.action_id: summary async for summary in ledger.iter_summaries(now=LATER)
    }
    for page_size in (1, 1000):
        listed = [item async for item in ledger.iter_listed(now=LATER, page_size=page_size)]
        assert [list_cells(summaries[i], LATER, True) for i in ("rewritten", "vouched")] == [
            listed_cells(item, LATER, True) for item in listed
        ]
    # the summary shows the number read again, not as stored: the quick way must too
    assert ("+12025550143", stored) == (summaries["rewritten"].action.intent.recipient, stored)


@pytest.mark.parametrize("show_private", [False, True])
def test_a_page_of_rows_is_each_items_row(show_private: bool) -> None:
    """``listed_page_cells`` gives each item the row ``listed_cells`` gives it, at every age
    (seconds, minutes, hours, days, around each step and in the future), with a recipient
    shown once per page or again."""
    now = LATER
    ages = [
        timedelta(seconds=seconds)
        for base in (0, 120, 7200, 2 * 86400, 3 * 86400, 400 * 86400)
        for seconds in (base - 1, base, base + 0.5, base + 1)
    ]
    page = [
        QuietSuccess(f"a{index}", now - age, f"+1202555{index % 3:04d}", 1 + index % 2, "d:5555")
        for index, age in enumerate(ages)
    ]
    shown: dict[str, str] = {}
    expected = [listed_cells(item, now, show_private) for item in page]
    assert listed_page_cells(page, now, show_private, shown) == expected
    assert listed_page_cells(page, now, show_private, shown) == expected
