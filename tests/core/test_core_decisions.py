"""should_redispatch, reconcile, the intent fingerprint and the retry policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from starebrain_actions import (
    AcceptanceState,
    Action,
    ActionRecord,
    Artifact,
    ArtifactOutcome,
    DeliveryState,
    Event,
    InvalidInput,
    LookupResult,
    MatchVerdict,
    RedispatchReason,
    RetryPolicy,
    ReviewReason,
    SmsIntent,
    reconcile,
    should_redispatch,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
P, C, F = DeliveryState.PENDING, DeliveryState.CONFIRMED, DeliveryState.FAILED
AP, AA, AR = AcceptanceState.PENDING, AcceptanceState.ACCEPTED, AcceptanceState.REJECTED


def action(policy: RetryPolicy | None = None) -> Action:
    """An action created at NOW with the given policy."""
    intent = SmsIntent(recipient="+12025550100", body="Your code is 4821")
    return Action(
        action_id="A-17",
        fingerprint=intent.fingerprint,
        intent=intent,
        policy=policy or RetryPolicy(maximum_attempts=3, initial_interval=timedelta(0)),
        created_at=NOW,
    )


def attempt(
    number: int,
    delivery: DeliveryState = P,
    acceptance: AcceptanceState = AP,
    review: ReviewReason | None = None,
) -> ActionRecord:
    """Attempt ``number`` in the given states."""
    return ActionRecord(
        action_id="A-17",
        dispatch_id=f"d-{number}",
        attempt=number,
        device="dev",
        delivery=delivery,
        acceptance=acceptance,
        provider_object_id=800 + number if delivery is C else None,
        dispatched_at=NOW,
        confirmed_at=NOW if delivery is C else None,
        failed_at=NOW if delivery is F else None,
        accepted_at=NOW if acceptance is AA else None,
        rejected_at=NOW if acceptance is AR else None,
        review_reason=review,
    )


@pytest.mark.parametrize(
    ("latest", "expected", "reason"),
    [
        ((P, AP), False, RedispatchReason.IN_FLIGHT),
        ((F, AP), True, RedispatchReason.DELIVERY_FAILED),
        ((C, AR), True, RedispatchReason.ACCEPTANCE_REJECTED),
        ((C, AP), False, RedispatchReason.VERIFYING),
        ((C, AA), False, RedispatchReason.SUCCEEDED),
    ],
)
def test_should_redispatch_follows_the_design_rule(
    latest: tuple[DeliveryState, AcceptanceState], expected: bool, reason: RedispatchReason
) -> None:
    """PENDING: no; FAILED: yes; REJECTED: yes; anything else: no."""
    decision = should_redispatch(action(), [attempt(1, *latest)], NOW)
    assert expected == bool(decision)
    assert reason == decision.reason


def test_first_attempt_is_allowed() -> None:
    """An action with no attempt may be dispatched."""
    decision = should_redispatch(action(), [], NOW)
    assert decision.redispatch
    assert RedispatchReason.FIRST_ATTEMPT == decision.reason


def test_budget_stops_attempt_maximum_plus_one() -> None:
    """With maximum_attempts=2, two failed attempts leave no budget."""
    policy = RetryPolicy(maximum_attempts=2, initial_interval=timedelta(0))
    decision = should_redispatch(action(policy), [attempt(1, F), attempt(2, F)], NOW)
    assert not decision
    assert RedispatchReason.BUDGET_EXHAUSTED == decision.reason
    assert should_redispatch(action(policy), [attempt(1, F)], NOW)


def test_deadline_stops_retries() -> None:
    """After created_at + schedule_to_close, no new attempt starts."""
    policy = RetryPolicy(schedule_to_close=timedelta(minutes=5))
    late = NOW + timedelta(minutes=5)
    decision = should_redispatch(action(policy), [attempt(1, F)], late)
    assert RedispatchReason.DEADLINE_PASSED == decision.reason
    assert should_redispatch(action(policy), [attempt(1, F)], late - timedelta(seconds=1))


def test_review_blocks_retries_except_mismatch() -> None:
    """An attempt waiting for review (ambiguous, duplicate) blocks a retry; a mismatch does not."""
    blocked = should_redispatch(action(), [attempt(1, F, review=ReviewReason.AMBIGUOUS)], NOW)
    assert RedispatchReason.NEEDS_REVIEW == blocked.reason
    retried = should_redispatch(action(), [attempt(1, C, AR, review=ReviewReason.MISMATCH)], NOW)
    assert retried.redispatch


def test_backoff_delays_the_retry() -> None:
    """With an initial interval, a retry waits and the decision says until when."""
    policy = RetryPolicy(
        initial_interval=timedelta(seconds=10), backoff_coefficient=2.0, jitter=0.0
    )
    decision = should_redispatch(action(policy), [attempt(1, F)], NOW + timedelta(seconds=5))
    assert RedispatchReason.BACKOFF == decision.reason
    assert NOW + timedelta(seconds=10) == decision.retry_at
    assert should_redispatch(action(policy), [attempt(1, F)], NOW + timedelta(seconds=10))
    assert timedelta(seconds=20) == policy.interval_before(3)


def test_retries_back_off_by_default_with_a_jitter_every_process_agrees_on() -> None:
    """Issue 10, section 3: by default a retry waits 1 s, doubling up to 60 s, scaled by a
    jitter within 20%; the jitter is a hash of the attempt before, so two processes deciding
    about the same attempts compute the same wait, and two actions' waits differ."""
    policy = RetryPolicy()
    waits = [policy.interval_before(n, "d-1").total_seconds() for n in range(2, 12)]
    bases = [min(2.0 ** (n - 2), 60.0) for n in range(2, 12)]
    assert all(0.8 * base <= wait <= 1.2 * base for wait, base in zip(waits, bases, strict=True))
    assert waits == [policy.interval_before(n, "d-1").total_seconds() for n in range(2, 12)]
    assert policy.interval_before(2, "d-1") != policy.interval_before(2, "d-2")
    assert timedelta(seconds=1) == policy.interval_before(2)  # no seed, no jitter
    decision = should_redispatch(action(RetryPolicy()), [attempt(1, F)], NOW)
    assert RedispatchReason.BACKOFF == decision.reason
    assert decision.retry_at == NOW + policy.interval_before(2, "d-1")
    huge = RetryPolicy(initial_interval=timedelta(days=1), maximum_interval=None)
    assert huge.interval_before(10_000, "d-1") > timedelta(days=1)  # no overflow


@pytest.mark.parametrize("flag", ["unreachable", "fence_lost"])
def test_an_unreachable_phone_does_not_spend_the_budget(flag: str) -> None:
    """Issue 10, section 3: attempts that failed only because the phone could not be reached
    (nothing was written to it) do not count against the budget; they still back off. Nor
    (issue 33) do those whose fence claim failed because the phone's fence folder was
    cleared (nothing ran: ``fence_lost``)."""
    policy = RetryPolicy(maximum_attempts=1, initial_interval=timedelta(seconds=1), jitter=0.0)
    unreachable = [attrs.evolve(attempt(n, F), evidence={flag: True}) for n in range(1, 4)]
    later = NOW + timedelta(seconds=10)
    assert should_redispatch(action(policy), unreachable, later)
    soon = should_redispatch(action(policy), unreachable, NOW)
    assert RedispatchReason.BACKOFF == soon.reason
    assert NOW + timedelta(seconds=4) == soon.retry_at  # the fourth attempt: 1 s doubled twice
    spent = [*unreachable, attempt(4, F)]
    assert (
        RedispatchReason.BUDGET_EXHAUSTED == should_redispatch(action(policy), spent, later).reason
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"maximum_attempts": 0},
        {"jitter": 1.5},
        {"jitter": float("nan")},
        {"maximum_attempts": 1.5},
        {"backoff_coefficient": 0.5},
        {"grace_window": timedelta(seconds=-1)},
        {"schedule_to_close": timedelta(seconds=-1)},
    ],
)
def test_retry_policy_is_validated(kwargs: dict[str, object]) -> None:
    """A policy with nonsense values cannot be built."""
    with pytest.raises(InvalidInput):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def sent(verdict: MatchVerdict) -> LookupResult:
    """A complete lookup that found provider row 900 as SENT."""
    return LookupResult(
        complete=True,
        artifact=Artifact(provider_object_id=900, outcome=ArtifactOutcome.SENT, verdict=verdict),
    )


def test_reconcile_confirms_and_accepts_a_matching_artifact() -> None:
    """A found, matching message gives CONFIRMED then ACCEPTED, in that order."""
    transitions = reconcile(attempt(1), sent(MatchVerdict(matched=True)), NOW, grace_window=GRACE)
    assert [Event.CONFIRM, Event.ACCEPT] == [t.event for t in transitions]
    assert (C, AA) == (transitions[-1].after.delivery, transitions[-1].after.acceptance)
    assert transitions[0].after == transitions[1].before


def test_reconcile_rejects_a_mismatching_artifact() -> None:
    """A found message that does not match gives CONFIRMED then REJECTED."""
    transitions = reconcile(
        attempt(1), sent(MatchVerdict(matched=False, reason="body")), NOW, grace_window=GRACE
    )
    assert (C, AR) == (transitions[-1].after.delivery, transitions[-1].after.acceptance)


def test_reconcile_leaves_final_records_alone() -> None:
    """A record whose delivery is not PENDING is returned unchanged."""
    for record in (attempt(1, C, AA), attempt(1, F)):
        assert () == reconcile(record, sent(MatchVerdict(matched=True)), NOW, grace_window=GRACE)


def test_absence_never_fails_an_attempt() -> None:
    """A read without the message proves nothing, complete or not, however late: only a
    positive proof (a failed row, an error before the command left) turns PENDING into FAILED
    (DESIGN invariant 4)."""
    for lookup in (LookupResult(complete=True), LookupResult(complete=False)):
        for when in (NOW, NOW + GRACE, NOW + timedelta(days=30)):
            assert () == reconcile(attempt(1), lookup, when, grace_window=GRACE)


def test_provider_failure_and_queued_rows() -> None:
    """A type-5 row proves FAILED; a queued row proves nothing until past the grace window."""
    failed_row = LookupResult(
        complete=True,
        artifact=Artifact(provider_object_id=5, outcome=ArtifactOutcome.FAILED),
    )
    (failed,) = reconcile(attempt(1), failed_row, NOW, grace_window=GRACE)
    assert F == failed.after.delivery
    queued = LookupResult(
        complete=True, artifact=Artifact(provider_object_id=5, outcome=ArtifactOutcome.QUEUED)
    )
    assert () == reconcile(attempt(1), queued, NOW, grace_window=GRACE)
    (stuck,) = reconcile(attempt(1), queued, NOW + GRACE, grace_window=GRACE)
    assert (P, ReviewReason.STUCK) == (stuck.after.delivery, stuck.after.review_reason)


def test_ambiguous_attribution_goes_to_review_not_failure() -> None:
    """Ambiguity flags review once and never fails the attempt."""
    ambiguous = LookupResult(complete=True, ambiguous=True)
    (flagged,) = reconcile(attempt(1), ambiguous, NOW + GRACE, grace_window=GRACE)
    assert (P, ReviewReason.AMBIGUOUS) == (flagged.after.delivery, flagged.after.review_reason)
    assert () == reconcile(flagged.after, ambiguous, NOW + GRACE, grace_window=GRACE)


def test_a_sent_artifact_without_verdict_is_refused() -> None:
    """reconcile cannot judge a SENT artifact without a match verdict."""
    lookup = LookupResult(
        complete=True, artifact=Artifact(provider_object_id=1, outcome=ArtifactOutcome.SENT)
    )
    with pytest.raises(InvalidInput):
        reconcile(attempt(1), lookup, NOW, grace_window=GRACE)


def test_fingerprint_is_stable_and_canonical() -> None:
    """Equivalent intents share a fingerprint; a different body or recipient does not."""
    base = SmsIntent(recipient="+1 202 555 0100", body="Hi\r\nthere")
    assert base.fingerprint == SmsIntent(recipient="+12025550100", body="Hi\nthere").fingerprint
    assert base.fingerprint == SmsIntent(recipient="001 202 555 0100", body="Hi\rthere").fingerprint
    assert (
        SmsIntent(recipient="(202) 555-0143", body="x", region="US").fingerprint
        == SmsIntent(recipient="+1 202 555 0143", body="x").fingerprint
    )
    composed = SmsIntent(recipient="+12025550100", body="caf\u00e9").fingerprint
    assert composed == SmsIntent(recipient="+12025550100", body="cafe\u0301").fingerprint
    assert base.fingerprint != SmsIntent(recipient="+12025550101", body="Hi\nthere").fingerprint
    assert base.fingerprint != SmsIntent(recipient="+12025550100", body="Hi there").fingerprint
    assert base.fingerprint.startswith("sha256:")
    assert 71 == len(base.fingerprint)


def test_fingerprint_golden_value() -> None:
    """The fingerprint of a fixed intent never changes between releases (the recipient is a
    valid number: +1 555 0100, without an area code, is refused since recipients are checked)."""
    intent = SmsIntent(recipient="+1 202 555 0100", body="Your code is 4821")
    assert {
        "kind": "sms",
        "recipient": "+12025550100",
        "body": "Your code is 4821",
        "extras": {},
    } == (intent.canonical())
    assert (
        "sha256:6a9a04e8ba9de58c5247701a7475c75f71b6442749ab92658d4137b3d549d4e7"
        == intent.fingerprint
    )


def test_short_codes_fingerprint_as_digits() -> None:
    """A short code is kept as its digits."""
    assert "12345" == SmsIntent(recipient="12345", body="STOP").canonical()["recipient"]


@pytest.mark.parametrize(
    ("recipient", "body", "extras", "match"),
    [
        ("", "x", {}, "recipient"),
        ("   ", "x", {}, "recipient"),
        ("abc", "x", {}, "digits"),
        ("+12025550100", "", {}, "body"),
        ("+12025550100", "  \n", {}, "body"),
        ("+12025550100", "x", {"api_key": "s3cret"}, "allowlisted"),
    ],
)
def test_bad_intents_are_refused(
    recipient: str, body: str, extras: dict[str, str], match: str
) -> None:
    """Empty recipient or body, and non-allowlisted extras, raise InvalidInput."""
    with pytest.raises(InvalidInput, match=match):
        SmsIntent(recipient=recipient, body=body, extras=extras)


def test_allowlisted_extras_enter_the_fingerprint() -> None:
    """An allowlisted extra changes the fingerprint."""
    plain = SmsIntent(recipient="+12025550100", body="x")
    tagged = attrs.evolve(plain, extras={"campaign": "spring"})
    assert plain.fingerprint != tagged.fingerprint


def _rejected(number: int, **evidence: object) -> ActionRecord:
    return attrs.evolve(
        attempt(number, C, AR, ReviewReason.MISMATCH),
        evidence={"matched": False, "recipient_ok": True, "body_ok": False, **evidence},
    )


def test_the_same_mismatch_twice_stops_the_retries() -> None:
    """Two attempts rejected in the same way (the app alters every text alike): no third
    copy, whatever budget is left."""
    same = [_rejected(1, reason="body_mismatch"), _rejected(2, reason="body_mismatch")]
    decision = should_redispatch(action(RetryPolicy(maximum_attempts=5)), same, NOW)
    assert (False, RedispatchReason.REPEATED_MISMATCH) == (decision.redispatch, decision.reason)


def test_a_different_mismatch_is_retried() -> None:
    """A second rejection that differs from the first (a one-off fault) still earns a retry."""
    differ = [
        _rejected(1, reason="body_mismatch"),
        attrs.evolve(
            _rejected(2, reason="recipient_mismatch"),
            evidence={"matched": False, "recipient_ok": False, "body_ok": True},
        ),
    ]
    decision = should_redispatch(
        action(RetryPolicy(maximum_attempts=5, initial_interval=timedelta(0))), differ, NOW
    )
    assert (True, RedispatchReason.ACCEPTANCE_REJECTED) == (decision.redispatch, decision.reason)
