"""What an action must obey stays with it (DESIGN.md invariant 9): the verdicts and the policy
that judged it, and the phone it was meant for, bind every later path that can send it
(``SmsAgent.send`` and ``resume`` with no gate of their own, a worker with none), because the
ledger reads them in the transaction that writes each receipt. Each case runs on SQLite and on
PostgreSQL (``db_path``); ground truth is the phone's own store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, SmsIntent, Status
from starebrain_actions.core.exceptions import PolicyRefused
from starebrain_actions.core.policy import Policy, Verdict, zones_of
from tests.agent.conftest import FAST, sent_rows
from tests.agent.test_worker import seen, worker_for

TO = "+12025550100"

Phone = Callable[..., Awaitable[SimulatedPhone]]


def quiet_now() -> Policy:
    """Quiet hours holding now at ``TO`` (from an hour ago to two hours ahead, in its zone):
    never near their edge while a test runs."""
    local = datetime.now(UTC).astimezone(zones_of(TO)[0])
    start = (local - timedelta(hours=1)).time().replace(second=0, microsecond=0)
    end = (local + timedelta(hours=2)).time().replace(second=0, microsecond=0)
    return Policy(quiet_hours=(start, end))


#: Each refusing verdict with the policy that gives it (the limit once one SMS went out).
CASES: dict[str, tuple[Callable[[], Policy], Verdict, str]] = {
    "deny": (lambda: Policy(deny=("+1202555*",)), Verdict.DENY, "recipients.deny"),
    "limit": (
        lambda: Policy(per_recipient_per_day=1),
        Verdict.OVER_LIMIT,
        "limits.per_recipient_per_day",
    ),
    "quiet": (quiet_now, Verdict.WAIT, "limits.quiet_hours"),
    "hold": (lambda: Policy(approve="always"), Verdict.HOLD, "recipients.approve"),
}


async def judged(agent: Any, case: str) -> Policy:
    """Let the case's gate judge action X-1 through ``agent`` (refused, its verdict kept and
    its policy pinned); for the limit, one SMS to the number goes out first."""
    make, verdict, rule = CASES[case]
    gate = make()
    if case == "limit":
        first = await agent.send("X-0", TO, "first of the day", wait=10, gate=gate)
        assert Status.SUCCEEDED == first.status
    refused = await agent.send("X-1", TO, "bound text", wait=2, gate=gate)
    assert refused.gate is not None
    assert (verdict, rule) == (refused.gate.verdict, refused.gate.rule)
    return gate


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_later_send_with_no_gate_obeys_the_recorded_verdict(
    case: str, sms_phone: Phone, agent_for: Callable[..., Any]
) -> None:
    """An action a gate refused is refused again when an agent with no gate of its own sends
    it: the ledger judges it by its pinned policy (or its standing DENY or HOLD)."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await judged(agent, case)
    async with agent_for(phone) as bare:  # no gate at all
        again = await bare.send("X-1", TO, "bound text", wait=2)
    _make, verdict, rule = CASES[case]
    assert again.gate is not None
    assert (verdict, rule) == (again.gate.verdict, again.gate.rule)
    assert [] == sent_rows(phone, TO, "bound text")
    expected = Status.DENIED if case == "deny" else Status.PLANNED
    assert expected == again.status


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_later_resume_with_no_gate_sends_nothing_it_must_not(
    case: str, sms_phone: Phone, agent_for: Callable[..., Any]
) -> None:
    """``resume`` by an agent with no gate leaves a refused action unsent (it says why, or,
    denied or held, leaves it out); the phone's store never holds its text."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await judged(agent, case)
    async with agent_for(phone) as bare:
        report = await bare.resume(wait=2.0)
    notes = {item.action_id: item.note for item in report.items}
    assert [] == sent_rows(phone, TO, "bound text")
    if case in ("limit", "quiet"):
        assert "stopped by the policy gate" in notes["X-1"]
    else:
        assert "X-1" not in notes  # denied or held: not resumable at all


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_worker_with_no_gate_sends_nothing_its_queue_must_not(
    case: str, sms_phone: Phone, agent_for: Callable[..., Any], db_path: str, adb_key_path: Path
) -> None:
    """A queued action the gate judged at enqueue (pinned) is not sent by a worker that has
    no gate: a DENY or a HOLD took it out of the queue; a limit reached since, or quiet hours
    begun since, are judged again in the worker's receipt."""
    phone = await sms_phone()
    make, verdict, rule = CASES[case]
    gate = make()
    intent = SmsIntent(recipient=TO, body="bound text")
    # the limit and the quiet hours let it into the queue (a first SMS goes out after; the
    # quiet hours had not begun three hours ago), and refuse it when the worker takes it
    at = datetime.now(UTC) - timedelta(hours=3) if case == "quiet" else None
    async with Ledger.open(db_path) as ledger:
        queued = await ledger.enqueue("X-1", intent, FAST, pool="default", gate=gate, now=at)
    if case in ("deny", "hold"):
        assert queued.gate is not None and verdict == queued.gate.verdict
    else:
        assert queued.gate is None and queued.summary.action.gate_policy is not None
    if case == "limit":
        async with agent_for(phone) as agent:
            first = await agent.send("X-0", TO, "first of the day", wait=10)
            assert Status.SUCCEEDED == first.status
    worker, events = worker_for(db_path, [phone], adb_key_path)
    task = asyncio.create_task(worker.run())
    try:
        if case in ("limit", "quiet"):
            await seen(events, "done")  # claimed, and refused in its receipt
        else:
            await seen(events, "phone_ready")
            for _ in range(1500):  # the queue looked at: nothing to claim
                if worker.doing.get(phone.serial) == "idle":
                    break
                await asyncio.sleep(0.02)
            assert "idle" == worker.doing.get(phone.serial)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    done = [e for e in events if e.event == "done" and e.action_id == "X-1"]
    assert ([rule] if case in ("limit", "quiet") else []) == [
        rule for e in done if rule in (e.detail or "")
    ]
    assert [] == sent_rows(phone, TO, "bound text")
    async with Ledger.open(db_path) as ledger:
        summary = await ledger.summary("X-1")
    assert (summary.action.gate or {}).get("rule") == rule


async def test_a_process_gate_adds_refusals_but_never_lifts_one(
    sms_phone: Phone, agent_for: Callable[..., Any], db_path: str
) -> None:
    """The pinned policy lets everything go, yet a later process whose own gate denies the
    recipient refuses the action (a DENY is final from then on); a later permissive gate
    never lifts a pinned refusal."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        async with Ledger.open(db_path) as ledger:
            await ledger.create_action("P-1", SmsIntent(recipient=TO, body="p1"), FAST)
            await ledger.create_action("P-2", SmsIntent(recipient=TO, body="p2"), FAST)
            with pytest.raises(PolicyRefused):  # pins approve = "always" on P-2
                await ledger.begin_attempt(P2 := "P-2", phone.serial, gate=Policy(approve="always"))
        # P-1: first judged by an allow-all gate, then by one that denies its recipient
        denied = await agent.send("P-1", TO, "p1", wait=2, gate=Policy(deny=("+1*",)))
        allowed_later = await agent.send("P-1", TO, "p1", wait=2, gate=Policy())
        # P-2: pinned to approve = "always"; a gate that approves nothing never lifts it
        held = await agent.send(P2, TO, "p2", wait=2, gate=Policy(approve="never"))
    assert denied.gate is not None and Verdict.DENY == denied.gate.verdict
    assert (Status.DENIED, Verdict.DENY) == (
        allowed_later.status,
        allowed_later.gate.verdict if allowed_later.gate else None,
    )
    assert held.gate is not None and Verdict.HOLD == held.gate.verdict
    assert ([], []) == (sent_rows(phone, TO, "p1"), sent_rows(phone, TO, "p2"))


async def test_a_rule_deny_is_final_and_cannot_be_approved(
    sms_phone: Phone, agent_for: Callable[..., Any]
) -> None:
    """An action a rule denied cannot be approved by a person: the DENY is final (a person
    who wants the text sent creates a new action)."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await judged(agent, "deny")
        with pytest.raises(Exception, match="a DENY is final") as refused:
            await agent.ledger.approve("X-1", operator="ana")
        after = await agent.send("X-1", TO, "bound text", wait=2)
    assert "InvariantViolation" == type(refused.value).__name__
    assert Status.DENIED == after.status
    assert [] == sent_rows(phone, TO, "bound text")


async def test_an_action_keeps_the_phone_its_sender_named(
    sms_phone: Phone, agent_for: Callable[..., Any]
) -> None:
    """A held action made on phone A and approved is not sent by a resume on phone B, which
    names it and says why; a resume on A sends it once."""
    phone_a = await sms_phone()
    phone_b = await sms_phone()
    async with agent_for(phone_a) as agent_a:
        held = await agent_a.send("K-1", TO, "for phone a", wait=2, gate=Policy(approve="always"))
        assert held.gate is not None and Verdict.HOLD == held.gate.verdict
        await agent_a.ledger.approve("K-1", operator="ana")
        key_a = agent_a.phone.device
    async with agent_for(phone_b) as agent_b:
        elsewhere = await agent_b.resume(wait=2.0)
        direct = await agent_b.send("K-1", TO, "for phone a", wait=2)
    async with agent_for(phone_a) as agent_a:
        home = await agent_a.resume(wait=10.0)
    notes = {item.action_id: item.note for item in elsewhere.items}
    assert f"meant for phone {key_a}" in notes["K-1"]
    assert direct.refused is not None and key_a in direct.refused
    assert [1] == [item.sent for item in home.items if item.action_id == "K-1"]
    assert ([], 1) == (
        sent_rows(phone_b, TO, "for phone a"),
        len(sent_rows(phone_a, TO, "for phone a")),
    )


def test_quiet_now_holds_now() -> None:
    """The quiet hours these tests use hold now at the recipient, with an hour either side."""
    from starebrain_actions.core.policy import quiet_until

    policy = quiet_now()
    assert policy.quiet_hours is not None
    until = quiet_until(TO, policy.quiet_hours, datetime.now(UTC))
    assert until is not None and until - datetime.now(UTC) > timedelta(minutes=90)
    assert isinstance(policy.quiet_hours[0], time)
