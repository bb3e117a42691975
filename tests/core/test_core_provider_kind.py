"""The pure core names a provider row by its table too: SMS and MMS ``_id``s are separate."""

from __future__ import annotations

import itertools
from datetime import timedelta

import attrs
import pytest

from starebrain_actions import (
    LEGAL_STATES,
    TRANSITIONS,
    AcceptanceState,
    ActionRecord,
    Artifact,
    ArtifactOutcome,
    DeliveryState,
    DuplicateSighting,
    Event,
    InvalidInput,
    InvariantViolation,
    LookupResult,
    MatchVerdict,
    ProviderKind,
    ReviewReason,
    confirm_delivery,
    converter,
    reconcile,
    resolve,
)
from starebrain_actions.core.convert import record_from_row

from .test_core_transitions import ANNOTATIONS, NOW, STATE_CHANGING, make_record, plan

P, C, F = DeliveryState.PENDING, DeliveryState.CONFIRMED, DeliveryState.FAILED
AP, AA, AR = AcceptanceState.PENDING, AcceptanceState.ACCEPTED, AcceptanceState.REJECTED
SMS, MMS = ProviderKind.SMS, ProviderKind.MMS
GRACE = timedelta(seconds=60)


def test_provider_kinds_are_the_stored_text() -> None:
    """ProviderKind's values are the literal text the ledger stores and its CHECK allows."""
    assert {"sms": SMS, "mms": MMS} == {kind.value: kind for kind in ProviderKind}


@pytest.mark.parametrize(
    ("states", "event", "kind"),
    list(itertools.product(sorted(LEGAL_STATES), STATE_CHANGING, ProviderKind)),
    ids=lambda value: "-".join(value) if isinstance(value, tuple) else value.value,
)
def test_every_transition_keeps_the_row_and_its_table_together(
    states: tuple[DeliveryState, AcceptanceState], event: Event, kind: ProviderKind
) -> None:
    """Whatever the table of the row, confirmation sets the _id and its kind, a not-sent
    ruling clears both, every other event keeps both; kind is None exactly when the _id is."""
    record = make_record(*states, kind=kind)
    legal = event in ANNOTATIONS or (event, *states) in TRANSITIONS
    if not legal:
        with pytest.raises(InvariantViolation):
            plan(record, event, kind)
        return
    transition = plan(record, event, kind)
    after = transition.after
    if event is Event.CONFIRM:
        assert (812, kind) == (after.provider_object_id, after.provider_kind)
        assert {"provider_object_id": 812, "provider_kind": kind.value}.items() <= (
            transition.evidence.items()
        )
        assert {"provider_object_id", "provider_kind"} <= set(transition.changed)
    elif event is Event.RESOLVE_NOT_SENT:
        assert (None, None) == (after.provider_object_id, after.provider_kind)
    else:
        assert (record.provider_object_id, record.provider_kind) == (
            after.provider_object_id,
            after.provider_kind,
        )
    assert (after.provider_kind is None) == (after.provider_object_id is None)
    if record.provider_kind != after.provider_kind:
        assert "provider_kind" in transition.changed


def test_a_record_never_holds_an_id_without_its_table_or_a_table_without_an_id() -> None:
    """An _id given alone is an SMS row; a kind without an _id, or a kind that is a bare
    string, is refused."""
    record = make_record()
    assert SMS == attrs.evolve(record, provider_object_id=5, provider_kind=SMS).provider_kind
    assert (
        SMS
        == ActionRecord(
            action_id="A",
            dispatch_id="d",
            attempt=1,
            device="x",
            dispatched_at=NOW,
            provider_object_id=5,
        ).provider_kind
    )
    with pytest.raises(InvalidInput, match="both"):
        attrs.evolve(record, provider_kind=MMS)
    with pytest.raises(InvalidInput, match="both"):
        attrs.evolve(make_record(C, kind=MMS), provider_object_id=None)
    with pytest.raises(InvalidInput, match="ProviderKind"):
        attrs.evolve(record, provider_object_id=5, provider_kind="mms")


def test_confirmation_refuses_a_kind_that_is_not_a_provider_kind() -> None:
    """confirm_delivery with the text "mms" instead of ProviderKind.MMS raises InvalidInput."""
    with pytest.raises(InvalidInput, match="provider_kind"):
        confirm_delivery(
            make_record(),
            provider_object_id=12,
            now=NOW,
            provider_kind="mms",  # type: ignore[arg-type]
        )


def test_caller_evidence_cannot_contradict_the_confirmed_row() -> None:
    """Evidence passed to confirm_delivery cannot name another row or table than the one stored."""
    transition = confirm_delivery(
        make_record(),
        provider_object_id=12,
        provider_kind=MMS,
        now=NOW,
        evidence={"provider_kind": "sms", "provider_object_id": 1, "date_ms": 5},
    )
    assert {"provider_kind": "mms", "provider_object_id": 12, "date_ms": 5} == dict(
        transition.evidence
    )


def test_an_operator_ruling_as_sent_names_no_row() -> None:
    """resolve(as_sent=True) leaves both None on an attempt without a row and keeps an MMS
    row it was confirmed by; resolve(as_sent=False) lets the row go."""
    for states in ((P, AP), (F, AP)):
        after = resolve(make_record(*states), as_sent=True, reason="r", operator="ana", now=NOW)
        assert (None, None) == (after.after.provider_object_id, after.after.provider_kind)
    kept = resolve(make_record(C, AR, kind=MMS), as_sent=True, reason="r", operator="o", now=NOW)
    assert (812, MMS) == (kept.after.provider_object_id, kept.after.provider_kind)
    gone = resolve(
        make_record(C, AA, kind=MMS), as_sent=False, reason="r", operator="o", now=NOW, force=True
    )
    assert (None, None) == (gone.after.provider_object_id, gone.after.provider_kind)
    assert {"provider_object_id", "provider_kind"} <= set(gone.changed)


def mms_artifact(outcome: ArtifactOutcome, matched: bool = True) -> Artifact:
    """MMS row 12 with the given outcome (and a verdict when it was sent)."""
    verdict = MatchVerdict(matched=matched, reason=None if matched else "body differs")
    return Artifact(
        provider_object_id=12,
        kind=MMS,
        outcome=outcome,
        verdict=verdict if outcome is ArtifactOutcome.SENT else None,
        evidence={"date_ms": 7},
    )


@pytest.mark.parametrize("matched", [True, False])
def test_reconcile_confirms_with_the_artifacts_kind(matched: bool) -> None:
    """A sent MMS artifact confirms the attempt as MMS row 12, then is judged; its kind is in
    the evidence of both the record and the confirmation."""
    lookup = LookupResult(complete=False, artifact=mms_artifact(ArtifactOutcome.SENT, matched))
    confirmed, judged = reconcile(make_record(), lookup, NOW, grace_window=GRACE)
    assert (Event.CONFIRM, MMS, 12) == (
        confirmed.event,
        confirmed.after.provider_kind,
        confirmed.after.provider_object_id,
    )
    assert "mms" == confirmed.evidence["provider_kind"]
    assert (AA if matched else AR) == judged.after.acceptance
    assert (12, MMS) == (judged.after.provider_object_id, judged.after.provider_kind)
    assert "mms" == judged.after.evidence["provider_kind"]


def test_reconcile_shows_the_kind_of_a_failed_or_stuck_mms_row() -> None:
    """A failed MMS row proves nothing (MmsService posts it up to 3 times: issue 33): the
    attempt is confirmed as MMS row 12, the row it wrote, and goes to review (UNSETTLED),
    never FAILED; a queued one past the grace window flags it STUCK, the evidence naming the
    row with its table and no row stored."""
    confirmed, flagged = reconcile(
        make_record(),
        LookupResult(complete=True, artifact=mms_artifact(ArtifactOutcome.FAILED)),
        NOW,
        grace_window=GRACE,
    )
    assert (C, AP, 12, MMS) == (
        flagged.after.delivery,
        flagged.after.acceptance,
        flagged.after.provider_object_id,
        flagged.after.provider_kind,
    )
    assert ReviewReason.UNSETTLED == flagged.after.review_reason
    assert "MMS" in flagged.evidence["why"]
    assert {"provider_object_id": 12, "provider_kind": "mms", "date_ms": 7} == {
        key: confirmed.evidence[key] for key in ("provider_object_id", "provider_kind", "date_ms")
    }
    (stuck,) = reconcile(
        make_record(),
        LookupResult(complete=True, artifact=mms_artifact(ArtifactOutcome.QUEUED)),
        NOW + GRACE,
        grace_window=GRACE,
    )
    assert ReviewReason.STUCK == stuck.after.review_reason
    assert ("mms", 12) == (stuck.evidence["provider_kind"], stuck.evidence["provider_object_id"])


def test_artifacts_and_duplicates_are_sms_rows_unless_told() -> None:
    """Artifact and DuplicateSighting default to SMS and refuse a kind that is a bare string."""
    assert SMS == Artifact(provider_object_id=1, outcome=ArtifactOutcome.SENT).kind
    assert SMS == DuplicateSighting(dispatch_id="d", provider_object_id=1).kind
    with pytest.raises(InvalidInput, match="kind"):
        Artifact(provider_object_id=1, outcome=ArtifactOutcome.SENT, kind="mms")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="kind"):
        DuplicateSighting(dispatch_id="d", provider_object_id=1, kind="mms")  # type: ignore[arg-type]


def test_the_kind_survives_json_and_rows() -> None:
    """A record confirmed by an MMS row unstructures its kind as "mms" and reads back equal."""
    record = make_record(C, kind=MMS)
    data = converter.unstructure(record)
    assert ("mms", 812) == (data["provider_kind"], data["provider_object_id"])
    assert record == converter.structure(data, ActionRecord)
    row = {key: value for key, value in data.items() if key != "evidence"}
    assert record == record_from_row({**row, "evidence_json": "{}"})
