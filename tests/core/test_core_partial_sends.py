"""Issue 33, items 1 and 2: a row of the messaging app's path that may hide a send is never
read as "nothing went out", and an MMS is never proven by time (pure; no I/O).

AOSP Messaging keeps the worst result across the parts of a long text (``SmsSender``'s
``setPartResult``), so its FAILED row can hide parts that were delivered; MmsService posts an
MMS up to 3 times after waiting up to 30 minutes (DeviceConfig may change it) for its
network, so neither its SENT nor its FAILED settles by a time the product can know.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from starebrain_actions import (
    AcceptanceState,
    Action,
    ActionRecord,
    Artifact,
    ArtifactOutcome,
    DeliveryState,
    Event,
    LookupResult,
    ProviderKind,
    RedispatchReason,
    RetryPolicy,
    ReviewReason,
    SmsIntent,
    reconcile,
    should_redispatch,
)
from starebrain_actions.core.convert import structure, to_jsonable
from starebrain_actions.core.decisions import (
    MMS_NETWORK_WAIT,
    failed_after_sent,
    may_be_partly_sent,
    settle_time,
)
from starebrain_actions.core.proof import settle
from starebrain_actions.core.segments import body_segments
from starebrain_actions.orchestration.attribution import plan_device
from starebrain_actions.orchestration.watched import Watched

from .test_core_settling import (
    ACTION,
    CLOCK,
    FRAMEWORK,
    MATCH,
    NOW,
    POLICY,
    attempt,
    message,
    read,
)

LONG = "Your appointment is confirmed. " * 7  # 210 GSM-7 septets: 2 segments
LONG_INTENT = SmsIntent(recipient="+12025550100", body=LONG)
LONG_ACTION = Action(
    action_id="A-17",
    fingerprint=LONG_INTENT.fingerprint,
    intent=LONG_INTENT,
    policy=POLICY,
    created_at=NOW,
)


def failed_row(kind: ProviderKind = ProviderKind.SMS) -> LookupResult:
    return LookupResult(
        complete=True,
        artifact=Artifact(
            provider_object_id=11,
            kind=kind,
            outcome=ArtifactOutcome.FAILED,
            row_date_ms=CLOCK + 100,
            evidence={"date_ms": CLOCK + 100},
        ),
    )


def confirmed(
    kind: ProviderKind = ProviderKind.SMS, evidence: dict[str, object] | None = None
) -> ActionRecord:
    """The attempt as ``reconcile`` left it when it first saw its SENT row a second later."""
    [confirm] = reconcile(
        attempt(evidence),
        LookupResult(
            complete=True,
            artifact=Artifact(
                provider_object_id=11,
                kind=kind,
                outcome=ArtifactOutcome.SENT,
                verdict=MATCH,
                row_date_ms=CLOCK + 100,
            ),
        ),
        NOW + timedelta(seconds=1),
        grace_window=POLICY.grace_window,
        settle_after=POLICY.settle_after,
        framework_settle_after=POLICY.framework_settle_after,
    )
    assert Event.CONFIRM == confirm.event
    return confirm.after


def test_the_long_text_is_two_segments() -> None:
    assert (2, 1) == (body_segments(LONG), body_segments("Your code is 4821"))


@pytest.mark.parametrize("segments", [2, 5])
def test_a_long_text_whose_confirmed_row_turns_failed_goes_to_a_person(segments: int) -> None:
    """Item 1: a VERIFYING text of several segments whose row turns FAILED, even a minute
    after the send (within the app's 5-minute timeout, where a one-segment SMS is resent):
    review (UNSETTLED) with why, never REJECTED as "nothing went out", never resent."""
    record = confirmed()
    [flag] = settle(
        record,
        ArtifactOutcome.FAILED,
        MATCH,
        NOW + timedelta(minutes=1),
        complete=True,
        segments=segments,
    )
    assert (Event.FLAG_REVIEW, ReviewReason.UNSETTLED) == (flag.event, flag.after.review_reason)
    assert f"{segments} SMS segments" in flag.after.evidence["why"]
    assert "delivered" in flag.after.evidence["why"]
    assert not failed_after_sent(flag.after)
    later = NOW + timedelta(hours=1)
    decision = should_redispatch(LONG_ACTION, [flag.after], later)
    assert RedispatchReason.NEEDS_REVIEW == decision.reason


def test_a_one_segment_sms_keeps_today_s_rule() -> None:
    """One segment, FAILED within the app's timeout: the radio's verdict, REJECTED, resent."""
    [reject] = settle(
        confirmed(), ArtifactOutcome.FAILED, MATCH, NOW + timedelta(minutes=1), complete=True
    )
    assert Event.REJECT == reject.event and failed_after_sent(reject.after)


def test_the_framework_path_keeps_its_rule_whatever_the_length() -> None:
    """The framework writes its row at the final result (and refuses a text of several
    segments): its FAILED is the radio's verdict."""
    record = confirmed(evidence=FRAMEWORK)
    assert not may_be_partly_sent(record, ProviderKind.SMS, 3)
    [reject] = settle(
        record, ArtifactOutcome.FAILED, MATCH, NOW + timedelta(minutes=1), complete=True, segments=3
    )
    assert Event.REJECT == reject.event


def test_a_long_text_first_seen_failed_is_confirmed_for_review_not_failed() -> None:
    """An unresolved attempt whose first read finds its long text's row FAILED: confirmed as
    that row (no other attempt may claim it), and in review: never FAILED, never resent. A
    one-segment SMS, seen the same way: FAILED, as before."""
    confirm, flag = reconcile(
        attempt(),
        failed_row(),
        NOW + timedelta(seconds=5),
        grace_window=POLICY.grace_window,
        segments=2,
    )
    assert (Event.CONFIRM, Event.FLAG_REVIEW) == (confirm.event, flag.event)
    after = flag.after
    assert (DeliveryState.CONFIRMED, AcceptanceState.PENDING, 11, CLOCK + 100) == (
        after.delivery,
        after.acceptance,
        after.provider_object_id,
        after.provider_row_date_ms,
    )
    assert ReviewReason.UNSETTLED == after.review_reason
    [failed] = reconcile(
        attempt(), failed_row(), NOW + timedelta(seconds=5), grace_window=POLICY.grace_window
    )
    assert DeliveryState.FAILED == failed.after.delivery


def test_a_one_segment_row_first_seen_failed_after_the_app_s_timeout_proves_nothing() -> None:
    """Item 5's late FAILED: a first read (after an outage, say) past the app's own send
    timeout finds the row FAILED: the app may have given up while the radio sent it, so the
    attempt goes to review, not FAILED. The timeout is the action's policy
    (``app_send_timeout``, 5 minutes by default)."""
    assert timedelta(minutes=5) == RetryPolicy().app_send_timeout
    at = NOW + timedelta(minutes=6)
    _, flag = reconcile(attempt(), failed_row(), at, grace_window=POLICY.grace_window)
    assert ReviewReason.UNSETTLED == flag.after.review_reason
    assert "timeout" in flag.after.evidence["why"]
    [failed] = reconcile(
        attempt(),
        failed_row(),
        at,
        grace_window=POLICY.grace_window,
        app_send_timeout=timedelta(minutes=10),
    )
    assert DeliveryState.FAILED == failed.after.delivery


def test_an_mms_row_settles_no_sooner_than_the_network_wait_and_then_goes_to_a_person() -> None:
    """Item 2: an MMS row's settle time counts MmsService's 30-minute network wait on top of
    the SMS window (``settles_at`` shows it); once passed, still SENT, it is never judged
    SUCCEEDED by time: review (UNSETTLED), with why."""
    assert timedelta(minutes=30) == MMS_NETWORK_WAIT
    record = confirmed(ProviderKind.MMS)
    due = settle_time(record)
    assert NOW + POLICY.settle_after + MMS_NETWORK_WAIT + timedelta(milliseconds=100) == due
    early = due - timedelta(seconds=1)
    assert () == settle(record, ArtifactOutcome.SENT, MATCH, early, complete=True)
    [flag] = settle(record, ArtifactOutcome.SENT, MATCH, due, complete=True)
    assert (Event.FLAG_REVIEW, ReviewReason.UNSETTLED) == (flag.event, flag.after.review_reason)
    assert "MMS" in flag.after.evidence["why"]
    assert AcceptanceState.PENDING == flag.after.acceptance


def test_an_mms_row_first_seen_past_its_settle_time_goes_to_a_person() -> None:
    """Seen late (an outage), still SENT: confirmed, then review; never ACCEPTED at once as
    an SMS row would be."""
    late = NOW + POLICY.settle_after + MMS_NETWORK_WAIT + timedelta(minutes=1)
    artifact = Artifact(
        provider_object_id=11,
        kind=ProviderKind.MMS,
        outcome=ArtifactOutcome.SENT,
        verdict=MATCH,
        row_date_ms=CLOCK + 100,
    )
    transitions = reconcile(
        attempt(),
        LookupResult(complete=True, artifact=artifact),
        late,
        grace_window=POLICY.grace_window,
        settle_after=POLICY.settle_after,
        framework_settle_after=POLICY.framework_settle_after,
    )
    assert [Event.CONFIRM, Event.FLAG_REVIEW] == [t.event for t in transitions]
    assert ReviewReason.UNSETTLED == transitions[-1].after.review_reason


def test_an_mms_row_turned_failed_is_never_read_as_nothing_sent() -> None:
    """An MMS row that turns FAILED, at any time: review, never REJECTED and resent."""
    [flag] = settle(
        confirmed(ProviderKind.MMS),
        ArtifactOutcome.FAILED,
        MATCH,
        NOW + timedelta(minutes=1),
        complete=True,
    )
    assert ReviewReason.UNSETTLED == flag.after.review_reason and "MMS" in flag.evidence["why"]


def test_plan_device_counts_the_segments_of_the_action_s_own_body() -> None:
    """The pass hands ``settle`` the segments of the watched action's body: a long text's
    confirmed row turned FAILED goes to review, a short one's is REJECTED."""
    record = confirmed()
    failed = message(11, CLOCK + 100, ArtifactOutcome.FAILED)
    outcomes = {}
    for action in (LONG_ACTION, ACTION):
        plan = plan_device(
            [Watched(record=record, action=action, floor_id=10)],
            read(failed),
            {(11, CLOCK + 100)},
            lambda row, intent: MATCH,
            NOW + timedelta(minutes=1),
        )
        outcomes[action is LONG_ACTION] = [t.event for t in plan.transitions]
    assert {True: [Event.FLAG_REVIEW], False: [Event.REJECT]} == outcomes


def test_a_policy_of_before_issue_33_reads_with_the_default_timeout() -> None:
    """A stored policy without ``app_send_timeout`` (written before it existed) reads with
    the default."""
    data = to_jsonable(RetryPolicy())
    del data["app_send_timeout"]
    assert RetryPolicy() == structure(data, RetryPolicy, "policy")
