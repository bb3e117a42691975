"""The MCP server obeys the phone's ledger marks as the other senders do (issue 36): another
ledger's attempt still open on the phone refuses the server's send, with both ledgers named and
nothing recorded; a server started with share_phone sends. The ground truth is what left the
phone."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs

from starebrain_actions import Ledger, Status
from starebrain_actions.orchestration.agent import SmsAgent

from .conftest import BODY, SEND_POLICY, TO, client_on, error_text, structured

#: The other ledger's policy: its row settles only after 30 minutes, so its attempt stays
#: open (VERIFYING) through the test.
SLOW = attrs.evolve(SEND_POLICY, settle_after=timedelta(minutes=30))


async def test_another_ledgers_open_attempt_refuses_the_server_until_share_phone(
    target: Path | str, phone_factory: Any, adb_key_path: Path, tmp_path: Path
) -> None:
    """Another ledger (a file of its own) sent through the phone and its attempt is open: the
    server's send_sms is a tool error naming both ledgers, its ledger holds no attempt and
    nothing more left the phone; a server with share_phone sends once."""
    phone = await phone_factory(build_type="userdebug")
    other_db = tmp_path / "other.db"
    async with SmsAgent.open(
        db=other_db,
        device=phone.serial,
        key_path=adb_key_path,
        policy=SLOW,
        send_path="ui",
        read_as_system=True,
    ) as other:
        first = await other.send("theirs-1", TO, "their text", wait=30)
        assert Status.VERIFYING is first.status, first
        other_id = await other.ledger.ledger_id()
    call = {"action_id": "mine-1", "to": TO, "body": BODY, "wait_seconds": 10}
    async with client_on(target, adb_key_path, [phone.serial], send_path="ui") as client:
        refused = error_text(await client.call_tool("send_sms", call))
    async with Ledger.open(target) as ledger:
        mine_id = await ledger.ledger_id()
        assert () == (await ledger.summary("mine-1")).attempts
    assert other_id in refused and mine_id in refused and "nothing" in refused.lower()
    await phone.radio_idle()
    assert ["their text"] == [t.body for t in phone.transmissions]
    async with client_on(
        target, adb_key_path, [phone.serial], send_path="ui", share_phone=True
    ) as client:
        sent = structured(await client.call_tool("send_sms", call))
    assert sent["status"] in ("SUCCEEDED", "VERIFYING"), sent
    await phone.wait_transmissions(lambda t: t.body == BODY, count=1, then_idle=True)
    assert 1 == sum(1 for t in phone.transmissions if t.body == BODY)
