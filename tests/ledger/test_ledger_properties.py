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
    InvalidInput,
    InvariantViolation,
    Ledger,
    LedgerError,
    ProviderKind,
    SmsIntent,
)
from starebrain_actions.core.model import ACTION_EVENTS

from ..core.test_core_transitions import plan

EVENTS = [event for event in Event if event is not Event.CREATED and event not in ACTION_EVENTS]
INTENT = SmsIntent(recipient="+12025550100", body="hi")


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


#: Ids a person or a model might write, with the near misses that matter: whitespace at either
#: end (a final newline above all), control characters, non-ASCII look-alikes.
_ID_TEXT = st.text(
    alphabet=st.sampled_from(
        [*"aZ09-_.:/~!", " ", "\n", "\r", "\t", "\x00", "\x7f", "é", "\u2028"]
    ),
    max_size=12,
) | st.text(max_size=8)


async def _create_each(path: Path, ids: list[str]) -> list[tuple[str, bool]]:
    """Try ``create_action`` with each id on one ledger; (id, accepted) for each, checking
    that an accepted id is stored exactly as given."""
    seen = []
    async with Ledger.open(path) as ledger:
        for action_id in ids:
            try:
                action = await ledger.create_action(action_id, INTENT)
            except InvalidInput:
                seen.append((action_id, False))
                continue
            assert action_id == action.action_id
            assert action_id == (await ledger.get_action(action_id)).action_id
            seen.append((action_id, True))
    return seen


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(_ID_TEXT, min_size=1, max_size=6))
def test_action_ids_are_whole_printable_ascii_or_refused(ids: list[str]) -> None:
    """An id is taken exactly when the whole of it is 1 to 200 printable ASCII characters
    without spaces: ``id`` and ``id\\n`` are never two actions (``$`` after ``match`` would
    have let the newline through); nothing else is ever stored (issue 21, item 7)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.db"
        seen = asyncio.run(_create_each(path, [*ids, *(i + "\n" for i in ids)]))
        with sqlite3.connect(path) as db:
            stored = {row[0] for row in db.execute("SELECT action_id FROM actions")}
    for action_id, accepted in seen:
        expected = 1 <= len(action_id) <= 200 and all("!" <= c <= "~" for c in action_id)
        assert expected == accepted, action_id
    assert {action_id for action_id, accepted in seen if accepted} == stored
    assert not any(action_id.endswith("\n") for action_id in stored)
