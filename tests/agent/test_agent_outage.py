"""Issue 10, section 3: a phone outage must not burn the budget; retries back off."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from starebrain_actions import DeliveryState, RetryPolicy, Status
from starebrain_actions.core.decisions import spends_budget
from starebrain_actions.core.transitions import note_error

TO = "+1 202 555 0100"
#: One attempt each, a backoff of 0.3 s: an attempt that met an outage spends nothing.
ONE_ATTEMPT = RetryPolicy(
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
    maximum_attempts=1,
    grace_window=timedelta(seconds=1),
    initial_interval=timedelta(milliseconds=300),
)


async def test_a_two_second_outage_spends_no_attempt(sms_phone: Any, agent_for: Any) -> None:
    """The phone refuses connections for 2 s (adbd back on USB only) while three actions with
    a budget of ONE attempt each are sent: the attempts that met the outage fail without
    spending the budget, the retries back off, and every action goes out exactly once when
    the phone is back. (Before the fix every action spent its budget in milliseconds and
    ended BUDGET_EXHAUSTED with nothing sent.)"""
    phone = await sms_phone()
    async with agent_for(phone, policy=ONE_ATTEMPT, connect_timeout_s=0.5) as agent:
        await agent.phone.fence_epoch()  # asked once per connection, before the outage
        phone.disable_tcpip()
        back = asyncio.get_running_loop().call_later(
            2.0, lambda: asyncio.ensure_future(phone.enable_tcpip())
        )
        try:
            outcomes = await asyncio.gather(
                *(agent.send(f"A-{n}", TO, f"Table {n} is ready", wait=20) for n in range(3))
            )
        finally:
            back.cancel()
    assert [Status.SUCCEEDED] * 3 == [outcome.status for outcome in outcomes]
    sent = await phone.wait_transmissions(
        lambda t: t.body.startswith("Table "), count=3, then_idle=True
    )
    for n in range(3):
        assert 1 == sum(1 for t in sent if t.body == f"Table {n} is ready")
    attempts = [record for outcome in outcomes for record in outcome.summary.attempts]
    unreachable = [record for record in attempts if not spends_budget(record)]
    assert unreachable, "no attempt met the outage: the test proves nothing"
    assert all(DeliveryState.FAILED is record.delivery for record in unreachable)
    # backed off: far fewer attempts than polls in 2 s
    assert len(unreachable) <= 3 * 4


async def test_an_outage_longer_than_the_wait_leaves_the_action_waiting(
    sms_phone: Any, agent_for: Any
) -> None:
    """An outage that outlasts --wait ends the send with nothing sent and the budget intact
    (PLANNED, waiting for the phone and its backoff: a rerun sends), never FAILED or
    BUDGET_EXHAUSTED."""
    phone = await sms_phone()
    policy = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=1,
        initial_interval=timedelta(milliseconds=200),
    )
    async with agent_for(phone, policy=policy, connect_timeout_s=0.5) as agent:
        await agent.phone.fence_epoch()  # asked once per connection, before the outage
        phone.disable_tcpip()
        outcome = await agent.send("A-1", TO, "Table 1 is ready", wait=1.5)
        assert not outcome.summary.review_reasons
        assert Status.PLANNED == outcome.status
        await phone.enable_tcpip()
        again = await agent.send("A-1", TO, "Table 1 is ready", wait=10)
    assert Status.SUCCEEDED == again.status
    sent = await phone.wait_transmissions(lambda t: t.body == "Table 1 is ready", then_idle=True)
    assert 1 == len(sent)


async def test_no_attempt_starts_while_the_fence_cannot_be_read(
    sms_phone: Any, agent_for: Any
) -> None:
    """The phone is out of reach before this connection ever read its fence epoch: no attempt
    is started (one without a fence could never be voided, and its rows never told from the
    owner's); the send waits for the phone and goes out once it is back."""
    phone = await sms_phone()
    async with agent_for(phone, connect_timeout_s=0.5) as agent:
        phone.disable_tcpip()
        waited = await agent.send("A-1", TO, "Table 1 is ready", wait=1.0)
        assert (Status.PLANNED, ()) == (waited.status, waited.summary.attempts)
        await phone.enable_tcpip()
        outcome = await agent.send("A-1", TO, "Table 1 is ready", wait=10)
    record = outcome.record
    assert record is not None and "fence_epoch" in record.evidence
    assert (Status.SUCCEEDED, 1) == (outcome.status, len(outcome.summary.attempts))


async def test_a_pass_noting_an_error_meanwhile_never_drops_what_the_send_proved(
    sms_phone: Any, agent_for: Any
) -> None:
    """The send meets the outage (nothing sent: its attempt fails without spending the one
    attempt), while a reconcile pass of the unreachable phone notes its error on that same
    attempt. The note changes neither axis, so the send's proof is applied on the attempt as
    it is now; before, the lost compare-and-set dropped it, the attempt stayed in flight with
    nothing sent, and the action ended UNKNOWN (seen in a full run under load)."""
    phone = await sms_phone()
    async with agent_for(phone, policy=ONE_ATTEMPT, connect_timeout_s=0.5) as agent:
        await agent.phone.fence_epoch()
        real = agent.phone.dispatch
        noted: list[str] = []

        async def dispatch(intent: Any, **kwargs: Any) -> Any:
            if not noted:
                # the outage starts as the command leaves; a pass notes it on the attempt
                phone.disable_tcpip()
                asyncio.get_running_loop().call_later(
                    1.0, lambda: asyncio.ensure_future(phone.enable_tcpip())
                )
                (attempt,) = (await agent.ledger.summary("A-1")).attempts
                note = note_error(attempt, "reconcile read failed: refused", now=agent.ledger.now())
                await agent.ledger.apply(note)
                noted.append(attempt.dispatch_id)
            return await real(intent, **kwargs)

        agent.phone.dispatch = dispatch  # type: ignore[method-assign]
        outcome = await agent.send("A-1", TO, "Table 1 is ready", wait=10)
    first = outcome.summary.attempts[0]
    assert (DeliveryState.FAILED, True) == (first.delivery, first.evidence.get("unreachable"))
    assert Status.SUCCEEDED == outcome.status
    sent = await phone.wait_transmissions(count=1, then_idle=True)
    assert ["Table 1 is ready"] == [t.body for t in sent]
