"""Actions whose tries found the phone not ready read PLANNED on both backends: the status
filter's SQL keeps them with the PLANNED ones and away from FAILED, review does not list
them, and their refused tries write phone.not_ready or phone.unreachable, never
action.failed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from starebrain_actions import Ledger, RetryPolicy, SmsIntent, Status, fail_delivery

#: Two attempts, no backoff: a refused try may be followed at once.
POLICY = RetryPolicy(maximum_attempts=2, initial_interval=timedelta(0))
LOCKED = {
    "error": "the keyguard is showing (the screen is locked); no key was pressed",
    "not_ready": "keyguard_showing",
    "remedy": "unlock the phone and keep its screen unlocked while it sends",
}
UNREACHABLE = {"error": "could not connect", "unreachable": True}
SPENT = {"error": "the phone marked the message failed"}


async def _with_attempts(ledger: Ledger, action_id: str, *failures: dict[str, Any]) -> None:
    """Create ``action_id`` and fail one attempt per item of ``failures``, with its evidence."""
    intent = SmsIntent(recipient="+12025550100", body=action_id)
    await ledger.create_action(action_id, intent, POLICY)
    for evidence in failures:
        record = await ledger.begin_attempt(action_id, "dev-a")
        await ledger.apply(
            fail_delivery(
                record, reason="refused", now=ledger.now(), actor="agent", evidence=evidence
            )
        )


async def test_status_filters_keep_actions_waiting_for_the_phone_with_planned(
    ledger: Ledger,
) -> None:
    """Not ready, unreachable, and a refused try after a real failure: PLANNED; a real
    failure, and a real failure after a refused try: FAILED. Each filter returns exactly the
    actions whose derived status it names, and none needs review."""
    await _with_attempts(ledger, "locked", LOCKED, LOCKED)
    await _with_attempts(ledger, "unreachable", UNREACHABLE)
    await _with_attempts(ledger, "failed-then-locked", SPENT, LOCKED)
    await _with_attempts(ledger, "failed", SPENT)
    await _with_attempts(ledger, "locked-then-failed", LOCKED, SPENT)
    await _with_attempts(ledger, "untried")
    planned = {s.action.action_id for s in await ledger.summaries(status=Status.PLANNED)}
    failed = {s.action.action_id for s in await ledger.summaries(status=Status.FAILED)}
    every = {s.action.action_id: s.status for s in await ledger.summaries()}
    assert {"locked", "unreachable", "failed-then-locked", "untried"} == planned
    assert {"failed", "locked-then-failed"} == failed
    assert {a for a, status in every.items() if status is Status.PLANNED} == planned
    assert [] == await ledger.needing_review()
    events = await ledger.events(types=["action.failed", "phone.*"])
    by_action: dict[str | None, list[str]] = {}
    for event in events:
        by_action.setdefault(event.action_id, []).append(event.type)
    assert ["phone.not_ready", "phone.not_ready"] == by_action["locked"]
    assert ["phone.unreachable"] == by_action["unreachable"]
    assert "action.failed" not in by_action.get("failed-then-locked", [])
    resumable = {s.action.action_id for s in await ledger.resumable()}
    assert planned | {"failed", "locked-then-failed"} >= resumable >= planned
