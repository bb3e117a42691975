"""The send path's short writes run on the event loop's thread when nothing can make them
wait, and on the worker thread (waiting for the lock) otherwise; either way they are the same
transactions, committed before they return."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from starebrain_actions import (
    DeliveryState,
    Ledger,
    MatchVerdict,
    SmsIntent,
    Status,
    confirm_delivery,
    try_accept,
)

INTENT = SmsIntent(recipient="+12025550143", body="Your code is 4821")


async def test_a_write_waits_for_a_lock_another_connection_holds(
    ledger: Ledger, ledger_path: Path
) -> None:
    """While another connection holds the write lock, a receipt waits for it (busy timeout)
    instead of failing, and is committed once the lock is released."""
    await ledger.create_action("a-1", INTENT)
    other = sqlite3.connect(ledger_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        receipt = asyncio.create_task(ledger.begin_attempt("a-1", "127.0.0.1:5555"))
        await asyncio.sleep(0.3)
        assert not receipt.done()  # it cannot finish while the lock is held
        other.execute("COMMIT")
        record = await receipt
    finally:
        other.close()
    assert [record] == await ledger.attempts("a-1")


async def test_every_write_of_a_lifecycle_is_committed_when_it_returns(
    ledger: Ledger, ledger_path: Path
) -> None:
    """Each write is visible to another connection as soon as it returns: the receipt
    before any send could start, then each transition."""
    other = sqlite3.connect(ledger_path, isolation_level=None)

    def delivery(dispatch_id: str) -> list[tuple[str, str, int]]:
        return other.execute(
            "SELECT delivery, acceptance, version FROM attempts WHERE dispatch_id = ?",
            (dispatch_id,),
        ).fetchall()

    try:
        await ledger.create_action("a-1", INTENT)
        assert [("a-1",)] == other.execute("SELECT action_id FROM actions").fetchall()
        record = await ledger.begin_attempt("a-1", "127.0.0.1:5555")
        assert [("PENDING", "PENDING", 0)] == delivery(record.dispatch_id)
        now = datetime.now(UTC)
        record = await ledger.apply(confirm_delivery(record, provider_object_id=812, now=now))
        assert [("CONFIRMED", "PENDING", 1)] == delivery(record.dispatch_id)
        await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=now))
        assert [("CONFIRMED", "ACCEPTED", 2)] == delivery(record.dispatch_id)
    finally:
        other.close()


async def test_concurrent_writes_and_reads_on_one_ledger_all_succeed(ledger: Ledger) -> None:
    """Writes started while reads are on the worker thread never share its transaction:
    every one of many interleaved operations on one connection succeeds."""

    async def lifecycle(number: int) -> Status:
        action_id = f"a-{number}"
        await ledger.create_action(action_id, INTENT)
        record = await ledger.begin_attempt(action_id, f"127.0.0.1:{5000 + number}")
        now = datetime.now(UTC)
        record = await ledger.apply(confirm_delivery(record, provider_object_id=number, now=now))
        await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=now))
        return (await ledger.summary(action_id)).status

    async def reader() -> int:
        found = 0
        for _ in range(20):
            found += len(await ledger.in_flight())
            await ledger.devices_in_flight()
        return found

    results = await asyncio.gather(*(lifecycle(n) for n in range(30)), reader(), reader())
    assert [Status.SUCCEEDED] * 30 == results[:30]
    deliveries = [
        [record.delivery for record in await ledger.attempts(f"a-{number}")] for number in range(30)
    ]
    assert [[DeliveryState.CONFIRMED]] * 30 == deliveries


async def test_a_read_only_ledger_still_refuses_writes(ledger_path: Path) -> None:
    """A write on a read-only ledger fails as before, inline or not."""
    async with Ledger.open(ledger_path):
        pass
    async with Ledger.open(ledger_path, read_only=True) as read_only:
        try:
            await read_only.create_action("a-1", INTENT)
        except Exception as exc:  # the ledger's error for a read-only file
            assert "read-only" in str(exc) or "readonly" in str(exc)
        else:
            raise AssertionError("a read-only ledger accepted a write")
