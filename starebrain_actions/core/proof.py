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
    may_be_partly_sent,
    on_framework_path,
    sent_as_mms,
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
    ProviderKind,
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
    segments: int = 1,
    app_send_timeout: timedelta = APP_SEND_TIMEOUT,
) -> tuple[Transition, ...]:
    """What one read proves about a confirmed attempt whose row has not settled (VERIFYING).

    ``row``: what its row (the same ``_id`` and date) says in this read; None when the read
    does not show it. Still SENT once ``settle_time`` has passed: judged (ACCEPTED when
    ``verdict`` matched); but an MMS of the app's path is never proven by time
    (``decisions.MMS_NETWORK_WAIT``): review (UNSETTLED). FAILED: the phone's verdict that
    nothing went out, REJECTED (the artifact exists but does not carry the intent) and resent
    like a FAILED delivery; unless the row may hide a send that went out: a text of several
    segments (``segments``, the intent's) or an MMS on the app's path
    (``decisions.may_be_partly_sent``), or a UI-path row seen failed past the receipt plus
    ``app_send_timeout`` (the app's own timeout: a radio success after it is ignored): review
    (UNSETTLED). Gone from a complete read (failed out of the restricted view's sight,
    deleted, or its ``_id`` reused): review (UNSETTLED), never a resend. Anything else:
    nothing yet.
    """
    now = require_aware("now", now)
    if record.delivery is not _C or record.acceptance is not _AP:
        return ()
    proof = dict(evidence or {})
    kind = record.provider_kind
    if row is ArtifactOutcome.SENT:
        due = settle_time(record)
        if due is not None and now < due:
            return ()
        if verdict is None:
            raise InvalidInput("a settled row needs a match verdict to be judged")
        if not sent_as_mms(record, kind):
            return (try_accept(record, verdict, now=now, actor=actor),)
        why = MMS_NEVER_SETTLES
    elif row is ArtifactOutcome.FAILED:
        unknown = _failed_proves_nothing(record, kind, now, segments, app_send_timeout)
        if unknown is None:
            return (reject_failed_after_sent(record, now=now, actor=actor, evidence=proof),)
        why = unknown
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


#: Why a SENT MMS row of the app's path goes to a person once its settle time has passed.
MMS_NEVER_SETTLES = (
    "the app sent the text as MMS: MmsService waits for the MMS network 30 minutes by default,"
    " a value the phone's DeviceConfig may change, and posts it up to 3 times, so no time"
    " proves that the row will stay sent: a person must rule (ask the recipient, or look at"
    " the message in the app)"
)


def _failed_proves_nothing(
    record: ActionRecord,
    kind: ProviderKind | None,
    now: datetime,
    segments: int,
    app_send_timeout: timedelta,
) -> str | None:
    """Why a FAILED row of ``record`` does not prove that nothing went out (None: it does:
    the framework's verdict, or the app's within its own send timeout for a one-segment
    SMS)."""
    if may_be_partly_sent(record, kind, segments):
        if kind is ProviderKind.MMS:
            return (
                "the app marked its MMS failed: MmsService posts an MMS up to 3 times, and a"
                " post whose answer was lost may have reached the carrier, so whether it went"
                " out is unknown"
            )
        return (
            f"the app marked a text of {segments} SMS segments failed: the row keeps the"
            " worst result of its parts, so parts before the one that failed may have been"
            " delivered; it is never resent without a ruling"
        )
    if on_framework_path(record) or now < record.dispatched_at + app_send_timeout:
        return None
    return (
        "the app marked the message failed after its own send timeout: a radio success"
        " after it would be ignored, so whether it went out is unknown"
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
    segments: int = 1,
    app_send_timeout: timedelta = APP_SEND_TIMEOUT,
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
    watches it. None: judged at once. A FAILED row that may hide a send that went out (a text
    of ``segments`` > 1 or an MMS on the app's path, or an app's row first seen failed past
    the receipt plus ``app_send_timeout``) is confirmed, as the row the attempt wrote, and
    goes to review (UNSETTLED): never FAILED, never resent without a ruling.

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
            segments=segments,
            app_send_timeout=app_send_timeout,
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
    segments: int,
    app_send_timeout: timedelta,
) -> tuple[Transition, ...]:
    """What the artifact a read attributed to an unresolved attempt proves: sent (confirmed,
    then judged), failed (or, where the row may hide a send, confirmed and in review as
    UNSETTLED), or still queued (STUCK in review past the grace window)."""
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
        why = _failed_proves_nothing(record, artifact.kind, now, segments, app_send_timeout)
        if why is None:
            return (
                fail_delivery(
                    record,
                    reason="the phone marked the message failed",
                    now=now,
                    actor=actor,
                    evidence=row,
                ),
            )
        return _confirmed_for_review(record, artifact, now, actor=actor, why=why)
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
            kind=artifact.kind,
        )
        if due > now:
            row_evidence["settles_at"] = format_time(due)
        elif sent_as_mms(record, artifact.kind):
            # first seen past its settle time: an MMS is still never proven by time
            return _confirmed_for_review(record, artifact, now, actor=actor, why=MMS_NEVER_SETTLES)
    confirmed = _confirm(record, artifact, now, actor=actor, evidence=row_evidence)
    if due is not None and due > now:
        return (confirmed,)  # sent by the phone, not yet settled
    judged = try_accept(confirmed.after, artifact.verdict, now=now, actor=actor)
    return (confirmed, judged)


def _confirm(
    record: ActionRecord,
    artifact: Artifact,
    now: datetime,
    *,
    actor: str,
    evidence: Mapping[str, Any],
) -> Transition:
    """The attempt confirmed by ``artifact``: its row, by table, ``_id`` and date."""
    return confirm_delivery(
        record,
        provider_object_id=artifact.provider_object_id,
        provider_kind=artifact.kind,
        row_date_ms=artifact.row_date_ms,
        now=now,
        actor=actor,
        evidence=evidence,
    )


def _confirmed_for_review(
    record: ActionRecord, artifact: Artifact, now: datetime, *, actor: str, why: str
) -> tuple[Transition, ...]:
    """The row the attempt wrote, confirmed as its artifact (no other attempt may claim it),
    and in review as UNSETTLED: whether it went out is unknown (``why``)."""
    confirmed = _confirm(record, artifact, now, actor=actor, evidence=dict(artifact.evidence))
    flagged = flag_for_review(
        confirmed.after, ReviewReason.UNSETTLED, now=now, actor=actor, evidence={"why": why}
    )
    return (confirmed, flagged)


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
