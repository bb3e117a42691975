"""What binds an MCP action stays with it in the ledger (issue 32, DESIGN.md invariant 9): the
phone it was made for, its owner's namespace and per-client "new" counting, and a DENY, which
is final. On a server in this process over SQLite and PostgreSQL (the SDK's client, or the
service itself for a ``--clients`` client's scope), and one ``--clients`` server process,
against simulated phones whose own stores say what went out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, SmsIntent
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import AcceptanceState, DeliveryState, ReviewReason, Status
from starebrain_actions.core.policy import Policy
from starebrain_actions.ledger.store import summarize
from starebrain_actions.mcp.auth import ActionScope
from starebrain_actions.mcp.config import ServerConfig
from starebrain_actions.mcp.results import next_step, sms_result
from starebrain_actions.mcp.service import SmsService, open_service
from starebrain_actions.orchestration.agent import SmsAgent
from tests.agent.test_agent_what_binds import quiet_now

from .conftest import (
    BODY,
    SEND_POLICY,
    TO,
    client_on,
    error_text,
    http_client,
    http_server,
    server_args,
    sms_out,
    structured,
)
from .test_mcp_http_auth import ALICE, BOB, alice_and_bob
from .test_mcp_results import NOW, _action, _record

PhoneFactory = Callable[..., Any]

#: A gate that holds every action for a person's approval.
ALWAYS = Policy(approve="always")
#: A gate that lets every action go.
NEVER = Policy(approve="never")
#: A gate whose rule denies the test's recipient (+1 202 555 0100).
DENY_TO = Policy(approve="never", deny=("+1202555*",))
ALICE_SCOPE, BOB_SCOPE = ActionScope(client="alice"), ActionScope(client="bob")


@asynccontextmanager
async def service_on(
    db: Path | str, key: Path, devices: list[str], **overrides: Any
) -> AsyncIterator[SmsService]:
    """The service of a server in this process (fast policy, short timeouts), to call with a
    ``--clients`` client's scope."""
    overrides.setdefault("policy", SEND_POLICY)
    overrides.setdefault("poll_interval_s", 0.05)
    overrides.setdefault("command_timeout_s", 3.0)
    overrides.setdefault("connect_timeout_s", 2.0)
    config = ServerConfig(db=db, devices=tuple(devices), key_path=key, **overrides)
    async with open_service(config) as service:
        yield service


def stored_out(phone: SimulatedPhone) -> list[str | None]:
    """Bodies of the SENT rows (type 2) in the phone's own SMS store."""
    return [row.body for row in phone.store.rows(types=[2])]


def send(action_id: str, body: str = BODY, **more: Any) -> dict[str, Any]:
    return {"action_id": action_id, "to": TO, "body": body, "wait_seconds": 10, **more}


# --------------------------------------------------------------------------- the phone


async def test_a_held_action_keeps_the_servers_phone_and_no_other_phone_sends_it(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """Held for approval over MCP, the action is bound to the server's phone (its key in the
    ledger). Once a person approves it, an agent on another phone sends nothing for it
    (``WrongPhone``: the outcome names the phone it is meant for), nor does a resume there
    (it says why); the server's own phone sends it on the next send_sms, once."""
    mine, other = await phone_factory(), await phone_factory()
    async with client_on(target, adb_key_path, [mine.serial], gate=ALWAYS) as client:
        held = structured(await client.call_tool("send_sms", send("A-1")))
        async with Ledger.open(target) as ledger:
            planned = (await ledger.get_action("A-1")).planned_device
            key = await ledger.phone_key_for(mine.serial)
            approved = await ledger.approve("A-1", operator="ana")
        status = structured(await client.call_tool("sms_status", {"action_id": "A-1"}))
        async with SmsAgent.open(
            db=target, device=other.serial, key_path=adb_key_path, policy=SEND_POLICY
        ) as agent:
            outcome = await agent.send("A-1", TO, BODY, wait=5)
            resumed = await agent.resume(wait=2)
        sent = structured(await client.call_tool("send_sms", send("A-1")))
    assert ("PLANNED", "HOLD", 0) == (
        held["status"],
        held["policy"]["verdict"],
        held["attempts"],
    )
    assert key == planned == approved.action.planned_device
    # approved, not yet sent: no hold is shown any more, and the call sends it
    assert (None, "PLANNED") == (status["policy"], status["status"])
    assert "call send_sms again with action_id 'A-1' to send it" in status["next_step"]
    assert outcome.refused is not None and f"meant for phone {key}" in outcome.refused
    assert (Status.PLANNED, ()) == (outcome.status, tuple(outcome.summary.attempts))
    (left,) = [item for item in resumed.items if item.action_id == "A-1"]
    assert 0 == left.sent and f"meant for phone {key}" in left.note, left
    assert ([], []) == (sms_out(other), stored_out(other))
    assert ("SUCCEEDED", mine.serial, 1) == (sent["status"], sent["device"], sent["attempts"])
    assert [BODY] == sms_out(mine) == stored_out(mine)


async def test_a_call_naming_another_phone_sends_through_the_actions_own(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """An action made for phone A, held, then approved: a call naming phone B sends it
    through A, saying the action keeps its phone; B's store holds nothing. On a server whose
    only phone is B, the call sends nothing at all and says the action was made for A."""
    phone_a, phone_b = await phone_factory(), await phone_factory()
    devices = [phone_a.serial, phone_b.serial]
    async with client_on(target, adb_key_path, devices, gate=ALWAYS) as client:
        held = structured(await client.call_tool("send_sms", send("A-1")))
        other = structured(await client.call_tool("send_sms", send("B-1", device=phone_b.serial)))
        async with Ledger.open(target) as ledger:
            await ledger.approve("A-1", operator="ana")
            await ledger.approve("B-1", operator="ana")
    async with client_on(target, adb_key_path, [phone_b.serial], gate=NEVER) as client:
        elsewhere = structured(await client.call_tool("send_sms", send("A-1")))
    assert [] == sms_out(phone_a) + sms_out(phone_b)
    async with client_on(target, adb_key_path, devices, gate=NEVER) as client:
        asked_b = structured(await client.call_tool("send_sms", send("A-1", device=phone_b.serial)))
        b_on_b = structured(await client.call_tool("send_sms", send("B-1")))
    assert ("PLANNED", "PLANNED") == (held["status"], other["status"])
    assert ("PLANNED", 0, None) == (elsewhere["status"], elsewhere["attempts"], elsewhere["latest"])
    assert elsewhere["next_step"].startswith(
        f"Action 'A-1' was made for phone {phone_a.serial}, which is not one of this server's"
    ), elsewhere["next_step"]
    assert "never send this message under another action_id" in elsewhere["next_step"]
    assert ("SUCCEEDED", phone_a.serial) == (asked_b["status"], asked_b["device"])
    assert asked_b["next_step"].startswith(
        f"Action 'A-1' keeps the phone it was made for, {phone_a.serial}: this call sends it"
        f" through that phone, never through {phone_b.serial}."
    ), asked_b["next_step"]
    # B-1 was made for B: a call naming no phone sends it through B, not the first phone
    assert ("SUCCEEDED", phone_b.serial) == (b_on_b["status"], b_on_b["device"])
    assert [BODY] == sms_out(phone_a) == stored_out(phone_a)
    assert [BODY] == sms_out(phone_b) == stored_out(phone_b)


# --------------------------------------------------------------------------- owners


async def test_a_clients_namespace_is_its_own_in_the_ledger(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """With alice and bob registered (the server does it at start-up), an unscoped caller
    of the ledger cannot create bob/B-9; bob's send_sms B-9 then sends it, owned by bob;
    alice reaches none of bob's ids; an id created in bob's namespace before he was
    registered is not his: his call for it is a tool error that sends nothing."""
    phone = await phone_factory()
    intent = SmsIntent(recipient=TO, body=BODY)
    async with Ledger.open(target) as ledger:
        await ledger.create_action("bob/OLD-1", intent)  # before any client was registered
    async with service_on(
        target, adb_key_path, [phone.serial], gate=NEVER, owners=("alice", "bob")
    ) as service:
        async with Ledger.open(target) as ledger:
            with pytest.raises(InvalidInput, match="namespace of client 'bob'"):
                await ledger.create_action("bob/B-9", intent)
            with pytest.raises(InvalidInput, match="namespace of client 'bob'"):
                await ledger.enqueue("bob/B-10", intent, pool="office")
        sent = await service.send_sms(
            action_id="B-9", to=TO, body=BODY, wait_seconds=10, device=None, scope=BOB_SCOPE
        )
        with pytest.raises(ToolError, match="no action 'B-9'"):
            await service.sms_status(action_id="B-9", detail=False, scope=ALICE_SCOPE)
        with pytest.raises(ToolError) as not_his:
            await service.send_sms(
                action_id="OLD-1", to=TO, body=BODY, wait_seconds=10, device=None, scope=BOB_SCOPE
            )
        async with Ledger.open(target) as ledger:
            owner = (await ledger.get_action("bob/B-9")).owner
            with pytest.raises(InvalidInput, match="created by another caller"):
                await ledger.create_action("bob/OLD-1", intent, owner="bob")
    assert ("B-9", Status.SUCCEEDED, "bob") == (sent.action_id, sent.status, owner)
    text = str(not_his.value)
    assert text.startswith("not this client's action, nothing sent: 'OLD-1'"), text
    assert "never send this message under another action_id" in text
    assert [BODY] == sms_out(phone) == stored_out(phone)


async def test_approval_new_counts_known_recipients_per_client(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """approve = "new": alice's first SMS to a number is held; approved, it goes, and her
    next one to it goes without approval; bob's first SMS to that same number is still held
    (a number alice texted is not one bob did)."""
    phone = await phone_factory()
    async with service_on(
        target, adb_key_path, [phone.serial], gate=Policy(approve="new"), owners=("alice", "bob")
    ) as service:

        async def call(scope: ActionScope, action_id: str, body: str) -> Any:
            return await service.send_sms(
                action_id=action_id, to=TO, body=body, wait_seconds=10, device=None, scope=scope
            )

        first = await call(ALICE_SCOPE, "A-1", BODY)
        async with Ledger.open(target) as ledger:
            await ledger.approve("alice/A-1", operator="ana")
        approved = await call(ALICE_SCOPE, "A-1", BODY)
        second = await call(ALICE_SCOPE, "A-2", "again")
        bobs = await call(BOB_SCOPE, "B-1", "from bob")
    assert (Status.PLANNED, "HOLD") == (first.status, first.policy and first.policy.verdict)
    assert (Status.SUCCEEDED, DeliveryState.CONFIRMED) == (approved.status, approved.delivery)
    assert (Status.SUCCEEDED, None) == (second.status, second.policy)
    assert ("B-1", Status.PLANNED, 0) == (bobs.action_id, bobs.status, bobs.attempts)
    assert bobs.policy is not None
    assert ("HOLD", "recipients.approve") == (bobs.policy.verdict, bobs.policy.rule)
    assert "starebrain approve bob/B-1" not in bobs.next_step  # bob's own id is shown
    assert "starebrain approve B-1" in bobs.next_step
    assert [BODY, "again"] == sms_out(phone) == stored_out(phone)


@pytest.mark.slow
async def test_a_clients_server_registers_its_clients_at_start_up(
    tmp_path: Path, phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """``starebrain mcp --clients`` records alice and bob as owners when it starts: another
    caller of the ledger cannot create bob/B-9 then, and bob's send_sms B-9 sends it, owned
    by bob."""
    phone = await phone_factory()
    clients = alice_and_bob(tmp_path, '[recipients]\napprove = "never"\n')
    args = server_args(db_path, adb_key_path, [phone], "--clients", str(clients))
    intent = SmsIntent(recipient=TO, body=BODY)
    async with http_server(args) as (url, _process):
        async with Ledger.open(db_path) as ledger:
            with pytest.raises(InvalidInput, match="namespace of client 'bob'"):
                await ledger.create_action("bob/B-9", intent)
        async with http_client(url, token=BOB) as as_bob, http_client(url, token=ALICE) as as_alice:
            sent = structured(await as_bob.call_tool("send_sms", send("B-9")))
            alice_reads = await as_alice.call_tool("sms_status", {"action_id": "B-9"})
    async with Ledger.open(db_path) as ledger:
        action = await ledger.get_action("bob/B-9")
    assert ("B-9", "SUCCEEDED") == (sent["action_id"], sent["status"])
    assert ("bob", phone.serial) == (action.owner, action.planned_device)
    assert "no action 'B-9'" in error_text(alice_reads)
    assert [BODY] == sms_out(phone) == stored_out(phone)


# --------------------------------------------------------------------------- DENY is final


async def test_a_denied_action_reads_denied_and_is_never_sent(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """The server's deny rule matches the recipient: send_sms and sms_status read DENIED,
    with the verdict and its rule, settled, and a next step saying it is never sent, by
    which rule, and that a person creates a new action to send it after all; a later
    send_sms sends nothing."""
    phone = await phone_factory()
    async with client_on(target, adb_key_path, [phone.serial], gate=DENY_TO) as client:
        denied = structured(await client.call_tool("send_sms", send("A-1")))
        status = structured(await client.call_tool("sms_status", {"action_id": "A-1"}))
        again = structured(await client.call_tool("send_sms", send("A-1")))
    for result in (denied, status, again):
        assert ("DENIED", 0, True) == (result["status"], result["attempts"], result["settled"])
        policy = result["policy"]
        assert ("DENY", "recipients.deny") == (policy["verdict"], policy["rule"]), policy
        step = result["next_step"]
        assert step.startswith("Denied by the policy gate's rule recipients.deny: "), step
        assert "never sent, by any path" in step and "new action_id" in step
        assert "call send_sms again with action_id 'A-1'" not in step
    assert ([], []) == (sms_out(phone), stored_out(phone))


async def test_a_persons_denial_reads_denied_and_is_never_sent(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """A held action a person denies (``starebrain deny``): DENIED, its verdict DENY by rule
    ``approval``, and send_sms sends nothing for it, whatever phone it names."""
    phone, other = await phone_factory(), await phone_factory()
    devices = [phone.serial, other.serial]
    async with client_on(target, adb_key_path, devices, gate=ALWAYS) as client:
        held = structured(await client.call_tool("send_sms", send("A-1")))
        async with Ledger.open(target) as ledger:
            await ledger.deny("A-1", operator="ana", reason="not this one")
        again = structured(await client.call_tool("send_sms", send("A-1", device=other.serial)))
    assert "HOLD" == held["policy"]["verdict"]
    assert ("DENIED", "DENY", "approval") == (
        again["status"],
        again["policy"]["verdict"],
        again["policy"]["rule"],
    )
    assert again["next_step"].startswith("Denied by a person (`starebrain deny`)")
    assert [] == sms_out(phone) + sms_out(other) + stored_out(phone) + stored_out(other)


def test_a_deny_stops_every_retry_in_what_the_model_is_told() -> None:
    """Pure: a DENY with its latest attempt FAILED reads DENIED (never "retry"), as does a
    DENY verdict on a PLANNED summary; after a wrong text went out (MISMATCH), a DENY allows
    no resend; an earlier message that was denied never invites a new action_id."""
    deny = {"verdict": "DENY", "rule": "recipients.deny", "detail": "a deny pattern matches"}
    action = attrs.evolve(_action(), gate=deny)
    failed = _record(
        timedelta(hours=1), delivery=DeliveryState.FAILED, failed_at=NOW - timedelta(hours=1)
    )
    for summary in (summarize(action, [failed], NOW), summarize(action, [], NOW)):
        shown = sms_result(attrs.evolve(summary, status=Status.PLANNED), now=NOW)
        assert (Status.DENIED, "DENY", "recipients.deny", True) == (
            shown.status,
            shown.policy and shown.policy.verdict,
            shown.policy and shown.policy.rule,
            shown.settled,
        )
        assert "never sent, by any path" in shown.next_step
    earlier = next_step(summarize(action, [failed], NOW), now=NOW, earlier=True)
    assert "first tried at" in earlier and "new action_id of your own" not in earlier
    mismatch = _record(
        timedelta(hours=1),
        delivery=DeliveryState.CONFIRMED,
        acceptance=AcceptanceState.REJECTED,
        provider_object_id=9,
        confirmed_at=NOW - timedelta(hours=1),
        rejected_at=NOW - timedelta(hours=1),
        review_reason=ReviewReason.MISMATCH,
    )
    wrong = summarize(action, [mismatch], NOW)
    step = next_step(wrong, now=NOW)
    assert Status.MISMATCH is wrong.status
    assert "no resend is allowed" in step and "send the intended text once" not in step, step


# --------------------------------------------------------------------------- a later path


@pytest.mark.parametrize(
    ("gate", "verdict", "rule"),
    [
        (DENY_TO, "DENY", "recipients.deny"),
        (
            Policy(approve="never", per_recipient_per_day=1),
            "OVER_LIMIT",
            "limits.per_recipient_per_day",
        ),
        (None, "WAIT", "limits.quiet_hours"),
        (ALWAYS, "HOLD", "recipients.approve"),
    ],
    ids=["deny", "limit", "quiet", "hold"],
)
async def test_a_server_that_allows_everything_obeys_what_judged_the_action_before(
    gate: Policy | None,
    verdict: str,
    rule: str,
    target: Path | str,
    phone_factory: PhoneFactory,
    adb_key_path: Path,
) -> None:
    """An action a sender's gate refused (a deny rule, a daily limit reached, quiet hours, a
    hold) is refused again when a server whose own policy allows everything is asked to
    send it: the ledger judges it by the policy pinned to it; nothing goes out."""
    phone = await phone_factory()
    first_gate = gate if gate is not None else quiet_now()
    async with SmsAgent.open(
        db=target, device=phone.serial, key_path=adb_key_path, policy=SEND_POLICY, send_path="ui"
    ) as agent:
        if verdict == "OVER_LIMIT":
            done = await agent.send("L-0", TO, "first of the day", wait=10, gate=first_gate)
            assert Status.SUCCEEDED == done.status
        refused = await agent.send("A-1", TO, BODY, wait=2, gate=first_gate)
    assert refused.gate is not None and (verdict, rule) == (
        refused.gate.verdict.value,
        refused.gate.rule,
    )
    async with client_on(target, adb_key_path, [phone.serial], gate=NEVER) as client:
        later = structured(await client.call_tool("send_sms", send("A-1")))
    assert (verdict, rule) == (later["policy"]["verdict"], later["policy"]["rule"]), later
    assert 0 == later["attempts"]
    assert BODY not in stored_out(phone)
