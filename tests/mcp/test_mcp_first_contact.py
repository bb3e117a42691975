"""The MCP server checks a phone its ledger never met before the first send through it, as
``SmsAgent.open`` does (``orchestration.agent.vet_new_phone``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from android_bridge import Device
from starebrain_actions import Ledger

from .conftest import BODY, TO, client_on, error_text, sms_out, structured

PhoneFactory = Callable[..., Any]


async def test_a_new_phone_that_fails_a_check_is_a_tool_error_that_sends_nothing(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """A file where the fence's directory should be: the call is a tool error naming the
    fence check, nothing is recorded or sent; mended, the same call sends once."""
    phone = await phone_factory()
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        await device.shell("touch /data/local/tmp/starebrain")
    call = {"action_id": "A-1", "to": TO, "body": BODY, "wait_seconds": 5}
    async with client_on(db_path, adb_key_path, [phone.serial]) as client:
        refused = await client.call_tool("send_sms", call)
        text = error_text(refused)
        assert "fence (" in text and "never met" in text, text
        async with Ledger.open(db_path) as ledger:
            assert [] == list(await ledger.phones())
        assert [] == sms_out(phone)
        async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
            await device.shell("rm /data/local/tmp/starebrain")
        sent = structured(await client.call_tool("send_sms", call))
    assert 1 == sent["attempts"]
    assert [BODY] == sms_out(phone)
