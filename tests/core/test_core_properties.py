"""Hypothesis: random event sequences never break invariants 1 and 6 or the status table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from starebrain_actions import (
    LEGAL_STATES,
    STATUS_TABLE,
    AcceptanceState,
    ActionRecord,
    DeliveryState,
    Event,
    InvariantViolation,
    Status,
    derive_status,
)
from starebrain_actions.core.model import ACTION_EVENTS

from .test_core_transitions import fire

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
AUTOMATIC = [event for event in Event if event is not Event.CREATED and event not in ACTION_EVENTS]
FINAL_DELIVERY = {DeliveryState.CONFIRMED, DeliveryState.FAILED}
FINAL_ACCEPTANCE = {AcceptanceState.ACCEPTED, AcceptanceState.REJECTED}


def fresh() -> ActionRecord:
    """A newly created attempt."""
    return ActionRecord(action_id="A", dispatch_id="d", attempt=1, device="dev", dispatched_at=NOW)


@settings(max_examples=400, deadline=None)
@given(events=st.lists(st.sampled_from(AUTOMATIC), max_size=25))
def test_random_event_sequences_keep_every_invariant(events: list[Event]) -> None:
    """After every step: acceptance implies confirmation, final states only move by operator
    resolution, the version counts real changes and the derived status matches the table."""
    record = fresh()
    for event in events:
        before = record
        try:
            record = fire(record, event)
        except InvariantViolation:
            assert before == record
            continue
        assert before.version + 1 == record.version
        # invariant 1
        assert record.acceptance is AcceptanceState.PENDING or (
            record.delivery is DeliveryState.CONFIRMED
        )
        assert (record.delivery, record.acceptance) in LEGAL_STATES
        # invariant 6
        operator = event in (Event.RESOLVE_SENT, Event.RESOLVE_NOT_SENT)
        if before.delivery in FINAL_DELIVERY and record.delivery != before.delivery:
            assert operator
        if before.acceptance in FINAL_ACCEPTANCE and record.acceptance != before.acceptance:
            assert operator
        # timestamps agree with states
        assert (record.delivery is DeliveryState.CONFIRMED) == (record.confirmed_at is not None)
        assert (record.delivery is DeliveryState.FAILED) == (record.failed_at is not None)
        assert (record.acceptance is AcceptanceState.ACCEPTED) == (record.accepted_at is not None)
        # the status table
        status = derive_status(record, NOW, timedelta(seconds=60))
        assert STATUS_TABLE[(record.delivery, record.acceptance)] == status
        late = derive_status(record, NOW + timedelta(seconds=60), timedelta(seconds=60))
        if status is Status.IN_FLIGHT:
            assert Status.UNKNOWN == late
        else:
            assert status == late


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(st.sampled_from([e for e in AUTOMATIC if not e.value.startswith("resolve")]))
)
def test_without_an_operator_final_states_never_change(events: list[Event]) -> None:
    """Without resolutions, once a record leaves PENDING its delivery never changes again."""
    record = fresh()
    settled: DeliveryState | None = None
    for event in events:
        try:
            record = fire(record, event)
        except InvariantViolation:
            continue
        if settled is not None:
            assert settled == record.delivery
        elif record.delivery is not DeliveryState.PENDING:
            settled = record.delivery
