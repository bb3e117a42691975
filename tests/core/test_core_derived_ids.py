"""Derived action ids (issue 21, item 8): when a send without an action id may resume an
action, which generation of the derived id it uses, and when an answer is the earlier message.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from starebrain_actions import (
    AcceptanceState,
    Action,
    ActionRecord,
    ActionSummary,
    DeliveryState,
    InvalidInput,
    RetryPolicy,
    ReviewReason,
    SmsIntent,
    summarize,
)
from starebrain_actions.core.derived_ids import (
    DERIVED_ID_WINDOW,
    choose_derived_generation,
    derived_generation,
    derived_generation_id,
    derived_id_resumable,
    earlier_message,
)
from starebrain_actions.core.transitions import LEGAL_STATES

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)
P, C, F = DeliveryState.PENDING, DeliveryState.CONFIRMED, DeliveryState.FAILED
AP, AA, AR = AcceptanceState.PENDING, AcceptanceState.ACCEPTED, AcceptanceState.REJECTED
FINAL = [(F, AP), (C, AA), (C, AR)]
UNSETTLED = [(P, AP), (C, AP)]
INTENT = SmsIntent(recipient="+12025550100", body="Meeting at 5")
OTHER = SmsIntent(recipient="+12025550100", body="Meeting at 6")
BASE = "sms-0123456789abcdef"


def action(created: datetime, action_id: str = BASE, intent: SmsIntent = INTENT) -> Action:
    """An action holding ``intent``, created at ``created``."""
    return Action(
        action_id=action_id,
        fingerprint=intent.fingerprint,
        intent=intent,
        policy=RetryPolicy(),
        created_at=created,
    )


def attempt(
    number: int,
    states: tuple[DeliveryState, AcceptanceState],
    dispatched: datetime,
    action_id: str = BASE,
    review: ReviewReason | None = None,
) -> ActionRecord:
    """Attempt ``number`` of ``action_id`` in ``states``, dispatched at ``dispatched``."""
    delivery, acceptance = states
    return ActionRecord(
        action_id=action_id,
        dispatch_id=f"{action_id}/d-{number}",
        attempt=number,
        device="dev",
        delivery=delivery,
        acceptance=acceptance,
        provider_object_id=800 + number if delivery is C else None,
        dispatched_at=dispatched,
        confirmed_at=dispatched if delivery is C else None,
        failed_at=dispatched if delivery is F else None,
        accepted_at=dispatched if acceptance is AA else None,
        rejected_at=dispatched if acceptance is AR else None,
        review_reason=review,
    )


def summary_of(
    created: datetime,
    *attempts: tuple[tuple[DeliveryState, AcceptanceState], datetime],
    action_id: str = BASE,
    intent: SmsIntent = INTENT,
) -> ActionSummary:
    """The summary of an action created at ``created`` with these attempts."""
    records = [
        attempt(number, states, at, action_id)
        for number, (states, at) in enumerate(attempts, start=1)
    ]
    return summarize(action(created, action_id, intent), records, NOW)


# --------------------------------------------------------------------------- resumable


def test_the_default_window_is_a_day() -> None:
    """A derived id answers for 24 hours by default, as Stripe keeps an idempotency key."""
    assert DAY == DERIVED_ID_WINDOW


def test_every_state_pair_is_covered() -> None:
    """The final and unsettled pairs below are exactly the legal (delivery, acceptance)
    pairs, so the tests over them cover every state."""
    assert set(FINAL) | set(UNSETTLED) == LEGAL_STATES
    assert not set(FINAL) & set(UNSETTLED)


@pytest.mark.parametrize("age", [timedelta(0), DAY - timedelta(seconds=1), DAY, 400 * DAY])
def test_an_action_with_no_attempt_is_always_resumed(age: timedelta) -> None:
    """PLANNED (nothing was ever handed to the phone) is resumed however old it is."""
    assert derived_id_resumable(summary_of(NOW - age), NOW, DAY)


@pytest.mark.parametrize("states", UNSETTLED)
@pytest.mark.parametrize("age", [timedelta(0), DAY, 400 * DAY])
def test_an_unsettled_attempt_is_always_resumed(
    states: tuple[DeliveryState, AcceptanceState], age: timedelta
) -> None:
    """Delivery PENDING, or CONFIRMED with acceptance PENDING: the outcome is not proven, so
    the action is resumed however old (a new action could be a second SMS)."""
    then = NOW - age
    assert derived_id_resumable(summary_of(then, (states, then)), NOW, DAY)


@pytest.mark.parametrize("states", FINAL)
def test_a_final_attempt_is_resumed_only_inside_the_window(
    states: tuple[DeliveryState, AcceptanceState],
) -> None:
    """FAILED, ACCEPTED or REJECTED: resumed until the window has passed since the dispatch,
    not from the moment it has (the end is excluded)."""
    for age, resumable in [
        (timedelta(0), True),
        (DAY - timedelta(microseconds=1), True),
        (DAY, False),
        (400 * DAY, False),
    ]:
        then = NOW - age
        assert resumable == derived_id_resumable(summary_of(then, (states, then)), NOW, DAY), age


@pytest.mark.parametrize(
    ("earlier", "later"), list(itertools.product(FINAL + UNSETTLED, FINAL + UNSETTLED))
)
def test_two_attempts_expire_only_when_both_are_final(
    earlier: tuple[DeliveryState, AcceptanceState], later: tuple[DeliveryState, AcceptanceState]
) -> None:
    """With two old attempts, the action expires exactly when every attempt is final; an
    unsettled attempt anywhere keeps it (an earlier one included)."""
    old = NOW - 3 * DAY
    summary = summary_of(old, (earlier, old), (later, old + timedelta(hours=1)))
    assert (earlier in UNSETTLED or later in UNSETTLED) == derived_id_resumable(summary, NOW, DAY)


def test_the_window_runs_from_the_latest_dispatch() -> None:
    """An old action whose latest attempt was dispatched an hour ago is still resumed: the
    window counts from that dispatch, not from the action's creation or its first attempt."""
    created = NOW - 5 * DAY
    summary = summary_of(created, ((F, AP), created), ((C, AA), NOW - timedelta(hours=1)))
    assert derived_id_resumable(summary, NOW, DAY)
    assert not derived_id_resumable(summary, NOW + DAY, DAY)


def test_the_window_runs_from_the_creation_when_it_is_later() -> None:
    """An attempt stamped before its action's creation (another host's clock) counts from the
    creation, the later of the two."""
    created = NOW - timedelta(hours=1)
    summary = summary_of(created, ((C, AA), NOW - 2 * DAY))
    assert derived_id_resumable(summary, NOW, DAY)
    assert not derived_id_resumable(summary, created + DAY, DAY)


def test_review_on_a_final_attempt_does_not_keep_it() -> None:
    """A final attempt in review (DUPLICATE: sent twice, both seen) has a known outcome: past
    the window the same text is a new action, and the review stays where it is."""
    old = NOW - 2 * DAY
    record = attempt(1, (C, AA), old, review=ReviewReason.DUPLICATE)
    summary = summarize(action(old), [record], NOW)
    assert summary.needs_review
    assert not derived_id_resumable(summary, NOW, DAY)


def test_a_zero_window_resumes_only_unsettled_actions() -> None:
    """With a window of 0, a settled action is never resumed, an unsettled one still is."""
    assert not derived_id_resumable(summary_of(NOW, ((C, AA), NOW)), NOW, timedelta(0))
    assert derived_id_resumable(summary_of(NOW, ((P, AP), NOW)), NOW, timedelta(0))
    assert derived_id_resumable(summary_of(NOW), NOW, timedelta(0))


def test_a_negative_window_or_a_naive_time_is_refused() -> None:
    """A negative window is an input error; a naive ``now`` too (times are UTC)."""
    summary = summary_of(NOW, ((C, AA), NOW))
    with pytest.raises(InvalidInput):
        derived_id_resumable(summary, NOW, timedelta(seconds=-1))
    with pytest.raises(InvalidInput):
        choose_derived_generation([summary], INTENT.fingerprint, NOW, timedelta(seconds=-1))
    with pytest.raises(InvalidInput):
        derived_id_resumable(summary, NOW.replace(tzinfo=None), DAY)


# --------------------------------------------------------------------------- generation ids


def test_generation_ids() -> None:
    """The first generation is the base id itself (existing ledgers keep working); later
    ones add ``-2``, ``-3``…; reading an id back gives its generation, or None."""
    assert [BASE, f"{BASE}-2", f"{BASE}-10"] == [derived_generation_id(BASE, n) for n in (1, 2, 10)]
    with pytest.raises(InvalidInput):
        derived_generation_id(BASE, 0)
    assert [1, 2, 10] == [
        derived_generation(derived_generation_id(BASE, n), BASE) for n in (1, 2, 10)
    ]
    for other in (
        f"{BASE}-1",
        f"{BASE}-02",
        f"{BASE}-",
        f"{BASE}-2a",
        f"{BASE}-٣",  # a digit, but not ASCII
        f"{BASE}2",
        "sms-fedcba9876543210-2",
        "A-17",
    ):
        assert derived_generation(other, BASE) is None, other


# --------------------------------------------------------------------------- choosing


def gen(
    number: int,
    age: timedelta,
    states: tuple[DeliveryState, AcceptanceState] | None = (C, AA),
    intent: SmsIntent = INTENT,
) -> ActionSummary:
    """Generation ``number``, created and (unless ``states`` is None) attempted ``age`` ago."""
    then = NOW - age
    attempts = [] if states is None else [(states, then)]
    return summary_of(then, *attempts, action_id=derived_generation_id(BASE, number), intent=intent)


HOUR = timedelta(hours=1)
OLD = 3 * DAY


@pytest.mark.parametrize(
    ("generations", "chosen"),
    [
        # nothing yet: the base id
        ([], 1),
        # sent an hour ago: resumed
        ([gen(1, HOUR)], 1),
        # sent three days ago and settled: a new action
        ([gen(1, OLD)], 2),
        # FAILED three days ago: settled too, a new action
        ([gen(1, OLD, (F, AP))], 2),
        # three days old but never proven, or never attempted: resumed
        ([gen(1, OLD, (P, AP))], 1),
        ([gen(1, OLD, (C, AP))], 1),
        ([gen(1, OLD, None)], 1),
        # the newest matching generation is the one resumed
        ([gen(1, OLD), gen(2, HOUR)], 2),
        ([gen(1, OLD), gen(2, OLD)], 3),
        # a generation holding another intent is skipped, whatever its state
        ([gen(1, HOUR, intent=OTHER)], 2),
        ([gen(1, OLD), gen(2, HOUR, intent=OTHER)], 3),
        ([gen(1, HOUR), gen(2, HOUR, intent=OTHER)], 1),
        ([gen(1, OLD), gen(2, OLD, None, intent=OTHER), gen(3, OLD)], 4),
        # an older generation still unproven is resumed rather than sent again
        ([gen(1, OLD, (P, AP)), gen(2, OLD)], 1),
    ],
)
def test_choose_derived_generation(generations: list[ActionSummary], chosen: int) -> None:
    """The newest generation holding this intent that may be resumed; else the first free
    one (after every existing generation)."""
    assert chosen == choose_derived_generation(generations, INTENT.fingerprint, NOW, DAY)


def test_a_wider_window_resumes_what_a_narrower_one_does_not() -> None:
    """The window is the caller's: a generation sent 30 hours ago is resumed with a
    48-hour window and replaced with the default one."""
    generations = [gen(1, timedelta(hours=30))]
    assert 1 == choose_derived_generation(generations, INTENT.fingerprint, NOW, 2 * DAY)
    assert 2 == choose_derived_generation(generations, INTENT.fingerprint, NOW, DAY)


# --------------------------------------------------------------------------- earlier message


def test_earlier_message() -> None:
    """An answer is the earlier message when the action had an attempt before the call and
    has no new one: not for a new action, a first attempt, a retry or another action."""
    old = NOW - HOUR
    sent = summary_of(old, ((C, AA), old))
    pending = summary_of(old, ((P, AP), old))
    failed = summary_of(old, ((F, AP), old))
    retried = summary_of(old, ((F, AP), old), ((C, AA), NOW))
    planned = summary_of(old)
    first = summary_of(old, ((C, AA), NOW))
    assert earlier_message(sent, sent)
    assert earlier_message(pending, sent)  # proven during the call: still the earlier one
    assert earlier_message(pending, pending)
    assert not earlier_message(None, sent)
    assert not earlier_message(planned, first)
    assert not earlier_message(planned, planned)
    assert not earlier_message(failed, retried)
    other = summary_of(old, ((C, AA), old), action_id=f"{BASE}-2")
    assert not earlier_message(sent, other)
