"""A phone that is not ready does not look like a failure through MCP, on both backends: the
action reads PLANNED, waiting for the phone, with the reason and what a person must do; its
refused tries are counted apart from the attempts, and once the phone is unlocked one SMS
goes out, the first real send."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs

from .conftest import BODY, SEND_POLICY, TO, client_on, sms_out, structured

PhoneFactory = Callable[..., Any]
#: A SENT row of the SMS provider (``type`` 2).
SENT = 2


async def _status_once_refused(client: Any, action_id: str, within_s: float = 30.0) -> Any:
    """sms_status once the action's latest try is one the phone refused as not ready,
    re-read every 50 ms."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        status = structured(await client.call_tool("sms_status", {"action_id": action_id}))
        if status["phone_not_ready"] is not None:
            return status
        if loop.time() > deadline:
            raise AssertionError(f"no not-ready try within {within_s} s: {status}")
        await asyncio.sleep(0.05)


async def test_a_locked_phone_reads_planned_then_sends_once_when_unlocked(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """Locked: sms_status says PLANNED, waiting for the phone with the keyguard as reason
    and the unlock as remedy, 0 attempts, the refused tries counted apart, no first send,
    nobody needs to review it. Unlocked: the same send_sms sends one SMS (the phone's store
    holds one SENT row), 1 attempt, the refused tries still counted apart, and first_sent_at
    is that attempt's."""
    phone = await phone_factory(screen="locked")
    call = {"action_id": "L-1", "to": TO, "body": BODY, "wait_seconds": 0}
    # a long backoff: the refused try stays the latest while the test reads it
    policy = attrs.evolve(SEND_POLICY, initial_interval=timedelta(seconds=4))
    async with client_on(target, adb_key_path, [phone.serial], policy=policy, send_path="ui") as (
        client
    ):
        await client.call_tool("send_sms", call)
        waiting = await _status_once_refused(client, "L-1")
        review = structured(await client.call_tool("list_review", {}))
        phone.screen = "on"
        sent = structured(await client.call_tool("send_sms", {**call, "wait_seconds": 15}))
    assert "PLANNED" == waiting["status"], waiting
    assert "the keyguard is showing" in waiting["waiting_for_phone"]
    assert "unlock the phone" in waiting["waiting_for_phone"]
    assert "unlock the phone" in waiting["phone_not_ready"]
    assert (0, None, False) == (
        waiting["attempts"],
        waiting["first_sent_at"],
        waiting["needs_review"],
    )
    assert waiting["unsent_tries"] >= 1
    assert "no attempt was spent" in waiting["next_step"] and "person" in waiting["next_step"]
    assert "L-1" not in [item["action_id"] for item in review["actions"]]
    assert ("SUCCEEDED", 1, None) == (sent["status"], sent["attempts"], sent["waiting_for_phone"])
    assert sent["unsent_tries"] >= waiting["unsent_tries"]
    assert sent["latest"]["dispatched_at"] == sent["first_sent_at"]
    assert [BODY] == sms_out(phone)
    assert 1 == sum(1 for row in phone.store.rows(types=[SENT]) if row.body == BODY)
