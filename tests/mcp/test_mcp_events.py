"""``get_events`` (issue 34): a model reads what happened to its actions since a cursor; over
HTTP with ``--clients`` each client sees only its own actions' events, under its own ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starebrain_actions.core.policy import Policy

from .conftest import TO, http_client, http_server, server_args, structured
from .test_mcp_binds import ALICE_SCOPE, BOB_SCOPE, PhoneFactory, send, service_on
from .test_mcp_http_auth import ALICE, BOB, alice_and_bob

NEVER = Policy(approve="never")


async def test_a_client_reads_its_own_events_after_a_cursor(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """alice and bob each send; alice's events are hers (her ids, none of bob's, none without
    an action); the cursor she is given returns nothing more until her next send, then only
    that send's events; a type filter keeps to its type."""
    phone = await phone_factory()
    async with service_on(
        target, adb_key_path, [phone.serial], gate=NEVER, owners=("alice", "bob")
    ) as service:

        async def call(scope: Any, action_id: str, body: str) -> Any:
            return await service.send_sms(
                action_id=action_id, to=TO, body=body, wait_seconds=10, device=None, scope=scope
            )

        await call(ALICE_SCOPE, "A-1", "Your code is 4821")
        await call(BOB_SCOPE, "B-1", "two")
        first = await service.get_events(
            after=0, limit=100, types=(), action_id=None, scope=ALICE_SCOPE
        )
        again = await service.get_events(
            after=first.next_after, limit=100, types=(), action_id=None, scope=ALICE_SCOPE
        )
        await call(ALICE_SCOPE, "A-2", "three")
        later = await service.get_events(
            after=first.next_after, limit=100, types=(), action_id=None, scope=ALICE_SCOPE
        )
        succeeded = await service.get_events(
            after=0, limit=100, types=("action.succeeded",), action_id=None, scope=ALICE_SCOPE
        )
        bobs = await service.get_events(
            after=0, limit=100, types=(), action_id="B-1", scope=BOB_SCOPE
        )
    assert {"A-1"} == {event.action_id for event in first.events}
    assert "action.succeeded" in [event.type for event in first.events]
    assert ([], first.next_after, False) == (again.events, again.next_after, again.more)
    assert later.events and {"A-2"} == {event.action_id for event in later.events}
    assert ["A-1", "A-2"] == [event.action_id for event in succeeded.events]
    assert {"B-1"} == {event.action_id for event in bobs.events}
    text = str([event.data for event in first.events])
    assert TO.replace(" ", "") not in text
    assert "Your code is 4821" not in text


async def test_http_clients_see_only_their_own_events(
    tmp_path: Path, phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """Over HTTP with --clients: bob's get_events lists his send, never alice's."""
    phone = await phone_factory()
    clients = alice_and_bob(tmp_path, '[recipients]\napprove = "never"\n')
    args = server_args(db_path, adb_key_path, [phone], "--clients", str(clients))
    async with (
        http_server(args) as (url, _process),
        http_client(url, token=BOB) as as_bob,
        http_client(url, token=ALICE) as as_alice,
    ):
        structured(await as_alice.call_tool("send_sms", send("A-7")))
        structured(await as_bob.call_tool("send_sms", send("B-7", body="bob's")))
        alices = structured(await as_alice.call_tool("get_events", {}))
        bobs = structured(await as_bob.call_tool("get_events", {"types": ["action.*"]}))
    assert {"A-7"} == {event["action_id"] for event in alices["events"]}
    assert {"B-7"} == {event["action_id"] for event in bobs["events"]}
    assert all(event["type"].startswith("action.") for event in bobs["events"])
    assert "action.succeeded" in [event["type"] for event in alices["events"]]
