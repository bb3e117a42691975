"""Events out (issue 34): every change has its event, written with it (DESIGN.md
invariant 10), on both backends, read after a cursor."""

from __future__ import annotations

import asyncio
from typing import Any

from starebrain_actions import Ledger, Status
from starebrain_actions.core.events import LedgerEvent

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
    in order."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        seen: list[LedgerEvent] = []

        async def follow() -> None:
            async for event in agent.events(poll_s=0.05):
                seen.append(event)
                if event.type == "action.succeeded":
                    return

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.1)
        await agent.send("A-9", TO, BODY, wait=5)
        await asyncio.wait_for(follower, 10)
    assert "action.created" == seen[0].type
    assert [event.position for event in seen] == sorted(event.position for event in seen)
