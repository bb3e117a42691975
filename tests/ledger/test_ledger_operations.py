"""The ledger's operations on a real SQLite file."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from starebrain_actions import (
    AcceptanceState,
    AttemptInFlight,
    AttemptRefused,
    BudgetExhausted,
    DeliveryState,
    DeviceBusy,
    Event,
    FingerprintConflict,
    InvalidInput,
    InvariantViolation,
    Ledger,
    LedgerError,
    MatchVerdict,
    NotFound,
    RetryPolicy,
    ReviewReason,
    SmsIntent,
    StaleTransition,
    Status,
    confirm_delivery,
    fail_delivery,
    flag_for_review,
    record_submission,
    try_accept,
)

INTENT = SmsIntent(recipient="+1 202 555 0100", body="Your code is 4821")
#: two attempts, the second right after the first fails
NO_WAIT = RetryPolicy(maximum_attempts=2, initial_interval=timedelta(0))


def table_counts(path: Path) -> dict[str, int]:
    """Rows per table, read with a separate plain connection."""
    with sqlite3.connect(path) as db:
        return {
            table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("actions", "attempts", "history", "duplicates")
        }


async def test_create_action_is_idempotent(ledger: Ledger, ledger_path: Path) -> None:
    """Creating the same id and intent twice returns the first action and writes once."""
    first = await ledger.create_action("A-17", INTENT)
    again = await ledger.create_action(
        "A-17", SmsIntent(recipient="+12025550100", body="Your code is 4821")
    )
    assert first.created_at == again.created_at
    assert first.fingerprint == again.fingerprint
    assert 1 == table_counts(ledger_path)["actions"]


async def test_fingerprint_conflict_writes_nothing(ledger: Ledger, ledger_path: Path) -> None:
    """The same id with another body raises FingerprintConflict and changes no row."""
    await ledger.create_action("A-17", INTENT)
    before = table_counts(ledger_path)
    with pytest.raises(FingerprintConflict, match="A-17"):
        await ledger.create_action("A-17", SmsIntent(recipient="+12025550100", body="other"))
    assert before == table_counts(ledger_path)
    assert INTENT.fingerprint == (await ledger.get_action("A-17")).fingerprint


@pytest.mark.parametrize("bad", ["", "has space", "x" * 201, "tab\there", "A-17\n", "\nA-17"])
async def test_bad_action_ids_are_refused(ledger: Ledger, bad: str) -> None:
    """Action ids must be 1-200 printable characters without spaces: a final newline is
    refused too, never a second action beside ``A-17`` (issue 21, item 7)."""
    with pytest.raises(InvalidInput, match="action id"):
        await ledger.create_action(bad, INTENT)


async def test_full_lifecycle_writes_one_history_row_per_change(ledger: Ledger) -> None:
    """create -> attempt -> submitted -> confirm -> accept: SUCCEEDED, four history rows."""
    await ledger.create_action("A-17", INTENT)
    record = await ledger.begin_attempt("A-17", "127.0.0.1:5555")
    assert (DeliveryState.PENDING, 1) == (record.delivery, record.attempt)
    now = ledger.now()
    record = await ledger.apply(
        record_submission(record, watermark_id=811, device_clock_ms=1_700_000_000_000, now=now)
    )
    record = await ledger.apply(confirm_delivery(record, provider_object_id=812, now=now))
    record = await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=now))
    summary = await ledger.summary("A-17")
    assert Status.SUCCEEDED == summary.status
    assert not summary.needs_review
    history = await ledger.history("A-17")
    assert [Event.CREATED, Event.SUBMITTED, Event.CONFIRM, Event.ACCEPT] == [
        entry.event for entry in history
    ]
    assert DeliveryState.PENDING == history[2].from_delivery
    assert DeliveryState.CONFIRMED == history[2].to_delivery
    assert 812 == history[2].evidence["provider_object_id"]
    assert record == await ledger.get_attempt(record.dispatch_id)


async def test_begin_attempt_refuses_while_an_attempt_is_in_flight(ledger: Ledger) -> None:
    """A second attempt of an action with a PENDING attempt is refused."""
    await ledger.create_action("A-17", INTENT)
    await ledger.begin_attempt("A-17", "dev-1")
    with pytest.raises(AttemptInFlight):
        await ledger.begin_attempt("A-17", "dev-2")


async def test_device_lease_is_held_until_resolution(ledger: Ledger) -> None:
    """Another action cannot use a device whose in-flight attempt is unresolved; proof frees it."""
    await ledger.create_action("A-1", INTENT)
    await ledger.create_action("A-2", SmsIntent(recipient="+12025550100", body="second"))
    first = await ledger.begin_attempt("A-1", "dev")
    with pytest.raises(DeviceBusy, match="dev"):
        await ledger.begin_attempt("A-2", "dev")
    await ledger.apply(confirm_delivery(first, provider_object_id=1, now=ledger.now()))
    second = await ledger.begin_attempt("A-2", "dev")
    assert "A-2" == second.action_id


async def test_budget_stops_attempt_maximum_plus_one(ledger: Ledger) -> None:
    """With maximum_attempts=2 the third attempt is refused and the action needs review."""
    await ledger.create_action("A-17", INTENT, NO_WAIT)
    for _ in range(2):
        record = await ledger.begin_attempt("A-17", "dev")
        await ledger.apply(fail_delivery(record, reason="refused", now=ledger.now()))
    with pytest.raises(BudgetExhausted):
        await ledger.begin_attempt("A-17", "dev")
    assert 2 == len(await ledger.attempts("A-17"))
    (review,) = await ledger.needing_review()
    assert (ReviewReason.BUDGET_EXHAUSTED,) == review.review_reasons


async def test_deadline_stops_new_attempts(ledger: Ledger) -> None:
    """After schedule_to_close no attempt starts, even the first."""
    created = datetime(2026, 1, 1, tzinfo=UTC)
    await ledger.create_action(
        "A-17", INTENT, RetryPolicy(schedule_to_close=timedelta(minutes=1)), now=created
    )
    with pytest.raises(BudgetExhausted, match="deadline"):
        await ledger.begin_attempt("A-17", "dev", now=created + timedelta(minutes=2))
    record = await ledger.begin_attempt("A-17", "dev", now=created + timedelta(seconds=30))
    assert 1 == record.attempt


async def test_succeeded_actions_are_never_redispatched(ledger: Ledger) -> None:
    """begin_attempt on a SUCCEEDED action is refused."""
    await ledger.create_action("A-17", INTENT)
    record = await ledger.begin_attempt("A-17", "dev")
    record = await ledger.apply(confirm_delivery(record, provider_object_id=3, now=ledger.now()))
    await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=ledger.now()))
    with pytest.raises(AttemptRefused, match="succeeded"):
        await ledger.begin_attempt("A-17", "dev")


async def test_stale_transition_is_reported_not_overwritten(ledger: Ledger) -> None:
    """Applying a transition planned from an old copy raises StaleTransition and changes nothing."""
    await ledger.create_action("A-17", INTENT)
    record = await ledger.begin_attempt("A-17", "dev")
    await ledger.apply(confirm_delivery(record, provider_object_id=9, now=ledger.now()))
    with pytest.raises(StaleTransition, match="another worker"):
        await ledger.apply(fail_delivery(record, reason="absent", now=ledger.now()))
    assert DeliveryState.CONFIRMED == (await ledger.get_attempt(record.dispatch_id)).delivery


async def test_apply_many_applies_a_batch_in_one_call_reporting_failures(ledger: Ledger) -> None:
    """A batch applies every valid transition and reports a stale one in its place."""
    records = []
    for n in range(3):
        await ledger.create_action(f"A-{n}", SmsIntent(recipient="+12025550100", body=f"m{n}"))
        records.append(await ledger.begin_attempt(f"A-{n}", f"dev-{n}"))
    now = ledger.now()
    batch = [
        confirm_delivery(record, provider_object_id=n, now=now) for n, record in enumerate(records)
    ]
    batch.append(fail_delivery(records[0], reason="x", now=now))
    results = await ledger.apply_many(batch)
    assert [False, False, False, True] == [isinstance(r, StaleTransition) for r in results]
    assert [] == await ledger.in_flight()
    stored = [await ledger.get_attempt(record.dispatch_id) for record in records]
    assert [0, 1, 2] == [record.provider_object_id for record in stored]


async def test_one_provider_row_confirms_one_attempt(ledger: Ledger) -> None:
    """A second attempt confirmed with the same device and _id is refused by UNIQUE."""
    for n in (1, 2):
        await ledger.create_action(f"A-{n}", SmsIntent(recipient="+12025550100", body=f"m{n}"))
    first = await ledger.begin_attempt("A-1", "dev")
    await ledger.apply(confirm_delivery(first, provider_object_id=77, now=ledger.now()))
    second = await ledger.begin_attempt("A-2", "dev")
    with pytest.raises(LedgerError, match="UNIQUE"):
        await ledger.apply(confirm_delivery(second, provider_object_id=77, now=ledger.now()))
    assert DeliveryState.PENDING == (await ledger.get_attempt(second.dispatch_id)).delivery


async def test_operator_resolution_is_recorded_and_reopens_the_budget(ledger: Ledger) -> None:
    """Resolving an unknown attempt as not sent marks it FAILED with the operator's reason."""
    await ledger.create_action("A-17", INTENT)
    record = await ledger.begin_attempt("A-17", "dev")
    await ledger.apply(flag_for_review(record, ReviewReason.AMBIGUOUS, now=ledger.now()))
    assert ["A-17"] == [s.action.action_id for s in await ledger.needing_review()]
    resolved = await ledger.resolve(
        "A-17", as_sent=False, reason="checked the phone: not there", operator="ana"
    )
    assert (DeliveryState.FAILED, None, "ana") == (
        resolved.delivery,
        resolved.review_reason,
        resolved.resolved_by,
    )
    last = (await ledger.history("A-17"))[-1]
    assert (Event.RESOLVE_NOT_SENT, "operator:ana") == (last.event, last.actor)
    assert "checked the phone: not there" == last.evidence["reason"]
    assert [] == await ledger.needing_review()
    later = ledger.now() + timedelta(seconds=2)  # past the default backoff of about 1 s
    assert 2 == (await ledger.begin_attempt("A-17", "dev", now=later)).attempt


async def test_resolving_as_sent_leaves_a_final_state(ledger: Ledger) -> None:
    """An operator can turn a FAILED attempt into SUCCEEDED; history keeps both."""
    await ledger.create_action("A-17", INTENT)
    record = await ledger.begin_attempt("A-17", "dev")
    await ledger.apply(fail_delivery(record, reason="absent", now=ledger.now()))
    resolved = await ledger.resolve("A-17", as_sent=True, reason="recipient got it", operator="bo")
    assert (DeliveryState.CONFIRMED, AcceptanceState.ACCEPTED) == (
        resolved.delivery,
        resolved.acceptance,
    )
    assert Status.SUCCEEDED == (await ledger.summary("A-17")).status


async def test_duplicates_are_recorded_and_flag_review(ledger: Ledger, ledger_path: Path) -> None:
    """A second provider row for a confirmed attempt is kept as a duplicate and flags review."""
    await ledger.create_action("A-17", INTENT)
    record = await ledger.begin_attempt("A-17", "dev")
    record = await ledger.apply(confirm_delivery(record, provider_object_id=5, now=ledger.now()))
    assert await ledger.record_duplicate(record.dispatch_id, provider_object_id=6)
    assert not await ledger.record_duplicate(record.dispatch_id, provider_object_id=6)
    with pytest.raises(LedgerError, match="already confirms"):
        await ledger.record_duplicate(record.dispatch_id, provider_object_id=5)
    summary = await ledger.summary("A-17")
    assert (1, (ReviewReason.DUPLICATE,)) == (summary.duplicates, summary.review_reasons)
    assert [6] == [d["provider_object_id"] for d in await ledger.duplicates("A-17")]


async def test_duplicates_need_a_confirmed_original(ledger: Ledger) -> None:
    """A duplicate of an unconfirmed attempt is an invariant violation."""
    await ledger.create_action("A-17", INTENT)
    record = await ledger.begin_attempt("A-17", "dev")
    with pytest.raises(InvariantViolation):
        await ledger.record_duplicate(record.dispatch_id, provider_object_id=6)


async def test_queries_filter_by_status_and_device(ledger: Ledger) -> None:
    """summaries filters on derived status and device; in_flight on device."""
    await ledger.create_action("A-1", INTENT)
    await ledger.create_action("A-2", SmsIntent(recipient="+12025550100", body="two"))
    await ledger.create_action("A-3", SmsIntent(recipient="+12025550100", body="three"))
    one = await ledger.begin_attempt("A-1", "dev-a")
    await ledger.begin_attempt("A-2", "dev-b")
    await ledger.apply(fail_delivery(one, reason="refused", now=ledger.now()))
    assert ["A-1"] == [s.action.action_id for s in await ledger.summaries(status=Status.FAILED)]
    assert ["A-2"] == [s.action.action_id for s in await ledger.summaries(device="dev-b")]
    assert ["A-3"] == [s.action.action_id for s in await ledger.summaries(status=Status.PLANNED)]
    assert ["dev-b"] == await ledger.devices_in_flight()
    assert ["A-2"] == [r.action_id for r in await ledger.in_flight("dev-b")]
    assert [] == await ledger.in_flight("dev-a")


async def test_unknown_ids_raise_not_found(ledger: Ledger) -> None:
    """Queries and operations on unknown ids raise NotFound naming the id."""
    with pytest.raises(NotFound, match="nope"):
        await ledger.get_action("nope")
    with pytest.raises(NotFound, match="nope"):
        await ledger.begin_attempt("nope", "dev")
    with pytest.raises(NotFound):
        await ledger.get_attempt("nope")
    await ledger.create_action("A-17", INTENT)
    with pytest.raises(NotFound, match="no attempt"):
        await ledger.resolve("A-17", as_sent=True, reason="r", operator="o")


async def test_naive_now_is_refused(ledger: Ledger) -> None:
    """A naive datetime passed to the ledger raises InvalidInput and writes nothing."""
    with pytest.raises(InvalidInput, match="timezone"):
        await ledger.create_action("A-17", INTENT, now=datetime(2026, 1, 1))


async def test_transitions_are_logged_with_personal_data_redacted(ledger: Ledger) -> None:
    """Every transition logs a snake_case event with ids; no phone number or body appears."""
    structlog.reset_defaults()  # another test's level filter would hide INFO from capture
    with capture_logs() as logs:
        await ledger.create_action("A-17", INTENT)
        record = await ledger.begin_attempt("A-17", "dev")
        record = await ledger.apply(
            confirm_delivery(record, provider_object_id=5, now=ledger.now())
        )
        await ledger.apply(
            try_accept(
                record, MatchVerdict(matched=False, reason="to +1 202 555 0100"), now=ledger.now()
            )
        )
    events = [entry["event"] for entry in logs]
    assert ["action_created", "attempt_created", "delivery_confirmed", "acceptance_rejected"] == (
        events
    )
    assert all(entry.get("dispatch_id") == record.dispatch_id for entry in logs[1:])
    text = repr(logs)
    assert "555 0100" not in text
    assert "4821" not in text


async def test_an_attempt_in_review_whose_command_is_over_frees_the_phone(ledger: Ledger) -> None:
    """Schema version 3: an unresolved attempt flagged AMBIGUOUS or STUCK (reached only once
    its send command ended) no longer holds its device's lease; another action may start an
    attempt on that phone, while its own action waits for a proof or a ruling."""
    for n, reason in enumerate((ReviewReason.AMBIGUOUS, ReviewReason.STUCK)):
        await ledger.create_action(f"held-{n}", INTENT)
        record = await ledger.begin_attempt(f"held-{n}", "dev")
        with pytest.raises(DeviceBusy):
            await ledger.create_action(f"next-{n}", SmsIntent(recipient="+12025550101", body="x"))
            await ledger.begin_attempt(f"next-{n}", "dev")
        await ledger.apply(flag_for_review(record, reason, now=ledger.now()))
        nxt = await ledger.begin_attempt(f"next-{n}", "dev")
        assert DeliveryState.PENDING is nxt.delivery
        await ledger.apply(fail_delivery(nxt, reason="test", now=ledger.now()))


async def test_actions_reads_many_ids_at_once_and_leaves_unknown_ones_out(
    ledger_path: Path,
) -> None:
    """``actions`` (what a reconcile pass loads for its watched attempts) answers 1,200 ids,
    more than one query's worth, with exactly what ``get_action`` reads, from a fresh handle
    (nothing cached) and from the cache; unknown ids are left out."""
    ids = [f"bulk-{n:04d}" for n in range(1_200)]
    async with Ledger.open(ledger_path) as ledger:
        for n, action_id in enumerate(ids):
            await ledger.create_action(
                action_id, SmsIntent(recipient="+12025550100", body=f"note {n}")
            )
    async with Ledger.open(ledger_path) as fresh:
        found = await fresh.actions([*ids, "nobody", ids[0]])
        again = await fresh.actions(ids[::7])
        one_by_one = {action_id: await fresh.get_action(action_id) for action_id in ids}
    assert one_by_one == found
    assert {action_id: one_by_one[action_id] for action_id in ids[::7]} == again
