"""A reconcile pass can never steal a newer attempt's message (two actions, one intent)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from starebrain_actions import DeliveryState, Ledger, RetryPolicy, ReviewReason, SmsIntent, Status
from starebrain_actions.orchestration.reconciler import reconcile_device
from starebrain_actions.phone.android import AndroidPhone
from tests.conftest import OUTBOX_FIRST

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
        # settled at first sight (the race is what this test is about)
        await agent.ledger.create_action(
            "twin-2", SmsIntent(recipient=TO, body=BODY), RetryPolicy(settle_after=timedelta(0))
        )
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
    phone = await sms_phone(root=False, send_delay_ms=2500, app=OUTBOX_FIRST)
    async with agent_for(phone) as agent:
        first = await agent.send("A-17", TO, BODY, wait=0.3)
        await asyncio.sleep(1.0)  # well after our keys: the owner types their own text
        owner = phone.store.insert_outgoing(
            "+12025550100", "Call me back pls", date_ms=phone.now_ms()
        )
        phone.store.mark_sent(owner, date_sent_ms=phone.now_ms())
        outcome = await agent.send("A-17", TO, BODY, wait=8)
    ours = await phone.wait_transmissions(lambda t: t.body == BODY, then_idle=True)
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
        first_key = record.evidence["keys_window_ms"][0]
        owner = await _owner_sends(phone, BODY, first_key + 10)
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


class PassBeforeTheSecondSend:
    """The real phone; another process's reconcile pass runs right after the receipt of the
    second attempt, before its send (the attempt has no watermark yet)."""

    def __init__(self, phone: AndroidPhone, ledger: Ledger, reader: AndroidPhone) -> None:
        self._phone, self._ledger, self._reader = phone, ledger, reader
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._phone, name)

    async def dispatch(self, intent: Any, **fence: Any) -> Any:
        self.calls += 1
        if self.calls == 2:
            await reconcile_device(self._ledger, self._reader)
        return await self._phone.dispatch(intent, **fence)


async def test_an_earlier_attempts_failed_row_never_fails_the_next_attempt(
    sms_phone: Any, agent_for: Any, adb_key_path: Any
) -> None:
    """Found by the chaos test: the first send fails on the radio (a type 5 row, read through
    su 1000) and its attempt is FAILED; a pass running between the second attempt's receipt
    and its send took that old FAILED row as proof the second attempt failed too, and a third
    copy was sent. A FAILED attempt's row stays its own: one SMS goes out, SUCCEEDED."""
    # no radio delay: the app's row turns FAILED in the step of the phone's loop that wrote
    # it SENT, so no read sees it SENT, however loaded the machine (FAST's 0.3 s from the
    # receipt is past before the app writes it: a SENT sighting would settle at once)
    phone = await sms_phone(send_delay_ms=0)
    phone.inject_fault("send-fails")
    async with agent_for(phone) as agent:
        reader = await AndroidPhone.connect(
            phone.serial, key_path=adb_key_path, read_as_system=True
        )
        try:
            agent.phone = PassBeforeTheSecondSend(agent.phone, agent.ledger, reader)  # type: ignore[assignment]
            outcome = await agent.send("A-17", TO, BODY, wait=8)
        finally:
            await reader.close()
    await phone.wait_idle()
    assert Status.SUCCEEDED == outcome.status
    first, second = outcome.summary.attempts
    assert DeliveryState.FAILED == first.delivery
    assert DeliveryState.CONFIRMED == second.delivery
    assert 1 == sum(1 for t in phone.transmissions if t.body == BODY)


async def test_a_killed_senders_attempt_never_takes_the_owners_identical_text(
    sms_phone: Any, agent_for: Any, adb_key_path: Any
) -> None:
    """Found by the chaos test: a sender is killed right after its receipt (nothing reached
    the phone), and the owner then sends the very same text to the same person. The attempt's
    send window is unknown, so no row is attributed to it before its fence is read: the fence
    is voided (the script never ran), the attempt is FAILED, and the rerun sends ours; the
    owner's row is never taken for it."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await agent.ledger.create_action("A-17", SmsIntent(recipient=TO, body=BODY), agent.policy)
        epoch = await agent.phone.fence_epoch()
        await agent.ledger.begin_attempt("A-17", phone.serial, evidence={"fence_epoch": epoch})
        owner = await _owner_sends(phone, BODY, phone.now_ms())
        await reconcile_device(agent.ledger, agent.phone)  # too young to void: nothing taken
        waiting = await agent.ledger.summary("A-17")
        await reconcile_device(agent.ledger, agent.phone, void_after=timedelta(0))
        voided = await agent.ledger.summary("A-17")
        outcome = await agent.send("A-17", TO, BODY, wait=8)
    first = voided.attempts[0]
    assert (DeliveryState.PENDING, None) == (
        waiting.attempts[0].delivery,
        waiting.attempts[0].provider_object_id,
    )
    assert (DeliveryState.FAILED, "voided") == (first.delivery, first.evidence.get("fence"))
    assert Status.SUCCEEDED == outcome.status
    latest = outcome.record
    assert latest is not None and latest.provider_object_id not in (None, owner)
    assert 1 == len(await phone.wait_transmissions(lambda t: t.body == BODY, then_idle=True))


async def test_the_owners_text_before_our_first_key_is_no_mismatch(
    sms_phone: Any, agent_for: Any
) -> None:
    """Found by the chaos test: the app sends ours as RCS chat (nothing in content://sms) and,
    while the compose window is still opening, the owner texts the same person something
    else. That row lies inside the round trip but before our first key: the window the
    script's own clock gives (first key to last key) excludes it, so it is no MISMATCH and
    nothing is sent again; the attempt goes to review."""
    phone = await sms_phone(focus_delay_ms=600)
    phone.inject_fault("rcs-send")
    policy = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=3,
        initial_interval=timedelta(0),
        grace_window=timedelta(seconds=1),
        unverified_after=timedelta(seconds=3),
    )
    async with agent_for(phone, policy=policy) as agent:
        # past unverified_after (3 s): a MISMATCH would have been resent by then
        sending = asyncio.create_task(agent.send("A-17", TO, BODY, wait=4))
        await asyncio.sleep(0.3)  # the round trip is under way, the app not yet focused
        await _owner_sends(phone, "Call me back pls", phone.now_ms())
        outcome = await sending
    assert 1 == len(outcome.summary.attempts)
    ours = await phone.wait_transmissions(lambda t: t.body == BODY, then_idle=True)
    assert [("rcs", BODY)] == [(t.channel, t.body) for t in ours]
    assert outcome.status is not Status.SUCCEEDED
    record = outcome.record
    assert record is not None and record.provider_object_id is None


async def test_the_owners_other_text_just_after_our_last_key_is_no_mismatch(
    sms_phone: Any, agent_for: Any
) -> None:
    """Found by the chaos test in CI: ours went out as RCS chat (nothing in content://sms) and
    the owner's other text to the same person is dated 50 ms after our last key. A half match
    leads to a resend, so it needs the strict window (first key to last key, no margin):
    that row is no MISMATCH, and nothing is sent again."""
    phone = await sms_phone()
    phone.inject_fault("rcs-send")
    async with agent_for(phone) as agent:
        first = await agent.send("A-17", TO, BODY, wait=0.2)
        record = first.record
        assert record is not None
        last_key = record.evidence["keys_window_ms"][1]
        await _owner_sends(phone, "Call me back", last_key + 50)
        again = await agent.send("A-17", TO, BODY, wait=2)
    assert 1 == len(again.summary.attempts)
    ours = await phone.wait_transmissions(lambda t: t.body == BODY, then_idle=True)
    assert [("rcs", BODY)] == [(t.channel, t.body) for t in ours]
    latest = again.record
    assert latest is not None and latest.provider_object_id is None
