"""Replies and STOP through the MCP server (issue 34): get_replies shows a client the replies
to its own actions only, redacted; after a STOP, send_sms to the number is refused with rule
opted_out and nothing reaches the phone, while another number still sends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import TO, error_text, http_client, http_server, server_args, sms_out, structured
from .test_mcp_http_auth import ALICE, BOB, alice_and_bob

pytestmark = pytest.mark.slow

PhoneFactory = Callable[..., Any]


async def test_a_client_sees_its_own_replies_and_a_stop_refuses_its_next_send(
    tmp_path: Path, phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """alice's A-1 gets a reply and a STOP: her get_replies lists both (bodies redacted) and
    says the recipient opted out; bob cannot read alice's A-1; alice's next send_sms to the
    number is refused (opted_out), nothing sent; her send to another number goes."""
    phone = await phone_factory()
    clients = alice_and_bob(tmp_path, '[recipients]\napprove = "never"\n')
    args = server_args(db_path, adb_key_path, [phone], "--clients", str(clients))
    async with (
        http_server(args) as (url, _process),
        http_client(url, token=ALICE) as as_alice,
        http_client(url, token=BOB) as as_bob,
    ):
        call = {"to": TO, "wait_seconds": 20}
        first = structured(
            await as_alice.call_tool("send_sms", {**call, "action_id": "A-1", "body": "hi"})
        )
        phone.receive_sms(TO, "sure, see you")
        phone.store.insert_incoming(TO, "STOP", date_ms=phone.now_ms() + 1)
        await as_alice.call_tool("reconcile", {"device": phone.serial})
        replies = structured(await as_alice.call_tool("get_replies", {"action_id": "A-1"}))
        bob_reads = await as_bob.call_tool("get_replies", {"action_id": "A-1"})
        refused = structured(
            await as_alice.call_tool("send_sms", {**call, "action_id": "A-2", "body": "again"})
        )
        other = structured(
            await as_alice.call_tool(
                "send_sms",
                {"to": "+12025550199", "wait_seconds": 20, "action_id": "A-3", "body": "other"},
            )
        )
    assert "SUCCEEDED" == first["status"]
    assert (2, True) == (replies["count"], replies["recipient_opted_out"])
    assert [None, "opt_out"] == [reply["keyword"] for reply in replies["replies"]]
    assert "sure, see you" not in str(replies) and TO not in str(replies)
    assert "no action 'A-1'" in error_text(bob_reads)
    assert "opted_out" == refused["policy"]["rule"], refused
    assert "SUCCEEDED" == other["status"]
    assert ["hi", "other"] == sms_out(phone)
