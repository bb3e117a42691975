"""The policy gate before the phone: a denied action is never sent, a held one waits for a
person's approval, quiet hours and limits count from the ledger (so they hold across agents),
and every verdict is in the history with its rule and the policy file's digest. Every test
runs on SQLite and on PostgreSQL (``db_path``); ground truth is the phone's store."""

from __future__ import annotations

import asyncio
from datetime import time
from pathlib import Path
from typing import Any

from starebrain_actions import Ledger, Status
from starebrain_actions.core.policy import Policy, Verdict, load_policy

from .conftest import sent_rows

TO = "+1 202 555 0100"


def verdicts(history: list[Any]) -> list[tuple[str, str]]:
    return [
        (entry.evidence["verdict"], entry.evidence["rule"])
        for entry in history
        if entry.event.value == "policy_verdict"
    ]


async def test_a_denied_recipient_is_never_sent_and_history_says_why(
    sms_phone: Any, agent_for: Any, db_path: str, tmp_path: Path
) -> None:
    """recipients.deny: the send stops before the phone (DENIED, the verdict on the outcome)
    and a rerun stops again; the history names the rule and the policy file's digest."""
    path = tmp_path / "policy.toml"
    path.write_text('[recipients]\ndeny = ["+1202555*"]\n', encoding="utf-8")
    gate = load_policy(path)
    phone = await sms_phone()
    async with agent_for(phone, gate=gate) as agent:
        first = await agent.send("D-1", TO, "denied text", wait=2)
        again = await agent.send("D-1", TO, "denied text", wait=2)
    assert first.gate is not None and again.gate is not None
    assert (Verdict.DENY, "recipients.deny", gate.digest) == (
        first.gate.verdict,
        first.gate.rule,
        first.gate.digest,
    )
    assert (Status.DENIED, []) == (again.status, sent_rows(phone, TO, "denied text"))
    async with Ledger.open(db_path) as ledger:
        history = await ledger.history("D-1")
    assert [("DENY", "recipients.deny")] == verdicts(history)
    assert gate.digest == history[-1].evidence["digest"]


async def test_the_first_sms_to_a_number_waits_for_a_persons_approval(
    sms_phone: Any, agent_for: Any
) -> None:
    """approve = "new": the first SMS to a number is held (nothing sent) until a person
    approves it; then it goes once; a second action to the same number needs no approval."""
    phone = await sms_phone()
    async with agent_for(phone, gate=Policy(approve="new")) as agent:
        held = await agent.send("N-1", TO, "first text", wait=2)
        assert held.gate is not None and Verdict.HOLD == held.gate.verdict
        assert [] == sent_rows(phone, TO, "first text")
        await agent.ledger.approve("N-1", operator="bo")
        sent = await agent.send("N-1", TO, "first text", wait=10)
        second = await agent.send("N-2", TO, "second text", wait=10)
    assert (Status.SUCCEEDED, None) == (sent.status, sent.gate)
    assert (Status.SUCCEEDED, None) == (second.status, second.gate)
    assert (1, 1) == (
        len(sent_rows(phone, TO, "first text")),
        len(sent_rows(phone, TO, "second text")),
    )


async def test_a_denial_by_a_person_is_final(sms_phone: Any, agent_for: Any) -> None:
    """A held action a person denies is never sent, and cannot be approved afterwards."""
    phone = await sms_phone()
    async with agent_for(phone, gate=Policy(approve="always")) as agent:
        await agent.send("N-1", TO, "never", wait=1)
        await agent.ledger.deny("N-1", operator="bo", reason="not this one")
        after = await agent.send("N-1", TO, "never", wait=1)
        try:
            await agent.ledger.approve("N-1", operator="al")
        except Exception as exc:  # InvariantViolation
            refused = str(exc)
    assert after.gate is not None and ("DENY", "approval") == (
        after.gate.verdict.value,
        after.gate.rule,
    )
    assert "a denial is final" in refused
    assert [] == sent_rows(phone, TO, "never")


async def test_the_hourly_limit_counts_across_agents(sms_phone: Any, agent_for: Any) -> None:
    """per_hour = 2 counted in the ledger: two actions sent by one agent, the third, sent by
    another agent on another connection, is refused (OVER_LIMIT) and nothing goes out."""
    phone = await sms_phone()
    gate = Policy(per_hour=2)
    async with agent_for(phone, gate=gate) as first:
        for number in (1, 2):
            done = await first.send(f"H-{number}", TO, f"hourly {number}", wait=10)
            assert Status.SUCCEEDED == done.status
    async with agent_for(phone, gate=gate) as second:
        third = await second.send("H-3", TO, "hourly 3", wait=2)
    assert third.gate is not None
    assert (Verdict.OVER_LIMIT, "limits.per_hour") == (third.gate.verdict, third.gate.rule)
    assert [] == sent_rows(phone, TO, "hourly 3")


async def test_quiet_hours_make_the_action_wait_and_say_until_when(
    sms_phone: Any, agent_for: Any
) -> None:
    """Quiet hours covering the whole day at the recipient: WAIT, with when they end."""
    phone = await sms_phone()
    async with agent_for(phone, gate=Policy(quiet_hours=(time(0, 0), time(23, 59)))) as agent:
        waiting = await agent.send("Q-1", TO, "quiet", wait=1)
    assert waiting.gate is not None
    assert (Verdict.WAIT, "limits.quiet_hours") == (waiting.gate.verdict, waiting.gate.rule)
    assert waiting.gate.until is not None
    assert [] == sent_rows(phone, TO, "quiet")


async def test_an_approval_racing_sends_sends_once(sms_phone: Any, agent_for: Any) -> None:
    """Three sends of a held action race a person's approval: exactly one SMS goes out."""
    phone = await sms_phone(send_delay_ms=50)
    async with agent_for(phone, gate=Policy(approve="always")) as agent:
        await agent.send("R-1", TO, "raced", wait=0.5)

        async def approve_soon() -> None:
            await asyncio.sleep(0.2)
            await agent.ledger.approve("R-1", operator="bo")

        await asyncio.gather(
            approve_soon(),
            *(agent.send("R-1", TO, "raced", wait=8) for _ in range(3)),
        )
        final = await agent.send("R-1", TO, "raced", wait=8)
    assert Status.SUCCEEDED == final.status
    assert 1 == len(sent_rows(phone, TO, "raced"))


async def test_a_sender_without_a_gate_honours_a_hold_and_a_denial(
    sms_phone: Any, agent_for: Any
) -> None:
    """An action one gate held waits for a person even when a sender with no gate of its own
    (a cron resume, another process) tries it; a person's denial binds every sender too;
    once approved, the gateless sender sends it once."""
    phone = await sms_phone()
    async with agent_for(phone, gate=Policy(approve="always")) as gated:
        await gated.send("H-1", TO, "held text", wait=1)
        await gated.send("D-1", TO, "denied text", wait=1)
        await gated.ledger.deny("D-1", operator="bo", reason="no")
    async with agent_for(phone) as plain:
        held = await plain.send("H-1", TO, "held text", wait=2)
        denied = await plain.send("D-1", TO, "denied text", wait=2)
        await plain.ledger.approve("H-1", operator="bo")
        sent = await plain.send("H-1", TO, "held text", wait=10)
    assert held.gate is not None and Verdict.HOLD == held.gate.verdict
    assert denied.gate is not None and Verdict.DENY == denied.gate.verdict
    assert Status.SUCCEEDED == sent.status
    assert (1, 0) == (
        len(sent_rows(phone, TO, "held text")),
        len(sent_rows(phone, TO, "denied text")),
    )
