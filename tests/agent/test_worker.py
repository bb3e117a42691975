"""The worker (``orchestration.worker.Worker``) against simulated phones, on both backends:
it sends what is queued for its pool across its phones, once each (counted in the phones'
own stores), one worker per phone, and leaves cleanly when stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, SmsIntent, Status
from starebrain_actions.orchestration.agent import SmsAgent
from starebrain_actions.orchestration.worker import Worker, WorkerEvent
from tests.agent.conftest import FAST, sent_rows
from tests.conftest import until

TO = "+12025550100"
DONE = {Status.SUCCEEDED}


def worker_for(
    db: str, phones: list[SimulatedPhone], key: Path, **kwargs: Any
) -> tuple[Worker, list[WorkerEvent]]:
    events: list[WorkerEvent] = []
    kwargs.setdefault("heartbeat_s", 0.2)
    kwargs.setdefault("stale_after", timedelta(seconds=2))
    kwargs.setdefault("idle_s", 0.05)
    kwargs.setdefault("wait", 10.0)
    kwargs.setdefault("command_timeout_s", 10.0)
    worker = Worker(
        db,
        [phone.serial for phone in phones],
        key_path=key,
        poll_interval_s=0.05,
        read_as_system=True,
        send_path="ui",
        on_event=events.append,
        **kwargs,
    )
    return worker, events


async def queue(db: str, count: int, *, pool: str = "default", prefix: str = "Q") -> list[str]:
    ids = [f"{prefix}-{n}" for n in range(count)]
    async with Ledger.open(db) as ledger:
        for action_id in ids:
            await ledger.enqueue(
                action_id, SmsIntent(recipient=TO, body=action_id), FAST, pool=pool
            )
    return ids


async def until_settled(db: str, ids: list[str], *, within: float = 60.0) -> dict[str, Status]:
    """Wait until every action SUCCEEDED (or the time is over); their statuses."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    async with Ledger.open(db) as ledger:
        while True:
            statuses = {i: (await ledger.summary(i)).status for i in ids}
            if set(statuses.values()) <= DONE or loop.time() > end:
                return statuses
            await asyncio.sleep(0.1)


async def seen(
    events: list[WorkerEvent], kind: str, *, count: int = 1, within: float = 30.0
) -> None:
    """Wait until the worker told ``count`` events of this kind."""
    for _ in range(int(within / 0.02)):
        if sum(1 for e in events if e.event == kind) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not {count} {kind} event(s) within {within} s: {events}")


async def says(worker: Worker, serial: str, text: str, *, within: float = 30.0) -> str:
    """Wait until what the worker says it does on phone ``serial`` holds ``text``."""
    for _ in range(int(within / 0.02)):
        if text in (doing := worker.doing.get(serial, "")):
            return doing
        await asyncio.sleep(0.02)
    raise AssertionError(f"the worker never said {text!r} within {within} s: {worker.doing}")


async def started(db: str, action_id: str, *, within: float = 30.0) -> None:
    """Wait until the action has an attempt (its receipt is in the ledger)."""
    async with Ledger.open(db) as ledger:

        async def has_attempt() -> bool:
            return bool((await ledger.summary(action_id)).attempts)

        await until(has_attempt, f"{action_id} has an attempt", within=within)


async def held_by(db: str, phone: SimulatedPhone, key_path: Path, *, host: str, pid: int) -> str:
    """Another worker (``host:pid``, its heartbeat now) holds ``phone`` and has claimed the
    next queued action without starting it, as a worker that then stopped beating leaves
    them; its worker name."""
    from starebrain_actions.ledger.queue import PhoneWorker

    async with Ledger.open(db) as ledger:
        async with SmsAgent.open(
            db=db, device=phone.serial, key_path=key_path, send_path="ui"
        ) as agent:
            key = agent.phone.device
        now = ledger.now()
        other = PhoneWorker(
            device=key,
            worker=f"{host}:{pid}",
            host=host,
            pid=pid,
            pool="default",
            address=phone.serial,
            claimed_at=now,
            heartbeat_at=now,
        )
        await ledger.hold_phones(other, [(key, phone.serial)])
        assert await ledger.claim_next("default", key, other.worker) is not None
    return other.worker


def sent_once(phones: list[SimulatedPhone], ids: list[str]) -> dict[str, int]:
    """How many SENT rows each action's text has, over every phone's own store."""
    return {i: sum(len(sent_rows(phone, TO, i)) for phone in phones) for i in ids}


async def test_a_worker_spreads_the_queue_over_its_phones_and_sends_each_once(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    phones = [await sms_phone(send_delay_ms=200), await sms_phone(send_delay_ms=200)]
    ids = await queue(db_path, 8)
    worker, events = worker_for(db_path, phones, adb_key_path)
    running = asyncio.create_task(worker.run())
    statuses = await until_settled(db_path, ids)
    worker.stop()
    await asyncio.wait_for(running, 30)
    assert set(statuses.values()) == DONE, statuses
    assert sent_once(phones, ids) == dict.fromkeys(ids, 1)
    # both phones sent some of it
    assert all(any(row for i in ids for row in sent_rows(p, TO, i)) for p in phones)
    async with Ledger.open(db_path) as ledger:
        assert await ledger.phone_workers() == []  # let go on the way out
        where = {(await ledger.summary(i)).latest.device for i in ids}  # type: ignore[union-attr]
        assert len(where) == 2
        tally = (await ledger.queue_tally())["default"]
        assert (tally["waiting"], tally["claimed"], tally["total"]) == (0, 0, 8)
    assert {e.event for e in events} >= {"phone_ready", "claimed", "done", "stopped"}


async def test_two_workers_never_share_a_phone(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    phone = await sms_phone()
    ids = await queue(db_path, 4)
    first, first_events = worker_for(db_path, [phone], adb_key_path, name="w-first")
    running = [asyncio.create_task(first.run())]
    await seen(first_events, "phone_ready")
    second, second_events = worker_for(db_path, [phone], adb_key_path, name="w-second")
    running.append(asyncio.create_task(second.run()))
    statuses = await until_settled(db_path, ids)
    held = [e for e in second_events if e.event == "phone_held"]
    assert held and "w-first" in held[0].detail
    assert not any(e.event == "claimed" for e in second_events)
    # the first leaves: the second takes the phone and serves what is queued next
    first.stop()
    await asyncio.wait_for(running[0], 30)
    more = await queue(db_path, 2, prefix="R")
    later = await until_settled(db_path, more)
    second.stop()
    await asyncio.wait_for(running[1], 30)
    assert set(statuses.values()) == DONE and set(later.values()) == DONE
    assert sent_once([phone], ids + more) == dict.fromkeys(ids + more, 1)
    assert any(e.event == "claimed" for e in second_events)


async def test_a_silent_worker_s_phone_is_taken_over_after_its_heartbeat_stops(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    """A worker that stops beating without letting go (as after ``kill -9``, here on another
    "host"): its phone and claims pass to the next worker once its heartbeat is stale."""
    phone = await sms_phone()
    ids = await queue(db_path, 3)
    await held_by(db_path, phone, adb_key_path, host="elsewhere", pid=1)
    worker, events = worker_for(db_path, [phone], adb_key_path)
    running = asyncio.create_task(worker.run())
    statuses = await until_settled(db_path, ids)
    worker.stop()
    await asyncio.wait_for(running, 30)
    assert set(statuses.values()) == DONE
    assert sent_once([phone], ids) == dict.fromkeys(ids, 1)
    kinds = [e.event for e in events]
    assert kinds.index("phone_held") < kinds.index("phone_taken")


async def test_stop_finishes_the_send_in_hand(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    phone = await sms_phone(send_delay_ms=500)
    ids = await queue(db_path, 3)
    worker, events = worker_for(db_path, [phone], adb_key_path)
    running = asyncio.create_task(worker.run())
    await seen(events, "claimed")
    # in hand once started: its receipt is in the ledger (a claim not started yet is let go
    # of at once: test_stop_ends_a_rate_limit_wait_for_a_message_not_started)
    await started(db_path, "Q-0")
    worker.stop()
    await asyncio.wait_for(running, 30)
    done = [e for e in events if e.event == "done"]
    assert [e.action_id for e in done] == ["Q-0"]
    async with Ledger.open(db_path) as ledger:
        first = await ledger.summary("Q-0")
        assert first.status in (Status.SUCCEEDED, Status.VERIFYING)
        assert first.action.claim is None
        assert (await ledger.summary("Q-2")).status is Status.PLANNED
        assert await ledger.phone_workers() == []
    assert sent_once([phone], ids) == {"Q-0": 1, "Q-1": 0, "Q-2": 0}


async def test_resume_leaves_queued_actions_to_the_workers(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]],
    agent_for: Callable[..., Any],
    db_path: str,
) -> None:
    phone = await sms_phone()
    ids = await queue(db_path, 2)
    async with agent_for(phone) as agent:
        report = await agent.resume(wait=2.0)
    assert report.items == ()
    assert sent_once([phone], ids) == dict.fromkeys(ids, 0)


async def test_an_agent_queues_without_its_phone(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]],
    agent_for: Callable[..., Any],
    db_path: str,
) -> None:
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        queued = await agent.enqueue("E-1", TO, "E-1", pool="north")
        again = await agent.enqueue("E-1", TO, "E-1", pool="south")
    assert queued.created and not again.created
    assert queued.summary.status is Status.PLANNED
    assert (queued.summary.action.pool, again.summary.action.pool) == ("north", "north")
    assert queued.summary.action.policy == FAST  # the agent's retry policy
    assert queued.summary.attempts == ()
    assert sent_once([phone], ["E-1"]) == {"E-1": 0}


async def test_a_worker_keeps_to_the_phones_rate_limit(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    phone = await sms_phone()
    ids = await queue(db_path, 4)
    worker, events = worker_for(db_path, [phone], adb_key_path, rate_limit=2)
    running = asyncio.create_task(worker.run())
    # two sends, then the worker says it waits on the phone's limit: conditions, not a time
    # (a bound of 5 s for the second send failed beside a CPU hog)
    await seen(events, "done", count=2)
    await says(worker, phone.serial, "send limit")
    await asyncio.sleep(1.5)  # long enough for two more sends, were they allowed
    doing = worker.doing[phone.serial]
    worker.stop()
    await asyncio.wait_for(running, 30)
    assert sum(sent_once([phone], ids).values()) == 2
    assert "send limit" in doing
    async with Ledger.open(db_path) as ledger:
        assert (await ledger.queue_tally())["default"]["waiting"] == 2


@pytest.mark.long(14)
async def test_a_wiped_phone_is_connected_again_and_served_as_a_new_one(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], tmp_path: Path, adb_key_path: Path
) -> None:
    """A factory reset at the same address: the worker's handle finds another phone there,
    lets go of the old one and connects again; the phone is bound afresh and the queue goes
    on, one SMS per message. (On SQLite only: what it tests is the worker's, not the
    ledger's; the reconnect waits out the phone's own setting up again.)"""
    db_path = str(tmp_path / "ledger.db")
    phone = await sms_phone()
    first = await queue(db_path, 1)
    worker, events = worker_for(db_path, [phone], adb_key_path)
    running = asyncio.create_task(worker.run())
    assert set((await until_settled(db_path, first)).values()) == DONE
    await phone.wipe_data()
    phone.authorized_keys.path.write_text(
        Path(f"{adb_key_path}.pub").read_text(encoding="utf-8"), encoding="utf-8"
    )
    await phone.enable_tcpip()
    phone.unlock_user()
    later = await queue(db_path, 2, prefix="W")
    settled = await until_settled(db_path, later)
    worker.stop()
    await asyncio.wait_for(running, 30)
    assert set(settled.values()) == DONE, events
    kinds = [e.event for e in events]
    assert "phone_replaced" in kinds and kinds.count("phone_ready") == 2, kinds
    assert sent_once([phone], later) == dict.fromkeys(later, 1)
    async with Ledger.open(db_path) as ledger:
        devices = {(await ledger.summary(i)).latest.device for i in first + later}  # type: ignore[union-attr]
        assert len(devices) == 2  # the wiped phone is a new phone of the ledger
        assert await ledger.phone_workers() == []


async def test_a_wipe_costs_the_action_in_hand_one_attempt_on_the_old_phone(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    """A factory reset found by the send of a claimed action: that send ends after its one
    attempt on the old phone (FAILED, unreachable: no budget spent), the worker connects
    again and the action goes out on the new phone, once; the worker does not start attempt
    after attempt on a handle that refuses its phone until the action's wait is over."""
    phone = await sms_phone()
    first = await queue(db_path, 1)
    worker, events = worker_for(db_path, [phone], adb_key_path, wait=8.0)
    running = asyncio.create_task(worker.run())
    assert set((await until_settled(db_path, first)).values()) == DONE
    old_key = phone.serial
    await phone.wipe_data()
    phone.authorized_keys.path.write_text(
        Path(f"{adb_key_path}.pub").read_text(encoding="utf-8"), encoding="utf-8"
    )
    await phone.enable_tcpip()
    phone.unlock_user()
    later = await queue(db_path, 1, prefix="W")
    settled = await until_settled(db_path, later, within=20.0)
    worker.stop()
    await asyncio.wait_for(running, 30)
    assert set(settled.values()) == DONE, events
    async with Ledger.open(db_path) as ledger:
        attempts = (await ledger.summary(later[0])).attempts
    on_old = [a for a in attempts if a.device == old_key]
    assert len(on_old) <= 1, [(a.device, a.last_error) for a in attempts]
    assert sent_once([phone], later) == dict.fromkeys(later, 1)


async def test_a_cleared_fence_folder_costs_the_queue_no_budget(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    """``rm -rf /data/local/tmp/*`` under a running worker (its handle knows the old epoch):
    the next claimed action's send fails its fence claim on the same phone, spends none of
    its one attempt, and goes out once with the phone's new epoch; so does the rest of the
    queue."""
    phone = await sms_phone()
    first = await queue(db_path, 1)
    # each action has one attempt: a send script cut off by a 2 s command timeout on a loaded
    # machine is voided by its fence and rightly spends it (FAILED, red in `.ci/run`); what
    # is tested is the cleared folder, so the script gets the time it needs
    worker, events = worker_for(db_path, [phone], adb_key_path, command_timeout_s=20.0)
    running = asyncio.create_task(worker.run())
    assert set((await until_settled(db_path, first)).values()) == DONE
    phone.clear_tmp()
    later = [f"F-{n}" for n in range(3)]
    async with Ledger.open(db_path) as ledger:
        for action_id in later:
            await ledger.enqueue(
                action_id,
                SmsIntent(recipient=TO, body=action_id),
                attrs.evolve(FAST, maximum_attempts=1),
            )
    settled = await until_settled(db_path, later, within=20.0)
    worker.stop()
    await asyncio.wait_for(running, 30)
    assert set(settled.values()) == DONE, events
    assert sent_once([phone], later) == dict.fromkeys(later, 1)


async def test_a_worker_never_sends_to_a_number_that_opted_out(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]], db_path: str, adb_key_path: Path
) -> None:
    """STOP binds the worker too (issue 34): with the recipient opted out, a queued action to
    it is refused by the gate in the worker's receipt transaction (rule opted_out, the event
    action.refused) and nothing reaches the phone, while the queue's other number is sent."""
    phone = await sms_phone()
    other = "+12025550199"
    async with Ledger.open(db_path) as ledger:
        await ledger.change_opt_out(TO, "opt_out", actor="ana", reason="asked by phone")
        await ledger.enqueue("Q-stop", SmsIntent(recipient=TO, body="Q-stop"), FAST)
        await ledger.enqueue("Q-other", SmsIntent(recipient=other, body="Q-other"), FAST)
    worker, _events = worker_for(db_path, [phone], adb_key_path)
    running = asyncio.create_task(worker.run())
    try:
        settled = await until_settled(db_path, ["Q-other"])
        async with Ledger.open(db_path) as ledger:
            for _ in range(300):  # until the worker has judged Q-stop
                refusals = await ledger.events(types=["action.refused"], action_id="Q-stop")
                if refusals:
                    break
                await asyncio.sleep(0.05)
            stopped = await ledger.summary("Q-stop")
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
    assert {"Q-other": Status.SUCCEEDED} == settled
    assert refusals and "opted_out" == refusals[0].data["evidence"]["rule"]
    assert stopped.action.gate is not None and "opted_out" == stopped.action.gate["rule"]
    assert not stopped.attempts
    assert [] == sent_rows(phone, TO, "Q-stop")
    assert 1 == len(sent_rows(phone, other, "Q-other"))


async def test_stop_ends_a_rate_limit_wait_for_a_message_not_started(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]],
    agent_for: Callable[..., Any],
    db_path: str,
    adb_key_path: Path,
) -> None:
    """Issue 36: another sender used the phone's limit, so the worker's claimed action waits
    in the send's rate limit (a minute); SIGTERM (stop()) ends that wait at once, the action
    unsent, PLANNED and unclaimed, where the worker used to wait it out."""
    phone = await sms_phone()
    async with agent_for(phone, rate_limit=2) as agent:
        for n in range(2):
            sent = await agent.send(f"other-{n}", TO, f"other-{n}", wait=20.0)
            assert sent.status in (Status.SUCCEEDED, Status.VERIFYING)
    before = len(phone.transmissions)
    assert 2 == before
    ids = await queue(db_path, 1)
    # below half its limit of its own sends the worker claims without asking the ledger;
    # the send's own check then finds the phone at its limit (the other sender's two)
    worker, events = worker_for(db_path, [phone], adb_key_path, rate_limit=2, wait=120.0)
    running = asyncio.create_task(worker.run())
    await seen(events, "claimed")
    loop = asyncio.get_running_loop()
    asked = loop.time()
    worker.stop()
    await asyncio.wait_for(running, 60)
    # the limit frees a minute after the other sends: a worker that waited it out takes
    # tens of seconds; one that lets go at once takes a round trip to the ledger or two
    assert loop.time() - asked < 20.0
    assert before == len(phone.transmissions)
    assert sent_once([phone], ids) == {"Q-0": 0}
    async with Ledger.open(db_path) as ledger:
        summary = await ledger.summary("Q-0")
        assert (Status.PLANNED, None, ()) == (
            summary.status,
            summary.action.claim,
            summary.attempts,
        )
        assert await ledger.phone_workers() == []


@pytest.mark.parametrize("end", ["reaped", "zombie"])
async def test_a_dead_worker_of_this_host_is_taken_over_at_once_with_its_claims(
    sms_phone: Callable[..., Awaitable[SimulatedPhone]],
    db_path: str,
    adb_key_path: Path,
    end: str,
) -> None:
    """Issue 36: a worker of this host killed with ``kill -9`` (its process reaped, or still
    a zombie its parent has not waited for) holds the phone and a claim it never started. A
    new worker takes both at once, with a heartbeat that stays fresh for a minute: each
    message is sent once, long before the claim could go stale."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    phone = await sms_phone()
    ids = await queue(db_path, 2)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    child.send_signal(signal.SIGKILL)
    if end == "reaped":
        child.wait()
    else:
        # killed, not waited for: a zombie until the test reaps it (kill -0 still answers);
        # waitid with WNOWAIT returns once it has died and leaves it unreaped
        await asyncio.to_thread(os.waitid, os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    try:
        await held_by(db_path, phone, adb_key_path, host=socket.gethostname(), pid=child.pid)
        worker, events = worker_for(
            db_path,
            [phone],
            adb_key_path,
            stale_after=timedelta(seconds=60),
            heartbeat_s=10.0,
        )
        running = asyncio.create_task(worker.run())
        # a takeover by staleness would take 60 s: these 30 are for a loaded machine
        statuses = await until_settled(db_path, ids, within=30.0)
        worker.stop()
        await asyncio.wait_for(running, 30)
    finally:
        child.wait()
    assert set(statuses.values()) == DONE, statuses
    assert sent_once([phone], ids) == dict.fromkeys(ids, 1)
    assert "phone_taken" in [e.event for e in events]
