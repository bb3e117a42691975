"""Sending through the framework (``service call isms`` as the shell user): no UI, no RCS, and
rows the product can tell from the owner's by ``creator``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from starebrain_actions import Status

TO, BODY = "+1 202 555 0100", "Your code is 4821"
SHELL = "com.android.shell"


@pytest.mark.parametrize("android", [10, 14, 15])
async def test_a_framework_send_is_one_sms_written_by_the_shell(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """The framework writes the sent row with creator com.android.shell; no am, no key event,
    and an RCS-reachable recipient still gets an SMS (SMSDispatcher, ISms.sendTextForSubscriber
    transaction 6 on Android 10, 5 on 11 to 15)."""
    phone = await sms_phone(android=android, rcs_recipients=[TO])
    async with agent_for(phone, send_path="framework") as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    record = outcome.record
    assert record is not None
    assert (Status.SUCCEEDED, "framework") == (outcome.status, record.evidence.get("send_path"))
    sent = await phone.wait_transmissions(count=1, then_idle=True)
    assert [("sms", SHELL)] == [(t.channel, t.app) for t in sent]
    assert [SHELL] == [r.creator for r in phone.store.rows(types=[2]) if r.body == BODY]
    assert not any("am start" in command for command in phone.commands_run)


async def test_the_owners_identical_text_is_never_taken_for_ours(
    sms_phone: Any, agent_for: Any
) -> None:
    """The phone's owner sends the very same text to the same number right after ours: on the
    framework path the owner's row (written by the messaging app) is never our artifact, and
    ours is confirmed."""
    phone = await sms_phone(send_delay_ms=300)
    async with agent_for(phone, send_path="framework") as agent:
        sending = asyncio.create_task(agent.send("A-17", TO, BODY, wait=5))
        await asyncio.sleep(0.1)  # our command is on the phone, its row not yet written
        owner_row = phone.store.insert_outgoing("+12025550100", BODY, date_ms=phone.now_ms())
        phone.store.mark_sent(owner_row, date_sent_ms=phone.now_ms())
        outcome = await sending
    record = outcome.record
    assert record is not None
    ours = [r._id for r in phone.store.rows(types=[2]) if r.creator == SHELL]
    assert (Status.SUCCEEDED, ours, 0) == (
        outcome.status,
        [record.provider_object_id],
        outcome.summary.duplicates,
    )
    assert owner_row != record.provider_object_id


async def test_a_row_the_framework_writes_long_after_the_call_is_still_ours(
    sms_phone: Any, agent_for: Any
) -> None:
    """The framework dates its row when the radio answers (SMSDispatcher.SmsTracker
    .persistSentMessageIfRequired puts System.currentTimeMillis(), frameworks/opt/telephony),
    here 2.5 s after the call returned, well past the send window: on this path the date
    proves nothing and ``creator`` decides, so the row confirms the attempt."""
    phone = await sms_phone(send_delay_ms=2500)
    async with agent_for(phone, send_path="framework") as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=10)
    record = outcome.record
    assert record is not None and record.device_clock_ms is not None
    row = next(r for r in phone.store.rows(types=[2]) if r.creator == SHELL)
    window = record.evidence["send_window_ms"]
    assert row.date is not None and row.date > record.device_clock_ms + window
    assert (Status.SUCCEEDED, row._id) == (outcome.status, record.provider_object_id)


@pytest.mark.parametrize("send_path", ["ui", "framework"])
async def test_no_transition_is_stamped_before_the_row_it_cites(
    sms_phone: Any, agent_for: Any, send_path: str
) -> None:
    """Every command takes 150 ms on the phone and the framework writes its row 60 ms after
    the call: the sender's first read starts before the row exists and finds it. The
    confirmation is stamped when it is decided, after that read, never before the row's own
    date (both clocks are this machine's): an auditor never sees an effect before its cause
    (issue 21, item 9)."""
    phone = await sms_phone(latency_ms=150, send_delay_ms=60)
    async with agent_for(phone, send_path=send_path) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=10)
        history = await agent.ledger.history("A-17")
    assert Status.SUCCEEDED == outcome.status
    [confirm] = [entry for entry in history if entry.event.value == "confirm"]
    row_date_ms = confirm.evidence["date_ms"]
    assert isinstance(row_date_ms, int)
    assert row_date_ms <= int(confirm.at.timestamp() * 1000)
    stamps = [entry.at for entry in history]
    assert sorted(stamps) == stamps


@pytest.mark.parametrize(
    "fault", ["drop-after-send", "hang-after-send", "drop-before-send", "reboot"]
)
async def test_a_framework_send_whose_reply_is_lost_is_one_sms_never_resent(
    sms_phone: Any, agent_for: Any, fault: str
) -> None:
    """The link's faults meet the framework path too: the call sends, then the connection
    resets, the link stalls, or the phone reboots before the reply (or the connection resets
    as the call starts: the script ignores SIGHUP and the call runs on). However often the
    agent is asked again, the phone sends the message once, and no attempt is spent on it
    but the first; a read proves it (after a reboot, once the phone is unlocked). The faults
    are the link's, as on the app's path: closing the stream hangs the script up through its
    PTY (``StartSubprocess``, ``shell_service.cpp``, system/core android-10.0.0_r30 and
    packages/modules/adb 11 to 15) and the send script ignores SIGHUP (mksh ``histrap.c``;
    ``android_bridge._fence.run_to_the_end``), so ``service call`` runs on once started."""
    phone = await sms_phone(android=14)
    phone.inject_fault(fault)
    async with agent_for(phone, send_path="framework", command_timeout_s=3.0) as agent:
        first = await agent.send("A-17", TO, BODY, wait=4)
    if fault == "reboot":
        await phone.enable_tcpip()  # adb tcpip again, over USB
        phone.unlock_user()  # the owner unlocks it: the SMS store opens
    await phone.wait_idle()
    async with agent_for(phone, send_path="framework") as agent, asyncio.timeout(60):
        again = await agent.send("A-17", TO, BODY, wait=10)
    sent = await phone.wait_transmissions(count=1, then_idle=True)
    assert [("sms", SHELL, BODY)] == [(t.channel, t.app, t.body) for t in sent]
    assert 1 == len(again.summary.attempts), (first.status, again.summary)
    assert Status.SUCCEEDED is again.status
    assert first.status is not Status.FAILED
    assert first.record is not None
    if fault == "reboot":
        assert 1 == phone.reboots
    else:  # the reply was lost: the first attempt saw no outcome, and it was read instead
        assert "outcome unknown" in str(first.record.evidence.get("error")), first.record
