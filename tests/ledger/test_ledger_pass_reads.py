"""A reconcile pass's reads of the ledger in one call each (``watched_attempts``,
``pass_claims``) give what the separate reads they replace give, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from starebrain_actions import Ledger, SmsIntent, fail_delivery

DEVICE = "127.0.0.1:5555"
OTHER = "127.0.0.1:5556"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


async def _attempt(ledger: Ledger, index: int, device: str) -> str:
    at = NOW + timedelta(seconds=index)
    intent = SmsIntent(recipient="+12025550143", body=f"message {index}")
    await ledger.create_action(f"a-{index}", intent, now=at)
    record = await ledger.begin_attempt(f"a-{index}", device, now=at)
    return record.dispatch_id


async def test_a_pass_reads_in_one_call_what_the_separate_reads_give(ledger: Ledger) -> None:
    """The attempts a pass watches come with their actions; the claimed SMS and MMS rows
    and the attempts ruled not sent come in one call, each as its own read gives it, and
    an omitted part (no MMS window, no unresolved attempt) is empty."""
    # a failed attempt whose row the phone named (claimed, SMS row 11), one ruled not sent
    # by an operator, one whose MMS row 13 failed, then the one in flight (the lease)
    failed = await _attempt(ledger, 0, DEVICE)
    (record,) = await ledger.attempts("a-0")
    await ledger.apply(
        fail_delivery(
            record,
            reason="the phone says failed",
            now=NOW,
            evidence={"provider_object_id": 11, "provider_type": 5, "provider_kind": "sms"},
        )
    )
    await _attempt(ledger, 1, DEVICE)
    await ledger.resolve("a-1", as_sent=False, reason="checked the phone", operator="ops", now=NOW)
    await _attempt(ledger, 2, DEVICE)
    (mms,) = await ledger.attempts("a-2")
    await ledger.apply(
        fail_delivery(
            mms,
            reason="the phone says failed",
            now=NOW,
            evidence={"provider_object_id": 13, "provider_type": 5, "provider_kind": "mms"},
        )
    )
    pending = await _attempt(ledger, 3, DEVICE)
    await _attempt(ledger, 4, OTHER)
    since = NOW - timedelta(hours=1)

    records, actions = await ledger.watched_attempts(DEVICE, since)
    assert [pending] == [r.dispatch_id for r in records]
    assert await ledger.recent_attempts(DEVICE, since) == records
    assert await ledger.actions(["a-3"]) == actions

    ruled_since = NOW - timedelta(days=1)
    assert (set(), set(), []) == await ledger.pass_claims(DEVICE, 0, None, None, None)
    claimed, claimed_mms, ruled = await ledger.pass_claims(DEVICE, 0, 11, 0, ruled_since)
    assert {(11, None)} == claimed == await ledger.claimed_provider_ids(DEVICE, 0)
    assert set() == (await ledger.pass_claims(DEVICE, 0, 10, None, None))[0]
    assert {(13, None)} == claimed_mms == await ledger.claimed_mms_ids(DEVICE, 0)
    assert ["a-1"] == [r.action_id for r in ruled]
    assert await ledger.ruled_not_sent(DEVICE, ruled_since) == ruled
    assert failed not in {r.dispatch_id for r in ruled}  # the phone's failure is no ruling

    assert (set(), set(), []) == await ledger.pass_claims(DEVICE, 11, 20, None, None)
    assert (set(), set(), []) == await ledger.pass_claims(OTHER, 0, 20, 0, ruled_since)
