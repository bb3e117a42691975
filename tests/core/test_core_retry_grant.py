"""An operator's grant of new attempts (``grant_retry``), and attempts a phone that was not
ready for them did not spend (``spends_budget``)."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from starebrain_actions import (
    ActionRecord,
    InvalidInput,
    RedispatchReason,
    RetryPolicy,
    ReviewReason,
    should_redispatch,
)
from starebrain_actions.core.decisions import grant_retry, not_ready, spends_budget
from starebrain_actions.core.exceptions import RetryRefused

from .test_core_decisions import AA, AP, AR, NOW, C, F, P, action, attempt


def failed(number: int, **evidence: object) -> ActionRecord:
    """Attempt ``number``, FAILED, with this evidence."""
    return attrs.evolve(attempt(number, F), evidence=evidence)


def test_a_locked_phone_spends_no_attempt() -> None:
    """Three attempts refused by the keyguard leave the whole budget: a fourth may start."""
    attempts = [failed(n, not_ready="keyguard_showing") for n in (1, 2, 3)]
    assert [False, False, False] == [spends_budget(record) for record in attempts]
    assert "keyguard_showing" == not_ready(attempts[0])
    decision = should_redispatch(action(), attempts, NOW)
    assert (True, RedispatchReason.DELIVERY_FAILED) == (decision.redispatch, decision.reason)


def test_a_refused_send_still_spends_its_attempt() -> None:
    """A FAILED attempt without the not-ready mark spends the budget, as before."""
    attempts = [failed(n, error="am start failed") for n in (1, 2, 3)]
    assert [True, True, True] == [spends_budget(record) for record in attempts]
    assert None is not_ready(attempts[0])
    assert RedispatchReason.BUDGET_EXHAUSTED == should_redispatch(action(), attempts, NOW).reason


def test_a_grant_gives_an_exhausted_action_new_attempts() -> None:
    """After a grant of 2, two more attempts may start, then the budget is spent again; the
    attempts before it stay as they were."""
    attempts = [failed(n) for n in (1, 2, 3)]
    granted = grant_retry(action(), attempts, granted=2, now=NOW, by="bo", reason="unlocked")
    assert granted.grant is not None
    assert (3, 2, "bo", "unlocked") == (
        granted.grant.after_attempt,
        granted.grant.attempts,
        granted.grant.granted_by,
        granted.grant.reason,
    )
    assert should_redispatch(granted, attempts, NOW).redispatch
    assert should_redispatch(granted, [*attempts, failed(4)], NOW).redispatch
    spent = should_redispatch(granted, [*attempts, failed(4), failed(5)], NOW)
    assert RedispatchReason.BUDGET_EXHAUSTED == spent.reason


def test_a_grant_lifts_a_repeated_mismatch_and_the_backoff() -> None:
    """Two identical mismatches refuse a third copy; a grant allows it at once (no backoff
    counts from before the grant), and two more identical ones after it refuse again."""
    slow = action(RetryPolicy(maximum_attempts=5, initial_interval=timedelta(hours=1)))
    rejected = [
        attrs.evolve(attempt(n, C, AR), evidence={"reason": "body", "body_ok": False})
        for n in (1, 2)
    ]
    assert RedispatchReason.REPEATED_MISMATCH == should_redispatch(slow, rejected, NOW).reason
    granted = grant_retry(slow, rejected, granted=3, now=NOW, by="bo", reason="app fixed")
    assert should_redispatch(granted, rejected, NOW).redispatch
    again = [
        *rejected,
        *(
            attrs.evolve(attempt(n, C, AR), evidence={"reason": "body", "body_ok": False})
            for n in (3, 4)
        ),
    ]
    assert RedispatchReason.REPEATED_MISMATCH == should_redispatch(granted, again, NOW).reason


def test_a_grant_restarts_the_deadline() -> None:
    """A deadline counted from the action's creation is counted from the grant after it."""
    policy = RetryPolicy(maximum_attempts=3, schedule_to_close=timedelta(minutes=5))
    later = NOW + timedelta(minutes=10)
    attempts = [failed(1)]
    assert (
        RedispatchReason.DEADLINE_PASSED
        == should_redispatch(action(policy), attempts, later).reason
    )
    granted = grant_retry(action(policy), attempts, granted=1, now=later, by="bo", reason="ok")
    assert should_redispatch(granted, attempts, later + timedelta(minutes=4)).redispatch
    assert (
        RedispatchReason.DEADLINE_PASSED
        == should_redispatch(granted, attempts, later + timedelta(minutes=5)).reason
    )


@pytest.mark.parametrize(
    ("attempts", "refused"),
    [
        ([attempt(1, P)], "unresolved"),
        ([attempt(1, C, AP)], "unresolved"),
        ([attempt(1, P, review=ReviewReason.UNVERIFIED)], "unresolved"),
        ([attempt(1, F, review=ReviewReason.DUPLICATE)], "review"),
        ([attempt(1, C, AA)], "SUCCEEDED"),
        ([attempt(1, F)], "may be retried already"),
        ([], "may be retried already"),
    ],
)
def test_a_grant_is_refused_unless_a_person_must_lift_a_refusal(
    attempts: list[ActionRecord], refused: str
) -> None:
    """An unresolved attempt (a new one could send twice), one in review, a success, or an
    action that may go on by itself: no grant."""
    with pytest.raises(RetryRefused, match=refused):
        grant_retry(action(), attempts, granted=1, now=NOW, by="bo", reason="why")


@pytest.mark.parametrize(
    ("granted", "by", "reason"), [(0, "bo", "x"), (1, " ", "x"), (1, "bo", "")]
)
def test_a_grant_needs_attempts_an_operator_and_a_reason(
    granted: int, by: str, reason: str
) -> None:
    """At least one attempt, and who and why, or nothing is granted."""
    attempts = [failed(n) for n in (1, 2, 3)]
    with pytest.raises(InvalidInput):
        grant_retry(action(), attempts, granted=granted, now=NOW, by=by, reason=reason)
