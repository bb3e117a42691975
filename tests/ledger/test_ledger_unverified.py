"""An UNVERIFIED attempt releases its device's lease, and only that: enforced by the database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from starebrain_actions import (
    AttemptInFlight,
    DeliveryState,
    DeviceBusy,
    Ledger,
    ReviewReason,
    SmsIntent,
    flag_for_review,
)


async def _two_actions(ledger: Ledger) -> None:
    await ledger.create_action("A-1", SmsIntent(recipient="+12025550100", body="one"))
    await ledger.create_action("A-2", SmsIntent(recipient="+12025550101", body="two"))


async def test_an_unverified_attempt_frees_the_phone_for_other_actions(ledger: Ledger) -> None:
    """While an attempt is merely unresolved it holds the device; once UNVERIFIED another
    action may start there, and the attempt itself stays PENDING."""
    await _two_actions(ledger)
    first = await ledger.begin_attempt("A-1", "dev")
    with pytest.raises(DeviceBusy):
        await ledger.begin_attempt("A-2", "dev")
    flagged = await ledger.apply(flag_for_review(first, ReviewReason.UNVERIFIED, now=ledger.now()))
    second = await ledger.begin_attempt("A-2", "dev")
    assert (DeliveryState.PENDING, "dev") == (flagged.delivery, second.device)


async def test_an_unverified_attempt_never_lets_its_own_action_send_again(ledger: Ledger) -> None:
    """The released lease is the phone's, not the action's: a new attempt of the same action is
    refused while the unverified one is unresolved."""
    await _two_actions(ledger)
    first = await ledger.begin_attempt("A-1", "dev")
    await ledger.apply(flag_for_review(first, ReviewReason.UNVERIFIED, now=ledger.now()))
    with pytest.raises(AttemptInFlight):
        await ledger.begin_attempt("A-1", "other-dev")


async def test_the_lease_index_refuses_two_holders_in_raw_sql(
    ledger: Ledger, ledger_path: Path
) -> None:
    """A raw UPDATE that would make two lease-holding attempts on one device is refused; an
    UNVERIFIED one next to a holder is allowed."""
    await _two_actions(ledger)
    first = await ledger.begin_attempt("A-1", "dev")
    await ledger.apply(flag_for_review(first, ReviewReason.UNVERIFIED, now=ledger.now()))
    await ledger.begin_attempt("A-2", "dev")
    raw = sqlite3.connect(ledger_path)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute(
                "UPDATE attempts SET review_reason = NULL, version = version + 1"
                " WHERE dispatch_id = ?",
                (first.dispatch_id,),
            )
    finally:
        raw.close()


async def test_a_recipient_refused_by_a_later_rule_keeps_the_ledger_readable(
    ledger: Ledger, ledger_path: Path
) -> None:
    """An action stored before recipients were checked (+1 555 0100 has no area code) is read
    back as stored instead of making every read of the ledger fail."""
    await ledger.create_action("old-1", SmsIntent(recipient="+12025550100", body="hi"))
    raw = sqlite3.connect(ledger_path)
    try:
        raw.execute(
            "UPDATE actions SET intent_json = json_set(intent_json, '$.recipient', ?)",
            ("+1 555 0100",),
        )
        raw.commit()
    finally:
        raw.close()
    summaries = await ledger.summaries()
    assert ["+1 555 0100"] == [summary.action.intent.recipient for summary in summaries]
