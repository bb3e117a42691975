"""The phone rows a device's attempts claim: artifacts, duplicates and the FAILED rows failed
attempts name in their evidence, found as index ranges (``EXPLAIN QUERY PLAN``)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from starebrain_actions import Ledger, SmsIntent, fail_delivery

DEVICE = "127.0.0.1:5555"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


async def _failed(ledger: Ledger, index: int, device: str, row: int, kind: str) -> None:
    """An attempt the phone marked failed in row ``row`` of the ``kind`` store."""
    at = NOW + timedelta(seconds=index)
    intent = SmsIntent(recipient="+12025550143", body=f"failed {index}")
    await ledger.create_action(f"a-{index}", intent, now=at)
    record = await ledger.begin_attempt(f"a-{index}", device, now=at)
    evidence = {"provider_object_id": row, "provider_type": 5}
    if kind != "sms" or index % 2:  # older evidence names no kind for an SMS row
        evidence["provider_kind"] = kind
    await ledger.apply(fail_delivery(record, reason="phone says failed", now=at, evidence=evidence))


async def test_failed_rows_are_claimed_by_kind_and_above_the_anchor(tmp_path: Path) -> None:
    """A FAILED attempt's row is its own: listed among the claimed rows of its device and its
    store above the anchor, never of another device or store, nor at or below the anchor."""
    async with Ledger.open(tmp_path / "ledger.db") as ledger:
        await _failed(ledger, 0, DEVICE, 11, "sms")
        await _failed(ledger, 1, DEVICE, 12, "sms")
        await _failed(ledger, 2, DEVICE, 13, "mms")
        await _failed(ledger, 3, "127.0.0.1:5556", 14, "sms")
        # (_id, date): the evidence of these failed attempts names no date
        assert {(11, None), (12, None)} == await ledger.claimed_provider_ids(DEVICE, 10)
        assert {(12, None)} == await ledger.claimed_provider_ids(DEVICE, 11)
        assert {(13, None)} == await ledger.claimed_mms_ids(DEVICE, 0)
        assert set() == await ledger.claimed_mms_ids(DEVICE, 13)


async def test_claimed_rows_are_index_ranges(tmp_path: Path) -> None:
    """Every part of the claimed-rows query searches an index (the failed attempts' rows
    through ``attempts_failed_rows``): a pass never reads the evidence of every failed
    attempt the device ever had."""
    path = tmp_path / "ledger.db"
    statements: list[str] = []
    async with Ledger.open(path) as ledger:
        await _failed(ledger, 0, DEVICE, 11, "sms")
        raw = ledger._connection._conn  # the sqlite3 connection aiosqlite drives
        raw.set_trace_callback(statements.append)
        try:
            await ledger.claimed_provider_ids(DEVICE, 10)
        finally:
            raw.set_trace_callback(None)
    (statement,) = [s for s in statements if "json_extract" in s]
    with closing(sqlite3.connect(path)) as db:
        plan = [str(row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + statement)]
    searches = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert 3 == len(searches), plan
    assert all(step.startswith("SEARCH") for step in searches), plan
    assert any("attempts_failed_rows" in step for step in searches), plan
