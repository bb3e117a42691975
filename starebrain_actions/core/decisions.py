"""The pure decisions over an action's attempts: may a new attempt start
(``should_redispatch``), may an operator grant more (``grant_retry``), which attempts spend
the budget, and when a confirmed row has settled (the settling times ``proof`` and
the read path use).

Nothing here performs I/O, nor changes a record: each function reads frozen records and
returns a decision (or, for a grant, a new ``Action``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

import attrs

from starebrain_actions.core.convert import parse_time
from starebrain_actions.core.exceptions import InvalidInput, RetryRefused
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    DeliveryState,
    ProviderKind,
    RedispatchDecision,
    RedispatchReason,
    RetryGrant,
    ReviewReason,
    require_aware,
)

_P = DeliveryState.PENDING
_C = DeliveryState.CONFIRMED
_F = DeliveryState.FAILED
_AP = AcceptanceState.PENDING
_AA = AcceptanceState.ACCEPTED
_AR = AcceptanceState.REJECTED


# --------------------------------------------------------------------------- decisions


def spends_budget(record: ActionRecord) -> bool:
    """Does this attempt count against the action's budget? All do, except one that failed
    because the phone could not be reached at all (``evidence["unreachable"]``; another phone
    answering at its address too), was not ready for a send (``evidence["not_ready"]``:
    locked, screen off, no SMS app...; see ``not_ready``), or no longer had the attempt's
    fence epoch, its fence folder cleared (``evidence["fence_lost"]``): nothing was sent, and
    nothing was learnt about the message. Its retries still back off like any other."""
    return not (
        record.delivery is _F
        and (
            record.evidence.get("unreachable") is True
            or record.evidence.get("fence_lost") is True
            or not_ready(record)
        )
    )


def not_ready(record: ActionRecord) -> str | None:
    """The check that found the phone not ready for this FAILED attempt (``keyguard_showing``,
    ``screen_off``...), None if it failed otherwise or did not fail."""
    reason = record.evidence.get("not_ready")
    return reason if record.delivery is _F and isinstance(reason, str) and reason else None


#: What a person is told to do when a not-ready attempt kept no remedy of its own (the
#: bridge words one for every check it names: ``android_bridge``'s ``NOT_READY_REMEDIES``).
NOT_READY_FALLBACK: Final = "make the phone ready for a send"


def not_ready_remedy(record: ActionRecord) -> str | None:
    """What a person must do on the phone when this attempt found it not ready: the remedy
    the send kept in its evidence, as the bridge worded it (``unlock the phone…``); None
    when the attempt did not fail as not ready."""
    if not_ready(record) is None:
        return None
    remedy = record.evidence.get("remedy")
    return remedy if isinstance(remedy, str) and remedy else NOT_READY_FALLBACK


def unsent_why(record: ActionRecord) -> str | None:
    """Why this attempt sent nothing and spent no attempt of the budget (``spends_budget``
    false): ``not_ready`` (the phone refused before the first key), ``unreachable`` (the
    phone did not answer, or another phone answered at its address) or ``fence_lost`` (its
    fence folder was cleared); None for any other attempt."""
    if spends_budget(record):
        return None
    if not_ready(record) is not None:
        return "not_ready"
    return "unreachable" if record.evidence.get("unreachable") is True else "fence_lost"


def first_sent(attempts: Sequence[ActionRecord]) -> ActionRecord | None:
    """The first attempt that could have sent the message (it spent the budget); None when
    every attempt was refused before anything was sent (not ready, unreachable, fence lost:
    ``unsent_why``) or there is none."""
    ordered = sorted(attempts, key=lambda record: record.attempt)
    return next((record for record in ordered if spends_budget(record)), None)


def waiting_for_phone(
    action: Action, attempts: Sequence[ActionRecord], now: datetime
) -> ActionRecord | None:
    """The latest attempt, when it sent nothing because of the phone (``unsent_why``: not
    ready, unreachable, its fence lost) and the action may be tried again, now or after
    its backoff (``should_redispatch``): the action waits for the phone, and the summary
    reads PLANNED. None otherwise: no attempt, another outcome, an earlier attempt whose
    message went out (the phone confirmed it: a wrong text, say), or no new attempt allowed
    (the budget spent or the deadline passed: it stays FAILED, for a person)."""
    if not attempts:
        return None
    latest = max(attempts, key=lambda record: record.attempt)
    if unsent_why(latest) is None:
        return None
    if any(record.delivery is _C and not failed_after_sent(record) for record in attempts):
        return None  # something went out before: this action is not "nothing sent"
    decision = should_redispatch(action, attempts, now)
    if decision.redispatch or decision.waits:
        return latest
    return None


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
    if action.intent.expired(now):
        return RedispatchDecision(redispatch=False, reason=RedispatchReason.EXPIRED)
    if ordered:
        latest = ordered[-1]
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
    retry_at = action.intent.scheduled_after(now)
    if counted:
        latest = counted[-1]
        ended = latest.failed_at or latest.rejected_at or latest.dispatched_at
        backoff_ends = ended + action.policy.interval_before(len(counted) + 1, latest.dispatch_id)
        if now < backoff_ends and (retry_at is None or backoff_ends > retry_at):
            return RedispatchDecision(
                redispatch=False, reason=RedispatchReason.BACKOFF, retry_at=backoff_ends
            )
    if retry_at is not None:
        return RedispatchDecision(
            redispatch=False, reason=RedispatchReason.SCHEDULED, retry_at=retry_at
        )
    return RedispatchDecision(redispatch=True, reason=reason)


def expired(action: Action, attempts: Sequence[ActionRecord], now: datetime) -> bool:
    """Is the action EXPIRED: its intent's deadline passed with nothing of it sent or under
    way? Every attempt (if any) provably not sent (delivery FAILED) and none waiting for a
    person's ruling on it (an app's late FAILED row may hide a send: review UNSETTLED; a
    ruling that nothing went out clears it); and
    not denied (DENIED says more). An attempt in flight at the deadline is settled by reads
    as ever: the deadline never turns an unknown outcome into "not sent"."""
    if action.denied or not action.intent.expired(require_aware("now", now)):
        return False
    return all(record.delivery is _F and record.review_reason is None for record in attempts)


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
    if decision.reason is RedispatchReason.EXPIRED:
        raise RetryRefused(
            f"{what}: its deadline (not after {action.intent.not_after}) has passed: no ruling"
            " lifts it, it is never sent; to send the message after all, send it as a new"
            " action"
        )
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

#: How long MmsService waits for the MMS network before it fails a send
#: (``MmsNetworkManager.DEFAULT_MMS_SERVICE_NETWORK_REQUEST_TIMEOUT_MILLIS``, 30 minutes,
#: packages/services/Mms as LineageOS mirrors it: branches lineage-17.1 to lineage-21.0, that
#: is Android 10 to 14 (android-14.0.0_r29); 15 was not read). The wait comes after Messaging's
#: resend window, and it is a bound the product cannot know: DeviceConfig
#: (``telephony/mms_service_network_request_timeout_millis``) changes it without a trace on
#: the phone's rows, and ``MmsRequest`` tries the HTTP post up to 3 times, acquiring the
#: network again each time. So an MMS row is never settled by time:
#: past the settle window plus this wait, still SENT, it goes to a person (``sent_as_mms``).
MMS_NETWORK_WAIT: Final = timedelta(minutes=30)


def on_framework_path(record: ActionRecord) -> bool:
    """Was the attempt sent through the framework (its rows are written by ``creator``)?"""
    return isinstance(record.evidence.get("creator"), str)


def sent_as_mms(record: ActionRecord, kind: ProviderKind | None) -> bool:
    """Is ``record``'s row (or the row found for it, of table ``kind``) an MMS on the
    messaging app's path? Its SENT is never proof by time (``MMS_NETWORK_WAIT``), and its
    FAILED never proof that nothing went out (MmsService posts it up to 3 times; a post whose
    answer was lost may have reached the carrier)."""
    return kind is ProviderKind.MMS and not on_framework_path(record)


def may_be_partly_sent(record: ActionRecord, kind: ProviderKind | None, segments: int) -> bool:
    """Can a FAILED row of ``record`` (of table ``kind``, for a body of ``segments`` SMS) hide
    a send that went out, whole or in part? On the messaging app's path: a text of several
    segments (Messaging keeps the worst result across the parts, ``SmsSender``'s
    ``setPartResult``, packages/apps/Messaging android-10.0.0_r30 to android-15.0.0_r1: a
    FAILED row can hide parts delivered before the one that failed), or one sent as MMS
    (``sent_as_mms``). The framework path refuses a text of several segments and writes its
    row only at the final result (``SMSDispatcher``, frameworks/opt/telephony 10 to 15)."""
    if on_framework_path(record):
        return False
    return segments > 1 or sent_as_mms(record, kind)


def settles_at(
    record: ActionRecord,
    seen_at: datetime,
    *,
    settle_after: timedelta,
    framework_settle_after: timedelta,
    row_date_ms: int | None = None,
    kind: ProviderKind | None = None,
) -> datetime:
    """When a SENT row first seen at ``seen_at`` has settled, so that it proves the send.

    The framework writes its row once the radio answered, and a failure only rewrites it a
    moment later: settled ``framework_settle_after`` after it was first seen. A messaging
    app's row is written SENT before anything is sent (AOSP Messaging's optimistic write)
    and may turn FAILED until ``settle_after`` after the later of the receipt and the row's
    own ``date`` (``row_date_ms``, the phone's clock: the app's resend window starts when it
    writes the row, which may be well after the dispatch); a row first seen later than that
    has settled already. The row's date is placed on our clock by the phone's clock read
    just before the send (``device_clock_ms``); without that reading, it is taken as is.
    Either way it is bounded by what is certain: a date before the dispatch never brings
    the settle time earlier, and the row was written by the time it was seen, so a phone's
    clock running ahead never puts its creation later than ``seen_at``.

    An MMS row of the app's path (``kind``, ``sent_as_mms``) waits ``MMS_NETWORK_WAIT`` more;
    it is never settled by time: what this returns is when a person is asked.
    """
    if on_framework_path(record):
        return seen_at + framework_settle_after
    if sent_as_mms(record, kind):
        settle_after += MMS_NETWORK_WAIT
    start = record.dispatched_at
    if row_date_ms is not None:
        if record.device_clock_ms is not None:
            written = record.dispatched_at + timedelta(
                milliseconds=row_date_ms - record.device_clock_ms
            )
        else:
            written = datetime.fromtimestamp(row_date_ms / 1000, tz=UTC)
        start = max(start, min(written, seen_at))
    return max(start + settle_after, seen_at)


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
