"""Events out (issue 34): every change has its event, written with it (DESIGN.md
invariant 10), on both backends, read after a cursor."""

from __future__ import annotations

import asyncio
from typing import Any

from starebrain_actions import Ledger, Status
from starebrain_actions.core.events import LedgerEvent
from starebrain_actions.render.values import event_data

from .conftest import sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"


async def _all_events(ledger: Ledger) -> list[LedgerEvent]:
    return [event async for event in ledger.follow_events(follow=False)]


async def _history_sequences(ledger: Ledger) -> list[int]:
    def work(db: Any) -> list[int]:
        return [int(row[0]) for row in db.execute("SELECT sequence FROM history ORDER BY 1")]

    return await ledger._run(work)


async def test_a_send_writes_its_events_in_order_one_for_each_change(
    sms_phone: Any, agent_for: Any
) -> None:
    """A send that succeeds: action.created, the receipt, the submission, sent, succeeded,
    in that order, each history row reported by an event, positions 1, 2, 3..."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
        events = await _all_events(agent.ledger)
        sequences = await _history_sequences(agent.ledger)
    assert Status.SUCCEEDED == outcome.status
    assert 1 == len(sent_rows(phone, TO, BODY))
    kinds = [event.type for event in events]
    assert "action.created" == kinds[0]
    assert kinds.index("attempt.created") < kinds.index("action.sent")
    assert kinds.index("action.sent") < kinds.index("action.succeeded")
    assert 1 == kinds.count("action.succeeded")
    assert list(range(1, len(events) + 1)) == [event.position for event in events]
    assert len({event.event_id for event in events}) == len(events)
    # every history row has its event, and the events follow the history's order
    reported = [event.history_sequence for event in events if event.history_sequence]
    assert sequences == sorted(set(reported))
    assert reported == sorted(reported)
    assert {"A-17"} == {event.action_id for event in events}
    succeeded = next(event for event in events if event.type == "action.succeeded")
    assert phone.serial == succeeded.device
    assert 1 == succeeded.data["attempt"]


async def test_a_cursor_resumes_where_it_stopped_and_filters_hold(
    sms_phone: Any, agent_for: Any
) -> None:
    """Reading after a position gives exactly the later events; type and action filters
    keep their order."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await agent.send("A-1", TO, BODY, wait=5)
        first = await _all_events(agent.ledger)
        cursor = first[-1].position
        await agent.send("A-2", TO, "Your code is 1111", wait=5)
        later = await agent.ledger.events(after=cursor)
        succeeded = await agent.ledger.events(types=["action.succeeded"])
        families = await agent.ledger.events(types=["attempt.*"], action_id="A-2")
    assert later and {"A-2"} == {event.action_id for event in later}
    assert [cursor + n for n in range(1, len(later) + 1)] == [e.position for e in later]
    assert ["A-1", "A-2"] == [event.action_id for event in succeeded]
    assert families and all(e.type.startswith("attempt.") for e in families)
    assert {"A-2"} == {event.action_id for event in families}


async def test_a_follower_sees_new_events_as_they_are_committed(
    sms_phone: Any, agent_for: Any
) -> None:
    """``SmsAgent.events`` (``Ledger.follow_events``) waits for new events and yields them
    in order: a send made once the follower has read everything before it still reaches it."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        seen: list[LedgerEvent] = []

        async def follow() -> None:
            async for event in agent.events(poll_s=0.05):
                seen.append(event)
                if (event.action_id, event.type) == ("A-10", "action.succeeded"):
                    return

        def has(action_id: str) -> bool:
            return any((e.action_id, e.type) == (action_id, "action.succeeded") for e in seen)

        follower = asyncio.create_task(follow())
        await agent.send("A-9", TO, BODY, wait=5)
        for _ in range(500):  # the follower has read A-9's events: A-10's come after
            if has("A-9"):
                break
            await asyncio.sleep(0.02)
        assert has("A-9")
        await agent.send("A-10", TO, "Your code is 1010", wait=5)
        await asyncio.wait_for(follower, 10)
    assert "action.created" == seen[0].type
    assert [event.position for event in seen] == sorted(event.position for event in seen)


async def test_a_locked_phone_and_an_outage_are_phone_events_not_failures(
    sms_phone: Any, agent_for: Any
) -> None:
    """A refusal behind the keyguard is phone.not_ready (with the check that refused), a
    phone that refuses connections phone.unreachable: neither is attempt.failed or
    action.failed, and the sends that follow succeed."""
    phone = await sms_phone(screen="locked")
    async with agent_for(phone, connect_timeout_s=0.5) as agent:

        async def unlock_once_refused() -> None:
            # the owner unlocks once a send has met the keyguard, whatever the load
            for _ in range(2000):
                if await agent.ledger.events(types=["phone.not_ready"]):
                    break
                await asyncio.sleep(0.01)
            phone.screen = "on"

        unlocking = asyncio.create_task(unlock_once_refused())
        locked = await agent.send("A-1", TO, "after the unlock", wait=30)
        await unlocking
        await agent.phone.fence_epoch()
        phone.disable_tcpip()

        async def back_once_refused() -> None:
            # the phone comes back once an attempt has met the outage, whatever the load
            for _ in range(2000):
                if any(e.type == "phone.unreachable" for e in await agent.ledger.events()):
                    break
                await asyncio.sleep(0.01)
            await phone.enable_tcpip()

        back = asyncio.create_task(back_once_refused())
        outage = await agent.send("A-2", TO, "after the outage", wait=30)
        await back
        events = await _all_events(agent.ledger)
    assert (Status.SUCCEEDED, Status.SUCCEEDED) == (locked.status, outage.status)
    first = [event for event in events if event.action_id == "A-1"]
    second = [event for event in events if event.action_id == "A-2"]
    not_ready = [event for event in first if event.type == "phone.not_ready"]
    assert not_ready and {"keyguard_showing"} == {
        event.data["evidence"]["not_ready"] for event in not_ready
    }
    assert any(event.type == "phone.unreachable" for event in second)
    assert not [e for e in events if e.type in ("attempt.failed", "action.failed")]
    assert ["action.succeeded"] * 2 == [
        event.type for event in events if event.type == "action.succeeded"
    ]


async def test_the_attempt_that_spends_the_budget_is_action_failed(
    sms_phone: Any, agent_for: Any
) -> None:
    """Every send fails on the radio: the attempts before the last are attempt.failed, the
    one that spends the budget action.failed, with the command that grants more."""
    phone = await sms_phone(send_delay_ms=0)
    phone.inject_fault("send-fails", 10)
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-1", TO, BODY, wait=10)
        events = await _all_events(agent.ledger)
    assert Status.FAILED == outcome.status
    failures = [event for event in events if event.type.endswith(".failed")]
    assert ["attempt.failed", "attempt.failed", "action.failed"] == [e.type for e in failures]
    assert [1, 2, 3] == [event.data["attempt"] for event in failures]
    shown = event_data(failures[-1], show_private=False)
    assert "starebrain retry A-1 --reason TEXT" == shown["data"]["command"]
