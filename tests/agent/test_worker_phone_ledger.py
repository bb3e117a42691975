"""A worker of one ledger on a phone where another ledger's attempt is open: it waits, saying
so, and sends nothing; with ``share_phone`` it sends (counted in the phone's own store)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger
from tests.agent.test_agent_phone_ledger import open_attempt_of
from tests.agent.test_worker import DONE, queue, seen, sent_once, until_settled, worker_for


async def test_a_worker_waits_for_another_ledger_s_open_attempt_unless_sharing(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]],
    agent_for: Any,
    db_path: str,
    adb_key_path: Path,
    tmp_path: Path,
) -> None:
    """Refused, the worker tells ``phone_other_ledger`` (both ledgers' attempt named) and claims
    nothing; a worker with ``share_phone`` sends the queued message, once."""
    phone = await sms_phone()
    dispatch_id = await open_attempt_of(agent_for, phone)
    async with Ledger.open(db_path) as ledger:
        a_id = await ledger.ledger_id()
    other = str(tmp_path / "other.db")
    ids = await queue(other, 1)

    worker, events = worker_for(other, [phone], adb_key_path)
    running = asyncio.create_task(worker.run())
    await seen(events, "phone_other_ledger")
    worker.stop()
    await asyncio.wait_for(running, 30)
    told = next(e for e in events if e.event == "phone_other_ledger")
    assert a_id in told.detail and dispatch_id in told.detail, told
    assert not [e for e in events if e.event == "claimed"], events
    assert {ids[0]: 0} == sent_once([phone], ids)

    sharing, shared_events = worker_for(other, [phone], adb_key_path, share_phone=True)
    running = asyncio.create_task(sharing.run())
    statuses = await until_settled(other, ids)
    sharing.stop()
    await asyncio.wait_for(running, 30)
    assert set(statuses.values()) == DONE, statuses
    assert {ids[0]: 1} == sent_once([phone], ids)
    assert not [e for e in shared_events if e.event in ("phone_other_ledger", "phone_shared")]
