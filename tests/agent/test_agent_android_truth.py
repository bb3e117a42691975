"""The product on a phone that behaves as AOSP does: what real phones show, hide and do.

Each test counts what really left the phone (``phone.transmissions``: SMS, MMS and RCS
chat alike) and what its own stores hold, never only what the ledger says. Where the product
cannot prove an outcome it must make no claim: the attempt stays UNKNOWN and nothing is sent
again for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import attrs
import pytest

from starebrain_actions import (
    AcceptanceState,
    DeliveryState,
    Event,
    ProviderKind,
    RetryPolicy,
    ReviewReason,
    Status,
)
from starebrain_actions.core.decisions import MMS_NETWORK_WAIT, failed_after_sent
from starebrain_actions.core.exceptions import NotFound
from starebrain_actions.orchestration.agent import reconcile_pending
from tests.conftest import OUTBOX_FIRST

TO, BODY = "+1 202 555 0100", "Your code is 4821"
#: Grace 0: every unresolved attempt is UNKNOWN at once, the hardest case for "never resend".
NO_GRACE = RetryPolicy(
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
    maximum_attempts=3,
    grace_window=timedelta(0),
)


async def owner_texts_right_after(phone: Any, top: int) -> int:
    """As soon as a row above ``top`` shows up in the store (ours), the phone's owner sends
    the very same text to the same person: a SENT row dated now, inside our window."""
    for _ in range(10_000):  # polls the store every 2 ms, for 20 s at most
        if phone.store.max_id() != top:
            break
        await asyncio.sleep(0.002)
    row: int = phone.store.insert_outgoing("+12025550100", BODY, date_ms=phone.now_ms())
    phone.store.mark_sent(row, date_sent_ms=phone.now_ms())
    return row


async def sent_to(phone: Any, body: str, count: int = 1) -> list[str]:
    """Channels of every message that left the phone carrying ``body``, once ``count`` of them
    have (the radio sends after the app's row) and nothing more is on its way."""
    sent = await phone.wait_transmissions(lambda t: t.body == body, count=count, then_idle=True)
    return [t.channel for t in sent]


async def settle(agent: Any, db_path: Any, adb_key_path: Any, phone: Any, passes: int = 3) -> None:
    """Several reconcile passes, as cron would run them later."""
    await phone.wait_idle()
    for _ in range(passes):
        await reconcile_pending(agent.ledger, [phone.serial], key_path=str(adb_key_path))


@pytest.mark.parametrize("android", [10, 14, 15])
async def test_an_rcs_recipient_gets_one_message_and_the_attempt_stays_unknown(
    sms_phone: Any, agent_for: Any, db_path: Any, adb_key_path: Any, android: int
) -> None:
    """Google Messages sends to an RCS-reachable recipient as chat, which never lands in
    content://sms: one message out, the attempt UNKNOWN, and no second copy however many
    passes run (DESIGN, "What never lands in content://sms")."""
    phone = await sms_phone(app="google", rcs_recipients=[TO], android=android)
    async with agent_for(phone, policy=NO_GRACE) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=1)
        await settle(agent, db_path, adb_key_path, phone)
        again = await agent.send("A-17", TO, BODY, wait=0.5)
    stored = [row for row in phone.store.rows(types=[2]) if row.body == BODY]
    assert (["rcs"], [], 1) == (await sent_to(phone, BODY), stored, agent.dispatches)
    assert (Status.UNKNOWN, Status.UNKNOWN) == (outcome.status, again.status)


@pytest.mark.parametrize("read_as_system", [False, True])
async def test_a_text_converted_to_mms_is_confirmed_from_content_mms(
    sms_phone: Any, agent_for: Any, read_as_system: bool
) -> None:
    """A long text the app turns into MMS is found in content://mms (its own id space), with
    its recipient and parts: one message, confirmed (MmsProvider, TelephonyProvider
    android-15.0.0_r1), but never SUCCEEDED by time (issue 33, item 2: MmsService's network
    wait, 30 minutes by default, follows the settle window): VERIFYING until then."""
    body = "Your itinerary: " + " ".join(["gate B, seat 14C, boarding 10:30."] * 14)
    phone = await sms_phone(app="google")
    async with agent_for(phone, read_as_system=read_as_system) as agent:
        outcome = await agent.send("A-17", TO, body, wait=5)
    record = outcome.record
    assert record is not None
    assert ["mms"] == await sent_to(phone, body)
    assert (Status.VERIFYING, ProviderKind.MMS) == (outcome.status, record.provider_kind)
    assert [record.provider_object_id] == [m.id for m in phone.store.mms_messages()]
    assert outcome.settles_at is not None
    assert outcome.settles_at >= record.dispatched_at + MMS_NETWORK_WAIT


async def test_a_stale_draft_in_an_open_compose_window_is_never_sent(
    sms_phone: Any, agent_for: Any
) -> None:
    """An open compose window for the same number holds an older draft: the send clears the
    app's task (--activity-clear-task), so our text goes out and the draft does not
    (ActivityStarter.recycleTask would otherwise drop the new extras)."""
    phone = await sms_phone(app="google")
    phone.open_compose(TO.replace(" ", ""), "an old draft nobody meant to send")
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    assert Status.SUCCEEDED == outcome.status
    assert [BODY] == [t.body for t in await phone.wait_transmissions(count=1, then_idle=True)]


async def test_a_chooser_is_never_pressed(sms_phone: Any, agent_for: Any) -> None:
    """Two SMS apps and no default: am starts the system's chooser, the script stops before any
    key (a proof nothing was sent), and the wait ends with no message at all: the action
    waits for the phone (PLANNED), no attempt spent."""
    phone = await sms_phone(second_sms_app=True)
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    await phone.radio_idle()
    assert ([], Status.PLANNED) == (phone.transmissions, outcome.status)
    assert all(r.delivery is DeliveryState.FAILED for r in outcome.summary.attempts)
    assert "no key was pressed" in str(outcome.summary.attempts[0].evidence)


@pytest.mark.parametrize("screen", ["off", "locked"])
async def test_a_locked_or_sleeping_screen_sends_nothing(
    sms_phone: Any, agent_for: Any, db_path: Any, adb_key_path: Any, screen: str
) -> None:
    """Behind the keyguard the compose window is never drawn (am -W reports no clean launch),
    so the script stops before any key: nothing leaves the phone, and each attempt is proven
    FAILED by the keys never pressed, never by a missing row; the action waits for the phone
    (PLANNED)."""
    phone = await sms_phone(screen=screen)
    async with agent_for(phone, policy=NO_GRACE) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=1)
        await settle(agent, db_path, adb_key_path, phone)
    attempts = outcome.summary.attempts
    await phone.radio_idle()
    assert ([], Status.PLANNED) == (phone.transmissions, outcome.status)
    assert all("no key was pressed" in str(r.evidence) for r in attempts)


async def test_a_message_stuck_in_the_outbox_of_a_rooted_phone_is_never_sent_twice(
    sms_phone: Any, agent_for: Any, db_path: Any, adb_key_path: Any
) -> None:
    """adb root reads the restricted view (ProviderUtil.isAccessRestricted), so the queued row
    is invisible: the attempt is never failed by its absence and no second copy goes out."""
    phone = await sms_phone(root=True, faults=["stuck-outbox"], app=OUTBOX_FIRST)
    async with agent_for(phone, policy=NO_GRACE) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=1)
        await settle(agent, db_path, adb_key_path, phone)
        again = await agent.send("A-17", TO, BODY, wait=0.5)
    assert (1, 1) == (len(phone.store.rows(types=[4])), agent.dispatches)
    assert (Status.UNKNOWN, Status.UNKNOWN) == (outcome.status, again.status)


async def test_a_stuck_outbox_row_seen_through_the_system_uid_goes_to_review(
    sms_phone: Any, agent_for: Any, db_path: Any, adb_key_path: Any
) -> None:
    """Read through su 1000 the queued row is visible: it is the artifact, still PENDING, and
    past the grace window it goes to review (STUCK); nothing is sent again."""
    phone = await sms_phone(faults=["stuck-outbox"], app=OUTBOX_FIRST)
    async with agent_for(phone, policy=NO_GRACE) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=1)
    record = outcome.record
    assert record is not None
    assert (DeliveryState.PENDING, ReviewReason.STUCK) == (record.delivery, record.review_reason)
    await phone.radio_idle()  # a second copy, had one been sent, would be counted
    assert 1 == len(phone.transmissions) + len(phone.store.rows(types=[4]))


async def test_an_app_that_alters_every_text_is_stopped_after_the_same_mismatch_twice(
    sms_phone: Any, agent_for: Any
) -> None:
    """With "simple characters" on, the app strips accents from every text: the first copy is
    a MISMATCH and is resent, the second is rejected the same way, and the retries stop there
    for a person, budget or not."""
    body = "Café à 10h, bises"
    phone = await sms_phone(app="google")
    phone.app = attrs.evolve(phone.app, simple_characters=True)
    async with agent_for(
        phone,
        policy=RetryPolicy(
            settle_after=timedelta(milliseconds=300),
            framework_settle_after=timedelta(milliseconds=200),
            maximum_attempts=5,
        ),
    ) as agent:
        outcome = await agent.send("A-17", TO, body, wait=5)
    await phone.wait_idle()  # the app's row is written before the radio sends
    attempts = outcome.summary.attempts
    assert 2 == len(phone.transmissions) == len(attempts)
    assert all(r.acceptance is AcceptanceState.REJECTED for r in attempts)
    assert (Status.MISMATCH, True) == (outcome.status, outcome.summary.needs_review)


@pytest.mark.parametrize("fault", ["send-fails", "stuck-outbox"])
async def test_the_owners_identical_text_above_our_row_out_of_sight_is_never_claimed(
    sms_phone: Any, agent_for: Any, db_path: Any, adb_key_path: Any, fault: str
) -> None:
    """The chaos run's lie, replayed: read through the restricted view, our send fails (or
    stays queued) out of sight, and the owner's identical text lands right after it, dated
    inside our send window. The gap its ``_id`` leaves proves a row out of sight lies
    between the watermark and the owner's: the action never reads SUCCEEDED (our message
    never went out), and nothing is sent again. Past the grace window it is in review. (An
    app that writes its row OUTBOX first, so that ours is never in sight: the app writing it
    SENT first is the next test.)"""
    phone = await sms_phone(root=False, app=OUTBOX_FIRST)
    phone.inject_fault(fault)
    top = phone.store.max_id()

    owner = asyncio.create_task(owner_texts_right_after(phone, top))
    policy = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=3,
        grace_window=timedelta(seconds=1),
    )
    async with agent_for(phone, policy=policy) as agent, asyncio.timeout(60):
        first = await agent.send("A-17", TO, BODY, wait=0.5)
        owners_row = await owner
        await asyncio.sleep(1.0)
        await settle(agent, db_path, adb_key_path, phone)
        summary = await agent.ledger.summary("A-17")
    ours = phone.store.row(top + 1)
    assert ours is not None and ours.type in (4, 5) and owners_row == top + 2
    assert Status.SUCCEEDED not in (first.status, summary.status)
    assert (ReviewReason.AMBIGUOUS,) == summary.review_reasons
    assert (1, None) == (agent.dispatches, summary.attempts[0].provider_object_id)
    assert [top + 1] == summary.attempts[0].evidence["unseen_ids"]


async def until_verifying(agent: Any, action_id: str, *, within: float = 30.0) -> None:
    """Wait until a read confirmed the action's row, not yet settled (VERIFYING)."""
    for _ in range(int(within / 0.02)):
        with contextlib.suppress(NotFound):  # its receipt is not written yet
            if (await agent.ledger.summary(action_id)).status is Status.VERIFYING:
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{action_id} was not VERIFYING within {within} s")


@pytest.mark.parametrize("read_as_system", [False, True])
async def test_a_sent_row_the_app_later_marks_failed_never_reads_succeeded(
    sms_phone: Any, agent_for: Any, db_path: Any, adb_key_path: Any, read_as_system: bool
) -> None:
    """Issue 21, item 2, replayed: AOSP Messaging writes its row SENT before the radio sends
    (InsertNewMessageAction; SendMessageAction "optimistically setting … to SENT"), and the
    radio's failure rewrites it FAILED 0.2 s later. The first read finds the SENT row: the
    attempt is CONFIRMED but VERIFYING (sent by the phone, not yet settled), never
    SUCCEEDED. Read as the system uid the FAILED row is the phone's verdict: REJECTED, and
    the one retry is the one SMS. Through the restricted view the row just leaves the view:
    review (UNSETTLED), nothing resent."""
    build = {} if read_as_system else {"root": False}  # userdebug (su 1000), or a user build
    phone = await sms_phone(app="aosp", send_delay_ms=200, **build)
    policy = RetryPolicy(
        settle_after=timedelta(seconds=2),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=3,
        grace_window=timedelta(seconds=1),
    )
    phone.inject_fault("send-fails")
    async with agent_for(phone, policy=policy, read_as_system=read_as_system) as agent:
        # the radio fails the send only once a read has seen the SENT row (the condition,
        # not a race of the agent's first read against 0.2 s, lost on a loaded CI machine)
        phone.hold_radio()
        sending = asyncio.create_task(agent.send("A-17", TO, BODY, wait=8))
        await until_verifying(agent, "A-17")
        phone.release_radio()
        outcome = await sending
        await settle(agent, db_path, adb_key_path, phone)
        summary = await agent.ledger.summary("A-17")
        history = await agent.ledger.history("A-17")
    first = summary.attempts[0]
    assert DeliveryState.CONFIRMED == first.delivery  # the SENT row was seen
    assert Event.ACCEPT not in [
        entry.event for entry in history if entry.dispatch_id == first.dispatch_id
    ]
    if read_as_system:
        assert failed_after_sent(first)
        assert (Status.SUCCEEDED, 2) == (summary.status, len(summary.attempts))
        sent = await phone.wait_transmissions(count=1, then_idle=True)
        assert [BODY] == [t.body for t in sent]
    else:
        assert (ReviewReason.UNSETTLED, 1) == (first.review_reason, len(summary.attempts))
        assert Status.SUCCEEDED not in (outcome.status, summary.status)
        await phone.radio_idle()
        assert [] == phone.transmissions


async def test_a_sent_row_that_stays_sent_succeeds_only_once_settled(
    sms_phone: Any, agent_for: Any
) -> None:
    """The app's SENT row stays SENT: the sender reports VERIFYING (sent by the phone, not
    yet settled, with the time it settles: the settle window from the row's own date) until
    the settle window has passed, then SUCCEEDED, one SMS."""
    phone = await sms_phone(app="aosp", send_delay_ms=50)
    policy = RetryPolicy(
        settle_after=timedelta(seconds=1.5),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=3,
    )
    async with agent_for(phone, policy=policy) as agent:
        early = await agent.send("A-17", TO, BODY, wait=0.5)
        later = await agent.send("A-17", TO, BODY, wait=5)
    assert (Status.VERIFYING, True) == (early.status, early.settling)
    record = early.record
    assert record is not None and early.settles_at is not None
    # counted from the row's own date (the app writes it after the dispatch), on our clock
    assert record.provider_row_date_ms is not None and record.device_clock_ms is not None
    written = timedelta(milliseconds=record.provider_row_date_ms - record.device_clock_ms)
    assert timedelta(0) < written < timedelta(seconds=5)
    assert early.settles_at == record.dispatched_at + written + timedelta(seconds=1.5)
    assert (Status.SUCCEEDED, False) == (later.status, later.settling)
    assert [BODY] == [t.body for t in await phone.wait_transmissions(count=1, then_idle=True)]


@pytest.mark.parametrize("fault", ["wrong-recipient", "mangle-body"])
async def test_the_owners_identical_text_beside_our_altered_row_is_never_claimed(
    sms_phone: Any, agent_for: Any, db_path: Any, adb_key_path: Any, fault: str
) -> None:
    """The chaos run's second lie, replayed: the app sent ours altered (to a wrong number,
    or with its text changed), and the owner's identical text landed right after it inside
    our window. Our altered row, dated between our first and last key, is the evidence; the
    identical row is the owner's. The action never reads SUCCEEDED and goes to review."""
    phone = await sms_phone(root=False)
    phone.inject_fault(fault)
    top = phone.store.max_id()

    owner = asyncio.create_task(owner_texts_right_after(phone, top))
    async with agent_for(phone) as agent, asyncio.timeout(60):
        first = await agent.send("A-17", TO, BODY, wait=1)
        await owner
        await settle(agent, db_path, adb_key_path, phone)
        summary = await agent.ledger.summary("A-17")
    ours = phone.store.row(top + 1)
    assert (
        ours is not None
        and ours.type == 2
        and (ours.address, ours.body)
        != (
            "+12025550100",
            BODY,
        )
    )
    assert Status.SUCCEEDED not in (first.status, summary.status)
    assert (ReviewReason.AMBIGUOUS,) == summary.review_reasons
    assert [top + 1] == summary.attempts[0].evidence["altered_rows_in_keys_window"]
    assert 1 == agent.dispatches
