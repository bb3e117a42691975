"""The pure state machine: every legal transition in one table, and the decisions over it.

Nothing here performs I/O. Each function takes frozen records and returns new ones (or a
``Transition`` describing the change); the ledger applies a transition with compare-and-set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import attrs

from starebrain_actions.core.convert import format_time, parse_time
from starebrain_actions.core.exceptions import InvalidInput, InvariantViolation, RetryRefused
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    ArtifactOutcome,
    DeliveryState,
    Event,
    LookupResult,
    MatchVerdict,
    PhoneHold,
    ProviderKind,
    RedispatchDecision,
    RedispatchReason,
    RetryGrant,
    ReviewReason,
    Status,
    Transition,
    require_aware,
    storable,
)

_P = DeliveryState.PENDING
_C = DeliveryState.CONFIRMED
_F = DeliveryState.FAILED
_AP = AcceptanceState.PENDING
_AA = AcceptanceState.ACCEPTED
_AR = AcceptanceState.REJECTED

#: The (delivery, acceptance) pairs a record may ever be in. Acceptance needs confirmation.
LEGAL_STATES: Final[frozenset[tuple[DeliveryState, AcceptanceState]]] = frozenset(
    {(_P, _AP), (_C, _AP), (_C, _AA), (_C, _AR), (_F, _AP)}
)

#: Every state-changing transition: (event, delivery, acceptance) -> (delivery, acceptance).
#: A pair missing from this table is illegal. Only operator resolutions leave final states;
#: a resolution that restates the current state acknowledges it (and clears review).
TRANSITIONS: Final[
    Mapping[
        tuple[Event, DeliveryState, AcceptanceState],
        tuple[DeliveryState, AcceptanceState],
    ]
] = {
    (Event.CONFIRM, _P, _AP): (_C, _AP),
    (Event.FAIL, _P, _AP): (_F, _AP),
    (Event.ACCEPT, _C, _AP): (_C, _AA),
    (Event.REJECT, _C, _AP): (_C, _AR),
    (Event.RESOLVE_SENT, _P, _AP): (_C, _AA),
    (Event.RESOLVE_SENT, _C, _AP): (_C, _AA),
    (Event.RESOLVE_SENT, _C, _AR): (_C, _AA),
    (Event.RESOLVE_SENT, _F, _AP): (_C, _AA),
    (Event.RESOLVE_SENT, _C, _AA): (_C, _AA),
    (Event.RESOLVE_NOT_SENT, _P, _AP): (_F, _AP),
    (Event.RESOLVE_NOT_SENT, _C, _AP): (_F, _AP),
    (Event.RESOLVE_NOT_SENT, _C, _AA): (_F, _AP),
    (Event.RESOLVE_NOT_SENT, _C, _AR): (_F, _AP),
    (Event.RESOLVE_NOT_SENT, _F, _AP): (_F, _AP),
}

#: Events that record something without moving either axis; legal from any state.
ANNOTATIONS: Final[frozenset[Event]] = frozenset(
    {Event.SUBMITTED, Event.FLAG_REVIEW, Event.NOTE_ERROR}
)

#: Events only an operator may cause; the database lets them leave final states.
OPERATOR_EVENTS: Final[frozenset[Event]] = frozenset({Event.RESOLVE_SENT, Event.RESOLVE_NOT_SENT})

#: The derived status table of DESIGN.md (IN_FLIGHT becomes UNKNOWN past the grace window).
STATUS_TABLE: Final[Mapping[tuple[DeliveryState, AcceptanceState], Status]] = {
    (_P, _AP): Status.IN_FLIGHT,
    (_C, _AP): Status.VERIFYING,
    (_C, _AA): Status.SUCCEEDED,
    (_C, _AR): Status.MISMATCH,
    (_F, _AP): Status.FAILED,
}


def next_states(
    event: Event, delivery: DeliveryState, acceptance: AcceptanceState
) -> tuple[DeliveryState, AcceptanceState]:
    """Look the transition up in ``TRANSITIONS``.

    Raises:
        InvariantViolation: the event is not legal from these states.
    """
    if event in ANNOTATIONS:
        return delivery, acceptance
    try:
        return TRANSITIONS[(event, delivery, acceptance)]
    except KeyError:
        if event in (Event.ACCEPT, Event.REJECT) and delivery is not _C:
            raise InvariantViolation(
                f"cannot {event.value}: acceptance needs delivery CONFIRMED, "
                f"but delivery is {delivery.value}"
            ) from None
        raise InvariantViolation(
            f"event {event.value!r} is not legal from delivery={delivery.value}, "
            f"acceptance={acceptance.value}"
        ) from None


def _transition(
    record: ActionRecord,
    event: Event,
    *,
    now: datetime,
    actor: str,
    evidence: Mapping[str, Any] | None = None,
    **changes: Any,
) -> Transition:
    now = require_aware("now", now)
    if (record.delivery, record.acceptance) not in LEGAL_STATES:
        raise InvariantViolation(
            f"record {record.dispatch_id} is in an impossible state "
            f"({record.delivery.value}, {record.acceptance.value})"
        )
    delivery, acceptance = next_states(event, record.delivery, record.acceptance)
    if not actor:
        raise InvalidInput("actor must not be empty")
    # text from the phone (or a person) may hold NUL, which no ledger stores alike: U+FFFD
    actor = storable(actor)
    proof = storable(dict(evidence or {}))
    changes = {name: storable(value) for name, value in changes.items()}
    after = attrs.evolve(
        record,
        delivery=delivery,
        acceptance=acceptance,
        version=record.version + 1,
        evidence={**record.evidence, **proof} if proof else record.evidence,
        **changes,
    )
    changed = ["version"]
    changed += [
        name for name in ("delivery", "acceptance") if getattr(after, name) != getattr(record, name)
    ]
    changed += [name for name, value in changes.items() if value != getattr(record, name)]
    if proof:
        changed.append("evidence")
    return Transition(
        event=event,
        before=record,
        after=after,
        at=now,
        actor=actor,
        evidence=proof,
        changed=tuple(changed),
    )


# --------------------------------------------------------------------------- transitions


def confirm_delivery(
    record: ActionRecord,
    *,
    provider_object_id: int,
    now: datetime,
    actor: str = "reconciler",
    evidence: Mapping[str, Any] | None = None,
    provider_kind: ProviderKind = ProviderKind.SMS,
    row_date_ms: int | None = None,
) -> Transition:
    """PENDING -> CONFIRMED: a read of the phone found the message, row ``provider_object_id``
    of the provider table ``provider_kind`` names (``content://sms`` unless told otherwise),
    dated ``row_date_ms`` (ids are reused: the ``_id`` and the date name the message).

    Raises:
        InvariantViolation: delivery is not PENDING.
        InvalidInput: ``provider_object_id`` is not a non-negative integer, or
            ``provider_kind`` is not a ``ProviderKind``.
    """
    if (
        not isinstance(provider_object_id, int)
        or isinstance(provider_object_id, bool)
        or provider_object_id < 0
    ):
        raise InvalidInput(
            f"provider_object_id must be an integer >= 0; got {provider_object_id!r}"
        )
    if not isinstance(provider_kind, ProviderKind):
        raise InvalidInput(f"provider_kind must be a ProviderKind; got {provider_kind!r}")
    if row_date_ms is not None and (
        not isinstance(row_date_ms, int) or isinstance(row_date_ms, bool)
    ):
        raise InvalidInput(f"row_date_ms must be an int or None; got {row_date_ms!r}")
    return _transition(
        record,
        Event.CONFIRM,
        now=now,
        actor=actor,
        # the row's identity last: caller evidence cannot contradict what is stored
        evidence={
            **(evidence or {}),
            "provider_object_id": provider_object_id,
            "provider_kind": provider_kind.value,
        },
        provider_object_id=provider_object_id,
        provider_kind=provider_kind,
        provider_row_date_ms=row_date_ms,
        confirmed_at=require_aware("now", now),
    )


def fail_delivery(
    record: ActionRecord,
    *,
    reason: str,
    now: datetime,
    actor: str = "reconciler",
    evidence: Mapping[str, Any] | None = None,
) -> Transition:
    """PENDING -> FAILED: proof that nothing went out (never a mere timeout).

    Raises:
        InvariantViolation: delivery is not PENDING.
    """
    if not reason:
        raise InvalidInput("fail_delivery needs a reason (the proof of absence)")
    return _transition(
        record,
        Event.FAIL,
        now=now,
        actor=actor,
        evidence={"reason": reason, **(evidence or {})},
        failed_at=require_aware("now", now),
        last_error=reason,
    )


def try_accept(
    record: ActionRecord,
    verdict: MatchVerdict,
    *,
    now: datetime,
    actor: str = "reconciler",
) -> Transition:
    """Judge a confirmed message: ACCEPTED when ``verdict.matched``, else REJECTED (MISMATCH).

    Raises:
        InvariantViolation: delivery is not CONFIRMED, or acceptance is already decided.
    """
    now = require_aware("now", now)
    proof: dict[str, Any] = {"matched": verdict.matched, **dict(verdict.details)}
    if verdict.reason is not None:
        proof["reason"] = verdict.reason
    if verdict.matched:
        return _transition(
            record, Event.ACCEPT, now=now, actor=actor, evidence=proof, accepted_at=now
        )
    return _transition(
        record,
        Event.REJECT,
        now=now,
        actor=actor,
        evidence=proof,
        rejected_at=now,
        review_reason=ReviewReason.MISMATCH,
    )


def resolve(
    record: ActionRecord,
    *,
    as_sent: bool,
    reason: str,
    operator: str,
    now: datetime,
    force: bool = False,
    row: tuple[ProviderKind, int] | None = None,
) -> Transition:
    """An operator's ruling, the only way out of a final state; recorded with its reason.

    ``as_sent`` makes the attempt CONFIRMED and ACCEPTED (the message went out and is the
    action's effect), keeping the provider row it was confirmed by, if any (an operator's word
    names no row: ``provider_object_id`` and ``provider_kind`` stay None); otherwise FAILED
    (nothing of ours went out), and the row is let go. Either clears review and names the
    operator on the record; restating the current state acknowledges it.

    ``row=(kind, _id)`` (a ruling as sent) names the provider row the operator found, so that
    row is claimed by this attempt and no pass takes it for another. Ruling not sent an
    attempt a read CONFIRMED needs ``force``: the phone showed its message.

    Raises:
        InvalidInput: no reason or operator given; not-sent on a CONFIRMED attempt without
            ``force``; a row for a not-sent ruling, or another row than the one confirmed.
    """
    if not reason.strip():
        raise InvalidInput("an operator resolution needs a reason")
    if not operator.strip():
        raise InvalidInput("an operator resolution needs the operator's name")
    now = require_aware("now", now)
    evidence: dict[str, Any] = {"reason": reason, "operator": operator}
    if not as_sent and record.delivery is _C and not force:
        shown = (
            f" by provider row {record.provider_object_id}"
            if record.provider_object_id is not None
            else ""
        )
        raise InvalidInput(
            f"attempt {record.dispatch_id} was CONFIRMED{shown}: the phone showed its message;"
            " ruling it not sent needs force, and makes the action FAILED: a later send of it"
            " sends the SMS again (if its budget allows)"
        )
    if row is not None and not as_sent:
        raise InvalidInput("a not-sent ruling names no provider row")
    provider: dict[str, Any] = {}
    if as_sent and row is not None:
        kind, row_id = row
        known = record.provider_object_id
        if known is not None and (known, record.provider_kind) != (row_id, kind):
            raise InvalidInput(
                f"attempt {record.dispatch_id} is already confirmed by another provider row"
            )
        provider = {"provider_object_id": row_id, "provider_kind": kind}
        if known is None:
            provider["provider_row_date_ms"] = None  # an operator names the _id only
        evidence |= {"provider_object_id": row_id, "provider_kind": kind.value}
    if not as_sent and force:
        evidence["forced"] = True
    if as_sent:
        return _transition(
            record,
            Event.RESOLVE_SENT,
            now=now,
            actor=f"operator:{operator}",
            evidence=evidence,
            **provider,
            confirmed_at=record.confirmed_at or now,
            accepted_at=record.accepted_at or now,
            rejected_at=None,
            failed_at=None,
            review_reason=None,
            resolved_by=operator,
        )
    return _transition(
        record,
        Event.RESOLVE_NOT_SENT,
        now=now,
        actor=f"operator:{operator}",
        evidence=evidence,
        provider_object_id=None,
        provider_kind=None,
        provider_row_date_ms=None,
        confirmed_at=None,
        accepted_at=None,
        rejected_at=None,
        failed_at=record.failed_at or now,
        review_reason=None,
        resolved_by=operator,
    )


def ruling_in_force(
    record: ActionRecord, *, as_sent: bool, row: tuple[ProviderKind, int] | None = None
) -> bool:
    """True when an operator's earlier ruling already says what this one says and nothing has
    flagged the attempt since: restating it would change nothing, so nothing is written.

    A ruling naming another provider row, a not-sent ruling naming one, or any ruling on an
    attempt flagged for review again is not a repeat (``resolve`` decides those).
    """
    if record.resolved_by is None or record.review_reason is not None:
        return False
    if not as_sent:
        return row is None and record.delivery is DeliveryState.FAILED
    if not (record.delivery is _C and record.acceptance is AcceptanceState.ACCEPTED):
        return False
    return row is None or (record.provider_kind, record.provider_object_id) == row


def record_submission(
    record: ActionRecord,
    *,
    watermark_id: int | None,
    device_clock_ms: int | None,
    now: datetime,
    actor: str = "agent",
    evidence: Mapping[str, Any] | None = None,
) -> Transition:
    """Keep the dispatch evidence (watermark ``_id`` and device clock read before the send).

    Raises:
        InvariantViolation: evidence was already recorded for this attempt.
    """
    if record.watermark_id is not None or record.device_clock_ms is not None:
        raise InvariantViolation(f"attempt {record.dispatch_id} already has dispatch evidence")
    for name, value in (("watermark_id", watermark_id), ("device_clock_ms", device_clock_ms)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise InvalidInput(f"{name} must be an integer >= 0 or None; got {value!r}")
    return _transition(
        record,
        Event.SUBMITTED,
        now=now,
        actor=actor,
        evidence={"watermark_id": watermark_id, "device_clock_ms": device_clock_ms}
        | dict(evidence or {}),
        watermark_id=watermark_id,
        device_clock_ms=device_clock_ms,
    )


def flag_for_review(
    record: ActionRecord,
    reason: ReviewReason,
    *,
    now: datetime,
    actor: str = "reconciler",
    evidence: Mapping[str, Any] | None = None,
) -> Transition:
    """Stop automatic handling of this attempt until a person resolves it."""
    return _transition(
        record,
        Event.FLAG_REVIEW,
        now=now,
        actor=actor,
        evidence={"review_reason": reason.value, **(evidence or {})},
        review_reason=reason,
    )


def note_error(
    record: ActionRecord,
    error: str,
    *,
    now: datetime,
    actor: str = "reconciler",
    evidence: Mapping[str, Any] | None = None,
) -> Transition:
    """Keep an error that proves nothing (timeout, unreachable device): states stay as they are."""
    if not error:
        raise InvalidInput("note_error needs the error text")
    return _transition(
        record,
        Event.NOTE_ERROR,
        now=now,
        actor=actor,
        evidence={"error": error, **(evidence or {})},
        last_error=error,
    )


def can_void(record: ActionRecord) -> bool:
    """May a pass try to void this attempt's fence on the phone? Only an unresolved attempt
    created with a fence epoch, whose script is not already known to have claimed it."""
    return (
        record.delivery is _P
        and isinstance(record.evidence.get("fence_epoch"), str)
        and record.evidence.get("fence") not in ("claimed", "lost")
    )


def phone_hold(record: ActionRecord, action: Action, void_after: timedelta) -> PhoneHold:
    """An unresolved attempt holding its phone, with when a pass can free it: by voiding its
    fence from ``void_after`` after its receipt (if it has one to void; the phone is freed
    when its script never ran), and at the latest by moving it to review past its policy's
    ``unverified_after``."""
    return PhoneHold(
        action_id=record.action_id,
        dispatch_id=record.dispatch_id,
        device=record.device,
        since=record.dispatched_at,
        void_from=record.dispatched_at + void_after if can_void(record) else None,
        review_at=record.dispatched_at + action.policy.unverified_after,
    )


def settle_by_fence(
    record: ActionRecord,
    state: str,
    stages: Sequence[tuple[str, int]],
    *,
    now: datetime,
    actor: str = "reconciler",
    voided_at: str | None = None,
) -> Transition | None:
    """What the attempt's fence on the phone proves (``state`` from the phone's answer).

    ``voided``: the pass holds the fence name (or the script's ``go``), so no key was or can
    ever be pressed for it: FAILED, the proof of invariant 4 made on the phone. ``claimed``: the
    script started; its stages are kept as evidence and the attempt stays PENDING (the
    message may be queued, failed or sent out of sight). ``lost``: the fence folder was
    cleared; nothing is proven, noted once.

    Raises:
        InvalidInput: an unknown state.
    """
    if record.delivery is not _P:
        return None
    path_evidence = {"fence_epoch": record.evidence.get("fence_epoch")}
    if state == "voided":
        where = (
            "after its send script started, before any key could be pressed"
            if voided_at == "go"
            else "before its send script could run"
        )
        return fail_delivery(
            record,
            reason=f"voided on the phone {where}: nothing was or can still be sent",
            now=now,
            actor=actor,
            evidence={
                "fence": "voided",
                "fence_voided_at": voided_at or "claim",
                "fence_stages": [f"{name}@{ms}" for name, ms in stages],
                **path_evidence,
            },
        )
    if state == "claimed":
        shown = [f"{name}@{ms}" for name, ms in stages]
        reached = ", ".join(name for name, _ms in stages) or "the claim only"
        return note_error(
            record,
            f"the send script ran on the phone (reached: {reached}); outcome unknown",
            now=now,
            actor=actor,
            evidence={"fence": "claimed", "fence_stages": shown},
        )
    if state == "lost":
        return note_error(
            record,
            "the phone's fence folder was cleared: no proof either way",
            now=now,
            actor=actor,
            evidence={"fence": "lost"},
        )
    if state == "open":
        return None  # a peek: the script has not claimed its keys yet; nothing is proven
    raise InvalidInput(f"unknown fence state {state!r}")


# --------------------------------------------------------------------------- derived status


def derive_status(record: ActionRecord, now: datetime, grace_window: timedelta) -> Status:
    """The combined status of DESIGN.md's table; PENDING/PENDING is UNKNOWN past the grace.

    Raises:
        InvariantViolation: the pair of states is impossible.
    """
    try:
        status = STATUS_TABLE[(record.delivery, record.acceptance)]
    except KeyError:
        raise InvariantViolation(
            f"no status for delivery={record.delivery.value}, acceptance={record.acceptance.value}"
        ) from None
    if status is Status.IN_FLIGHT and require_aware("now", now) >= (
        record.dispatched_at + grace_window
    ):
        return Status.UNKNOWN
    return status


# --------------------------------------------------------------------------- decisions


def spends_budget(record: ActionRecord) -> bool:
    """Does this attempt count against the action's budget? All do, except one that failed
    because the phone could not be reached at all (``evidence["unreachable"]``) or was not
    ready for a send (``evidence["not_ready"]``: locked, screen off, no SMS app...; see
    ``not_ready``): nothing was sent, and nothing was learnt about the message. Its retries
    still back off like any other."""
    return not (
        record.delivery is _F and (record.evidence.get("unreachable") is True or not_ready(record))
    )


def not_ready(record: ActionRecord) -> str | None:
    """The check that found the phone not ready for this FAILED attempt (``keyguard_showing``,
    ``screen_off``...), None if it failed otherwise or did not fail."""
    reason = record.evidence.get("not_ready")
    return reason if record.delivery is _F and isinstance(reason, str) and reason else None


def should_redispatch(
    action: Action, attempts: Sequence[ActionRecord], now: datetime
) -> RedispatchDecision:
    """May a new attempt of ``action`` start now?

    Delivery PENDING: no. Delivery FAILED: yes. Acceptance REJECTED: yes, unless the attempt
    before was rejected in the same way (a systematic cause: the retry would repeat it).
    Anything else: no. And no, whatever the states, once the budget is spent (attempts that
    failed only because the phone was unreachable or not ready do not spend it:
    ``spends_budget``), the deadline has passed, or an attempt waits for review (a retry
    would be ambiguous); and not before the policy's backoff after the last attempt ended.
    An operator's grant (``Action.grant``) starts the budget, the deadline, the backoff and
    the repeated-mismatch rule over from the attempts after it.
    """
    now = require_aware("now", now)
    ordered = sorted(attempts, key=lambda record: record.attempt)
    # since an operator's grant (``starebrain retry``), only later attempts count
    counted = action.counted(ordered)
    if any(record.delivery is _P for record in ordered):
        return RedispatchDecision(redispatch=False, reason=RedispatchReason.IN_FLIGHT)
    if any(
        record.review_reason is not None and record.review_reason is not ReviewReason.MISMATCH
        for record in ordered
    ):
        return RedispatchDecision(redispatch=False, reason=RedispatchReason.NEEDS_REVIEW)
    if not ordered:
        reason = RedispatchReason.FIRST_ATTEMPT
    else:
        latest = ordered[-1]
        if latest.delivery is _C and latest.acceptance is _AA:
            return RedispatchDecision(redispatch=False, reason=RedispatchReason.SUCCEEDED)
        if latest.delivery is _C and latest.acceptance is _AP:
            return RedispatchDecision(redispatch=False, reason=RedispatchReason.VERIFYING)
        reason = (
            RedispatchReason.DELIVERY_FAILED
            if latest.delivery is _F
            else RedispatchReason.ACCEPTANCE_REJECTED
        )
        if _repeats_mismatch(counted):
            return RedispatchDecision(redispatch=False, reason=RedispatchReason.REPEATED_MISMATCH)
    if sum(1 for record in counted if spends_budget(record)) >= action.budget:
        return RedispatchDecision(redispatch=False, reason=RedispatchReason.BUDGET_EXHAUSTED)
    deadline = action.deadline
    if deadline is not None and now >= deadline:
        return RedispatchDecision(redispatch=False, reason=RedispatchReason.DEADLINE_PASSED)
    if counted:
        latest = counted[-1]
        ended = latest.failed_at or latest.rejected_at or latest.dispatched_at
        retry_at = ended + action.policy.interval_before(len(counted) + 1, latest.dispatch_id)
        if now < retry_at:
            return RedispatchDecision(
                redispatch=False, reason=RedispatchReason.BACKOFF, retry_at=retry_at
            )
    return RedispatchDecision(redispatch=True, reason=reason)


#: Why ``should_redispatch`` refuses a new attempt where an operator may grant one.
GRANTABLE: Final = frozenset(
    {
        RedispatchReason.BUDGET_EXHAUSTED,
        RedispatchReason.DEADLINE_PASSED,
        RedispatchReason.REPEATED_MISMATCH,
    }
)


def grant_retry(
    action: Action,
    attempts: Sequence[ActionRecord],
    *,
    granted: int,
    now: datetime,
    by: str,
    reason: str,
) -> Action:
    """The action with an operator's grant of ``granted`` new attempts (``starebrain
    retry``): allowed only when ``should_redispatch`` refuses for a reason a person may lift
    (``GRANTABLE``: the budget spent, the deadline passed, a repeated mismatch) and every
    attempt is resolved.

    Raises:
        InvalidInput: ``granted`` below 1, or no operator or reason.
        RetryRefused: an attempt is unresolved (in flight, verifying or in review), the
            action succeeded, or it may be retried already.
    """
    now = require_aware("now", now)
    if granted < 1:
        raise InvalidInput(f"attempts must be at least 1; got {granted}")
    if not by.strip() or not reason.strip():
        raise InvalidInput("a retry needs who grants it and why (operator and reason)")
    decision = should_redispatch(action, attempts, now)
    what = f"action {action.action_id}"
    if decision.reason in (RedispatchReason.IN_FLIGHT, RedispatchReason.VERIFYING):
        shown = (
            "sent by the phone, not settled yet"
            if (decision.reason is RedispatchReason.VERIFYING)
            else "its outcome is not proven yet"
        )
        raise RetryRefused(
            f"{what}: an attempt is unresolved ({shown}); a new one could send the SMS twice."
            " Let a read settle it (`starebrain reconcile`), then retry"
        )
    if decision.reason is RedispatchReason.NEEDS_REVIEW:
        raise RetryRefused(
            f"{what}: an attempt waits for review; rule on it first (`starebrain resolve`),"
            " then retry"
        )
    if decision.reason is RedispatchReason.SUCCEEDED:
        raise RetryRefused(f"{what} SUCCEEDED: nothing to retry")
    if decision.reason not in GRANTABLE:
        raise RetryRefused(
            f"{what} may be retried already ({decision.reason.value}): `starebrain resume`"
            " or the same send drives it"
        )
    last = max((record.attempt for record in attempts), default=0)
    grant = RetryGrant(
        after_attempt=last, attempts=granted, granted_at=now, granted_by=by, reason=reason
    )
    return attrs.evolve(action, grant=grant)


def _mismatch_signature(record: ActionRecord) -> tuple[object, ...]:
    evidence = record.evidence
    return (
        evidence.get("reason"),
        evidence.get("recipient_ok"),
        evidence.get("body_ok"),
        repr(evidence.get("why")),
    )


def _repeats_mismatch(ordered: Sequence[ActionRecord]) -> bool:
    """The last two attempts were both rejected, and in the same way: the cause is systematic
    (the app alters every text the same way), so a third copy would repeat it. A send the
    phone showed and then marked failed (``failed_after_sent``) is no mismatch: nothing went
    out, and it is retried like a FAILED delivery."""
    if len(ordered) < 2:
        return False
    previous, latest = ordered[-2], ordered[-1]
    return (
        previous.acceptance is _AR
        and latest.acceptance is _AR
        and not failed_after_sent(previous)
        and not failed_after_sent(latest)
        and _mismatch_signature(previous) == _mismatch_signature(latest)
    )


def failed_after_sent(record: ActionRecord) -> bool:
    """Was the attempt rejected because its confirmed row turned FAILED before it settled (the
    app's or the framework's SENT row, then the radio's verdict): nothing went out."""
    return record.acceptance is _AR and record.evidence.get("failed_after_sent") is True


# --------------------------------------------------------------------------- settling

#: How long one send attempt of AOSP Messaging may last before the app gives up on it and
#: rewrites its row FAILED (``BugleGservicesKeys.SMS_SEND_TIMEOUT_IN_MILLIS``, 5 minutes,
#: packages/apps/Messaging android-10.0.0_r30 to android-15.0.0_r1). A FAILED row seen before
#: the receipt plus this is the radio's verdict; one seen later may be the app's timeout, and
#: a radio success after it is ignored (``SmsSender``: "ignoring sent result"): no proof.
APP_SEND_TIMEOUT: Final = timedelta(minutes=5)


def on_framework_path(record: ActionRecord) -> bool:
    """Was the attempt sent through the framework (its rows are written by ``creator``)?"""
    return isinstance(record.evidence.get("creator"), str)


def settles_at(
    record: ActionRecord,
    seen_at: datetime,
    *,
    settle_after: timedelta,
    framework_settle_after: timedelta,
) -> datetime:
    """When a SENT row first seen at ``seen_at`` has settled, so that it proves the send.

    The framework writes its row once the radio answered, and a failure only rewrites it a
    moment later: settled ``framework_settle_after`` after it was first seen. A messaging
    app's row is written SENT before anything is sent (AOSP Messaging's optimistic write)
    and may turn FAILED until ``settle_after`` after the receipt; a row first seen later than
    that has settled already.
    """
    if on_framework_path(record):
        return seen_at + framework_settle_after
    return max(record.dispatched_at + settle_after, seen_at)


def settling_until(record: ActionRecord) -> datetime | None:
    """When a confirmed attempt whose row is only waiting to settle (VERIFYING, and in no
    review: an UNSETTLED row waits for a person, not for time) settles; None otherwise."""
    if record.delivery is not _C or record.acceptance is not _AP or record.review_reason:
        return None
    return settle_time(record)


def settle_time(record: ActionRecord) -> datetime | None:
    """When a VERIFYING attempt's row settles, as its confirmation noted (None: not noted, an
    attempt confirmed before rows had to settle: judged at once)."""
    value = record.evidence.get("settles_at")
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


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
            return (
                _transition(
                    record,
                    Event.REJECT,
                    now=now,
                    actor=actor,
                    evidence={
                        "matched": False,
                        "reason": "the phone showed the message sent, then marked it failed:"
                        " nothing went out",
                        "failed_after_sent": True,
                        **proof,
                    },
                    rejected_at=now,
                ),
            )
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
        row = {
            **artifact.evidence,
            "provider_object_id": artifact.provider_object_id,
            "provider_kind": artifact.kind.value,
        }
        if artifact.outcome is ArtifactOutcome.SENT:
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
            return (
                flag_for_review(record, ReviewReason.STUCK, now=now, actor=actor, evidence=row),
            )
        return ()
    # A read that does not show the message proves nothing (DESIGN invariant 4): the row may
    # be queued or failed where the reader cannot see it (every caller but uid 1000/1001 and
    # the default SMS app reads the restricted view), or the app sent it as RCS chat or MMS.
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


# --------------------------------------------------------------------------- derived action ids

#: How long a settled action answers a send that names no action id (the id derived from the
#: intent): 24 hours, as long as Stripe keeps an idempotency key. Past it, the same text to
#: the same number is a new action.
DERIVED_ID_WINDOW: Final = timedelta(hours=24)
