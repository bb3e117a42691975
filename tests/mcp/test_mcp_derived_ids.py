"""send_sms without an action_id (issue 21, item 8), through the SDK's client against
simulated phones: a repeat inside the window is the earlier message, says so and sends
nothing; past the window the same text is a new action and a second SMS; an action whose
outcome is not settled is resumed however old; the tool tells the model the rule."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import pytest

from starebrain_actions import Ledger, RetryPolicy, SmsIntent
from starebrain_actions.core.derived_ids import derive_action_id
from starebrain_actions.core.model import AcceptanceState, Action, ActionRecord, DeliveryState
from starebrain_actions.ledger.store import summarize
from starebrain_actions.mcp.config import ServerConfig
from starebrain_actions.mcp.results import sms_result

from .conftest import BODY, TO, client_on, server_args, sms_out, stdio_session, structured

PhoneFactory = Callable[..., Any]
DERIVED = derive_action_id(SmsIntent(recipient=TO, body=BODY))
CALL = {"to": TO, "body": BODY, "wait_seconds": 10}
EARLIER = "This is the earlier message of action"
NEW_ID = "call send_sms with a new action_id of your own"


async def test_a_repeat_is_the_earlier_message_and_past_the_window_a_new_action(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """The first call sends under the derived id; a repeat is that earlier message, says so
    and when, and sends nothing; with a 0.5 s window, once it has passed, the same call is a
    new action ``…-2`` and a second SMS, which a server with the default window resumes."""
    phone = await phone_factory()
    async with client_on(db_path, adb_key_path, [phone.serial]) as client:
        first = structured(await client.call_tool("send_sms", CALL))
        again = structured(await client.call_tool("send_sms", CALL))
        status = structured(await client.call_tool("sms_status", {"action_id": DERIVED}))
    assert (DERIVED, "SUCCEEDED", True, False) == (
        first["action_id"],
        first["status"],
        first["action_id_derived"],
        first["earlier_message"],
    )
    assert first["latest"]["dispatched_at"] == first["first_sent_at"]
    assert (DERIVED, True, first["first_sent_at"], 1) == (
        again["action_id"],
        again["earlier_message"],
        again["first_sent_at"],
        again["attempts"],
    )
    step = again["next_step"]
    assert step.startswith(f"{EARLIER} {DERIVED!r}, first sent at {first['first_sent_at']} ("), step
    assert "this call sent nothing" in step and NEW_ID in step
    assert not status["earlier_message"]  # a status read is not an answer to a send
    assert [BODY] == sms_out(phone)

    await asyncio.sleep(0.6)
    async with client_on(db_path, adb_key_path, [phone.serial], derived_id_window_s=0.5) as client:
        later = structured(await client.call_tool("send_sms", CALL))
    assert (f"{DERIVED}-2", "SUCCEEDED", True, False) == (
        later["action_id"],
        later["status"],
        later["action_id_derived"],
        later["earlier_message"],
    )
    assert [BODY, BODY] == sms_out(phone)

    async with client_on(db_path, adb_key_path, [phone.serial]) as client:
        resumed = structured(await client.call_tool("send_sms", CALL))
    assert (f"{DERIVED}-2", True) == (resumed["action_id"], resumed["earlier_message"])
    assert 2 == len(await phone.wait_transmissions(count=2, then_idle=True))


async def test_an_unresolved_old_action_is_resumed_past_the_window(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """An attempt three days old whose outcome was never proven is resumed, not replaced,
    even with a tiny window: nothing is sent, the result is the earlier message, and
    next_step does not offer a new action_id."""
    phone = await phone_factory()
    then = datetime.now(UTC) - timedelta(days=3)
    async with Ledger.open(db_path) as ledger:
        await ledger.create_action(DERIVED, SmsIntent(recipient=TO, body=BODY), now=then)
        await ledger.begin_attempt(DERIVED, phone.serial, now=then)
    async with client_on(db_path, adb_key_path, [phone.serial], derived_id_window_s=0.5) as client:
        data = structured(await client.call_tool("send_sms", {**CALL, "wait_seconds": 2}))
    assert (DERIVED, True, False) == (data["action_id"], data["earlier_message"], data["settled"])
    assert data["status"] in ("UNKNOWN", "IN_FLIGHT"), data
    step = data["next_step"]
    assert step.startswith(f"{EARLIER} {DERIVED!r}") and "(3d ago)" in step, step
    assert "this call sent nothing" in step or "nothing new has been sent so far" in step
    assert NEW_ID not in step
    await phone.radio_idle()
    assert [] == phone.transmissions


async def test_an_explicit_id_repeated_is_the_earlier_message(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """The same action_id again, after it SUCCEEDED: the earlier message, said so; one SMS.
    An explicit id never expires, whatever the window."""
    phone = await phone_factory()
    call = {**CALL, "action_id": "meeting-5pm"}
    async with client_on(db_path, adb_key_path, [phone.serial], derived_id_window_s=0) as client:
        first = structured(await client.call_tool("send_sms", call))
        again = structured(await client.call_tool("send_sms", call))
    assert (False, True) == (first["earlier_message"], again["earlier_message"])
    assert ("meeting-5pm", False) == (again["action_id"], again["action_id_derived"])
    assert again["next_step"].startswith(f"{EARLIER} 'meeting-5pm'")
    assert [BODY] == sms_out(phone)


async def test_the_tool_tells_the_model_the_rule(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """send_sms's description tells the model to pass its own action_id for every new
    message, and how long a derived one holds: the server's window (24h by default)."""
    phone = await phone_factory()
    descriptions = []
    for window in (None, 3600.0):
        extra = {} if window is None else {"derived_id_window_s": window}
        async with client_on(db_path, adb_key_path, [phone.serial], **extra) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        descriptions.append(tools["send_sms"].description or "")
    default, hour = descriptions
    assert "Whenever you mean a new message, pass an action_id of your own" in default
    assert "within 24h of its latest attempt" in default and "after 24h" in default
    assert "within 1h of its latest attempt" in hour and "24h" not in hour
    schema = tools["send_sms"].output_schema or {}
    assert {"earlier_message", "first_sent_at"} <= set(schema.get("properties", {}))


def test_the_window_must_be_finite_and_not_negative(tmp_path: Path) -> None:
    """A negative or infinite window is refused when the server is configured."""
    from starebrain_actions.core.exceptions import InvalidInput

    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(InvalidInput):
            ServerConfig(db=tmp_path / "l.db", devices=("127.0.0.1:5555",), derived_id_window_s=bad)


def test_next_step_of_an_earlier_failed_message_says_tried() -> None:
    """An earlier message that provably never went out is "first tried", not "first sent",
    and a settled one ends with how to send the same text again under a new id."""
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    then = now - timedelta(hours=5)
    intent = SmsIntent(recipient=TO, body=BODY)
    action = Action(
        action_id="A-9",
        fingerprint=intent.fingerprint,
        intent=intent,
        policy=RetryPolicy(maximum_attempts=1, settle_after=timedelta(milliseconds=300)),
        created_at=then,
    )
    record = ActionRecord(
        action_id="A-9",
        dispatch_id="d-1",
        attempt=1,
        device="dev",
        delivery=DeliveryState.FAILED,
        acceptance=AcceptanceState.PENDING,
        dispatched_at=then,
        failed_at=then,
    )
    result = sms_result(summarize(action, [record], now), now=now, earlier=True)
    assert result.next_step.startswith(
        f"{EARLIER} 'A-9', first tried at 2026-11-29T07:00:00.000000Z (5h ago); this call sent"
        " nothing. Nothing went out"
    ), result.next_step
    assert result.next_step.endswith(f"{NEW_ID}.")
    assert (True, "2026-11-29T07:00:00.000000Z") == (result.earlier_message, result.first_sent_at)


@pytest.mark.slow
async def test_the_command_line_window_reaches_the_server(
    phone_factory: PhoneFactory,
    db_path: Path,
    adb_key_path: Path,
    stderr_file: Callable[[str], IO[str]],
) -> None:
    """`starebrain mcp --derived-id-window 0` (a real process over stdio): a settled derived
    action is never the answer, so the same call twice is two actions and two SMS."""
    phone = await phone_factory()
    args = server_args(db_path, adb_key_path, [phone], "--derived-id-window", "0")
    async with stdio_session(args, errlog=stderr_file("server.err")) as client:
        first = structured(await client.call_tool("send_sms", CALL))
        second = structured(await client.call_tool("send_sms", CALL))
    assert [DERIVED, f"{DERIVED}-2"] == [first["action_id"], second["action_id"]]
    assert [BODY, BODY] == sms_out(phone)
