"""The pure core: every (state, event) pair, the derived status and the decisions."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import attrs
import pytest

from starebrain_actions import (
    LEGAL_STATES,
    STATUS_TABLE,
    TRANSITIONS,
    AcceptanceState,
    ActionRecord,
    DeliveryState,
    Event,
    InvalidInput,
    InvariantViolation,
    MatchVerdict,
    ProviderKind,
    ReviewReason,
    Status,
    Transition,
    confirm_delivery,
    derive_status,
    fail_delivery,
    flag_for_review,
    note_error,
    record_submission,
    resolve,
    try_accept,
)
from starebrain_actions.core.model import ACTION_EVENTS
from starebrain_actions.core.transitions import next_states

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
P, C, F = DeliveryState.PENDING, DeliveryState.CONFIRMED, DeliveryState.FAILED
AP, AA, AR = AcceptanceState.PENDING, AcceptanceState.ACCEPTED, AcceptanceState.REJECTED


def make_record(
    delivery: DeliveryState = P,
    acceptance: AcceptanceState = AP,
    kind: ProviderKind = ProviderKind.SMS,
) -> ActionRecord:
    """A record in the given states with the timestamps the states require (a confirmed one
    confirmed by row 812 of the provider table ``kind`` names)."""
    return ActionRecord(
        action_id="A-17",
        dispatch_id="d-1",
        attempt=1,
        device="127.0.0.1:5555",
        delivery=delivery,
        acceptance=acceptance,
        provider_object_id=812 if delivery is C else None,
        provider_kind=kind if delivery is C else None,
        dispatched_at=NOW,
        confirmed_at=NOW if delivery is C else None,
        failed_at=NOW if delivery is F else None,
        accepted_at=NOW if acceptance is AA else None,
        rejected_at=NOW if acceptance is AR else None,
    )


def plan(record: ActionRecord, event: Event, kind: ProviderKind = ProviderKind.SMS) -> Transition:
    """The transition the public function that causes ``event`` plans for ``record`` (a
    confirmation names row 812 of the provider table ``kind`` names)."""
    later = NOW + timedelta(seconds=1)
    if event is Event.CONFIRM:
        return confirm_delivery(record, provider_object_id=812, now=later, provider_kind=kind)
    if event is Event.FAIL:
        return fail_delivery(record, reason="absent", now=later)
    if event is Event.ACCEPT:
        return try_accept(record, MatchVerdict(matched=True), now=later)
    if event is Event.REJECT:
        return try_accept(record, MatchVerdict(matched=False, reason="body"), now=later)
    if event is Event.RESOLVE_SENT:
        return resolve(record, as_sent=True, reason="seen", operator="ana", now=later)
    if event is Event.RESOLVE_NOT_SENT:
        return resolve(record, as_sent=False, reason="no", operator="ana", now=later, force=True)
    if event is Event.FLAG_REVIEW:
        return flag_for_review(record, ReviewReason.AMBIGUOUS, now=later)
    if event is Event.NOTE_ERROR:
        return note_error(record, "timeout", now=later)
    if event is Event.SUBMITTED:
        return record_submission(record, watermark_id=1, device_clock_ms=2, now=later)
    raise AssertionError(event)


def fire(record: ActionRecord, event: Event) -> ActionRecord:
    """Apply ``event`` through the public function that causes it."""
    return plan(record, event).after


STATE_CHANGING = [event for event in Event if event not in {Event.CREATED, *ACTION_EVENTS}]
ANNOTATIONS = {Event.SUBMITTED, Event.FLAG_REVIEW, Event.NOTE_ERROR}


@pytest.mark.parametrize(
    ("states", "event"),
    list(itertools.product(sorted(LEGAL_STATES), STATE_CHANGING)),
    ids=lambda value: "-".join(value) if isinstance(value, tuple) else value.value,
)
def test_every_state_event_pair_is_legal_exactly_when_the_table_says(
    states: tuple[DeliveryState, AcceptanceState], event: Event
) -> None:
    """Each (state, event) pair either follows TRANSITIONS or raises InvariantViolation."""
    record = make_record(*states)
    expected = TRANSITIONS.get((event, *states))
    if event in ANNOTATIONS:
        expected = states
    if expected is None:
        with pytest.raises(InvariantViolation):
            fire(record, event)
        return
    after = fire(record, event)
    assert expected == (after.delivery, after.acceptance)
    assert record.version + 1 == after.version
    assert (after.delivery, after.acceptance) in LEGAL_STATES


def test_try_accept_before_confirmation_is_refused_with_a_clear_message() -> None:
    """try_accept on a PENDING or FAILED record raises InvariantViolation naming the cause."""
    for delivery in (P, F):
        with pytest.raises(InvariantViolation, match="needs delivery CONFIRMED"):
            try_accept(make_record(delivery), MatchVerdict(matched=True), now=NOW)


def test_acceptance_twice_is_refused() -> None:
    """A decided acceptance cannot be decided again by try_accept."""
    with pytest.raises(InvariantViolation):
        try_accept(make_record(C, AA), MatchVerdict(matched=False, reason="body"), now=NOW)


def test_only_operator_events_leave_final_states() -> None:
    """From FAILED and from CONFIRMED/decided, only the two resolutions are legal moves."""
    final = [(F, AP), (C, AA), (C, AR)]
    for states in final:
        for event in Event:
            key = (event, *states)
            if key in TRANSITIONS and TRANSITIONS[key] != states:
                assert event in (Event.RESOLVE_SENT, Event.RESOLVE_NOT_SENT)


def test_next_states_rejects_unknown_pairs() -> None:
    """The lookup raises for a pair missing from the table."""
    with pytest.raises(InvariantViolation, match="not legal"):
        next_states(Event.CONFIRM, C, AP)


def test_impossible_record_states_are_refused() -> None:
    """A record holding acceptance without confirmation cannot be transitioned."""
    broken = attrs.evolve(make_record(), acceptance=AA)
    with pytest.raises(InvariantViolation, match="impossible"):
        note_error(broken, "x", now=NOW)


@pytest.mark.parametrize(
    ("states", "status"),
    [
        ((P, AP), Status.IN_FLIGHT),
        ((C, AP), Status.VERIFYING),
        ((C, AA), Status.SUCCEEDED),
        ((C, AR), Status.MISMATCH),
        ((F, AP), Status.FAILED),
    ],
)
def test_derived_status_follows_the_design_table(
    states: tuple[DeliveryState, AcceptanceState], status: Status
) -> None:
    """derive_status maps each legal pair to docs/design.md's status before the grace window."""
    assert status == derive_status(make_record(*states), NOW, timedelta(seconds=60))
    assert status == STATUS_TABLE[states]


def test_pending_becomes_unknown_past_the_grace_window() -> None:
    """PENDING/PENDING is IN_FLIGHT inside the grace window and UNKNOWN at or after its end."""
    record = make_record()
    grace = timedelta(seconds=30)
    assert Status.IN_FLIGHT == derive_status(record, NOW + timedelta(seconds=29), grace)
    assert Status.UNKNOWN == derive_status(record, NOW + grace, grace)


def test_confirmation_records_the_artifact_and_time() -> None:
    """confirm_delivery stores the provider _id (an SMS row by default) and confirmed_at; the
    before record is kept."""
    transition = confirm_delivery(make_record(), provider_object_id=812, now=NOW, actor="me")
    assert (812, ProviderKind.SMS) == (
        transition.after.provider_object_id,
        transition.after.provider_kind,
    )
    assert NOW == transition.after.confirmed_at
    assert P == transition.before.delivery
    assert "me" == transition.actor
    assert {"provider_object_id": 812, "provider_kind": "sms"} == dict(transition.evidence)


@pytest.mark.parametrize("bad", [-1, True, "812", None])
def test_confirmation_refuses_bad_provider_ids(bad: object) -> None:
    """A provider _id must be a non-negative integer."""
    with pytest.raises(InvalidInput):
        confirm_delivery(make_record(), provider_object_id=bad, now=NOW)  # type: ignore[arg-type]


def test_rejection_flags_review_as_mismatch() -> None:
    """A REJECTED verdict marks the attempt for review with the verdict's reason as evidence."""
    after = try_accept(
        make_record(C), MatchVerdict(matched=False, reason="body differs"), now=NOW
    ).after
    assert ReviewReason.MISMATCH == after.review_reason
    assert "body differs" == after.evidence["reason"]


def test_resolution_needs_reason_and_operator_and_names_them() -> None:
    """An operator resolution without a reason is refused; with one it records the operator."""
    with pytest.raises(InvalidInput):
        resolve(make_record(), as_sent=True, reason=" ", operator="ana", now=NOW)
    with pytest.raises(InvalidInput):
        resolve(make_record(), as_sent=True, reason="ok", operator="", now=NOW)
    transition = resolve(
        make_record(C, AR), as_sent=False, reason="not ours", operator="ana", now=NOW, force=True
    )
    assert "operator:ana" == transition.actor
    assert (F, AP) == (transition.after.delivery, transition.after.acceptance)
    assert transition.after.provider_object_id is None
    assert "ana" == transition.after.resolved_by


def test_ruling_a_confirmed_attempt_not_sent_needs_force() -> None:
    """The phone showed the message: a not-sent ruling is refused unless forced, and the
    forced one says so in its evidence."""
    with pytest.raises(InvalidInput, match="needs force"):
        resolve(make_record(C, AR), as_sent=False, reason="r", operator="ana", now=NOW)
    forced = resolve(
        make_record(C, AR), as_sent=False, reason="r", operator="ana", now=NOW, force=True
    )
    assert True is forced.evidence["forced"]


def test_a_sent_ruling_names_the_row_it_claims() -> None:
    """A sent ruling with the provider row found on the phone records that row (so no pass
    takes it for another attempt); another row than the confirmed one is refused."""
    ruled = resolve(
        make_record(), as_sent=True, reason="r", operator="ana", now=NOW, row=(ProviderKind.SMS, 77)
    )
    assert (77, ProviderKind.SMS) == (ruled.after.provider_object_id, ruled.after.provider_kind)
    with pytest.raises(InvalidInput):
        resolve(
            make_record(C, AR),
            as_sent=True,
            reason="r",
            operator="o",
            now=NOW,
            row=(ProviderKind.SMS, 1),
        )


def test_naive_datetimes_are_refused_everywhere() -> None:
    """Records and transitions refuse naive datetimes with a message naming the field."""
    naive = datetime(2026, 1, 1)
    with pytest.raises(InvalidInput, match="dispatched_at"):
        attrs.evolve(make_record(), dispatched_at=naive)
    with pytest.raises(InvalidInput, match="now"):
        confirm_delivery(make_record(), provider_object_id=1, now=naive)


def test_submission_evidence_is_recorded_once() -> None:
    """The watermark and device clock are kept once; a second recording is refused."""
    first = record_submission(make_record(), watermark_id=811, device_clock_ms=5, now=NOW).after
    assert (811, 5) == (first.watermark_id, first.device_clock_ms)
    with pytest.raises(InvariantViolation):
        record_submission(first, watermark_id=900, device_clock_ms=6, now=NOW)
