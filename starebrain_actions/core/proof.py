"""What one read of the phone proves about one attempt (pure): ``reconcile`` for an
unresolved attempt (the artifact a lookup attributed to it, or none), ``settle`` for a
confirmed one whose row has not settled yet (VERIFYING).

Each returns the transitions to apply in order (``transitions``); the ledger applies them
with compare-and-set. Nothing here performs I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from starebrain_actions.core.convert import format_time
from starebrain_actions.core.decisions import (
    APP_SEND_TIMEOUT,
    on_framework_path,
    settle_time,
    settles_at,
)
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import (
    AcceptanceState,
    ActionRecord,
    Artifact,
    ArtifactOutcome,
    DeliveryState,
    LookupResult,
    MatchVerdict,
    ReviewReason,
    Transition,
    require_aware,
)
from starebrain_actions.core.transitions import (
    confirm_delivery,
    fail_delivery,
    flag_for_review,
    reject_failed_after_sent,
    try_accept,
)

_P = DeliveryState.PENDING
_C = DeliveryState.CONFIRMED
_AP = AcceptanceState.PENDING


def settle(
    record: ActionRecord,
    row: ArtifactOutcome | None,
    verdict: MatchVerdict | None,
    now: datetime,
    *,
    complete: bool,
    actor: str = "reconciler",
    evidence: Mapping[str, Any] | None = None,
) -> tuple[Transition, ...]:
    """What one read proves about a confirmed attempt whose row has not settled (VERIFYING).

    ``row``: what its row (the same ``_id`` and date) says in this read; None when the read
    does not show it. Still SENT once ``settle_time`` has passed: judged (ACCEPTED when
    ``verdict`` matched). FAILED: the phone's verdict that nothing went out, REJECTED (the
    artifact exists but does not carry the intent) and resent like a FAILED delivery; unless
    the app may have written it after its own send timeout (a UI-path row seen failed past
    the receipt plus ``APP_SEND_TIMEOUT``), which proves nothing: review (UNSETTLED). Gone
    from a complete read (failed out of the restricted view's sight, deleted, or its ``_id``
    reused): review (UNSETTLED), never a resend. Anything else: nothing yet.
    """
    now = require_aware("now", now)
    if record.delivery is not _C or record.acceptance is not _AP:
        return ()
    proof = dict(evidence or {})
    if row is ArtifactOutcome.SENT:
        due = settle_time(record)
        if due is not None and now < due:
            return ()
        if verdict is None:
            raise InvalidInput("a settled row needs a match verdict to be judged")
        return (try_accept(record, verdict, now=now, actor=actor),)
    if row is ArtifactOutcome.FAILED:
        if on_framework_path(record) or now < record.dispatched_at + APP_SEND_TIMEOUT:
            return (reject_failed_after_sent(record, now=now, actor=actor, evidence=proof),)
        why = (
            "the app marked the message failed after its own send timeout: a radio success"
            " after it would be ignored, so whether it went out is unknown"
        )
    elif row is None and complete:
        why = (
            "the confirmed row is no longer in view before it settled: the app marked it"
            " failed, the owner deleted it, or its _id now holds another message"
        )
    else:
        return ()  # still queued, or a read that proves nothing
    if record.review_reason is ReviewReason.UNSETTLED:
        return ()
    return (
        flag_for_review(
            record, ReviewReason.UNSETTLED, now=now, actor=actor, evidence={"why": why, **proof}
        ),
    )


def reconcile(
    record: ActionRecord,
    lookup: LookupResult,
    now: datetime,
    *,
    grace_window: timedelta,
    actor: str = "reconciler",
    unverified_after: timedelta | None = None,
    settle_after: timedelta | None = None,
    framework_settle_after: timedelta | None = None,
) -> tuple[Transition, ...]:
    """Decide what one read of the phone proves about one attempt.

    Returns the transitions to apply in order (empty: nothing is proven). Delivery not
    PENDING: nothing. The artifact found and sent: CONFIRMED, then ``try_accept`` with its
    verdict. The phone marks it failed: FAILED. Queued past the grace window: review (STUCK).
    No artifact: nothing, however complete the read (absence proves nothing: DESIGN
    invariant 4); past ``unverified_after``, an attempt whose send script ran (its fence says
    so, or it has none) goes to review as UNVERIFIED (RCS_SUSPECTED when the app that took
    the intent can send as RCS chat), which releases the device's lease.
    Ambiguous attribution: flagged for review, never failed. (An unresolved attempt in review
    as UNVERIFIED, RCS_SUSPECTED, AMBIGUOUS or STUCK no longer holds its device's lease:
    ``LEASE_RELEASING_REVIEWS``.)

    ``settle_after`` / ``framework_settle_after`` (the action's policy): a SENT row that
    matches is confirmed but judged only once it has settled (``settles_at``, noted in the
    evidence as ``settles_at``); until then the attempt is VERIFYING and :func:`settle`
    watches it. None: judged at once.

    Raises:
        InvalidInput: a SENT artifact comes without a match verdict.
    """
    now = require_aware("now", now)
    if record.delivery is not _P:
        return ()
    artifact = lookup.artifact
    if lookup.ambiguous:
        if record.review_reason is not None:
            # already before a person (an UNVERIFIED one must not take its lease back)
            return ()
        return (
            flag_for_review(
                record, ReviewReason.AMBIGUOUS, now=now, actor=actor, evidence=lookup.evidence
            ),
        )
    if artifact is not None:
        return _artifact_found(
            record,
            artifact,
            now,
            grace_window=grace_window,
            actor=actor,
            settle_after=settle_after,
            framework_settle_after=framework_settle_after,
        )
    # A read that does not show the message proves nothing (DESIGN invariant 4): the row may
    # be queued or failed where the reader cannot see it (every caller but uid 1000/1001 and
    # the default SMS app reads the restricted view), or the app sent it as RCS chat or MMS.
    return _artifact_missing(record, lookup, now, actor=actor, unverified_after=unverified_after)


def _artifact_found(
    record: ActionRecord,
    artifact: Artifact,
    now: datetime,
    *,
    grace_window: timedelta,
    actor: str,
    settle_after: timedelta | None,
    framework_settle_after: timedelta | None,
) -> tuple[Transition, ...]:
    """What the artifact a read attributed to an unresolved attempt proves: sent (confirmed,
    then judged), failed, or still queued (STUCK in review past the grace window)."""
    row = {
        **artifact.evidence,
        "provider_object_id": artifact.provider_object_id,
        "provider_kind": artifact.kind.value,
    }
    if artifact.outcome is ArtifactOutcome.SENT:
        return _artifact_sent(
            record,
            artifact,
            now,
            actor=actor,
            settle_after=settle_after,
            framework_settle_after=framework_settle_after,
        )
    if artifact.outcome is ArtifactOutcome.FAILED:
        return (
            fail_delivery(
                record,
                reason="the phone marked the message failed",
                now=now,
                actor=actor,
                evidence=row,
            ),
        )
    if now >= record.dispatched_at + grace_window and record.review_reason is None:
        return (flag_for_review(record, ReviewReason.STUCK, now=now, actor=actor, evidence=row),)
    return ()


def _artifact_sent(
    record: ActionRecord,
    artifact: Artifact,
    now: datetime,
    *,
    actor: str,
    settle_after: timedelta | None,
    framework_settle_after: timedelta | None,
) -> tuple[Transition, ...]:
    """A SENT artifact: CONFIRMED, then judged by its verdict, unless a matching row must
    settle first (``settles_at``, noted in the evidence): then CONFIRMED only (VERIFYING).

    Raises:
        InvalidInput: the artifact comes without a match verdict.
    """
    if artifact.verdict is None:
        raise InvalidInput("a SENT artifact needs a match verdict to be judged")
    row_evidence = dict(artifact.evidence)
    due: datetime | None = None
    if artifact.verdict.matched and settle_after is not None:
        due = settles_at(
            record,
            now,
            settle_after=settle_after,
            framework_settle_after=framework_settle_after or timedelta(0),
            row_date_ms=artifact.row_date_ms,
        )
        if due > now:
            row_evidence["settles_at"] = format_time(due)
    confirmed = confirm_delivery(
        record,
        provider_object_id=artifact.provider_object_id,
        provider_kind=artifact.kind,
        row_date_ms=artifact.row_date_ms,
        now=now,
        actor=actor,
        evidence=row_evidence,
    )
    if due is not None and due > now:
        return (confirmed,)  # sent by the phone, not yet settled
    judged = try_accept(confirmed.after, artifact.verdict, now=now, actor=actor)
    return (confirmed, judged)


def _artifact_missing(
    record: ActionRecord,
    lookup: LookupResult,
    now: datetime,
    *,
    actor: str,
    unverified_after: timedelta | None,
) -> tuple[Transition, ...]:
    """No artifact in the read: nothing, unless the attempt's send script ran (its fence says
    so, or it has none) longer than ``unverified_after`` ago: review as UNVERIFIED (or
    RCS_SUSPECTED when the app that took the intent can send as RCS chat)."""
    if (
        unverified_after is not None
        and record.review_reason is None
        and now >= record.dispatched_at + unverified_after
        and (
            record.evidence.get("fence") in ("claimed", "lost")
            or "fence_epoch" not in record.evidence
        )
    ):
        rcs = record.evidence.get("rcs_possible") is True
        return (
            flag_for_review(
                record,
                ReviewReason.RCS_SUSPECTED if rcs else ReviewReason.UNVERIFIED,
                now=now,
                actor=actor,
                evidence={
                    "messaging_app": record.evidence.get("messaging_app"),
                    "unverified_after_s": unverified_after.total_seconds(),
                    "fence": record.evidence.get("fence", "none"),
                    "fence_stages": list(record.evidence.get("fence_stages") or []),
                    **dict(lookup.evidence),
                },
            ),
        )
    return ()
