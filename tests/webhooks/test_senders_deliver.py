"""Who delivers (issue 34): a ``starebrain mcp`` server process and a queue worker deliver
the webhooks of the sends they make, signed, in order, with nothing else running."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from starebrain_actions import Ledger, SmsIntent
from tests.agent.conftest import FAST, sms_phone
from tests.agent.test_worker import until_settled, worker_for
from tests.mcp.conftest import http_client, http_server, server_args, structured

from .conftest import Receiver, event_json

TO = "+12025550100"

__all__ = ["sms_phone"]


async def _received(receiver: Receiver, action_id: str, kind: str) -> list[dict[str, Any]]:
    """The verified events the receiver took, once one of ``kind`` for ``action_id`` came
    (30 s at most)."""
    for _ in range(600):
        events = [event_json(item) for item in receiver.received if item.payload is not None]
        if any(e["action_id"] == action_id and e["type"] == kind for e in events):
            return events
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} for {action_id}: {receiver.received}")


async def test_an_mcp_server_delivers_the_events_of_its_sends(
    receiver: Receiver, phone_factory: Any, tmp_path: Path, adb_key_path: Path
) -> None:
    """``send_sms`` through the server: its events reach the endpoint, signed (every
    signature verified), in position order, action.created first and action.succeeded."""
    db = tmp_path / "ledger.db"
    async with Ledger.open(db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True, after=0)
    receiver.secret = endpoint.secret
    phone = await phone_factory()
    args = server_args(db, adb_key_path, [phone])
    async with http_server(args) as (url, _process), http_client(url) as client:
        sent = structured(
            await client.call_tool(
                "send_sms", {"action_id": "M-1", "to": TO, "body": "hi", "wait_seconds": 20}
            )
        )
        events = await _received(receiver, "M-1", "action.succeeded")
    assert "SUCCEEDED" == sent["status"]
    assert all(item.payload is not None for item in receiver.received)
    positions = [event["position"] for event in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert "action.created" == events[0]["type"]


async def test_a_worker_delivers_the_events_of_what_it_sends(
    receiver: Receiver, sms_phone: Any, tmp_path: Path, adb_key_path: Path
) -> None:
    """A queued action sent by a worker: its events reach the endpoint from the worker's
    own delivery task."""
    db = str(tmp_path / "ledger.db")
    phone = await sms_phone()
    async with Ledger.open(db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True, after=0)
        await ledger.enqueue("W-1", SmsIntent(recipient=TO, body="W-1"), FAST)
    receiver.secret = endpoint.secret
    worker, _events = worker_for(db, [phone], adb_key_path)
    running = asyncio.create_task(worker.run())
    try:
        await until_settled(db, ["W-1"])
        events = await _received(receiver, "W-1", "action.succeeded")
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
    kinds = [event["type"] for event in events if event["action_id"] == "W-1"]
    assert kinds[0] == "action.created" and "action.sent" in kinds
