"""The seed's failure cases through the Python API, against the simulated phone."""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import (
    AcceptanceState,
    DeliveryState,
    Event,
    FingerprintConflict,
    InvalidInput,
    Ledger,
    ReviewReason,
    Status,
)
from starebrain_actions.core.exceptions import LookupFailed
from starebrain_actions.orchestration.agent import SmsAgent, reconcile_pending
from starebrain_actions.orchestration.reconciler import reconcile_device
from starebrain_actions.orchestration.watched import SCRIPT_FINISH_WITHIN
from starebrain_actions.phone.android import AndroidPhone, PhoneUnavailable
from tests.conftest import OUTBOX_FIRST

from .conftest import FAST, sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"


async def test_the_same_approved_action_twice_sends_one_sms(sms_phone: Any, agent_for: Any) -> None:
    """Sending one action id twice sends one SMS; the second call returns the first's record."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        first = await agent.send("A-17", TO, BODY, wait=5)
        second = await agent.send("A-17", TO, BODY, wait=5)
    assert Status.SUCCEEDED == first.status
    assert Status.SUCCEEDED == second.status
    assert first.record == second.record
    assert 1 == len(sent_rows(phone, TO, BODY))
    assert 1 == agent.dispatches


async def test_a_lost_reply_is_one_sms_and_succeeds_after_reconcile(
    sms_phone: Any, agent_for: Any
) -> None:
    """The link stalls after the send (the script runs to its end on the phone, its reply
    never comes): the attempt stays PENDING, the fence's stage markers bound its window, and
    a read confirms the one SMS."""
    phone = await sms_phone(root=False)
    phone.inject_fault("hang-after-send")
    async with agent_for(phone, command_timeout_s=3.0) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=20)
        ledger = agent.ledger
        history = [entry.event for entry in await ledger.history("A-17")]
    assert Status.SUCCEEDED == outcome.status
    # the timed-out send is noted; the fence check notes that its script ran, then the read
    # confirms it
    assert [Event.CREATED, Event.NOTE_ERROR] == history[:2]
    assert [Event.CONFIRM, Event.ACCEPT] == history[-2:]
    assert {Event.NOTE_ERROR} == set(history[2:-2]) | {Event.NOTE_ERROR}
    assert outcome.record is not None
    assert "outcome unknown" in (outcome.record.last_error or "")
    assert [outcome.record.provider_object_id] == sent_rows(phone, TO, BODY)


async def test_a_script_killed_right_after_the_send_key_goes_to_review_never_resent(
    sms_phone: Any, agent_for: Any
) -> None:
    """adbd restarts right after the send key (init kills the script before it records its
    keys: a dropped connection alone would not, see test_agent_lost_reply), so its window
    stays open, and a matching row could be the owner's as well as ours (issue 10: an
    identical row whose origin cannot be told apart goes to review). Until its keys marker
    can no longer come (SCRIPT_FINISH_WITHIN) no row is attributed; after that the action
    goes to review as AMBIGUOUS, one SMS went out, nothing is resent. A send waiting on it
    returns as soon as it is in review (no read can settle it), not when its wait runs out."""
    phone = await sms_phone(root=False)
    phone.drop_after_command("input", nth=2, adbd_restarts=True)
    async with agent_for(phone) as agent, asyncio.timeout(120):
        first = await agent.send("A-17", TO, BODY, wait=2)
        later = agent.ledger.now() + SCRIPT_FINISH_WITHIN
        await reconcile_device(agent.ledger, agent.phone, now=later)
        outcome = await agent.ledger.summary("A-17")
        again = await agent.send("A-17", TO, BODY, wait=3600)
    assert () == first.summary.review_reasons
    assert (ReviewReason.AMBIGUOUS,) == outcome.review_reasons
    assert (ReviewReason.AMBIGUOUS,) == again.summary.review_reasons
    assert again.status in (Status.IN_FLIGHT, Status.UNKNOWN)
    assert (1, 1) == (len(again.summary.attempts), len(sent_rows(phone, TO, BODY)))
    record = outcome.latest
    assert record is not None and record.evidence.get("fence") == "claimed"


async def test_changed_arguments_conflict_and_send_nothing(sms_phone: Any, agent_for: Any) -> None:
    """Reusing an action id with another body raises FingerprintConflict; nothing is sent."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await agent.send("A-17", TO, BODY, wait=5)
        before = len(phone.commands_run)
        with pytest.raises(FingerprintConflict):
            await agent.send("A-17", TO, "Your code is 0000", wait=5)
        with pytest.raises(FingerprintConflict):
            await agent.send("A-17", "+1 202 555 0199", BODY, wait=5)
    assert not any("am start" in command for command in phone.commands_run[before:])
    assert 1 == len(phone.store.rows(types=[2])) - 1  # the seeded sent row plus ours


def _concurrent_sender(db: str, serial: str, key: str, barrier: Any, out: Any) -> None:
    """Child process: wait at the barrier, then send action A-17; report what happened."""

    async def run() -> str:
        async with SmsAgent.open(
            db=db,
            device=serial,
            key_path=key,
            policy=FAST,
            poll_interval_s=0.05,
            connect_timeout_s=15,
        ) as agent:
            barrier.wait(timeout=60)
            outcome = await agent.send("A-17", TO, BODY, wait=30)
            return f"{outcome.status.value}:{agent.dispatches}"

    try:
        out.put(asyncio.run(run()))
    except BaseException as exc:  # report it, and release the other sender at once
        barrier.abort()
        out.put(f"ERROR:{type(exc).__name__}: {exc}")
        raise


@pytest.mark.slow
async def test_two_concurrent_senders_in_separate_processes_send_one_sms(
    sms_phone: Any, db_path: Path, adb_key_path: Path
) -> None:
    """Two processes send the same action at the same moment: one SMS, both see SUCCEEDED."""
    phone = await sms_phone()
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(2), context.Queue()
    processes = [
        context.Process(
            target=_concurrent_sender,
            args=(str(db_path), phone.serial, str(adb_key_path), barrier, out),
            daemon=True,
        )
        for _ in range(2)
    ]
    for process in processes:
        process.start()
    results = []
    for _ in processes:
        results.append(await asyncio.to_thread(out.get, True, 60))
    for process in processes:
        await asyncio.to_thread(process.join, 60)
    assert [0, 0] == [process.exitcode for process in processes], results
    assert ["SUCCEEDED", "SUCCEEDED"] == sorted(r.split(":")[0] for r in results), results
    assert 1 == sum(int(r.split(":")[1]) for r in results)
    assert 1 == len(sent_rows(phone, TO, BODY))


async def test_a_failed_send_is_retried_and_counted_against_the_budget(
    sms_phone: Any, agent_for: Any
) -> None:
    """A type-5 FAILED row proves the send failed (rooted phone): one retry, one SMS."""
    # no radio delay: the app's row turns FAILED in the same step of the phone's loop that
    # wrote it SENT, so no read ever sees it SENT (with FAST's 0.3 s from the receipt long
    # past when the app writes it, a SENT sighting would be settled at once: SUCCEEDED).
    # A SENT row the radio fails later: test_agent_android_truth
    phone = await sms_phone(send_delay_ms=0)
    phone.inject_fault("send-fails")
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    first, second = outcome.summary.attempts
    assert DeliveryState.FAILED == first.delivery
    assert DeliveryState.CONFIRMED == second.delivery
    assert Status.SUCCEEDED == outcome.status
    assert 1 == len(sent_rows(phone, TO, BODY))


async def test_shell_mode_never_proves_absence(sms_phone: Any, agent_for: Any) -> None:
    """As the shell user a failed row is invisible: the app's SENT row, once seen, leaves the
    view before it settles (review UNSETTLED); never seen, the attempt stays UNKNOWN. Never
    retried either way."""
    phone = await sms_phone(root=False)
    phone.inject_fault("send-fails")
    # the app writes its row 0.2 s to 1 s after the receipt, past FAST's 0.3 s: a sighting
    # of it SENT would be settled at once (SUCCEEDED, for a message the radio then fails).
    # An hour cannot pass in this test: a row seen SENT stays VERIFYING until it leaves the
    # view, whenever the radio gets to fail it
    policy = attrs.evolve(FAST, settle_after=timedelta(hours=1))
    async with agent_for(phone, policy=policy) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=2)
        await phone.radio_idle()  # the app's failed send ends after its delay
        await agent.reconcile()  # a read after it: a row seen SENT is out of view now
        summary = await agent.ledger.summary("A-17")
    assert outcome.status in (Status.UNKNOWN, Status.VERIFYING)
    assert summary.status in (Status.UNKNOWN, Status.VERIFYING)
    if summary.status is Status.VERIFYING:
        assert (ReviewReason.UNSETTLED,) == summary.review_reasons
    assert 1 == agent.dispatches
    assert 1 == len(summary.attempts)
    assert [] == phone.transmissions


async def test_a_mangled_body_is_a_mismatch_then_resent(sms_phone: Any, agent_for: Any) -> None:
    """The app changes the text: attempt 1 is CONFIRMED/REJECTED, attempt 2 succeeds."""
    phone = await sms_phone()
    phone.inject_fault("mangle-body")
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    first = outcome.summary.attempts[0]
    assert (DeliveryState.CONFIRMED, AcceptanceState.REJECTED) == (
        first.delivery,
        first.acceptance,
    )
    assert "body" in str(first.evidence.get("reason"))
    assert Status.SUCCEEDED == outcome.status


async def test_a_duplicate_by_the_app_is_recorded_and_flagged(
    sms_phone: Any, agent_for: Any
) -> None:
    """The app sends the message twice: one attempt, the second row recorded against it and
    flagged for review as AMBIGUOUS (on the UI path the messaging app writes both copies, so a
    second copy cannot be told from its owner's identical text), and nothing resent."""
    phone = await sms_phone()
    phone.inject_fault("duplicate-send")
    async with agent_for(phone) as agent:
        await agent.send("A-17", TO, BODY, wait=5)
        await phone.wait_idle()
        await agent.reconcile()
        summary = await agent.ledger.summary("A-17")
        rows = await agent.ledger.duplicates("A-17")
    assert 2 == len(sent_rows(phone, TO, BODY))
    assert 1 == len(summary.attempts)
    assert 1 == summary.duplicates
    assert (ReviewReason.AMBIGUOUS,) == summary.review_reasons
    assert ["unknown"] == [row["evidence"]["origin"] for row in rows]


async def test_a_hang_after_send_is_resolved_by_reading(sms_phone: Any, agent_for: Any) -> None:
    """The command hangs after the phone sent: a timeout, then a read confirms one SMS."""
    phone = await sms_phone()
    phone.inject_fault("hang-after-send")
    async with agent_for(phone, command_timeout_s=3.0) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=20)
    assert Status.SUCCEEDED == outcome.status
    assert 1 == len(sent_rows(phone, TO, BODY))


async def test_bad_input_is_refused_before_anything_is_written(
    sms_phone: Any, agent_for: Any
) -> None:
    """An empty body or a recipient without digits raises InvalidInput; no action exists."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        with pytest.raises(InvalidInput):
            await agent.send("A-1", TO, "   ")
        with pytest.raises(InvalidInput):
            await agent.send("A-1", "call me", BODY)
        assert [] == await agent.ledger.summaries()


async def test_an_unreachable_phone_is_refused_at_open(db_path: Path, adb_key_path: Path) -> None:
    """Opening an agent on a closed port raises PhoneUnavailable and records nothing."""
    with pytest.raises(PhoneUnavailable):
        async with SmsAgent.open(db=db_path, device="127.0.0.1:9", key_path=adb_key_path):
            pass


async def test_device_down_during_reconcile_fails_nothing(
    sms_phone: Any, agent_for: Any, db_path: Path, adb_key_path: Path
) -> None:
    """With the phone gone, a reconcile pass reports it unreachable and nothing becomes FAILED."""
    phone = await sms_phone(root=False)
    async with agent_for(phone, command_timeout_s=0.5) as agent:
        phone.app = OUTBOX_FIRST
        phone.inject_fault("stuck-outbox")  # queued for good, out of the shell user's sight
        outcome = await agent.send("A-17", TO, BODY, wait=0.3)
    assert outcome.status in (Status.IN_FLIGHT, Status.UNKNOWN)
    await phone.stop()
    async with Ledger.open(db_path) as ledger:
        result = await reconcile_pending(ledger, key_path=str(adb_key_path))
        (report,) = result.devices
        record = (await ledger.attempts("A-17"))[0]
    assert (False, 1) == (report.reachable, report.in_flight)
    assert DeliveryState.PENDING == record.delivery
    assert "reconcile read failed" in (record.last_error or "")


async def test_reconcile_pass_reads_each_device_a_bounded_number_of_times(
    sms_phone: Any, agent_for: Any, db_path: Path, adb_key_path: Path
) -> None:
    """Twenty confirmed attempts and one in flight on a device cost one read in a pass."""
    phone = await sms_phone(latency_ms=0)
    async with agent_for(phone) as agent:
        for n in range(20):
            await agent.send(f"A-{n}", TO, f"message {n}", wait=5)
        phone.app = OUTBOX_FIRST
        phone.inject_fault("stuck-outbox")
        await agent.send("A-stuck", TO, "stuck", wait=0.2)
    async with Ledger.open(db_path) as ledger:
        result = await reconcile_pending(ledger, key_path=str(adb_key_path))
    (report,) = result.devices
    assert report.reachable
    assert report.round_trips <= 2
    assert 1 == report.in_flight


def test_module_has_no_hidden_io_at_import() -> None:
    """Importing the agent does not connect anywhere (no event loop is needed)."""
    assert "starebrain_actions.orchestration.agent" in sys.modules or __import__(
        "starebrain_actions.orchestration.agent"
    )


_ = SimulatedPhone


async def test_a_polling_sender_reads_only_above_its_own_watermark(
    sms_phone: Any, agent_for: Any
) -> None:
    """While waiting on its attempt, the agent's reads start at that attempt's watermark, not
    at earlier confirmed messages (so a busy phone's history does not grow each poll)."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        for n in range(5):
            await agent.send(f"A-{n}", TO, f"message {n}", wait=5)
        phone.inject_fault("stuck-outbox")
        sent_before = len(phone.commands_run)
        outcome = await agent.send("A-stuck", TO, "stuck", wait=0.5)
    assert outcome.record is not None and outcome.record.watermark_id is not None
    watermark = outcome.record.watermark_id
    reads = [c for c in phone.commands_run[sent_before:] if "content query" in c and "OR" in c]
    assert reads
    assert all(f"_id = {watermark}" in command for command in reads)


async def test_a_mismatch_is_explained_without_quoting_the_body(
    sms_phone: Any, agent_for: Any
) -> None:
    """The REJECTED attempt's evidence says where the body differs, never which characters."""
    phone = await sms_phone()
    phone.inject_fault("mangle-body")
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    why = outcome.summary.attempts[0].evidence["why"]
    assert any("first difference at character" in item for item in why), why
    assert not any("U+" in item for item in why)


async def test_a_read_that_fails_after_connecting_names_the_phone_once(
    sms_phone: Any, adb_key_path: Path
) -> None:
    """The link goes down after the connection was made: the read's error names the phone
    once, as ``<serial>: <what happened>`` (the bridge's message already starts with it)."""
    phone = await sms_phone(root=False)
    android = await AndroidPhone.connect(phone.serial, key_path=adb_key_path, connect_timeout_s=15)
    try:
        phone.disable_tcpip()
        with pytest.raises(LookupFailed) as failed:
            await android.read_outgoing(after_id=1, anchor_date_ms=None)
    finally:
        await android.close()
    text = str(failed.value)
    assert text.startswith(f"{phone.serial}: ")
    assert 1 == text.count(phone.serial), text
