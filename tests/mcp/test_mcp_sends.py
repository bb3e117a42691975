"""send_sms's promises, through the SDK's client and a server in this process, against
simulated phones: it returns within its wait, never resends an unresolved attempt, keeps a
send going after a quick return, and says when a phone cannot be reached."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs

from android_bridge.simulator import SimulatedPhone

from .conftest import BODY, SEND_POLICY, TO, client_on, error_text, sms_out, structured

PhoneFactory = Callable[..., Any]


async def test_an_unresolved_attempt_is_never_sent_again(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """The messaging app sends as RCS chat (nothing reaches the SMS store, so no read can
    prove it): each call returns within its wait with the status as it stands, UNKNOWN once
    past the grace window, and however often the model asks, nothing is sent again."""
    phone: SimulatedPhone = await phone_factory(faults=["rcs-send"])
    call = {"action_id": "A-1", "to": TO, "body": BODY, "wait_seconds": 1.2}
    async with client_on(db_path, adb_key_path, [phone.serial], send_path="ui") as client:
        seen = []
        for _ in range(3):
            started = time.monotonic()
            data = structured(await client.call_tool("send_sms", call))
            assert time.monotonic() - started < 1.2 + 1.0
            seen.append((data["status"], data["attempts"], data["delivery"]))
    assert ("UNKNOWN", 1, "PENDING") == seen[-1]
    assert {1} == {attempts for _, attempts, _ in seen}
    assert "Do not send it under a new action_id" in data["next_step"]
    assert ["rcs"] == [t.channel for t in await phone.wait_transmissions(then_idle=True)]
    assert [BODY] == sms_out(phone)


async def test_a_quick_return_leaves_the_send_running_and_a_repeat_joins_it(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """wait_seconds 0 returns at once (the send is starting); the send goes on in the
    server, and the next call with the same id learns it SUCCEEDED; one SMS."""
    phone = await phone_factory(latency_ms=100)
    call = {"action_id": "A-2", "to": TO, "body": BODY}
    async with client_on(db_path, adb_key_path, [phone.serial], default_wait_s=10) as client:
        started = time.monotonic()
        quick = structured(await client.call_tool("send_sms", {**call, "wait_seconds": 0}))
        returned_after = time.monotonic() - started
        final = structured(await client.call_tool("send_sms", {**call, "wait_seconds": 10}))
    assert returned_after < 1.0
    assert quick["status"] in ("PLANNED", "IN_FLIGHT"), quick
    assert "send_sms again with action_id 'A-2'" in quick["next_step"]
    assert ("SUCCEEDED", 1) == (final["status"], final["attempts"])
    assert [BODY] == sms_out(phone)


async def test_an_unreachable_phone_is_a_tool_error_that_sends_nothing(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path, tmp_path: Path
) -> None:
    """Nothing listens at the phone's address: a tool error saying no send was started. The
    action keeps the phone it was made for: the same call naming the server's second phone
    is the same error, saying so, and sends nothing through it; a new action for the second
    phone succeeds."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    phone = await phone_factory()
    call = {"action_id": "A-3", "to": TO, "body": BODY, "wait_seconds": 5}
    async with client_on(db_path, adb_key_path, [dead, phone.serial]) as client:
        failed = await client.call_tool("send_sms", call)
        kept = await client.call_tool("send_sms", {**call, "device": phone.serial})
        other = structured(
            await client.call_tool("send_sms", {**call, "action_id": "A-4", "device": phone.serial})
        )
    text = error_text(failed)
    assert "cannot be reached" in text and "no send was started" in text
    assert "PLANNED" in text
    kept_text = error_text(kept)
    assert f"keeps the phone it was made for, {dead}" in kept_text, kept_text
    assert "cannot be reached" in kept_text and "PLANNED" in kept_text
    assert ("SUCCEEDED", phone.serial) == (other["status"], other["device"])
    assert [BODY] == sms_out(phone)


async def test_an_action_id_with_a_final_newline_is_refused_and_never_a_second_send(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """``A-5`` then ``A-5\\n``: the second is a tool error naming the action id, nothing is
    written or sent for it, so the phone sent one SMS (issue 21, item 7)."""
    phone = await phone_factory()
    call = {"action_id": "A-5", "to": TO, "body": BODY, "wait_seconds": 10}
    async with client_on(db_path, adb_key_path, [phone.serial]) as client:
        first = structured(await client.call_tool("send_sms", call))
        again = await client.call_tool("send_sms", {**call, "action_id": "A-5\n"})
    assert "SUCCEEDED" == first["status"]
    text = error_text(again)
    assert "action id" in text and "nothing sent" in text
    assert [BODY] == sms_out(phone)


async def test_concurrent_calls_in_one_server_share_one_send(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """Ten identical calls at once, through one server sending through the messaging app: one
    send command on the phone, one SMS, ten SUCCEEDED answers for the same action."""
    phone = await phone_factory(latency_ms=50)
    call = {"action_id": "A-4", "to": TO, "body": BODY, "wait_seconds": 20}
    async with client_on(db_path, adb_key_path, [phone.serial], send_path="ui") as client:
        results = await asyncio.gather(*(client.call_tool("send_sms", call) for _ in range(10)))
    assert ["SUCCEEDED"] * 10 == [structured(result)["status"] for result in results]
    assert 1 == sum(1 for command in phone.commands_run if "am start" in command)
    assert [BODY] == sms_out(phone)


async def test_the_server_takes_the_framework_path_where_the_ledger_proves_it(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """``--send-path auto`` (the default) on the server, on a phone whose framework.jar proves
    no code (stripped): the app first; once a framework send on this phone's build came back
    as the shell's row (here one ``starebrain send --send-path framework``, through the
    library), the server's next send goes through the framework, on the phone handle it
    already holds."""
    from starebrain_actions.orchestration.agent import SmsAgent

    phone: SimulatedPhone = await phone_factory(android=14, framework_jar="stripped")
    call = {"action_id": "A-1", "to": TO, "body": BODY, "wait_seconds": 5}
    async with client_on(db_path, adb_key_path, [phone.serial]) as client:
        assert "SUCCEEDED" == structured(await client.call_tool("send_sms", call))["status"]
        async with SmsAgent.open(
            db=db_path, device=phone.serial, key_path=adb_key_path, send_path="framework"
        ) as agent:
            await agent.send("A-2", TO, "Your code is 9917", wait=5)
        again = {**call, "action_id": "A-3", "body": "Your code is 5550"}
        assert "SUCCEEDED" == structured(await client.call_tool("send_sms", again))["status"]
    assert ["com.google.android.apps.messaging", "com.android.shell", "com.android.shell"] == [
        transmission.app for transmission in await phone.wait_transmissions(count=3, then_idle=True)
    ]


async def test_the_server_takes_the_framework_path_from_the_first_send_where_the_jar_proves_it(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """``--send-path auto`` on a phone whose own framework.jar (AOSP's) proves the ISms code:
    the server's very first send goes through the framework, and so does the next; one SMS
    each, no ``am start``."""
    phone: SimulatedPhone = await phone_factory(android=14)
    call = {"action_id": "A-1", "to": TO, "body": BODY, "wait_seconds": 5}
    async with client_on(db_path, adb_key_path, [phone.serial]) as client:
        assert "SUCCEEDED" == structured(await client.call_tool("send_sms", call))["status"]
        again = {**call, "action_id": "A-2", "body": "Your code is 5550"}
        assert "SUCCEEDED" == structured(await client.call_tool("send_sms", again))["status"]
    assert [("com.android.shell", BODY), ("com.android.shell", "Your code is 5550")] == [
        (transmission.app, transmission.body)
        for transmission in await phone.wait_transmissions(count=2, then_idle=True)
    ]
    assert not any("am start" in command for command in phone.commands_run)


async def test_a_framework_server_refuses_a_body_of_more_than_one_sms_and_records_nothing(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """A server started with ``--send-path framework`` sends one SMS segment per message
    (SMSDispatcher.sendText sends nothing for a longer text and still reports success): a
    body of two segments, with an action_id or without, is a tool error saying so and that
    nothing was sent; the ledger holds nothing for it and the phone sends nothing. The tool's
    description says it; a one-SMS text then goes through the framework."""
    from starebrain_actions import Ledger

    phone: SimulatedPhone = await phone_factory(android=15)
    long = {"action_id": "A-1", "to": TO, "body": "a" * 161, "wait_seconds": 5}
    server = (db_path, adb_key_path, [phone.serial])
    async with client_on(*server, send_path="framework") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        refused = await client.call_tool("send_sms", long)
        derived = await client.call_tool("send_sms", {"to": TO, "body": "ж" * 71})
        short = structured(
            await client.call_tool("send_sms", {**long, "action_id": "A-2", "body": BODY})
        )
    assert "one SMS segment per message" in (tools["send_sms"].description or "")
    for result, count in ((refused, "GSM-7: 161 septets"), (derived, "UCS-2: 71 UTF-16")):
        text = error_text(result)
        assert "nothing sent" in text and f"2 SMS segments ({count}" in text
        assert "--send-path ui or --send-path auto" in text
    async with Ledger.open(db_path) as ledger:
        assert ["A-2"] == [summary.action.action_id for summary in await ledger.summaries()]
    assert "SUCCEEDED" == short["status"]
    sent = await phone.wait_transmissions(then_idle=True)
    assert [("com.android.shell", BODY)] == [(t.app, t.body) for t in sent]


async def test_a_locked_phone_says_a_person_must_unlock_it_and_spends_nothing(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """The keyguard is up, the server sends through the messaging app: send_sms returns
    PLANNED (waiting for the phone) with phone_not_ready saying to unlock the phone, no
    attempt spent, and a next step telling the model a person must act; once unlocked, the
    same call sends once."""
    phone = await phone_factory(screen="locked")
    call = {"action_id": "L-1", "to": TO, "body": BODY, "wait_seconds": 0}
    # the send starts at once and goes on in the server; the repeat is made once the phone
    # has refused the first attempt (the ledger says so), not after a wait that a loaded
    # machine may spend connecting: the next attempt is 4 s (the backoff) away then, so the
    # repeat finds the refused one, not a second one in flight
    policy = attrs.evolve(SEND_POLICY, initial_interval=timedelta(seconds=4))
    server = (db_path, adb_key_path, [phone.serial])
    async with client_on(*server, policy=policy, send_path="ui") as client:
        started = structured(await client.call_tool("send_sms", call))
        await _refused_as_not_ready(client, "L-1")
        locked = structured(await client.call_tool("send_sms", call))
        phone.screen = "on"
        sent = structured(await client.call_tool("send_sms", {**call, "wait_seconds": 10}))
    assert started["status"] in ("PLANNED", "IN_FLIGHT"), started
    assert "PLANNED" == locked["status"], locked
    assert "unlock the phone" in locked["phone_not_ready"]
    assert "no attempt was spent" in locked["next_step"] and "person" in locked["next_step"]
    assert ("SUCCEEDED", None) == (sent["status"], sent["phone_not_ready"])
    assert [BODY] == sms_out(phone)


async def _refused_as_not_ready(client: Any, action_id: str, *, within_s: float = 30.0) -> None:
    """Wait until the action's latest attempt is one the phone refused as not ready
    (``sms_status`` says phone_not_ready), re-reading every 50 ms."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        status = structured(await client.call_tool("sms_status", {"action_id": action_id}))
        if status["phone_not_ready"] is not None:
            return
        if loop.time() > deadline:
            raise AssertionError(f"no not-ready attempt within {within_s} s: {status}")
        await asyncio.sleep(0.05)


async def test_a_phone_held_by_another_action_is_named_with_when_it_can_be_freed(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """Another action's attempt holds the phone (an interrupted send, just now): send_sms
    returns PLANNED naming that action and when a read can free the phone, not only "call
    again"; nothing is sent."""
    from android_bridge import Device, ensure_epoch
    from starebrain_actions import Ledger, SmsIntent

    phone = await phone_factory()
    device = await Device.connect(phone.serial, key_path=adb_key_path)
    try:
        epoch = await ensure_epoch(device)
    finally:
        await device.close()
    async with Ledger.open(db_path) as ledger:
        await ledger.create_action("H-1", SmsIntent(recipient=TO, body="held"))
        await ledger.begin_attempt(
            "H-1", phone.serial, evidence={"fence_epoch": epoch.epoch, "send_path": "ui"}
        )
    call = {"action_id": "B-1", "to": TO, "body": BODY, "wait_seconds": 1.0}
    async with client_on(db_path, adb_key_path, [phone.serial]) as client:
        data = structured(await client.call_tool("send_sms", call))
    assert "PLANNED" == data["status"]
    assert "H-1" == data["held_by"]["action_id"]
    assert "'H-1'" in data["next_step"] and data["held_by"]["releasable_at"] in data["next_step"]
    assert [] == sms_out(phone)


async def test_a_row_that_cannot_settle_in_the_wait_is_answered_early_unless_wait_settled(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """Through the messaging app, a row settling in an hour: send_sms answers VERIFYING with
    settles_at as soon as the row is found, not after its 60 s wait; a repeat sends nothing;
    a repeat with wait_settled reads the row until its wait ends. One SMS."""
    phone = await phone_factory()
    policy = attrs.evolve(SEND_POLICY, settle_after=timedelta(hours=1))
    call = {"action_id": "E-1", "to": TO, "body": BODY, "wait_seconds": 60}
    async with client_on(
        db_path, adb_key_path, [phone.serial], send_path="ui", policy=policy, max_wait_s=60
    ) as client:
        started = time.monotonic()
        early = structured(await client.call_tool("send_sms", call))
        took = time.monotonic() - started
        again = structured(await client.call_tool("send_sms", call))
        started = time.monotonic()
        settled = {**call, "wait_seconds": 2, "wait_settled": True}
        followed = structured(await client.call_tool("send_sms", settled))
        followed_for = time.monotonic() - started
    assert ("VERIFYING", 1) == (early["status"], early["attempts"]), early
    assert early["settles_at"] is not None
    assert took < 30, took  # answered when the row was found
    assert ("VERIFYING", 1, True) == (again["status"], again["attempts"], again["earlier_message"])
    assert ("VERIFYING", 1) == (followed["status"], followed["attempts"])
    assert followed_for >= 2 - 0.1, followed_for  # it read the row for its whole wait
    assert [BODY] == sms_out(phone)
