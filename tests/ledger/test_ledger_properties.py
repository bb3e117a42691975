"""Hypothesis against the real ledger: random event sequences keep the stored record, its
history and the database constraints in agreement."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from starebrain_actions import (
    Event,
    InvariantViolation,
    Ledger,
    LedgerError,
    ProviderKind,
    SmsIntent,
)

from ..core.test_core_transitions import plan

EVENTS = [event for event in Event if event is not Event.CREATED]


async def run(path: Path, events: list[Event], kind: ProviderKind) -> None:
    """Apply ``events`` through the ledger (confirming by a row of table ``kind``), checking
    agreement after every step."""
    async with Ledger.open(path) as ledger:
        await ledger.create_action("A-1", SmsIntent(recipient="+12025550100", body="hi"))
        record = await ledger.begin_attempt("A-1", "dev")
        for event in events:
            try:
                transition = plan(record, event, kind)
            except InvariantViolation:
                continue
            try:
                record = await ledger.apply(transition)
            except LedgerError:
                continue
            stored = await ledger.get_attempt(record.dispatch_id)
            assert record == stored
            history = await ledger.history("A-1")
            assert stored.version + 1 == len(history)
            assert (stored.delivery, stored.acceptance) == (
                history[-1].to_delivery,
                history[-1].to_acceptance,
            )
    with sqlite3.connect(path) as db:
        assert [("ok",)] == db.execute("PRAGMA integrity_check").fetchall()
        unconfirmed_accepted = db.execute(
            "SELECT count(*) FROM attempts"
            " WHERE acceptance <> 'PENDING' AND delivery <> 'CONFIRMED'"
        ).fetchone()[0]
        assert 0 == unconfirmed_accepted
        half_named_rows = db.execute(
            "SELECT count(*) FROM attempts"
            " WHERE (provider_kind IS NULL) <> (provider_object_id IS NULL)"
        ).fetchone()[0]
        assert 0 == half_named_rows


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    events=st.lists(st.sampled_from(EVENTS), max_size=12),
    kind=st.sampled_from(ProviderKind),
)
def test_random_event_sequences_through_the_ledger_stay_consistent(
    events: list[Event], kind: ProviderKind
) -> None:
    """Whatever the order of events and the table of the confirming row, the stored record
    equals the one returned, history has one row per change ending in the stored states, and
    the database stays sound."""
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(Path(folder) / "ledger.db", events, kind))
