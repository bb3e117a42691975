"""The fence's verdicts and the UNVERIFIED review, as pure decisions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from starebrain_actions import (
    ActionRecord,
    DeliveryState,
    Event,
    InvalidInput,
    LookupResult,
    ReviewReason,
)
from starebrain_actions.core.proof import reconcile
from starebrain_actions.core.transitions import can_void, settle_by_fence

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
LIMIT = timedelta(minutes=10)


def pending(**evidence: object) -> ActionRecord:
    """An unresolved attempt with the given evidence."""
    return ActionRecord(
        action_id="A-17",
        dispatch_id="d-1",
        attempt=1,
        device="dev",
        dispatched_at=NOW,
        evidence=dict(evidence),
    )


def test_a_voided_fence_proves_the_attempt_failed() -> None:
    """The pass holds the fence: the script never ran and never can: FAILED, with the fence
    as evidence."""
    transition = settle_by_fence(pending(fence_epoch="ab12cd34"), "voided", (), now=NOW)
    assert transition is not None
    assert (Event.FAIL, DeliveryState.FAILED, "voided") == (
        transition.event,
        transition.after.delivery,
        transition.evidence["fence"],
    )


@pytest.mark.parametrize(
    ("reason", "cleared"),
    [
        (None, False),
        (ReviewReason.UNVERIFIED, True),
        (ReviewReason.RCS_SUSPECTED, True),
        (ReviewReason.AMBIGUOUS, False),
        (ReviewReason.STUCK, False),
    ],
)
def test_a_void_settles_the_review_that_asked_whether_the_script_sent(
    reason: ReviewReason | None, cleared: bool
) -> None:
    """An attempt in review because its script ran but nothing was seen (UNVERIFIED,
    RCS_SUSPECTED): a void proves the script never pressed a key, so the review is answered
    and cleared with the FAILED (its reason kept as evidence); another review (whose row the
    phone's is, a queued row) is left for a person."""
    record = attrs.evolve(pending(fence_epoch="ab12cd34"), review_reason=reason)
    transition = settle_by_fence(record, "voided", (), now=NOW, voided_at="go")
    assert transition is not None
    after = transition.after
    assert (DeliveryState.FAILED, None if cleared else reason) == (
        after.delivery,
        after.review_reason,
    )
    settled = transition.evidence.get("review_settled")
    assert (reason.value if cleared and reason else None) == settled
    assert ("review_reason" in transition.changed) is cleared


def test_a_claimed_fence_keeps_the_attempt_pending_with_its_stages() -> None:
    """The script claimed the fence: the attempt stays PENDING and its stages are kept."""
    transition = settle_by_fence(
        pending(fence_epoch="ab12cd34"), "claimed", (("am", 5), ("keys", 9)), now=NOW
    )
    assert transition is not None
    assert (DeliveryState.PENDING, "claimed", ["am@5", "keys@9"]) == (
        transition.after.delivery,
        transition.after.evidence["fence"],
        transition.after.evidence["fence_stages"],
    )
    assert False is can_void(transition.after)


def test_a_lost_fence_proves_nothing() -> None:
    """The fence folder was cleared: nothing is proven, noted once, never voided again."""
    transition = settle_by_fence(pending(fence_epoch="ab12cd34"), "lost", (), now=NOW)
    assert transition is not None
    assert (DeliveryState.PENDING, False) == (
        transition.after.delivery,
        can_void(transition.after),
    )


def test_only_fenced_unresolved_attempts_may_be_voided() -> None:
    """An attempt created without an epoch (an older version, a phone that could not say) is
    never voided: its script did not claim anything."""
    assert (True, False) == (can_void(pending(fence_epoch="ab12cd34")), can_void(pending()))
    failed = attrs.evolve(
        pending(fence_epoch="ab12cd34"), delivery=DeliveryState.FAILED, failed_at=NOW
    )
    assert False is can_void(failed)
    with pytest.raises(InvalidInput):
        settle_by_fence(pending(fence_epoch="ab12cd34"), "maybe", (), now=NOW)


@pytest.mark.parametrize(
    ("evidence", "flagged"),
    [
        ({"fence_epoch": "ab12cd34", "fence": "claimed"}, True),
        ({"fence_epoch": "ab12cd34", "fence": "lost"}, True),
        ({}, True),
        ({"fence_epoch": "ab12cd34"}, False),
    ],
)
def test_an_unseen_sent_attempt_goes_to_review_past_its_limit(
    evidence: dict[str, object], flagged: bool
) -> None:
    """Past unverified_after, an attempt whose script ran (or that has no fence to ask) goes
    to review as UNVERIFIED, still PENDING; one whose fence was never asked waits for it."""
    record = pending(**evidence)
    lookup = LookupResult(complete=True)
    early = reconcile(record, lookup, NOW + LIMIT / 2, grace_window=GRACE, unverified_after=LIMIT)
    late = reconcile(record, lookup, NOW + LIMIT, grace_window=GRACE, unverified_after=LIMIT)
    assert () == early
    reasons = [t.after.review_reason for t in late]
    assert ([ReviewReason.UNVERIFIED] if flagged else []) == reasons
    assert all(t.after.delivery is DeliveryState.PENDING for t in late)


def test_an_unverified_attempt_is_not_flagged_again_nor_made_ambiguous() -> None:
    """Once UNVERIFIED, a later ambiguous read does not take its lease back."""
    record = attrs.evolve(pending(), review_reason=ReviewReason.UNVERIFIED)
    ambiguous = LookupResult(complete=True, ambiguous=True)
    assert () == reconcile(record, ambiguous, NOW + LIMIT, grace_window=GRACE)
    assert () == reconcile(
        record, LookupResult(complete=True), NOW + LIMIT, grace_window=GRACE, unverified_after=LIMIT
    )
