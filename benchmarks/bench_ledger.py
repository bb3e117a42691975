#!/usr/bin/env python3
"""The ledger's own overhead: the same writes through ``Ledger`` and through plain sqlite3.

A lifecycle is what one successful send writes: create the action, begin an attempt (the
receipt), confirm its delivery, accept it; four ``BEGIN IMMEDIATE`` transactions. The
plain-sqlite3 side runs exactly the statements the ledger runs (the same SQL text, taken from
the ledger's module, the same parameters, the same pragmas: WAL, ``synchronous=FULL``,
foreign keys, a busy timeout) with no Python around them, so the ratio measures what the
ledger adds: its checks, its records, its JSON, the asyncio thread hop.

It runs twice: on disk (where ``fsync`` dominates both sides) and on a RAM disk
(``/dev/shm``), where the ratio is the real measure of the ledger's overhead (target >= 0.4;
0.25 before this benchmark's issue). Then a batch of transitions applied in one call against
the same UPDATEs in one plain transaction (target >= 0.5).

    python benchmarks/bench_ledger.py [--quick] [--lifecycles N] [--batch N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from starebrain_actions import (  # noqa: E402
    Ledger,
    MatchVerdict,
    RetryPolicy,
    SmsIntent,
    configure_logging,
    confirm_delivery,
    try_accept,
)
from starebrain_actions.core.convert import ATTEMPT_COLUMNS, converter, format_time  # noqa: E402
from starebrain_actions.ledger.devices import LEASE_RELEASING_SQL  # noqa: E402
from starebrain_actions.ledger.receipts import INSERT_ATTEMPT  # noqa: E402
from starebrain_actions.ledger.updates import to_json, update_sql  # noqa: E402

#: Where the RAM-disk run puts its files.
RAM_DISK = Path("/dev/shm")
RECIPIENT = "+12025550143"
#: Targets: the lifecycle ratio on disk (fsync-bound), on a RAM disk, and the batch ratio.
TARGET_DISK = 0.25
TARGET_RAM = 0.4
TARGET_BATCH = 0.5

CREATE_ACTION = (
    "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
    " policy_json, created_at, deadline) VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (action_id) DO NOTHING"
)
LOAD_ATTEMPTS = f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE action_id = ? ORDER BY attempt"
LEASE_HOLDER = (
    "SELECT dispatch_id, action_id, dispatched_at FROM attempts"
    " WHERE device = ? AND delivery = 'PENDING'"
    f" AND coalesce(review_reason, '') NOT IN ({LEASE_RELEASING_SQL})"
)
CONFIRM = update_sql(
    ("version", "delivery", "provider_object_id", "provider_kind", "confirmed_at", "evidence")
)
ACCEPT = update_sql(("version", "acceptance", "accepted_at", "evidence"))
#: The stored form of the default policy, as the ledger writes it.
POLICY_JSON = to_json(converter.unstructure(RetryPolicy()))


def now_text() -> str:
    return format_time(datetime.now(UTC))


async def ledger_lifecycles(path: Path, count: int, prefix: str) -> float:
    """Seconds for ``count`` lifecycles through the Ledger (the intent built by the caller,
    as an agent has it before it asks the ledger for anything)."""
    intents = [SmsIntent(recipient=RECIPIENT, body=f"m{n}") for n in range(count)]
    policy = RetryPolicy()
    async with Ledger.open(path) as ledger:
        start = time.perf_counter()
        for n, intent in enumerate(intents):
            action_id = f"{prefix}-{n}"
            await ledger.create_action(action_id, intent, policy)
            record = await ledger.begin_attempt(action_id, f"{prefix}-dev-{n}")
            now = datetime.now(UTC)
            record = await ledger.apply(confirm_delivery(record, provider_object_id=n, now=now))
            await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=now))
        return time.perf_counter() - start


def plain_connection(path: Path) -> sqlite3.Connection:
    """A sqlite3 connection with the ledger's pragmas, on a file the Ledger created."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 10000")
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    return db


def plain_lifecycles(path: Path, count: int, prefix: str) -> float:
    """Seconds for the ledger's statements of ``count`` lifecycles, by hand with sqlite3."""
    db = plain_connection(path)
    start = time.perf_counter()
    for n in range(count):
        action_id, device, at = f"{prefix}-{n}", f"{prefix}-dev-{n}", now_text()
        intent_json = f'{{"body":"m{n}","extras":{{}},"recipient":"{RECIPIENT}","region":null}}'
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            CREATE_ACTION, (action_id, f"sha256:{n:064x}", intent_json, 3, POLICY_JSON, at, None)
        )
        db.execute("COMMIT")

        db.execute("BEGIN IMMEDIATE")
        db.execute(LOAD_ATTEMPTS, (action_id,)).fetchall()
        db.execute(LEASE_HOLDER, (device,)).fetchone()
        dispatch_id = str(uuid.uuid4())
        db.execute(
            INSERT_ATTEMPT,
            {
                "dispatch_id": dispatch_id,
                "action_id": action_id,
                "attempt": 1,
                "device": device,
                "dispatched_at": at,
                "actor": "agent",
                "evidence_json": f'{{"attempt":1,"device":"{device}"}}',
                "record_evidence_json": "{}",
            },
        )
        db.execute("COMMIT")

        at = now_text()
        evidence = f'{{"provider_kind":"sms","provider_object_id":{n}}}'
        db.execute("BEGIN IMMEDIATE")
        db.execute(CONFIRM, confirm_params(dispatch_id, n, at, evidence))
        db.execute("COMMIT")

        db.execute("BEGIN IMMEDIATE")
        db.execute(
            ACCEPT,
            {
                "dispatch_id": dispatch_id,
                "version": 2,
                "acceptance": "ACCEPTED",
                "accepted_at": at,
                "evidence_json": '{"matched":true,' + evidence[1:],
                "last_event": "accept",
                "last_event_at": at,
                "last_actor": "reconciler",
                "last_evidence_json": '{"matched":true}',
                "expected_delivery": "CONFIRMED",
                "expected_acceptance": "PENDING",
                "expected_version": 1,
            },
        )
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


def confirm_params(dispatch_id: str, n: int, at: str, evidence: str) -> dict[str, Any]:
    return {
        "dispatch_id": dispatch_id,
        "version": 1,
        "delivery": "CONFIRMED",
        "provider_object_id": n,
        "provider_kind": "sms",
        "confirmed_at": at,
        "evidence_json": evidence,
        "last_event": "confirm",
        "last_event_at": at,
        "last_actor": "reconciler",
        "last_evidence_json": evidence,
        "expected_delivery": "PENDING",
        "expected_acceptance": "PENDING",
        "expected_version": 0,
    }


def seed_attempts(path: Path, count: int, prefix: str) -> list[str]:
    """``count`` in-flight attempts written in one plain transaction; their dispatch ids.

    Both batch measurements start from rows seeded this same way in the same file.
    """
    db = plain_connection(path)
    ids = []
    db.execute("BEGIN IMMEDIATE")
    for n in range(count):
        action_id, dispatch_id, at = f"{prefix}-{n}", str(uuid.uuid4()), now_text()
        db.execute(CREATE_ACTION, (action_id, f"sha256:{n:064x}", "{}", 3, POLICY_JSON, at, None))
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
        records = await ledger.attempts_by_id(ids)
        now = datetime.now(UTC)
        transitions = [  # planned by the pure core, as a reconcile pass does before applying
            confirm_delivery(records[dispatch_id], provider_object_id=n, now=now)
            for n, dispatch_id in enumerate(ids)
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
        evidence = f'{{"provider_kind":"sms","provider_object_id":{n}}}'
        db.execute(CONFIRM, confirm_params(dispatch_id, n, at, evidence))
    db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


@contextlib.contextmanager
def folder_in(parent: Path | None) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir=parent, prefix="bench-ledger-") as folder:
        yield Path(folder)


async def lifecycle_figures(parent: Path | None, lifecycles: int, rounds: int) -> dict[str, Any]:
    """Lifecycles per second through the Ledger and plain, in ``parent`` (None: the temp
    directory), in rounds that interleave the two so machine noise hits both alike."""
    ledger_time = plain_time = 0.0
    per_round = max(1, lifecycles // rounds)
    with folder_in(parent) as folder:
        for number in range(rounds + 1):  # round 0 warms up
            path = folder / f"lifecycles-{number}.db"
            async with Ledger.open(path):
                pass
            count = per_round if number else min(per_round, 20)
            plain = plain_lifecycles(path, count, "P")
            through_ledger = await ledger_lifecycles(path, count, "L")
            if number:
                plain_time += plain
                ledger_time += through_ledger
    total = per_round * rounds
    ledger_rate, plain_rate = total / ledger_time, total / plain_time
    return {
        "lifecycles": total,
        "ledger_lifecycles_per_s": round(ledger_rate, 1),
        "sqlite3_lifecycles_per_s": round(plain_rate, 1),
        "lifecycle_ratio": round(ledger_rate / plain_rate, 3),
    }


async def batch_figures(parent: Path | None, batch: int, rounds: int) -> dict[str, Any]:
    """One ``apply_many`` of ``batch`` confirmations against the same UPDATEs, plain."""
    plain_times: list[float] = []
    ledger_times: list[float] = []
    with folder_in(parent) as folder:
        for number in range(rounds + 1):
            path = folder / f"batch-{number}.db"
            async with Ledger.open(path):
                pass
            plain_ids = seed_attempts(path, batch, "Q")
            ledger_ids = seed_attempts(path, batch, "B")
            plain = plain_batch(path, plain_ids)
            through_ledger = await ledger_batch(path, ledger_ids)
            if number:  # round 0 warms up
                plain_times.append(plain)
                ledger_times.append(through_ledger)
    # medians: one batch is a single commit, whose fsync time varies a lot from run to run
    plain_time, ledger_time = statistics.median(plain_times), statistics.median(ledger_times)
    return {
        "batch": batch,
        "ledger_batch_transitions_per_s": round(batch / ledger_time, 1),
        "sqlite3_batch_transitions_per_s": round(batch / plain_time, 1),
        "batch_ratio": round(plain_time / ledger_time, 3),
    }


def ram_disk_usable() -> bool:
    """True when ``RAM_DISK`` exists and this user may write there."""
    return RAM_DISK.is_dir() and os.access(RAM_DISK, os.W_OK)


async def measure(
    *, disk_lifecycles: int, ram_lifecycles: int, batch: int, rounds: int
) -> dict[str, Any]:
    configure_logging(level=logging.WARNING)  # transitions log at INFO: measure the ledger
    figures: dict[str, Any] = {
        "machine": f"{platform.machine()} {platform.system()} python {platform.python_version()}"
        f" sqlite {sqlite3.sqlite_version}",
        "disk": await lifecycle_figures(None, disk_lifecycles, rounds),
        "ram_disk": None,
    }
    if ram_disk_usable():
        figures["ram_disk"] = await lifecycle_figures(RAM_DISK, ram_lifecycles, rounds)
    figures["batch"] = await batch_figures(None, batch, 2 * rounds)
    return figures


def _sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"disk_lifecycles": 200, "ram_lifecycles": 1000, "batch": 500, "rounds": 2}
    return {"disk_lifecycles": 400, "ram_lifecycles": 4000, "batch": 1000, "rounds": 4}


def _row(work: str, ratio: float, detail: str, target: float) -> dict[str, Any]:
    return {
        "work": work,
        "figure": f"ratio {ratio:.2f} ({detail})",
        "target": f">= {target}",
        "met": ratio >= target,
    }


def rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures as rows of ``run_all``'s table."""
    found: list[dict[str, Any]] = []
    for key, where, target in (("disk", "disk", TARGET_DISK), ("ram_disk", "RAM disk", TARGET_RAM)):
        part = figures[key]
        work = f"ledger vs sqlite3, lifecycles on {'a RAM disk' if key == 'ram_disk' else where}"
        if part is None:
            found.append(
                {
                    "work": work,
                    "figure": f"not measured: no writable {RAM_DISK} on this machine",
                    "target": f">= {target}",
                    "met": None,
                }
            )
            continue
        found.append(
            _row(
                work,
                part["lifecycle_ratio"],
                f"{part['ledger_lifecycles_per_s']:.0f} vs"
                f" {part['sqlite3_lifecycles_per_s']:.0f} lifecycles/s",
                target,
            )
        )
    batch = figures["batch"]
    found.append(
        _row(
            f"ledger vs sqlite3, {batch['batch']} transitions in one call (disk)",
            batch["batch_ratio"],
            f"{batch['ledger_batch_transitions_per_s']:.0f} vs"
            f" {batch['sqlite3_batch_transitions_per_s']:.0f}/s",
            TARGET_BATCH,
        )
    )
    return found


def run(quick: bool) -> list[dict[str, Any]]:
    """For ``benchmarks/run_all.py``: the rows of the table."""
    return rows(asyncio.run(measure(**_sizes(quick))))


def report(figures: dict[str, Any]) -> None:
    print(f"machine: {figures['machine']}")
    print("lifecycles (create -> attempt -> confirm -> accept), synchronous=FULL:")
    for key, where, target in (
        ("disk", "on disk", TARGET_DISK),
        ("ram_disk", f"on a RAM disk ({RAM_DISK})", TARGET_RAM),
    ):
        part = figures[key]
        if part is None:
            print(f"  {where}: not measured (no writable {RAM_DISK} here)")
            continue
        print(f"  {where}, {part['lifecycles']} each:")
        print(f"    Ledger             {part['ledger_lifecycles_per_s']:10.1f} lifecycles/s")
        print(f"    plain sqlite3      {part['sqlite3_lifecycles_per_s']:10.1f} lifecycles/s")
        print(f"    ratio              {part['lifecycle_ratio']:10.3f}   (target >= {target})")
    batch = figures["batch"]
    print(f"batch of {batch['batch']} transitions in one call, on disk:")
    print(f"    Ledger.apply_many  {batch['ledger_batch_transitions_per_s']:10.1f} transitions/s")
    print(f"    plain sqlite3      {batch['sqlite3_batch_transitions_per_s']:10.1f} transitions/s")
    print(f"    ratio              {batch['batch_ratio']:10.3f}   (target >= {TARGET_BATCH})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    parser.add_argument("--lifecycles", type=int, default=None, help="lifecycles on disk")
    parser.add_argument("--ram-lifecycles", type=int, default=None, help="on the RAM disk")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    sizes = _sizes(args.quick)
    if args.lifecycles is not None:
        sizes["disk_lifecycles"] = args.lifecycles
    if args.ram_lifecycles is not None:
        sizes["ram_lifecycles"] = args.ram_lifecycles
    if args.batch is not None:
        sizes["batch"] = args.batch
    figures = asyncio.run(measure(**sizes))
    report(figures)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
