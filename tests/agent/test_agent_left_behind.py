"""Nothing left behind: a send blocked by another action's attempt settles that attempt by the
reconcile pass's own code, a phone that is not ready spends no attempt, and an operator's
grant gives an exhausted action another chance. Ground truth is the phone's store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from starebrain_actions import (
    DeliveryState,
    RedispatchReason,
    Status,
    should_redispatch,
)
from starebrain_actions.core.model import LEASE_RELEASING_REVIEWS
from starebrain_actions.ledger.store import Ledger

from .conftest import FAST, sent_rows

TO = "+1 202 555 0100"


def now() -> datetime:
    return datetime.now(UTC)


async def interrupted_attempt(agent: Any, action_id: str, body: str) -> str:
    """What a send interrupted by Ctrl-C right after its receipt leaves: an attempt with its
    fence epoch, holding the phone, whose script never ran."""
    await agent.ledger.create_action(action_id, _intent(body), FAST)
    evidence = await agent._fence_evidence(body)
    record = await agent.ledger.begin_attempt(action_id, agent.phone.device, evidence=evidence)
    return str(record.dispatch_id)


def _intent(body: str) -> Any:
    from starebrain_actions import SmsIntent

    return SmsIntent(recipient=TO, body=body)


async def test_a_send_blocked_by_an_interrupted_attempt_voids_it_and_sends(
    sms_phone: Any, agent_for: Any
) -> None:
    """An attempt left by an interrupted send holds the phone; another action's send, once
    that attempt is older than ``void_after``, voids its fence itself (as a pass would) and
    sends within its own wait: one SMS for B, none for A, A FAILED and free to retry."""
    phone = await sms_phone()
    async with agent_for(phone, void_after=timedelta(seconds=1)) as agent:
        held = await interrupted_attempt(agent, "A-1", "the interrupted text")
        told: list[str] = []
        outcome = await agent.send("B-1", TO, "the next text", wait=15, on_wait=told.append)
        first = await agent.ledger.get_attempt(held)
    assert Status.SUCCEEDED == outcome.status
    assert ([], [outcome.record.provider_object_id]) == (  # type: ignore[union-attr]
        sent_rows(phone, TO, "the interrupted text"),
        sent_rows(phone, TO, "the next text"),
    )
    assert DeliveryState.FAILED == first.delivery
    assert len(told) == 1 and "A-1" in told[0] and "voids it from" in told[0]
    assert outcome.held_by is None


async def test_a_send_that_gives_up_names_the_attempt_holding_the_phone(
    sms_phone: Any, agent_for: Any
) -> None:
    """Before the holder may be voided, a send with a short wait returns PLANNED with the
    hold: which action, since when, and when a pass can free the phone."""
    phone = await sms_phone()
    async with agent_for(phone, void_after=timedelta(seconds=30)) as agent:
        held = await interrupted_attempt(agent, "A-1", "the interrupted text")
        outcome = await agent.send("B-1", TO, "the next text", wait=0.5)
    hold = outcome.held_by
    assert Status.PLANNED == outcome.status
    assert hold is not None
    assert ("A-1", held) == (hold.action_id, hold.dispatch_id)
    assert hold.void_from == hold.since + timedelta(seconds=30)
    assert hold.review_at == hold.since + FAST.unverified_after
    assert [] == sent_rows(phone, TO, "the next text")


async def test_stacked_faults_release_the_phone_when_the_holders_limit_passes(
    sms_phone: Any, agent_for: Any
) -> None:
    """``drop-after-send``, ``mangle-body`` and ``duplicate-send`` on one send leave an
    attempt no read can prove; a send blocked by it runs the pass's code on it, which moves
    it to review (AMBIGUOUS, or UNVERIFIED once its ``unverified_after`` passes: either
    frees the phone), then sends its own message."""
    phone = await sms_phone()
    policy = attrs.evolve(FAST, unverified_after=timedelta(seconds=3))
    async with agent_for(phone, policy=policy, void_after=timedelta(seconds=1)) as agent:
        for fault in ("drop-after-send", "mangle-body", "duplicate-send"):
            phone.inject_fault(fault)
        stuck = await agent.send("A-1", TO, "the stuck text", wait=0.3)
        assert stuck.status in (Status.IN_FLIGHT, Status.UNKNOWN)
        outcome = await agent.send("B-1", TO, "the next text", wait=15)
        first = await agent.ledger.summary("A-1")
    assert Status.SUCCEEDED == outcome.status
    assert 1 == len(sent_rows(phone, TO, "the next text"))
    assert first.latest is not None
    assert DeliveryState.PENDING == first.latest.delivery
    assert first.latest.review_reason in LEASE_RELEASING_REVIEWS


async def test_a_locked_phone_spends_no_attempt_and_the_send_waits_for_it(
    sms_phone: Any, agent_for: Any
) -> None:
    """With the screen locked, each attempt is refused before the first key and spends
    nothing; the send backs off within its wait, and once the owner unlocks the phone it
    sends: one SMS, SUCCEEDED, however many refusals came first."""
    phone = await sms_phone(screen="locked")
    steps: list[str] = []
    async with agent_for(phone) as agent:

        async def unlock_later() -> None:
            await asyncio.sleep(1.0)
            phone.screen = "on"

        unlocking = asyncio.create_task(unlock_later())
        outcome = await agent.send("A-1", TO, "after the unlock", wait=20, on_step=steps.append)
        await unlocking
    refused = [r for r in outcome.summary.attempts if r.delivery is DeliveryState.FAILED]
    assert Status.SUCCEEDED == outcome.status
    assert len(refused) >= 3 > FAST.maximum_attempts - 1
    assert {"keyguard_showing"} == {r.evidence.get("not_ready") for r in refused}
    assert [outcome.record.provider_object_id] == sent_rows(  # type: ignore[union-attr]
        phone, TO, "after the unlock"
    )
    assert any("unlock the phone" in step for step in steps)


async def test_a_send_that_ends_while_the_phone_is_locked_says_what_to_do(
    sms_phone: Any, agent_for: Any
) -> None:
    """The wait ends with the phone still locked: PLANNED (waiting for the phone) with the
    whole budget left, and ``not_ready`` says to unlock it; a rerun after unlocking sends
    once."""
    phone = await sms_phone(screen="locked")
    async with agent_for(phone) as agent:
        locked = await agent.send("A-1", TO, "locked text", wait=1.0)
        phone.screen = "on"
        again = await agent.send("A-1", TO, "locked text", wait=10)
    assert Status.PLANNED == locked.status
    assert locked.not_ready is not None and "unlock the phone" in locked.not_ready
    assert Status.SUCCEEDED == again.status
    assert 1 == len(sent_rows(phone, TO, "locked text"))


async def test_an_exhausted_action_is_sent_after_an_operators_grant(
    sms_phone: Any, agent_for: Any, db_path: str
) -> None:
    """Three sends the radio failed (``send-fails``: each spends an attempt) end
    BUDGET_EXHAUSTED; after ``Ledger.retry`` the same send goes out once, and the history
    keeps who granted it and why."""
    # no radio delay: each row turns FAILED in the step of the phone's loop that wrote it
    # SENT, so no read sees it SENT (FAST's 0.3 s from the receipt is past before the app
    # writes it: a SENT sighting would be settled at once, SUCCEEDED)
    phone = await sms_phone(send_delay_ms=0)
    phone.inject_fault("send-fails", count=3)
    async with agent_for(phone) as agent:
        spent = await agent.send("A-1", TO, "granted text", wait=10)
        decision = should_redispatch(spent.summary.action, spent.summary.attempts, now())
        assert RedispatchReason.BUDGET_EXHAUSTED == decision.reason
        assert 3 == len(spent.summary.attempts)
        assert [] == sent_rows(phone, TO, "granted text")
        await agent.ledger.retry("A-1", reason="the app was fixed", operator="bo", attempts=1)
        again = await agent.send("A-1", TO, "granted text", wait=10)
    async with Ledger.open(db_path) as ledger:
        history = await ledger.history("A-1")
    assert Status.SUCCEEDED == again.status
    assert 1 == len(sent_rows(phone, TO, "granted text"))
    granted = [entry for entry in history if entry.event.value == "retry_granted"]
    assert [("operator:bo", "the app was fixed")] == [
        (entry.actor, entry.evidence["reason"]) for entry in granted
    ]
