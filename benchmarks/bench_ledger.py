#!/usr/bin/env python3
"""Ledger throughput against plain sqlite3 with the same schema and pragmas, in one run.

Prints full lifecycles per second (create -> attempt -> confirm -> accept: four
transactions) through ``Ledger`` and through hand-written sqlite3, and their ratio (target
>= 0.25); then transitions per second for a batch of 1,000 transitions applied in one call,
against the same 1,000 UPDATEs in one plain transaction (target >= 0.5).

    python benchmarks/bench_ledger.py [--lifecycles N] [--batch N] [--dir PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from starebrain_actions import (  # noqa: E402
    Ledger,
    MatchVerdict,
    SmsIntent,
    configure_logging,
    confirm_delivery,
    try_accept,
)
from starebrain_actions._convert import format_time  # noqa: E402


def now_text() -> str:
    return format_time(datetime.now(UTC))


async def ledger_lifecycles(path: Path, count: int, prefix: str) -> float:
    """Seconds for ``count`` lifecycles through the Ledger."""
    async with Ledger.open(path) as ledger:
        start = time.perf_counter()
        for n in range(count):
            action_id = f"{prefix}-{n}"
            await ledger.create_action(action_id, SmsIntent(recipient="+15550100", body=f"m{n}"))
            record = await ledger.begin_attempt(action_id, f"{prefix}-dev-{n}")
            now = datetime.now(UTC)
            record = await ledger.apply(confirm_delivery(record, provider_object_id=n, now=now))
            await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=now))
        return time.perf_counter() - start


def plain_connection(path: Path) -> sqlite3.Connection:
    """A sqlite3 connection with the ledger's pragmas, on a file the Ledger created."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 10000")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("PRAGMA foreign_keys = ON")
    return db


def transaction(db: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> None:
    db.execute("BEGIN IMMEDIATE")
    db.execute(sql, params)
    db.execute("COMMIT")


# The same columns the Ledger writes (evidence included), guarded the same way.
CONFIRM = (
    "UPDATE attempts SET delivery = 'CONFIRMED', provider_object_id = ?, confirmed_at = ?,"
    " evidence_json = ?, version = version + 1, last_event = 'confirm', last_event_at = ?,"
    " last_actor = 'bench', last_evidence_json = ?"
    " WHERE dispatch_id = ? AND delivery = 'PENDING' AND acceptance = 'PENDING' AND version = 0"
)
ACCEPT = (
    "UPDATE attempts SET acceptance = 'ACCEPTED', accepted_at = ?, evidence_json = ?,"
    " version = version + 1, last_event = 'accept', last_event_at = ?, last_actor = 'bench',"
    " last_evidence_json = ? WHERE dispatch_id = ? AND delivery = 'CONFIRMED'"
    " AND acceptance = 'PENDING' AND version = 1"
)


def confirm_params(n: int, at: str, dispatch_id: str) -> tuple[object, ...]:
    evidence = json.dumps({"provider_object_id": n}, separators=(",", ":"))
    return (n, at, evidence, at, evidence, dispatch_id)


def plain_lifecycles(path: Path, count: int) -> float:
    """Seconds for the same four transactions per lifecycle, hand-written with sqlite3."""
    db = plain_connection(path)
    start = time.perf_counter()
    for n in range(count):
        action_id, dispatch_id, at = f"P-{n}", str(uuid.uuid4()), now_text()
        transaction(
            db,
            "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
            " policy_json, created_at) VALUES (?, 'sha256:x', '{}', 3, '{}', ?)",
            (action_id, at),
        )
        transaction(
            db,
            "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
            " last_event_at, last_actor) VALUES (?, ?, 1, ?, ?, ?, 'bench')",
            (dispatch_id, action_id, f"pdev-{n}", at, at),
        )
        transaction(db, CONFIRM, confirm_params(n, at, dispatch_id))
        accepted = json.dumps({"matched": True, "provider_object_id": n}, separators=(",", ":"))
        transaction(db, ACCEPT, (at, accepted, at, '{"matched":true}', dispatch_id))
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


def seed_attempts(path: Path, count: int, prefix: str) -> list[str]:
    """``count`` in-flight attempts written in one plain transaction; their dispatch ids.

    Both batch measurements start from rows seeded this same way in the same file.
    """
    db = plain_connection(path)
    ids = []
    db.execute("BEGIN IMMEDIATE")
    for n in range(count):
        action_id, dispatch_id, at = f"{prefix}-{n}", str(uuid.uuid4()), now_text()
        db.execute(
            "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
            " policy_json, created_at) VALUES (?, 'sha256:x', '{}', 3, '{}', ?)",
            (action_id, at),
        )
        db.execute(
            "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
            " last_event_at, last_actor) VALUES (?, ?, 1, ?, ?, ?, 'bench')",
            (dispatch_id, action_id, f"{prefix}-dev-{n}", at, at),
        )
        ids.append(dispatch_id)
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return ids


async def ledger_batch(path: Path, ids: list[str]) -> float:
    """Seconds for one ``apply_many`` confirming every attempt in ``ids``."""
    async with Ledger.open(path) as ledger:
        records = [await ledger.get_attempt(dispatch_id) for dispatch_id in ids]
        now = datetime.now(UTC)
        transitions = [  # planned by the pure core, as a reconcile pass does before applying
            confirm_delivery(record, provider_object_id=n, now=now)
            for n, record in enumerate(records)
        ]
        start = time.perf_counter()
        results = await ledger.apply_many(transitions)
        elapsed = time.perf_counter() - start
        assert all(not isinstance(result, Exception) for result in results)
        return elapsed


def plain_batch(path: Path, ids: list[str]) -> float:
    """Seconds for the same confirmations as UPDATEs in one plain transaction."""
    db = plain_connection(path)
    start = time.perf_counter()
    at = now_text()
    db.execute("BEGIN IMMEDIATE")
    for n, dispatch_id in enumerate(ids):
        db.execute(CONFIRM, confirm_params(n, at, dispatch_id))
    db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lifecycles", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None, help="where the database files go")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    configure_logging(level=logging.WARNING)  # transitions log at INFO: measure the ledger
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        ledger_time = plain_time = 0.0
        rounds = 4
        per_round = max(1, args.lifecycles // rounds)
        # a warm-up, then rounds that interleave the two so machine noise hits both alike
        for number in range(rounds + 1):
            path = Path(folder) / f"bench-{number}.db"
            async with Ledger.open(path):
                pass
            plain = plain_lifecycles(path, per_round if number else 20)
            through_ledger = await ledger_lifecycles(path, per_round if number else 20, "L")
            if number:
                plain_time += plain
                ledger_time += through_ledger
        total = per_round * rounds
        ledger_rate = total / ledger_time
        plain_rate = total / plain_time
        plain_batch_times: list[float] = []
        ledger_batch_times: list[float] = []
        for number in range(2 * rounds + 1):
            batch_path = Path(folder) / f"batch-{number}.db"
            async with Ledger.open(batch_path):
                pass
            plain_ids = seed_attempts(batch_path, args.batch, "Q")
            ledger_ids = seed_attempts(batch_path, args.batch, "B")
            plain = plain_batch(batch_path, plain_ids)
            through_ledger = await ledger_batch(batch_path, ledger_ids)
            if number:  # round 0 warms up
                plain_batch_times.append(plain)
                ledger_batch_times.append(through_ledger)
        # medians: one batch is a single commit, whose fsync time varies a lot from run to run
        plain_batch_time = statistics.median(plain_batch_times)
        ledger_batch_time = statistics.median(ledger_batch_times)
    figures = {
        "machine": f"{platform.machine()} {platform.system()} python {platform.python_version()}"
        f" sqlite {sqlite3.sqlite_version}",
        "lifecycles": total,
        "ledger_lifecycles_per_s": round(ledger_rate, 1),
        "sqlite3_lifecycles_per_s": round(plain_rate, 1),
        "lifecycle_ratio": round(ledger_rate / plain_rate, 3),
        "batch": args.batch,
        "ledger_batch_transitions_per_s": round(args.batch / ledger_batch_time, 1),
        "sqlite3_batch_transitions_per_s": round(args.batch / plain_batch_time, 1),
        "batch_ratio": round(plain_batch_time / ledger_batch_time, 3),
    }
    print(f"machine: {figures['machine']}")
    print(f"lifecycles (create -> attempt -> confirm -> accept), {total} each, synchronous=FULL:")
    print(f"  Ledger (aiosqlite)   {ledger_rate:10.1f} lifecycles/s")
    print(f"  plain sqlite3        {plain_rate:10.1f} lifecycles/s")
    print(f"  ratio                {ledger_rate / plain_rate:10.3f}   (target >= 0.25)")
    print(f"batch of {args.batch} transitions in one call:")
    print(f"  Ledger.apply_many    {figures['ledger_batch_transitions_per_s']:10.1f} transitions/s")
    print(
        f"  plain sqlite3        {figures['sqlite3_batch_transitions_per_s']:10.1f} transitions/s"
    )
    print(f"  ratio                {figures['batch_ratio']:10.3f}   (target >= 0.5)")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
