"""The pure state machine: every legal transition in one table, the transitions themselves,
the fence's proof and the derived status. The decisions over them live in ``decisions``,
what a read of the phone proves in ``proof``.

Nothing here performs I/O. Each function takes frozen records and returns new ones (or a
``Transition`` describing the change); the ledger applies a transition with compare-and-set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import attrs

from starebrain_actions.core.exceptions import InvalidInput, InvariantViolation
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    DeliveryState,
    Event,
    MatchVerdict,
    PhoneHold,
    ProviderKind,
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
    settles_review: bool = False,
) -> Transition:
    """PENDING -> FAILED: proof that nothing went out (never a mere timeout).
    ``settles_review``: the proof also answers the attempt's review, which is cleared (its
    reason kept in the evidence as ``review_settled``).

    Raises:
        InvariantViolation: delivery is not PENDING.
    """
    if not reason:
        raise InvalidInput("fail_delivery needs a reason (the proof of absence)")
    settled = record.review_reason if settles_review else None
    return _transition(
        record,
        Event.FAIL,
        now=now,
        actor=actor,
        evidence={
            "reason": reason,
            **(evidence or {}),
            **({"review_settled": settled.value} if settled is not None else {}),
        },
        failed_at=require_aware("now", now),
        last_error=reason,
        **({"review_reason": None} if settled is not None else {}),
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


def reject_failed_after_sent(
    record: ActionRecord,
    *,
    now: datetime,
    actor: str = "reconciler",
    evidence: Mapping[str, Any] | None = None,
) -> Transition:
    """CONFIRMED -> REJECTED: the phone showed the message sent, then marked its row failed
    before it settled (``proof.settle``): the artifact exists but does not carry the
    intent, and nothing went out (``decisions.failed_after_sent``).

    Raises:
        InvariantViolation: delivery is not CONFIRMED, or acceptance is already decided.
    """
    return _transition(
        record,
        Event.REJECT,
        now=now,
        actor=actor,
        evidence={
            "matched": False,
            "reason": "the phone showed the message sent, then marked it failed: nothing went out",
            "failed_after_sent": True,
            **(evidence or {}),
        },
        rejected_at=now,
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
    if not as_sent:
        if force:
            evidence["forced"] = True
        return _ruled_not_sent(record, operator=operator, now=now, evidence=evidence)
    provider: dict[str, Any] = {}
    if row is not None:
        provider = _operator_row(record, row)
        evidence |= {"provider_object_id": row[1], "provider_kind": row[0].value}
    return _ruled_sent(record, operator=operator, now=now, evidence=evidence, provider=provider)


def _operator_row(record: ActionRecord, row: tuple[ProviderKind, int]) -> dict[str, Any]:
    """The provider columns a ruling as sent that names ``row`` writes: the row is claimed by
    the attempt (its date unknown, unless the attempt was confirmed by this very row).

    Raises:
        InvalidInput: the attempt is already confirmed by another row.
    """
    kind, row_id = row
    known = record.provider_object_id
    if known is not None and (known, record.provider_kind) != (row_id, kind):
        raise InvalidInput(
            f"attempt {record.dispatch_id} is already confirmed by another provider row"
        )
    provider: dict[str, Any] = {"provider_object_id": row_id, "provider_kind": kind}
    if known is None:
        provider["provider_row_date_ms"] = None  # an operator names the _id only
    return provider


def _ruled_sent(
    record: ActionRecord,
    *,
    operator: str,
    now: datetime,
    evidence: dict[str, Any],
    provider: dict[str, Any],
) -> Transition:
    """The ruling as sent: CONFIRMED and ACCEPTED, review cleared, the operator named."""
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


def _ruled_not_sent(
    record: ActionRecord, *, operator: str, now: datetime, evidence: dict[str, Any]
) -> Transition:
    """The ruling as not sent: FAILED, the provider row let go, review cleared, the operator
    named."""
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


#: Reviews a void of the attempt's fence answers: each asks whether a send script that ran
#: sent a text no read has seen (``proof._artifact_missing``); a void proves the script never
#: pressed a key (it never claimed ``go``), so nothing was or can still be sent.
ANSWERED_BY_A_VOID: Final[frozenset[ReviewReason | None]] = frozenset(
    {ReviewReason.UNVERIFIED, ReviewReason.RCS_SUSPECTED}
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
    ever be pressed for it: FAILED, the proof of invariant 4 made on the phone; a review that
    asked whether the script sent its text (``ANSWERED_BY_A_VOID``) is answered and cleared,
    whoever reads the fence (the phone may answer again long after). ``claimed``: the
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
            # a review asking whether a script that ran sent its text is answered: the void
            # proves it never pressed a key (no person needed; the action may be sent again)
            settles_review=record.review_reason in ANSWERED_BY_A_VOID,
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
