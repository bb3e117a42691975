"""``send_sms(not_after=, not_before=)`` (issue 35, items 1 and 2), on both backends: a phone
ready only after the deadline never sends (the phone's store holds nothing), the same call
then answers EXPIRED with what to tell the user; a repeated call names the same deadline; a
queued message with a schedule waits for it; an unreadable time is refused, nothing
written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from starebrain_actions import Ledger
from tests.conftest import until_time

from .conftest import BODY, TO, client_on, error_text, structured

PhoneFactory = Callable[..., Any]
SENT = 2


async def test_a_phone_ready_only_after_the_deadline_answers_expired_and_sends_nothing(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """Locked until its 3 s deadline has passed: the repeated call (same not_after, a
    duration counted from the action's creation) answers EXPIRED, settled, next_step
    saying it is never sent and to tell the user; nothing left the phone."""
    phone = await phone_factory(screen="locked")
    call = {"action_id": "X-1", "to": TO, "body": BODY, "wait_seconds": 1, "not_after": "3s"}
    async with client_on(target, adb_key_path, [phone.serial], send_path="ui") as client:
        first = structured(await client.call_tool("send_sms", call))
        assert first["status"] in ("PLANNED", "IN_FLIGHT"), first
        async with Ledger.open(target) as ledger:
            deadline = (await ledger.get_action("X-1")).intent.not_after
            assert deadline is not None
            await until_time(deadline)
        phone.screen = "on"
        late = structured(await client.call_tool("send_sms", {**call, "wait_seconds": 10}))
    assert ("EXPIRED", True) == (late["status"], late["settled"]), late
    assert "never sent" in late["next_step"] and "new action_id" in late["next_step"]
    await phone.radio_idle()
    assert [] == phone.transmissions
    assert 0 == sum(1 for row in phone.store.rows(types=[SENT]) if row.body == BODY)


async def test_a_queued_message_waits_for_its_schedule_and_a_bad_time_is_refused(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """Queued with not_before '1h': PLANNED, the worker's next look at that time, and
    next_step naming the schedule; a time without a zone is refused with nothing written."""
    phone = await phone_factory()
    async with client_on(
        target, adb_key_path, [phone.serial], send_path="ui", pools=("default",)
    ) as client:
        queued = structured(
            await client.call_tool(
                "send_sms",
                {"action_id": "S-1", "to": TO, "body": BODY, "pool": "default", "not_before": "1h"},
            )
        )
        refused = error_text(
            await client.call_tool(
                "send_sms",
                {"action_id": "S-2", "to": TO, "body": BODY, "not_after": "2026-12-08T09:00"},
            )
        )
    assert "has no zone" in refused and "nothing sent" in refused
    assert "PLANNED" == queued["status"], queued
    async with Ledger.open(target) as ledger:
        action = await ledger.get_action("S-1")
        assert action.queue_after == action.intent.not_before is not None
        assert [] == [s for s in await ledger.summaries() if s.action.action_id == "S-2"]
