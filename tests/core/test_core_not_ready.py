"""An action whose tries found the phone not ready (or not answering) sent nothing: it reads
PLANNED while it may be tried again (``waiting_for_phone``), its first real send is the first
attempt that spent the budget (``first_sent``), and such tries are no earlier message."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from starebrain_actions import ActionRecord, RetryPolicy, Status
from starebrain_actions.core.decisions import (
    NOT_READY_FALLBACK,
    first_sent,
    not_ready_remedy,
    unsent_why,
    waiting_for_phone,
)
from starebrain_actions.core.derived_ids import earlier_message
from starebrain_actions.ledger.read import summarize

from .test_core_decisions import AR, NOW, C, F, action, attempt

LOCKED = {
    "not_ready": "keyguard_showing",
    "remedy": "unlock the phone and keep its screen unlocked while it sends",
    "error": "the keyguard is showing (the screen is locked); no key was pressed",
}


def failed(number: int, **evidence: object) -> ActionRecord:
    """Attempt ``number``, FAILED, with this evidence."""
    return attrs.evolve(attempt(number, F), evidence=evidence)


@pytest.mark.parametrize(
    ("evidence", "why"),
    [
        (LOCKED, "not_ready"),
        ({"unreachable": True, "error": "could not connect"}, "unreachable"),
        ({"fence_lost": True}, "fence_lost"),
        ({"error": "am start failed"}, None),
        ({"not_ready": ""}, None),
    ],
)
def test_what_sent_nothing_is_told_apart(evidence: dict[str, object], why: str | None) -> None:
    """A FAILED attempt that spent nothing says why (not ready, unreachable, fence lost); one
    that spent the budget, or an empty not-ready mark, is no such try."""
    record = failed(1, **evidence)
    assert why == unsent_why(record)
    assert (record if why is not None else None) == waiting_for_phone(action(), [record], NOW)


def test_an_unfailed_attempt_is_no_unsent_try() -> None:
    """A pending or confirmed attempt is not a try that sent nothing, whatever its evidence."""
    for delivery in (attempt(1).delivery, C):
        record = attrs.evolve(attempt(1, delivery), evidence=LOCKED)
        assert (None, None) == (unsent_why(record), not_ready_remedy(record))


def test_the_remedy_is_the_one_the_send_kept() -> None:
    """The remedy is the bridge's words kept in the evidence; a mark without one falls back."""
    assert LOCKED["remedy"] == not_ready_remedy(failed(1, **LOCKED))
    assert NOT_READY_FALLBACK == not_ready_remedy(failed(1, not_ready="screen_off"))


def test_a_locked_phone_leaves_the_action_planned_with_no_attempt_spent() -> None:
    """Three tries refused by the keyguard: PLANNED, nobody needs to look, no real send."""
    tries = [failed(n, **LOCKED) for n in (1, 2, 3)]
    summary = summarize(action(), tries, NOW)
    assert (Status.PLANNED, ()) == (summary.status, summary.review_reasons)
    assert None is first_sent(tries)


def test_a_real_failure_after_a_locked_try_reads_failed() -> None:
    """A try the phone refused, then an attempt that spent the budget and failed: FAILED (the
    latest attempt decides), and the first real send is that attempt."""
    attempts = [failed(1, **LOCKED), failed(2, error="the phone marked it failed")]
    assert Status.FAILED == summarize(action(), attempts, NOW).status
    assert attempts[1] == first_sent(attempts)


def test_a_locked_try_after_a_real_failure_waits_for_the_phone() -> None:
    """An attempt that failed for real, then a try the phone refused: the action may still be
    sent (2 of 3 attempts left) and waits for the phone: PLANNED."""
    attempts = [failed(1, error="the phone marked it failed"), failed(2, **LOCKED)]
    assert Status.PLANNED == summarize(action(), attempts, NOW).status


def test_a_backoff_still_waits_for_the_phone() -> None:
    """The next try waits for its backoff: still PLANNED (the phone is waited for)."""
    policy = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(minutes=5))
    tries = [failed(1, **LOCKED)]
    assert tries[0] == waiting_for_phone(action(policy), tries, NOW)
    assert Status.PLANNED == summarize(action(policy), tries, NOW).status


def test_a_passed_deadline_does_not_wait_for_the_phone() -> None:
    """Past the policy's deadline no attempt may start: the action does not wait for the
    phone any more (it stays for a person: FAILED with BUDGET_EXHAUSTED)."""
    policy = RetryPolicy(maximum_attempts=3, schedule_to_close=timedelta(minutes=1))
    tries = [failed(1, **LOCKED)]
    later = NOW + timedelta(minutes=2)
    assert None is waiting_for_phone(action(policy), tries, later)
    summary = summarize(action(policy), tries, later)
    assert Status.PLANNED is not summary.status
    assert summary.needs_review


def test_a_denied_action_stays_denied() -> None:
    """A DENY is final: a refused try does not make a denied action PLANNED."""
    denied = attrs.evolve(action(), approval="DENIED")
    assert Status.DENIED == summarize(denied, [failed(1, **LOCKED)], NOW).status


def test_tries_that_sent_nothing_are_no_earlier_message() -> None:
    """A rerun that adds no attempt answers about an earlier message only when one could have
    gone out: tries the phone refused before anything was sent are none."""
    refused = summarize(action(), [failed(1, **LOCKED)], NOW)
    assert not earlier_message(refused, refused)
    spent = summarize(action(), [failed(1, **LOCKED), failed(2, error="radio")], NOW)
    assert earlier_message(spent, spent)


def test_a_locked_try_after_a_wrong_text_went_out_is_not_planned() -> None:
    """A wrong text went out (a MISMATCH), then a try the phone refused: something was sent,
    so the action does not read PLANNED; a row the phone showed sent and then marked failed
    sent nothing, and the action waits for the phone."""
    wrong = attrs.evolve(attempt(1, C, AR), evidence={"reason": "body_mismatch"})
    attempts = [wrong, failed(2, **LOCKED)]
    assert None is waiting_for_phone(action(), attempts, NOW)
    assert Status.PLANNED is not summarize(action(), attempts, NOW).status
    marked = attrs.evolve(attempt(1, C, AR), evidence={"failed_after_sent": True})
    attempts = [marked, failed(2, **LOCKED)]
    assert Status.PLANNED == summarize(action(), attempts, NOW).status
