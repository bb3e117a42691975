"""``Ledger.derived_generations`` (issue 21, item 8): the generations of a derived action id,
looked up by exact id on both backends, up to the first free one, never by a scan."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from starebrain_actions import (
    InvalidInput,
    Ledger,
    MatchVerdict,
    SmsIntent,
    Status,
    confirm_delivery,
    try_accept,
)
from starebrain_actions.core.derived_ids import (
    derived_generation_id,
)

BASE = "sms-0123456789abcdef"
INTENT = SmsIntent(recipient="+12025550100", body="Meeting at 5")
OTHER = SmsIntent(recipient="+12025550100", body="Meeting at 6")


def ids(count: int, start: int = 1) -> list[str]:
    """Generations ``start`` … ``start + count - 1`` of BASE."""
    return [derived_generation_id(BASE, number) for number in range(start, start + count)]


async def test_nothing_yet_is_an_empty_list(ledger: Ledger) -> None:
    """No action holds the base id: no generation, the first is free."""
    await ledger.create_action("A-17", INTENT)
    assert [] == await ledger.derived_generations(BASE)


async def test_generations_in_order_with_their_attempts_and_intents(ledger: Ledger) -> None:
    """Each existing generation comes back in order with its own intent and attempts (the
    second holds another intent: it is listed, the core skips it)."""
    await ledger.create_action(BASE, INTENT)
    record = await ledger.begin_attempt(BASE, "10.0.0.1:5555")
    confirmed = confirm_delivery(record, provider_object_id=12, now=ledger.now())
    await ledger.apply(confirmed)
    await ledger.apply(try_accept(confirmed.after, MatchVerdict(matched=True), now=ledger.now()))
    await ledger.create_action(f"{BASE}-2", OTHER)
    await ledger.create_action(f"{BASE}-3", INTENT)
    await ledger.create_action("sms-fedcba9876543210", INTENT)  # another base: not listed
    found = await ledger.derived_generations(BASE)
    assert [BASE, f"{BASE}-2", f"{BASE}-3"] == [s.action.action_id for s in found]
    assert [INTENT.fingerprint, OTHER.fingerprint, INTENT.fingerprint] == [
        s.action.fingerprint for s in found
    ]
    assert [Status.SUCCEEDED, Status.PLANNED, Status.PLANNED] == [s.status for s in found]
    assert [1, 0, 0] == [len(s.attempts) for s in found]


async def test_the_walk_stops_at_the_first_free_generation(ledger: Ledger) -> None:
    """Generations past a gap (an id someone chose) are not listed: the first free
    generation is the next one used."""
    for action_id in [*ids(2), derived_generation_id(BASE, 4)]:
        await ledger.create_action(action_id, INTENT)
    assert ids(2) == [s.action.action_id for s in await ledger.derived_generations(BASE)]


@pytest.mark.parametrize("count", [7, 8, 9, 24, 25, 60])
async def test_long_chains_cross_the_batches(ledger: Ledger, count: int) -> None:
    """Chains ending inside, at and just past a batch's edge (batches of 8, 16, 32…) come
    back whole and in order."""
    for action_id in ids(count):
        await ledger.create_action(action_id, INTENT)
    found = await ledger.derived_generations(BASE)
    assert ids(count) == [s.action.action_id for s in found]


async def test_a_bad_base_id_is_refused(ledger: Ledger) -> None:
    """The base must be a valid action id (no final newline, no spaces)."""
    with pytest.raises(InvalidInput):
        await ledger.derived_generations(BASE + "\n")


async def test_generations_are_looked_up_by_key_never_scanned(ledger_path: Path) -> None:
    """Every statement the lookup runs finds its rows through an index (the actions' primary
    key, the attempts' (action_id, attempt) key): no SQLite plan step scans a table."""
    async with Ledger.open(ledger_path) as ledger:
        for number in range(200):
            await ledger.create_action(f"other-{number}", INTENT)
        for number, action_id in enumerate(ids(10)):
            await ledger.create_action(action_id, INTENT)
            await ledger.begin_attempt(action_id, f"10.0.0.{number}:5555")
        statements: list[str] = []
        raw = ledger._connection._conn  # the sqlite3 connection aiosqlite drives
        raw.set_trace_callback(statements.append)
        try:
            found = await ledger.derived_generations(BASE)
        finally:
            raw.set_trace_callback(None)
    assert 10 == len(found)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert any("FROM actions WHERE action_id IN" in s for s in selects), selects
    with closing(sqlite3.connect(ledger_path)) as db:
        for statement in selects:
            steps = [str(row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + statement)]
            assert not [step for step in steps if re.match(r"SCAN (actions|attempts)\b", step)], (
                statement,
                steps,
            )
