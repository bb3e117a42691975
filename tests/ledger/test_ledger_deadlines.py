"""An action's deadline and schedule in the ledger (issue 35, items 1 and 2), on both backends:
kept with the intent (a changed time is a changed intent; a duration counts from the action's
creation), no receipt at or after the deadline nor before the schedule (``should_redispatch``
first, the ledger's own trigger behind it), the expiry recorded once with its event, an
attempt in flight at the deadline settled by reads as ever, and quiet hours beside a
schedule: the later wins."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from starebrain_actions import (
    AttemptRefused,
    FingerprintConflict,
    InvalidInput,
    Ledger,
    MatchVerdict,
    RetryPolicy,
    SmsIntent,
    Status,
    confirm_delivery,
    fail_delivery,
    try_accept,
)
from starebrain_actions.core.derived_ids import derive_action_id
from starebrain_actions.core.exceptions import PolicyRefused
from starebrain_actions.core.model import IntentTimes, RedispatchReason
from starebrain_actions.core.policy import Policy, Verdict
from starebrain_actions.ledger.receipts import INSERT_ATTEMPT

#: 07:00 in Washington (+1 202…): inside quiet hours 21:00-08:00, which end at 13:00 UTC.
T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
DEVICE = "10.0.0.1:5555"
NO_WAIT = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(0))
MICRO = timedelta(microseconds=1)


def intent(body: str = "Your code is 4821", **times: datetime) -> SmsIntent:
    return SmsIntent(recipient="+12025550100", body=body, **times)


async def expired_events(ledger: Ledger, action_id: str) -> int:
    return len(await ledger.events(action_id=action_id, types=["action.expired"]))


async def test_no_receipt_at_the_deadline_and_the_expiry_is_recorded_once(
    ledger: Ledger,
) -> None:
    """A microsecond before the deadline an attempt starts; at it none does: the refusal
    records the expiry (EXPIRED, one action.expired event, the queue left), and a pass
    after records nothing more."""
    deadline = T0 + timedelta(minutes=10)
    await ledger.create_action("A-1", intent(not_after=deadline), NO_WAIT, now=T0)
    await ledger.create_action("A-2", intent("other", not_after=deadline), NO_WAIT, now=T0)
    record = await ledger.begin_attempt("A-1", DEVICE, now=deadline - MICRO)
    assert 1 == record.attempt
    with pytest.raises(AttemptRefused, match="deadline has passed") as refused:
        await ledger.begin_attempt("A-2", "10.0.0.2:5555", now=deadline)
    assert refused.value.decision.reason is RedispatchReason.EXPIRED  # type: ignore[attr-defined]
    summary = await ledger.summary("A-2", now=deadline)
    assert (Status.EXPIRED, deadline) == (summary.status, summary.action.expired_at)
    assert 1 == await expired_events(ledger, "A-2")
    assert [] == await ledger.expire_due(now=deadline + timedelta(hours=1))
    assert 1 == await expired_events(ledger, "A-2")
    # the attempt in flight at the deadline keeps its action out of EXPIRED
    assert Status.IN_FLIGHT is (await ledger.summary("A-1", now=deadline)).status


async def test_the_ledger_itself_refuses_a_receipt_outside_the_intents_time(
    ledger: Ledger,
) -> None:
    """A receipt written past ``should_redispatch`` (raw SQL) at the deadline, or before
    the schedule, is refused by the ledger's own trigger; nothing is written."""
    deadline = T0 + timedelta(minutes=10)
    await ledger.create_action("A-1", intent(not_after=deadline), NO_WAIT, now=T0)
    await ledger.create_action(
        "A-2", intent("later", not_before=T0 + timedelta(hours=1)), NO_WAIT, now=T0
    )

    def insert(action_id: str, at: datetime) -> None:
        from starebrain_actions.core.convert import format_time

        params = {
            "dispatch_id": f"raw-{action_id}",
            "action_id": action_id,
            "attempt": 1,
            "device": DEVICE,
            "dispatched_at": format_time(at),
            "actor": "test",
            "evidence_json": "{}",
            "record_evidence_json": "{}",
        }

        def work(db: object) -> None:
            db.execute(INSERT_ATTEMPT, params)  # type: ignore[attr-defined]

        return work  # type: ignore[return-value]

    for action_id, at in (("A-1", deadline), ("A-2", T0 + timedelta(minutes=59))):
        with pytest.raises(Exception, match="no attempt starts at or after"):
            await ledger._write(insert(action_id, at))  # type: ignore[arg-type]
        assert () == (await ledger.summary(action_id, now=at)).attempts


async def test_an_attempt_in_flight_at_the_deadline_is_settled_by_reads(
    ledger: Ledger,
) -> None:
    """Dispatched before the deadline, proven after it: a confirmation makes it SUCCEEDED
    (never EXPIRED: the deadline never turns an unknown outcome into "not sent"); a proof
    of absence makes it EXPIRED (nothing went out, no time left), which the next pass
    records, and no new attempt starts."""
    deadline = T0 + timedelta(minutes=10)
    after = deadline + timedelta(minutes=5)
    for action_id in ("sent", "not-sent"):
        await ledger.create_action(action_id, intent(action_id, not_after=deadline), now=T0)
    sent = await ledger.begin_attempt("sent", DEVICE, now=deadline - MICRO)
    not_sent = await ledger.begin_attempt("not-sent", "10.0.0.2:5555", now=deadline - MICRO)
    confirmed = await ledger.apply(confirm_delivery(sent, provider_object_id=7, now=after))
    await ledger.apply(try_accept(confirmed, MatchVerdict(matched=True, reason="ok"), now=after))
    await ledger.apply(fail_delivery(not_sent, reason="fence claimed", now=after))
    assert Status.SUCCEEDED is (await ledger.summary("sent", now=after)).status
    assert Status.EXPIRED is (await ledger.summary("not-sent", now=after)).status
    assert ["not-sent"] == await ledger.expire_due(now=after)
    assert (0, 1) == (
        await expired_events(ledger, "sent"),
        await expired_events(ledger, "not-sent"),
    )
    with pytest.raises(AttemptRefused, match="deadline has passed"):
        await ledger.begin_attempt("not-sent", "10.0.0.2:5555", now=after)


async def test_a_schedule_holds_every_receipt_and_every_claim_until_its_time(
    ledger: Ledger,
) -> None:
    """Queued with ``not_before`` an hour ahead: no worker claims it before then, no receipt
    starts before then (SCHEDULED, retry_at the schedule); at the time both go on."""
    start = T0 + timedelta(hours=1)
    queued = await ledger.enqueue("S-1", intent(not_before=start), NO_WAIT, now=T0)
    assert (Status.PLANNED, start) == (queued.summary.status, queued.summary.action.queue_after)
    assert await ledger.claim_next("default", DEVICE, "w:1", now=start - MICRO) is None
    claimed = await ledger.claim_next("default", DEVICE, "w:1", now=start)
    assert claimed is not None and "S-1" == claimed.action_id
    await ledger.create_action("S-2", intent("direct", not_before=start), NO_WAIT, now=T0)
    with pytest.raises(AttemptRefused) as refused:
        await ledger.begin_attempt("S-2", DEVICE, now=start - MICRO)
    decision = refused.value.decision  # type: ignore[attr-defined]
    assert (RedispatchReason.SCHEDULED, start) == (decision.reason, decision.retry_at)
    assert 1 == (await ledger.begin_attempt("S-2", DEVICE, now=start)).attempt


@pytest.mark.parametrize(
    ("schedule", "allowed_at"),
    [
        # 12:30 UTC is inside quiet hours (they end 13:00 UTC): the quiet hours win
        (T0 + timedelta(minutes=30), T0 + timedelta(hours=1)),
        # 14:00 UTC is after them: the schedule wins
        (T0 + timedelta(hours=2), T0 + timedelta(hours=2)),
    ],
)
async def test_quiet_hours_and_a_schedule_combine_and_the_later_wins(
    ledger: Ledger, schedule: datetime, allowed_at: datetime
) -> None:
    """The gate's quiet hours and the intent's schedule both hold the receipt: the first
    moment an attempt may start is the later of the two."""
    gate = Policy(quiet_hours=(datetime(2026, 1, 1, 21).time(), datetime(2026, 1, 1, 8).time()))
    await ledger.create_action("Q-1", intent(not_before=schedule), NO_WAIT, now=T0)
    for moment in (schedule, allowed_at - MICRO):
        if moment >= allowed_at:
            continue
        with pytest.raises((AttemptRefused, PolicyRefused)) as refused:
            await ledger.begin_attempt("Q-1", DEVICE, now=moment, gate=gate)
        if isinstance(refused.value, PolicyRefused):
            assert refused.value.gate.verdict is Verdict.WAIT  # type: ignore[attr-defined]
    assert 1 == (await ledger.begin_attempt("Q-1", DEVICE, now=allowed_at, gate=gate)).attempt


async def test_durations_count_from_the_actions_creation_and_a_changed_time_conflicts(
    ledger: Ledger,
) -> None:
    """``times``: the deadline is the creation plus the duration, and stays so for a call
    repeated later with the same duration; another duration, or the same message with a
    time named outright, is a changed intent (the conflict names both times); the derived
    id is the message's, whatever the times."""
    ten = IntentTimes(not_after=timedelta(minutes=10))
    made = await ledger.create_action("R-1", intent(), NO_WAIT, now=T0, times=ten)
    assert T0 + timedelta(minutes=10) == made.intent.not_after
    again = await ledger.create_action(
        "R-1", intent(), NO_WAIT, now=T0 + timedelta(minutes=5), times=ten
    )
    assert again == made
    with pytest.raises(FingerprintConflict, match="the same message; its deadline"):
        await ledger.create_action(
            "R-1",
            intent(),
            NO_WAIT,
            now=T0 + timedelta(minutes=5),
            times=IntentTimes(not_after=timedelta(minutes=11)),
        )
    with pytest.raises(FingerprintConflict):
        await ledger.create_action("R-1", intent(), NO_WAIT, now=T0)
    assert derive_action_id(intent()) == derive_action_id(made.intent)
    assert intent().fingerprint != made.intent.fingerprint


async def test_a_new_action_past_its_deadline_is_refused_and_an_old_one_read_back(
    ledger: Ledger,
) -> None:
    """Creating an action whose deadline has passed writes nothing; the same call for an
    action already stored reads it back (a rerun after the deadline learns it EXPIRED)."""
    with pytest.raises(InvalidInput, match="has passed already"):
        await ledger.create_action("P-1", intent(not_after=T0), NO_WAIT, now=T0)
    assert [] == await ledger.summaries(now=T0)
    deadline = T0 + timedelta(minutes=1)
    await ledger.create_action("P-2", intent(not_after=deadline), NO_WAIT, now=T0)
    late = deadline + timedelta(hours=1)
    stored = await ledger.create_action("P-2", intent(not_after=deadline), NO_WAIT, now=late)
    assert Status.EXPIRED is (await ledger.summary(stored.action_id, now=late)).status


async def test_the_intents_times_are_never_changed_and_an_expiry_never_moves(
    ledger: Ledger,
) -> None:
    """The ledger refuses an UPDATE of a stored deadline or schedule, and of a recorded
    expiry (what the action must obey is data, DESIGN.md invariant 9)."""
    deadline = T0 + timedelta(minutes=1)
    await ledger.create_action("F-1", intent(not_after=deadline), NO_WAIT, now=T0)
    assert ["F-1"] == await ledger.expire_due(now=deadline)
    for sql in (
        "UPDATE actions SET not_after = NULL WHERE action_id = 'F-1'",
        "UPDATE actions SET not_before = '2026-01-01T00:00:00.000000Z' WHERE action_id = 'F-1'",
        "UPDATE actions SET expired_at = '2027-01-01T00:00:00.000000Z' WHERE action_id = 'F-1'",
    ):

        def work(db: object, sql: str = sql) -> None:
            db.execute(sql)  # type: ignore[attr-defined]

        with pytest.raises(Exception, match=r"never changed|recorded once|not_before"):
            await ledger._write(work)  # type: ignore[arg-type]
    summary = await ledger.summary("F-1", now=deadline)
    assert (deadline, deadline) == (summary.action.intent.not_after, summary.action.expired_at)
