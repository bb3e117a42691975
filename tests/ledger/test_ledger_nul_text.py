"""Text holding NUL (U+0000) from the phone or a person: PostgreSQL's ``text`` and ``jsonb``
cannot store it, so both backends store U+FFFD in its place (``core.model.storable``), and the
records the ledger returns say the same as what it stored."""

from __future__ import annotations

from starebrain_actions import (
    Ledger,
    RetryPolicy,
    SmsIntent,
    fail_delivery,
    flag_for_review,
    resolve,
)
from starebrain_actions.core.model import ReviewReason

TO = "+12025550100"


async def test_nul_in_evidence_errors_and_rulings_is_stored_as_u_fffd(ledger: Ledger) -> None:
    await ledger.create_action("A-1", SmsIntent(recipient=TO, body="hi"), RetryPolicy())
    begun = await ledger.begin_attempt("A-1", "dev", evidence={"am\x00": ["x\x00y", 1]})
    failed = await ledger.apply(
        fail_delivery(
            begun, reason="radio\x00said no", now=ledger.now(), evidence={"row": {"b": "a\x00"}}
        )
    )
    stored = await ledger.get_attempt(begun.dispatch_id)
    assert stored == failed
    assert {"am\ufffd": ["x\ufffdy", 1], "row": {"b": "a\ufffd"}}.items() <= dict(
        stored.evidence
    ).items()
    assert stored.last_error is not None and "radio\ufffdsaid no" in stored.last_error
    history = await ledger.history("A-1")
    assert not any("\x00" in repr(entry) for entry in history)


async def test_an_operators_ruling_with_nul_is_stored(ledger: Ledger) -> None:
    """A reason or a name given through the MCP server's JSON may hold NUL."""
    await ledger.create_action("A-2", SmsIntent(recipient=TO, body="hi"), RetryPolicy())
    begun = await ledger.begin_attempt("A-2", "dev")
    flagged = await ledger.apply(
        flag_for_review(begun, ReviewReason.UNVERIFIED, now=ledger.now(), actor="reconciler")
    )
    ruled = await ledger.apply(
        resolve(flagged, as_sent=False, reason="gone\x00", operator="o\x00ps", now=ledger.now())
    )
    stored = await ledger.get_attempt(begun.dispatch_id)
    assert (stored, "o\ufffdps") == (ruled, stored.resolved_by)
    assert "gone\ufffd" == stored.evidence["reason"]
