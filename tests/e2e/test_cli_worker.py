"""``starebrain send --queue`` and ``starebrain worker`` as real processes against simulated
phones, on a SQLite file and on PostgreSQL: queued messages are sent once each (counted in
the phones' own stores), SIGTERM finishes the send in hand and exits 0, and ``kill -9``
mid-send loses nothing: the next worker takes the phone over and settles what was in hand."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, Status
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory
from tests.e2e.conftest import RECIPIENT, Target, starebrain_command

SENT = 2


async def cli(ledger: Target, *args: str) -> Result:
    argv = ["--db", str(ledger), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


async def queue(ledger: Target, action_id: str, *extra: str) -> Result:
    return await cli(
        ledger, "send", "--queue", "--to", RECIPIENT, "--body", f"text of {action_id}",
        "--action-id", action_id, *extra,
    )  # fmt: skip


def sent_count(phones: list[SimulatedPhone], action_id: str) -> int:
    body = f"text of {action_id}"
    return sum(1 for p in phones for row in p.store.rows(types=[SENT]) if row.body == body)


class WorkerProcess:
    """``starebrain worker --json`` as a child process, its events read as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls, ledger: Target, key: Path, phones: list[SimulatedPhone], *extra: str
    ) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if k != "STAREBRAIN_DB"}
        devices = [arg for phone in phones for arg in ("--device", phone.serial)]
        process = await asyncio.create_subprocess_exec(
            *starebrain_command(), "--db", str(ledger), "worker", *devices, "--key", str(key),
            "--json", "--stale-after", "3", "--wait", "10", *extra,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            self.events.append(json.loads(line))

    async def seen(self, event: str, count: int = 1, *, within: float = 60.0) -> None:
        for _ in range(int(within / 0.05)):
            if sum(1 for e in self.events if e["event"] == event) >= count:
                return
            if self.process.returncode is not None:
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {count} {event} event(s): {self.events}")

    async def ended(self, *, within: float = 60.0) -> int:
        code = await asyncio.wait_for(self.process.wait(), within)
        await self.reader
        return code


async def statuses(ledger: Target, ids: list[str], *, within: float = 60.0) -> dict[str, Status]:
    """Every action's status once all SUCCEEDED, or when the time is over."""
    found: dict[str, Status] = {}
    async with Ledger.open(ledger) as opened:
        for _ in range(int(within / 0.1)):
            found = {i: (await opened.summary(i)).status for i in ids}
            if set(found.values()) == {Status.SUCCEEDED}:
                break
            await asyncio.sleep(0.1)
    return found


async def test_send_queue_records_the_message_and_reaches_no_phone(
    ledger_target: Target, closed_port: int
) -> None:
    queued = await queue(ledger_target, "Q-1", "--pool", "north", "--json")
    assert queued.exit_code == 0, queued.output
    data = json.loads(queued.stdout)
    assert (data["action"]["action_id"], data["status"], data["pool"], data["queued"]) == (
        "Q-1",
        "PLANNED",
        "north",
        True,
    )
    again = await queue(ledger_target, "Q-1", "--pool", "north")
    assert again.exit_code == 0 and "already in the ledger" in again.output
    text = await queue(ledger_target, "Q-2")
    assert text.exit_code == 0 and "queued action Q-2 for pool default" in text.output
    # --queue with a phone, --pool without --queue, a bad pool: usage errors, nothing written
    with_device = await queue(ledger_target, "Q-3", "--device", f"127.0.0.1:{closed_port}")
    assert with_device.exit_code == 2 and "give no --device" in with_device.output
    pool_only = await cli(
        ledger_target, "send", "--pool", "north", "--to", RECIPIENT, "--body", "x",
        "--device", f"127.0.0.1:{closed_port}",
    )  # fmt: skip
    assert pool_only.exit_code == 2 and "--queue" in pool_only.output
    bad = await queue(ledger_target, "Q-4", "--pool", "two words")
    assert bad.exit_code == 2 and "pool" in bad.output
    no_device = await cli(ledger_target, "send", "--to", RECIPIENT, "--body", "x")
    assert no_device.exit_code == 2 and "--device" in no_device.output
    async with Ledger.open(ledger_target) as ledger:
        assert sorted(s.action.action_id for s in await ledger.summaries()) == ["Q-1", "Q-2"]


async def test_the_policy_gate_judges_a_queued_message(
    ledger_target: Target, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[recipients]\ndeny = ["+1202555*"]\n', encoding="utf-8")
    refused = await queue(ledger_target, "Q-9", "--policy", str(policy))
    assert refused.exit_code == 9, refused.output
    assert "denied" in refused.output
    async with Ledger.open(ledger_target) as ledger:
        action = (await ledger.summary("Q-9")).action
        assert action.queue_after is None and action.gate is not None


async def test_a_worker_sends_the_queue_and_stops_on_sigterm(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    phones = [await phone_factory(send_delay_ms=100), await phone_factory(send_delay_ms=100)]
    ids = [f"W-{n}" for n in range(6)]
    for action_id in ids:
        assert (await queue(ledger_target, action_id)).exit_code == 0
    worker = await WorkerProcess.start(ledger_target, adb_key_path, phones)
    try:
        found = await statuses(ledger_target, ids)
    finally:
        worker.process.send_signal(signal.SIGTERM)
    assert await worker.ended() == 0, worker.events
    assert set(found.values()) == {Status.SUCCEEDED}, found
    assert {i: sent_count(phones, i) for i in ids} == dict.fromkeys(ids, 1)
    kinds = [e["event"] for e in worker.events]
    assert kinds.count("stopped") == 2 and kinds.count("done") == len(ids)
    async with Ledger.open(ledger_target) as ledger:
        assert await ledger.phone_workers() == []


@pytest.mark.long(10)
async def test_kill_9_mid_send_loses_nothing(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The worker is killed while its phone sends; a new worker (this host, the old
    process gone) takes the phone at once, settles the attempt left in hand by reading, and
    sends the rest: one SMS per message."""
    phone = await phone_factory(send_delay_ms=1500)
    ids = [f"K-{n}" for n in range(3)]
    for action_id in ids:
        assert (await queue(ledger_target, action_id)).exit_code == 0
    first = await WorkerProcess.start(ledger_target, adb_key_path, [phone])
    await first.seen("claimed")
    await asyncio.sleep(0.5)  # the send command is on the phone now
    first.process.send_signal(signal.SIGKILL)
    assert await first.ended() == -signal.SIGKILL
    assert not any(e["event"] == "done" for e in first.events)
    second = await WorkerProcess.start(ledger_target, adb_key_path, [phone])
    try:
        found = await statuses(ledger_target, ids)
    finally:
        second.process.send_signal(signal.SIGTERM)
    assert await second.ended() == 0
    assert set(found.values()) == {Status.SUCCEEDED}, (found, second.events)
    assert {i: sent_count([phone], i) for i in ids} == dict.fromkeys(ids, 1)
    async with Ledger.open(ledger_target) as ledger:
        first_sent = await ledger.summary(ids[0])
        assert len(first_sent.attempts) == 1  # settled by a read, never sent again
