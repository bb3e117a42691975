"""``Ledger.framework_attempts``: a phone's framework attempts that came to an end, newest
first, with when each came to it and when each went to review, however many sends through
the app or attempts that say nothing follow them (what ``--send-path auto`` judges the
framework path by); read through the index ``attempts_framework``."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from starebrain_actions import (
    ActionRecord,
    DeliveryState,
    Ledger,
    ReviewReason,
    SmsIntent,
    confirm_delivery,
    fail_delivery,
)
from starebrain_actions.core.convert import ATTEMPT_COLUMNS
from starebrain_actions.core.transitions import flag_for_review
from starebrain_actions.phone.send_path import standing_in

DEVICE = "127.0.0.1:5555"
BUILD = "starebrain/sim/sim:14/AP1A/1:user/release-keys"
FRAMEWORK = {"send_path": "framework", "creator": "com.android.shell", "build": BUILD}
START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


async def attempt(ledger: Ledger, action_id: str, evidence: dict[str, object]) -> ActionRecord:
    """A new action with one attempt on ``DEVICE`` carrying ``evidence``."""
    await ledger.create_action(action_id, SmsIntent(recipient="+12025550100", body=action_id))
    return await ledger.begin_attempt(action_id, DEVICE, evidence=evidence)


async def test_a_doubt_is_found_behind_any_number_of_sends_through_the_app(
    ledger: Ledger,
) -> None:
    """Proven, then doubted (review), then 12 sends through the app and 3 framework attempts
    that failed before the framework was reached: with room for 2, the doubt and the proof
    come back, newest first, with the history's times; the standing is doubted since the
    review."""
    now = START
    proof = await attempt(ledger, "proof", FRAMEWORK)
    confirmed = confirm_delivery(
        proof, provider_object_id=7, now=now, evidence={"row_creator": "com.android.shell"}
    )
    await ledger.apply(confirmed)
    doubt = await attempt(ledger, "doubt", FRAMEWORK)
    flagged_at = now + timedelta(minutes=10)
    await ledger.apply(flag_for_review(doubt, ReviewReason.UNVERIFIED, now=flagged_at))
    for number in range(12):
        sent = await attempt(ledger, f"app-{number}", {"send_path": "ui"})
        await ledger.apply(fail_delivery(sent, reason="refused", now=now))
    for number in range(3):
        voided = await attempt(ledger, f"voided-{number}", {**FRAMEWORK, "fence": "voided"})
        await ledger.apply(fail_delivery(voided, reason="fence voided", now=now))
    found = await ledger.framework_attempts(DEVICE, 2)
    assert ["doubt", "proof"] == [record.action_id for record in found.records]
    (doubted, proven) = found.records
    assert ReviewReason.UNVERIFIED is doubted.review_reason
    assert DeliveryState.CONFIRMED is proven.delivery
    assert (flagged_at, flagged_at) == (
        found.decided_at[doubted.dispatch_id],
        found.flagged_at[doubted.dispatch_id],
    )
    assert (now, False) == (
        found.decided_at[proven.dispatch_id],
        proven.dispatch_id in found.flagged_at,
    )
    standing = standing_in(found, BUILD)
    assert ("doubted", flagged_at) == (standing.state, standing.decided_at)
    # the latest attempts of any path hold neither (what the search was before)
    latest = {record.action_id for record in await ledger.latest_attempts(DEVICE, 15)}
    assert set() == latest & {"doubt", "proof"}


async def test_framework_attempts_are_read_through_their_index(ledger_path: Path) -> None:
    """One index range of the phone's framework attempts (SQLite's plan)."""
    async with Ledger.open(ledger_path):
        pass
    with closing(sqlite3.connect(ledger_path)) as db:
        plan = " ".join(
            str(row[3])
            for row in db.execute(
                f"EXPLAIN QUERY PLAN SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE device = ?"
                " AND json_extract(evidence_json, '$.send_path') = 'framework'"
                " AND (delivery = 'CONFIRMED' OR review_reason IS NOT NULL"
                " OR resolved_by IS NOT NULL)"
                " ORDER BY dispatched_at DESC, dispatch_id DESC LIMIT ?",
                (DEVICE, 5),
            )
        )
    assert "USING INDEX attempts_framework" in plan, plan
