"""Workers for real: ``starebrain worker`` processes share one PostgreSQL ledger and five
simulated phones while the test races two of them for one action, ``kill -9``s one mid-send,
stops a phone and brings it back, and adds a phone with a worker of its own. What is asserted
comes from the phones: every queued message left exactly one phone exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import RetryPolicy, SmsIntent, Status
from starebrain_actions.ledger.store import Ledger
from tests._postgres import fresh_schema
from tests.conftest import PhoneFactory
from tests.e2e.conftest import starebrain_command

RECIPIENTS = [f"+1202555{n:04d}" for n in range(150, 154)]
MESSAGES = 40
#: the simulated phones' settle windows, and proofs of absence within seconds (the CLI's
#: policy takes these from the environment; a queued action carries the policy it was
#: queued with)
POLICY = RetryPolicy(
    maximum_attempts=5,
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=1),
    grace_window=timedelta(seconds=2),
    unverified_after=timedelta(seconds=3),
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
)


class WorkerProcess:
    """One ``starebrain worker --json`` child ("a host"), its events read as they come."""

    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.process = process
        self.events: list[dict[str, Any]] = []
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls, name: str, url: str, key: Path, phones: list[SimulatedPhone], log: Path
    ) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if k != "STAREBRAIN_DB"}
        devices = [arg for phone in phones for arg in ("--device", phone.serial)]
        with log.open("a", encoding="utf-8") as stderr:
            process = await asyncio.create_subprocess_exec(
                *starebrain_command(), "--log-level", "info", "--db", url, "worker", *devices,
                "--key", str(key), "--json", "--stale-after", "3", "--wait", "5",
                "--command-timeout", "2",
                stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env,
            )  # fmt: skip
        return cls(name, process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            self.events.append(json.loads(line))

    def count(self, event: str) -> int:
        return sum(1 for e in self.events if e["event"] == event)

    async def seen(self, event: str, count: int = 1, *, within: float = 60.0) -> None:
        for _ in range(int(within / 0.02)):
            if self.count(event) >= count:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{self.name}: no {count} {event} event(s): {self.events}")

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.process.wait(), 60)
        await self.reader
        return code


async def queue_all(url: str, ids: list[str]) -> None:
    """Queue ``ids`` as an agent would (one ledger connection of its own)."""
    async with Ledger.open(url) as ledger:
        for n, action_id in enumerate(ids):
            intent = SmsIntent(recipient=RECIPIENTS[n % len(RECIPIENTS)], body=f"text {action_id}")
            await ledger.enqueue(action_id, intent, POLICY)


async def until_succeeded(url: str, ids: list[str], within: float) -> dict[str, Status]:
    """Every action's status once each SUCCEEDED or waits for a person (its proof cannot
    come: a send script cut short by the phone going away), or when the time is over."""
    found: dict[str, Status] = {}
    async with Ledger.open(url) as ledger:
        end = time.monotonic() + within
        while time.monotonic() < end:
            summaries = [await ledger.summary(i) for i in ids]
            found = {s.action.action_id: s.status for s in summaries}
            if all(s.status is Status.SUCCEEDED or s.needs_review for s in summaries):
                break
            await asyncio.sleep(0.25)
    return found


def left_the_phones(phones: list[SimulatedPhone]) -> Counter[str]:
    """Every message that really left a phone (ground truth), by body."""
    return Counter(t.body for phone in phones for t in phone.transmissions)


@pytest.mark.long(30)
@pytest.mark.slow
async def test_workers_killed_raced_and_moved_send_each_message_once(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    phones = [await phone_factory(send_delay_ms=150) for _ in range(4)]
    # the fifth is added later; its framework jar proves nothing, so it sends through the app
    spare = await phone_factory(send_delay_ms=150, framework_jar="stripped", build_type="eng")
    log = tmp_path / "workers.log"
    workers: list[WorkerProcess] = []
    async with fresh_schema() as url:
        try:
            # two workers race for one message queued before either runs
            await queue_all(url, ["race-0"])
            a, b = await asyncio.gather(
                WorkerProcess.start("A", url, adb_key_path, phones[0:2], log),
                WorkerProcess.start("B", url, adb_key_path, phones[2:4], log),
            )
            workers += [a, b]
            raced = await until_succeeded(url, ["race-0"], 60)
            assert raced == {"race-0": Status.SUCCEEDED}, (a.events, b.events)
            assert a.count("claimed") + b.count("claimed") == 1

            # two agents queue; a third worker waits for phones 1 and 2 (held by A and B)
            ids = [f"m-{n:02d}" for n in range(MESSAGES)]
            await asyncio.gather(queue_all(url, ids[0::2]), queue_all(url, ids[1::2]))
            c = await WorkerProcess.start("C", url, adb_key_path, phones[1:3], log)
            workers.append(c)
            await c.seen("phone_held", 2)

            # kill -9 A while it sends; restarted, it takes back what C has not taken
            claims = a.count("claimed")
            await a.seen("claimed", claims + 1)
            await asyncio.sleep(0.05)
            a.process.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(a.process.wait(), 30) == -signal.SIGKILL
            await a.reader
            a2 = await WorkerProcess.start("A2", url, adb_key_path, phones[0:2], log)
            workers.append(a2)
            await c.seen("phone_taken")

            # a phone goes away and comes back; a fifth phone comes with a worker of its own
            await asyncio.sleep(0.5)
            await phones[3].stop()
            d = await WorkerProcess.start("D", url, adb_key_path, [spare], log)
            workers.append(d)
            # more work once D is ready: the first batch may be gone by then (a worker's
            # start-up is seconds on a loaded machine), and the spread asserted below needs
            # the added phone to find some; each other phone takes one at a time, so twelve
            # cannot all go before D's next look at the queue (0.5 s)
            await d.seen("phone_ready")
            late = [f"late-{n:02d}" for n in range(12)]
            await queue_all(url, late)
            ids += late
            await asyncio.sleep(2.0)
            await phones[3].start()

            statuses = await until_succeeded(url, ["race-0", *ids], 150)
            async with Ledger.open(url) as ledger:
                held = await ledger.phone_workers()
            codes = {w.name: await w.stop() for w in workers if w.name != "A"}
            async with Ledger.open(url) as ledger:
                after = await ledger.phone_workers()
                where: Counter[str] = Counter()
                stuck: dict[str, Any] = {}
                for i in ids:
                    summary = await ledger.summary(i)
                    if summary.latest is not None:
                        where[summary.latest.device] += 1
                    if summary.status is not Status.SUCCEEDED:
                        stuck[i] = [
                            (r.device, r.delivery.value, r.acceptance.value, r.review_reason,
                             r.last_error)
                            for r in summary.attempts
                        ]  # fmt: skip
        finally:
            for worker in workers:
                if worker.process.returncode is None:
                    worker.process.kill()
                    await worker.process.wait()
    explain = f"log: {log}\n" + "\n".join(
        f"{w.name}: {Counter(e['event'] for e in w.events)}" for w in workers
    )
    # a send script the stopped phone cut short may have left no proof either way: that
    # action waits for a person (review), never resent; every other one SUCCEEDED
    in_review = {i for i, status in statuses.items() if status is not Status.SUCCEEDED}
    assert len(in_review) <= 1 and in_review <= set(stuck), (stuck, explain)
    assert codes == {"B": 0, "C": 0, "A2": 0, "D": 0}, explain
    # ground truth: every message left one phone once (the one in review at most once)
    everything = [*phones, spare]
    sent = left_the_phones(everything)
    expected = {f"text {i}": 1 for i in ["race-0", *ids] if i not in in_review}
    assert {body: sent[body] for body in expected} == expected, explain
    assert all(sent[f"text {i}"] <= 1 for i in in_review), explain
    assert sum(sent.values()) - sum(sent[f"text {i}"] for i in in_review) == len(expected)
    # the work spread: the added phone sent some of it; the held phones were all let go
    assert any(t.body in expected for t in spare.transmissions), (where, explain)
    assert len(held) >= 4 and after == [], explain
