"""A reconcile pass can never steal a newer attempt's message (two actions, one intent)."""

from __future__ import annotations

import asyncio
from typing import Any

from starebrain_actions import DeliveryState, Ledger, SmsIntent, Status
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
