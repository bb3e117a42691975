"""A reconcile pass can never steal a newer attempt's message (two actions, one intent)."""

from __future__ import annotations

import asyncio
from typing import Any

from starebrain_actions import DeliveryState, Ledger, ReviewReason, SmsIntent, Status
from starebrain_actions._android import AndroidPhone
from starebrain_actions._reconciler import reconcile_device

TO, BODY = "+1 202 555 0100", "Your table is ready"


class StartsATwinMidPass:
    """The real phone, except that during the pass's first read another sender starts a new
    attempt of a twin action on the device and its message lands on the phone."""

    def __init__(self, phone: AndroidPhone, ledger: Ledger, sim: Any) -> None:
        self._phone = phone
        self._ledger = ledger
        self._sim = sim
        self.twin: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._phone, name)

    async def read_outgoing(self, **window: Any) -> Any:
        if self.twin is None:
            self.twin = await self._ledger.begin_attempt("twin-2", self._phone.device)
            row = self._sim.store.insert_outgoing("+12025550100", BODY, date_ms=self._sim.now_ms())
            self._sim.store.mark_sent(row, date_sent_ms=self._sim.now_ms())
        return await self._phone.read_outgoing(**window)


async def test_a_pass_redoes_itself_when_an_attempt_starts_meanwhile(
    sms_phone: Any, agent_for: Any, adb_key_path: Any
) -> None:
    """A pass lists its attempts, then a twin's attempt starts and its SMS lands before the
    pass reads the phone: the pass must not record that row as a duplicate of the older twin
    (whose intent it matches); it is redone, and the row confirms the new attempt."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        first = await agent.send("twin-1", TO, BODY, wait=5)
        await agent.ledger.create_action("twin-2", SmsIntent(recipient=TO, body=BODY))
        racing = StartsATwinMidPass(agent.phone, agent.ledger, phone)
        await reconcile_device(agent.ledger, racing)  # type: ignore[arg-type]
        one = await agent.ledger.summary("twin-1")
        two = await agent.ledger.summary("twin-2")
    assert Status.SUCCEEDED == first.status
    assert (0, Status.SUCCEEDED) == (one.duplicates, two.status)
    record = two.latest
    assert record is not None and DeliveryState.CONFIRMED is record.delivery
    assert record.provider_object_id == phone.store.max_id()


async def test_the_owners_text_to_the_same_person_is_never_taken_for_ours(
    sms_phone: Any, agent_for: Any
) -> None:
    """Our message waits in the outbox (out of the restricted view's sight) while the phone's
    owner texts the same person something else: that row matches only the recipient and is
    dated after our send window, so it is noted, not taken as a MISMATCH, and nothing is sent
    again; our row confirms the attempt once it shows up."""
    phone = await sms_phone(root=False, send_delay_ms=2500)
    async with agent_for(phone) as agent:
        first = await agent.send("A-17", TO, BODY, wait=0.3)
        await asyncio.sleep(1.0)  # well after our keys: the owner types their own text
        owner = phone.store.insert_outgoing(
            "+12025550100", "Call me back pls", date_ms=phone.now_ms()
        )
        phone.store.mark_sent(owner, date_sent_ms=phone.now_ms())
        outcome = await agent.send("A-17", TO, BODY, wait=8)
    ours = [t for t in phone.transmissions if t.body == BODY]
    assert (Status.IN_FLIGHT, Status.SUCCEEDED) == (first.status, outcome.status)
    assert (1, 1) == (len(ours), len(outcome.summary.attempts))
    record = outcome.record
    assert record is not None and record.provider_object_id != owner


async def _owner_sends(phone: Any, body: str, date_ms: int) -> int:
    """The phone's owner sends ``body`` to TO through the messaging app (a SENT row)."""
    row = phone.store.insert_outgoing("+12025550100", body, date_ms=date_ms)
    phone.store.mark_sent(row, date_sent_ms=date_ms)
    return int(row)


async def test_the_owners_identical_text_inside_our_window_goes_to_review_not_resent(
    sms_phone: Any, agent_for: Any
) -> None:
    """Issue 10, section 1: the owner sends the very same text 10 ms after our keys, while our
    own row still waits in the outbox (out of the shell user's sight). The owner's row is the
    only one to see, and it may be taken for ours; but when ours shows up, the two identical
    rows inside our send window cannot be told apart: the action goes to review (AMBIGUOUS),
    both rows are recorded against it, and nothing is sent again."""
    phone = await sms_phone(root=False, send_delay_ms=1500)
    async with agent_for(phone) as agent:
        first = await agent.send("A-17", TO, BODY, wait=0.2)
        record = first.record
        assert record is not None and record.device_clock_ms is not None
        owner = await _owner_sends(phone, BODY, record.device_clock_ms + 10)
        await agent.send("A-17", TO, BODY, wait=3)
        await phone.wait_idle()
        await agent.reconcile()
        summary = await agent.ledger.summary("A-17")
        rows = await agent.ledger.duplicates("A-17")
    ours = [t for t in phone.transmissions if t.body == BODY]
    assert (1, 1) == (len(ours), len(summary.attempts))
    assert Status.SUCCEEDED == summary.status
    assert (ReviewReason.AMBIGUOUS,) == summary.review_reasons
    latest = summary.latest
    assert latest is not None
    claimed = {latest.provider_object_id, *(row["provider_object_id"] for row in rows)}
    assert owner in claimed and len(claimed) == 2
    assert ["unknown"] == [row["evidence"]["origin"] for row in rows]


async def test_the_owners_identical_text_after_our_window_is_never_ours(
    sms_phone: Any, agent_for: Any
) -> None:
    """The owner sends the same text well after our send window closed, while our row is in
    the outbox: that row is not ours, however well it matches. It is neither claimed nor
    recorded as a duplicate; our own row confirms the attempt when it shows up."""
    phone = await sms_phone(root=False, send_delay_ms=2500)
    async with agent_for(phone) as agent:
        first = await agent.send("A-17", TO, BODY, wait=0.2)
        record = first.record
        assert record is not None and record.device_clock_ms is not None
        window = record.evidence["send_window_ms"]
        owner = await _owner_sends(phone, BODY, record.device_clock_ms + window + 1_500)
        outcome = await agent.send("A-17", TO, BODY, wait=8)
        await phone.wait_idle()
        await agent.reconcile()
        summary = await agent.ledger.summary("A-17")
    ours = [t for t in phone.transmissions if t.body == BODY]
    assert (Status.SUCCEEDED, 1, 1) == (outcome.status, len(ours), len(summary.attempts))
    latest = summary.latest
    assert latest is not None and latest.provider_object_id not in (None, owner)
    assert (0, ()) == (summary.duplicates, summary.review_reasons)
