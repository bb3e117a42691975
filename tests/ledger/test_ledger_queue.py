"""The queue in the ledger, on both backends: ``enqueue``, ``claim_next``, ``release``, and the
phones workers hold (``hold_phones``, ``heartbeat``, ``let_go``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from starebrain_actions import (
    FingerprintConflict,
    InvalidInput,
    Ledger,
    RetryPolicy,
    SmsIntent,
    Status,
    fail_delivery,
)
from starebrain_actions.core.policy import Policy, Verdict
from starebrain_actions.ledger.queue import STALE_AFTER, PhoneWorker

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
INTENT = SmsIntent(recipient="+1 202 555 0100", body="Your code is 4821")
NO_WAIT = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(0))


def holder(worker: str, at: datetime, *, host: str = "h1", pid: int = 1) -> PhoneWorker:
    return PhoneWorker(
        device="",
        worker=worker,
        host=host,
        pid=pid,
        pool="default",
        address="",
        claimed_at=at,
        heartbeat_at=at,
    )


async def queue_three(ledger: Ledger) -> None:
    for n in range(3):
        await ledger.enqueue(
            f"Q-{n}",
            SmsIntent(recipient="+12025550100", body=f"m{n}"),
            NO_WAIT,
            now=T0 + timedelta(seconds=n),
        )


async def test_enqueue_records_a_planned_action_with_no_phone(ledger: Ledger) -> None:
    queued = await ledger.enqueue("Q-1", INTENT, pool="north", now=T0)
    assert queued.created and queued.gate is None
    assert queued.summary.status is Status.PLANNED
    action = queued.summary.action
    assert (action.pool, action.queue_after, action.planned_device, action.claim) == (
        "north",
        T0,
        None,
        None,
    )
    again = await ledger.enqueue("Q-1", INTENT, pool="south", now=T0 + timedelta(seconds=5))
    assert not again.created
    assert again.summary.action.pool == "north"  # an id already queued keeps its pool
    with pytest.raises(FingerprintConflict):
        await ledger.enqueue("Q-1", SmsIntent(recipient="+12025550100", body="other"))
    assert (await ledger.queue_tally(now=T0))["north"] == {
        "total": 1,
        "waiting": 1,
        "later": 0,
        "claimed": 0,
    }


@pytest.mark.parametrize("pool", ["", "two words", "x" * 101, "tab\there"])
async def test_a_bad_pool_is_refused_and_nothing_is_written(ledger: Ledger, pool: str) -> None:
    with pytest.raises(InvalidInput, match="pool"):
        await ledger.enqueue("Q-1", INTENT, pool=pool)
    assert await ledger.summaries() == []


async def test_claims_take_the_oldest_due_action_once(ledger: Ledger) -> None:
    await queue_three(ledger)
    now = T0 + timedelta(minutes=1)
    await ledger.hold_phones(holder("w1", now), [("p1", "a1")])
    await ledger.hold_phones(holder("w2", now), [("p2", "a2")])
    first = await ledger.claim_next("default", "p1", "w1", now=now)
    second = await ledger.claim_next("default", "p2", "w2", now=now)
    third = await ledger.claim_next("default", "p1", "w1", now=now)
    assert [a.action_id for a in (first, second, third) if a] == ["Q-0", "Q-1", "Q-2"]
    assert first is not None and first.claim is not None
    assert (first.claim.worker, first.claim.device) == ("w1", "p1")
    assert await ledger.claim_next("default", "p2", "w2", now=now) is None
    assert await ledger.claim_next("other", "p2", "w2", now=now) is None
    stored = (await ledger.summary("Q-1")).action
    assert stored.claim is not None and stored.claim.worker == "w2"
    assert (await ledger.queue_tally(now=now))["default"]["claimed"] == 3


async def test_a_stale_workers_claim_is_free_again(ledger: Ledger) -> None:
    await queue_three(ledger)
    now = T0 + timedelta(minutes=1)
    await ledger.hold_phones(holder("w1", now), [("p1", "a1")])
    taken = await ledger.claim_next("default", "p1", "w1", now=now)
    assert taken is not None and taken.action_id == "Q-0"
    # w1 still beats: its claim holds
    assert (await ledger.claim_next("default", "p2", "w2", now=now)).action_id == "Q-1"  # type: ignore[union-attr]
    later = now + STALE_AFTER + timedelta(seconds=1)
    again = await ledger.claim_next("default", "p2", "w2", now=later)
    assert again is not None and again.action_id == "Q-0"


async def test_an_unresolved_attempt_pins_its_action_to_its_phone(ledger: Ledger) -> None:
    await queue_three(ledger)
    now = T0 + timedelta(minutes=1)
    claimed = await ledger.claim_next("default", "p1", "w1", now=now)
    assert claimed is not None
    record = await ledger.begin_attempt(claimed.action_id, "p1", now=now)
    # the worker dies: its claim is stale, but the attempt holds the action to p1
    later = now + timedelta(minutes=5)
    picked = []
    while (got := await ledger.claim_next("default", "p2", "w2", now=later)) is not None:
        picked.append(got.action_id)
    assert picked == ["Q-1", "Q-2"]
    # proven FAILED: the retry may go to another phone of the pool
    await ledger.apply(fail_delivery(record, reason="radio off", now=later, actor="test"))
    retry = await ledger.claim_next("default", "p2", "w2", now=later)
    assert retry is not None and retry.action_id == "Q-0"


async def test_release_takes_a_finished_action_out_of_the_queue(ledger: Ledger) -> None:
    await ledger.enqueue("Q-1", INTENT, RetryPolicy(maximum_attempts=1), now=T0)
    claimed = await ledger.claim_next("default", "p1", "w1", now=T0)
    assert claimed is not None
    record = await ledger.begin_attempt("Q-1", "p1", now=T0)
    await ledger.apply(fail_delivery(record, reason="no", now=T0, actor="test"))
    # out of budget: it leaves the queue, and a person's retry grant puts it back
    assert await ledger.release("Q-1", "w1", now=T0) is None
    action = (await ledger.summary("Q-1")).action
    assert (action.queue_after, action.claim) == (None, None)
    assert await ledger.claim_next("default", "p1", "w1", now=T0) is None
    await ledger.retry("Q-1", reason="radio fixed", operator="ops", now=T0 + timedelta(1))
    again = await ledger.claim_next("default", "p1", "w1", now=T0 + timedelta(1))
    assert again is not None and again.action_id == "Q-1"


async def test_backoff_moves_an_action_behind_the_due_ones(ledger: Ledger) -> None:
    policy = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=60))
    await ledger.enqueue("Q-1", INTENT, policy, now=T0)
    await ledger.enqueue("Q-2", SmsIntent(recipient="+12025550100", body="b"), now=T0)
    claimed = await ledger.claim_next("default", "p1", "w1", now=T0)
    assert claimed is not None and claimed.action_id == "Q-1"
    record = await ledger.begin_attempt("Q-1", "p1", now=T0)
    await ledger.apply(fail_delivery(record, reason="no", now=T0, actor="test"))
    after = await ledger.release("Q-1", "w1", now=T0)
    assert after is not None and after > T0
    nxt = await ledger.claim_next("default", "p1", "w1", now=T0)
    assert nxt is not None and nxt.action_id == "Q-2"
    assert await ledger.claim_next("default", "p1", "w1", now=T0) is None
    # w1 still drives Q-2 (its heartbeat is fresh) when Q-1's backoff is over
    await ledger.hold_phones(holder("w1", after), [("p1", "a1")])
    due = await ledger.claim_next("default", "p1", "w1", now=after)
    assert due is not None and due.action_id == "Q-1"


async def test_the_gate_judges_at_enqueue(ledger: Ledger) -> None:
    deny = Policy(deny=("+1202555*",))
    queued = await ledger.enqueue("Q-1", INTENT, gate=deny, now=T0)
    assert queued.gate is not None and queued.gate.verdict is Verdict.DENY
    assert queued.summary.action.queue_after is None
    assert queued.summary.action.gate is not None
    hold = Policy(approve="always")
    held = await ledger.enqueue(
        "Q-2", SmsIntent(recipient="+12025550100", body="b"), gate=hold, now=T0
    )
    assert held.gate is not None and held.gate.verdict is Verdict.HOLD
    assert await ledger.claim_next("default", "p1", "w1", now=T0) is None
    await ledger.approve("Q-2", operator="ops", now=T0)
    approved = await ledger.claim_next("default", "p1", "w1", now=T0)
    assert approved is not None and approved.action_id == "Q-2"


async def test_one_worker_per_phone_until_its_heartbeat_stops(ledger: Ledger) -> None:
    now = T0
    assert await ledger.hold_phones(holder("w1", now), [("p1", "a1"), ("p2", "a2")]) == {}
    refused = await ledger.hold_phones(holder("w2", now, pid=2), [("p2", "a2"), ("p3", "a3")])
    assert list(refused) == ["p2"] and refused["p2"].worker == "w1"
    later = now + timedelta(seconds=10)
    assert await ledger.heartbeat("w1", {"p1": "idle", "p2": "sending Q-1"}, now=later) == {
        "p1",
        "p2",
    }
    workers = {w.device: w for w in await ledger.phone_workers()}
    assert (workers["p2"].worker, workers["p2"].doing, workers["p2"].heartbeat_at) == (
        "w1",
        "sending Q-1",
        later,
    )
    # a worker known dead (same host, its process gone) is taken over at once
    assert await ledger.hold_phones(holder("w3", later), [("p1", "a1")], gone=["w1"]) == {}
    # after a stale heartbeat anyone may take it
    stale = later + STALE_AFTER
    assert await ledger.hold_phones(holder("w2", stale, pid=2), [("p2", "a2")]) == {}
    assert await ledger.heartbeat("w1", {"p1": "", "p2": ""}, now=stale) == set()
    await ledger.let_go("w2")
    assert {w.device: w.worker for w in await ledger.phone_workers()} == {"p1": "w3"}


async def test_let_go_frees_the_claims_of_its_phones(ledger: Ledger) -> None:
    await queue_three(ledger)
    now = T0 + timedelta(minutes=1)
    await ledger.hold_phones(holder("w1", now), [("p1", "a1")])
    assert await ledger.claim_next("default", "p1", "w1", now=now) is not None
    await ledger.let_go("w1", ["p1"])
    assert (await ledger.summary("Q-0")).action.claim is None
    assert await ledger.phone_workers() == []


async def test_racing_claims_never_share_an_action(ledger_target: str) -> None:
    """Eight ledgers (eight connections) claim at once: every action is claimed once."""
    async with Ledger.open(ledger_target) as first:
        for n in range(40):
            await first.enqueue(f"R-{n:02}", SmsIntent(recipient="+12025550100", body=f"{n}"))

    async def claimer(index: int) -> list[str]:
        got: list[str] = []
        async with Ledger.open(ledger_target) as mine:
            while claimed := await mine.claim_next("default", f"p{index}", f"w{index}"):
                got.append(claimed.action_id)
                await asyncio.sleep(0)
        return got

    results = await asyncio.gather(*(claimer(i) for i in range(8)))
    everything = [action for got in results for action in got]
    assert sorted(everything) == [f"R-{n:02}" for n in range(40)]


async def test_a_claim_can_let_go_of_the_last_one_in_the_same_transaction(
    ledger: Ledger,
) -> None:
    await queue_three(ledger)
    now = T0 + timedelta(minutes=1)
    await ledger.hold_phones(holder("w1", now), [("p1", "a1")])
    first = await ledger.claim_next("default", "p1", "w1", now=now)
    assert first is not None
    record = await ledger.begin_attempt(first.action_id, "p1", now=now)
    await ledger.apply(fail_delivery(record, reason="radio off", now=now, actor="test"))
    second = await ledger.claim_next("default", "p1", "w1", now=now, release=first.action_id)
    assert second is not None and second.action_id == "Q-1"
    released = (await ledger.summary(first.action_id)).action
    assert released.claim is None and released.queue_after == now  # due again: it FAILED


async def test_a_workers_gate_denial_takes_the_action_out_of_the_queue(ledger: Ledger) -> None:
    """Queued with no gate, denied by the gate of the worker that claimed it: its release
    leaves it out of the queue (DENY: never sent), instead of due again at once."""
    from starebrain_actions.core.exceptions import PolicyRefused

    await ledger.enqueue("Q-1", INTENT, now=T0)
    claimed = await ledger.claim_next("default", "p1", "w1", now=T0)
    assert claimed is not None
    with pytest.raises(PolicyRefused):
        await ledger.begin_attempt("Q-1", "p1", now=T0, gate=Policy(deny=("+1202555*",)))
    assert await ledger.release("Q-1", "w1", now=T0) is None
    assert await ledger.claim_next("default", "p1", "w1", now=T0) is None
