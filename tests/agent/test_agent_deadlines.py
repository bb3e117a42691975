"""Time in the intent (issue 35, items 1 and 2), through ``SmsAgent`` and the worker, on both
backends, judged by the phone's own store: no SMS ever leaves at or after its action's
deadline, on any path (send, a call again, resume, the worker); an action whose deadline
passes with nothing sent ends EXPIRED with one ``action.expired`` event; a scheduled action
waits for its time (tests/ledger/test_ledger_deadlines.py: the same at the ledger, to the
microsecond, and an attempt in flight at the deadline settled by reads as ever)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, SmsIntent, Status
from starebrain_actions.core.exceptions import FingerprintConflict, InvalidInput, RetryRefused
from tests.agent.conftest import FAST, sent_rows
from tests.agent.test_worker import worker_for
from tests.conftest import until, until_time

TO = "+12025550100"


async def expired_events(ledger: Ledger, action_id: str) -> int:
    """How many ``action.expired`` events the ledger holds for the action."""
    events = await ledger.events(action_id=action_id, types=["action.expired"])
    return len(events)


async def test_a_send_before_its_deadline_goes_out_once_and_a_later_call_names_the_same(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], agent_for: Callable[..., Any]
) -> None:
    """A deadline given as a duration counts from the action's creation: the call repeated
    later names the same deadline (no conflict, nothing sent again); another duration is a
    changed intent; one SMS in the phone's store."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        first = await agent.send("D-1", TO, "in time", wait=10, not_after=timedelta(minutes=5))
        assert Status.SUCCEEDED is first.status
        action = first.summary.action
        assert action.intent.not_after == action.created_at + timedelta(minutes=5)
        # the clock moves on: "5 minutes" still means the same deadline
        await until_time(action.created_at + timedelta(milliseconds=50))
        again = await agent.send("D-1", TO, "in time", wait=10, not_after=timedelta(minutes=5))
        assert (Status.SUCCEEDED, 1) == (again.status, agent.dispatches)
        with pytest.raises(FingerprintConflict, match="the same message; its deadline"):
            await agent.send("D-1", TO, "in time", wait=10, not_after=timedelta(minutes=6))
    await phone.radio_idle()
    assert 1 == len(sent_rows(phone, TO, "in time")) == len(phone.transmissions)


async def test_a_phone_ready_only_after_the_deadline_never_sends_and_the_action_expires(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], agent_for: Callable[..., Any]
) -> None:
    """Locked until after the deadline: the sends before it find the phone not ready
    (nothing sent, nothing spent); once it passes, the unlocked phone sends nothing by any
    path (the call again, resume), the action is EXPIRED with one action.expired event,
    and no ruling lifts it."""
    phone = await sms_phone(screen="locked")
    async with agent_for(phone) as agent:
        before = await agent.send("D-2", TO, "too late", wait=0.5, not_after=timedelta(seconds=2))
        assert before.not_ready is not None and not sent_rows(phone, TO, "too late")
        deadline = before.summary.action.intent.not_after
        assert deadline is not None
        await until_time(deadline)
        phone.screen = "on"
        after = await agent.send("D-2", TO, "too late", wait=5, not_after=timedelta(seconds=2))
        assert Status.EXPIRED is after.status
        report = await agent.resume(wait=5)
        assert all(item.action_id != "D-2" for item in report.items if item.after is not None)
        summary = await agent.ledger.summary("D-2")
        assert Status.EXPIRED is summary.status and summary.action.expired_at is not None
        assert 1 == await expired_events(agent.ledger, "D-2")
        with pytest.raises(RetryRefused, match="deadline"):
            await agent.ledger.retry("D-2", operator="ana", reason="send it")
    await phone.radio_idle()
    assert [] == sent_rows(phone, TO, "too late") == phone.transmissions


async def test_a_deadline_already_passed_creates_nothing(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], agent_for: Callable[..., Any]
) -> None:
    """A new action whose deadline has passed is refused before anything is written."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        past = agent.ledger.now() - timedelta(seconds=1)
        with pytest.raises(InvalidInput, match="has passed already"):
            await agent.send("D-4", TO, "never", wait=1, not_after=past)
        assert [] == await agent.ledger.summaries()
    assert [] == phone.transmissions


async def test_the_worker_waits_for_the_schedule_and_never_sends_past_the_deadline(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    """Queued with a schedule 2 s ahead: the worker does not claim it before then, and
    sends it once after; queued with a deadline the locked phone outlives: never sent,
    EXPIRED, its event written by the worker's own pass; both counted in the store."""
    phone = await sms_phone()
    async with Ledger.open(db_path) as ledger:
        start = ledger.now()
        later = SmsIntent(recipient=TO, body="scheduled", not_before=start + timedelta(seconds=2))
        queued = await ledger.enqueue("S-1", later, FAST)
        assert queued.summary.action.queue_after == later.not_before
        soon = SmsIntent(recipient=TO, body="expiring", not_after=start + timedelta(seconds=2))
        await ledger.enqueue("S-2", soon, FAST)
    phone.screen = "locked"
    worker, _events = worker_for(db_path, [phone], adb_key_path, reconcile_every_s=0.5)
    running = asyncio.create_task(worker.run())
    try:
        async with Ledger.open(db_path) as ledger:
            await until_time(start + timedelta(seconds=2.5))

            # the phone stays locked until S-2 is EXPIRED (every attempt of it proven not
            # sent): a send script started before the deadline and slowed by the machine's
            # load may still press its keys after it, as guarantees.md says, and once the
            # screen was on it did (a full run beside a CPU hog)
            async def expired() -> bool:
                return (await ledger.summary("S-2")).action.expired_at is not None

            await until(expired, "S-2 EXPIRED")
            phone.screen = "on"
            for _ in range(300):
                one = await ledger.summary("S-1")
                two = await ledger.summary("S-2")
                if one.status is Status.SUCCEEDED and two.action.expired_at is not None:
                    break
                await asyncio.sleep(0.1)
            assert (Status.SUCCEEDED, Status.EXPIRED) == (one.status, two.status)
            sent_at = one.attempts[-1].dispatched_at
            assert later.not_before is not None and sent_at >= later.not_before
            assert all(record.dispatched_at >= later.not_before for record in one.attempts)
            assert 1 == await expired_events(ledger, "S-2")
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
    await phone.radio_idle()
    assert 1 == len(sent_rows(phone, TO, "scheduled"))
    assert [] == sent_rows(phone, TO, "expiring")
