#!/usr/bin/env python3
"""Benchmark the nightly job and the read commands at 10,000, 100,000 and 1,000,000 actions.

Run: ``python benchmarks/bench_reads.py [--quick] [--sizes 10000,100000]``. For each size it
times, in a subprocess each (wall time and peak RSS from ``/usr/bin/time``):

* ``starebrain nightly --json`` with 4 simulated phones at 30 ms latency, one attempt in
  flight on each (targets: 1,000,000 actions in < 60 s and < 200 MB; 100,000 in < 6 s);
* ``starebrain review`` and ``list --status MISMATCH`` (target: < 2 s each at 1,000,000
  actions, memory independent of the ledger's size);
* ``list --limit 0`` and ``list --limit 0 --json``: every action (target: <= 3x the floor,
  issue 37);
* the floor: a bare ``sqlite3`` script reading every action with its attempts, the same rows
  the commands must look at (each figure is also printed as a ratio of it).

The ledger is built by a documented fast path, not one API call per action (a million sends
through the API would take hours): the ledger is created and migrated by ``Ledger.open``,
then rows are bulk-INSERTed into ``actions``, ``attempts`` and ``duplicates`` with every
constraint and trigger of the schema in force (foreign keys on; the history trigger writes one
``created``-style row per attempt, already in its final state). The build is then checked:
``PRAGMA integrity_check`` and ``foreign_key_check``, attempts numbered 1..n per action, one
history row per attempt, and one action of each shape read back through ``Ledger.summary``
with the status and review reasons the API would give it. Built ledgers are cached in the
temp directory, keyed by size and shape version; each run works on a copy, to which the four
in-flight attempts are added through the public API (``create_action``, ``begin_attempt``).

Mix per 1,000 actions: 965 sent first time, 20 failed then sent, 5 failed once, 3 out of
budget (3 failures), 3 mismatched, 2 duplicated, 1 verifying, 1 planned. So at 1,000,000
actions, 34,000 have an attempt that is not a clean success (what ``review``, ``list
--status`` and the nightly job summarize one by one) and 8,000 need review.

``--only`` runs some of the commands (``--only review,nightly``). ``list --limit 0`` reads a
clean success (96.5% of this mix) from its counts in SQL (``Ledger.iter_listed``); every other
action, and every action of ``--json``, is read and derived in full (the action and attempt
records, the summary: about 60 us of Python per action, ten times the floor's bare row read).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from smoke import smoke  # noqa: E402

from android_bridge import ensure_key  # noqa: E402
from android_bridge.simulator import SimulatedPhone  # noqa: E402
from starebrain_actions import Ledger, RetryPolicy, SmsIntent, Status  # noqa: E402
from starebrain_actions.core.convert import converter, format_time  # noqa: E402
from starebrain_actions.core.model import Action, ReviewReason, canonical_body  # noqa: E402
from starebrain_actions.ledger.store import SCHEMA_VERSION  # noqa: E402
from starebrain_actions.ledger.updates import to_json  # noqa: E402

#: Bump when the shape of the built ledger changes: cached ledgers of another shape are rebuilt.
SHAPE = 1
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000,)
LATENCY_MS = 30
PHONES = 4
DEVICES = tuple(f"10.0.0.{n}:5555" for n in range(1, PHONES + 1))
RECIPIENTS = tuple(f"+1202555{n:04d}" for n in range(100, 1100))
#: Action kinds by ``index % 1000``: (upper bound, kind).
MIX = (
    (965, "sent"),
    (985, "failed_then_sent"),
    (990, "failed"),
    (993, "budget_spent"),
    (996, "mismatch"),
    (998, "duplicate"),
    (999, "verifying"),
    (1000, "planned"),
)
#: What ``Ledger.summary`` must say for each kind: (status, review reasons).
EXPECTED = {
    "sent": (Status.SUCCEEDED, ()),
    "failed_then_sent": (Status.SUCCEEDED, ()),
    "failed": (Status.FAILED, ()),
    "budget_spent": (Status.FAILED, (ReviewReason.BUDGET_EXHAUSTED,)),
    "mismatch": (Status.MISMATCH, (ReviewReason.MISMATCH,)),
    "duplicate": (Status.SUCCEEDED, (ReviewReason.DUPLICATE,)),
    "verifying": (Status.VERIFYING, ()),
    "planned": (Status.PLANNED, ()),
}


def kind_of(index: int) -> str:
    """The kind of the action at ``index``."""
    rest = index % 1000
    for bound, kind in MIX:
        if rest < bound:
            return kind
    raise AssertionError(rest)


# --------------------------------------------------------------------------- building


def cache_dir() -> Path:
    """Where built ledgers are kept between runs."""
    path = Path(tempfile.gettempdir()) / "starebrain-bench-reads"
    path.mkdir(exist_ok=True)
    return path


def cached_ledger(size: int) -> Path:
    """The built ledger of ``size`` actions, built (and checked) if not cached yet."""
    path = cache_dir() / f"ledger-{size}-shape{SHAPE}-schema{SCHEMA_VERSION}.db"
    if not path.exists():
        partial = path.with_suffix(".partial")
        for leftover in cache_dir().glob(partial.name + "*"):
            leftover.unlink()
        started = time.perf_counter()
        build_ledger(partial, size)
        check_ledger(partial, size)
        partial.rename(path)
        for side in ("-wal", "-shm"):
            partial.with_name(partial.name + side).unlink(missing_ok=True)
        print(f"  built and checked {size:,} actions in {time.perf_counter() - started:.1f}s")
    return path


def build_ledger(path: Path, size: int) -> None:
    """Create ``path`` with the API, then bulk-insert ``size`` actions (see the module doc)."""
    asyncio.run(_create(path))
    policy = RetryPolicy()
    policy_json = to_json(converter.unstructure(policy))
    templates = [SmsIntent(recipient=recipient, body="x") for recipient in RECIPIENTS]
    origin = datetime.now(UTC) - timedelta(days=2, seconds=size)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("BEGIN IMMEDIATE")
        next_row = dict.fromkeys(DEVICES, 1)
        for start in range(0, size, 20_000):
            actions: list[tuple[Any, ...]] = []
            attempts: list[dict[str, Any]] = []
            duplicates: list[tuple[Any, ...]] = []
            for index in range(start, min(size, start + 20_000)):
                fingerprint, intent_json = _intent_columns(
                    templates[index % len(templates)], f"Your code is {index:07d}", check=index < 3
                )
                created = origin + timedelta(seconds=index)
                action_id = f"A{index:07d}"
                actions.append(
                    (
                        action_id,
                        fingerprint,
                        intent_json,
                        policy.maximum_attempts,
                        policy_json,
                        format_time(created),
                        None,
                    )
                )
                kind = kind_of(index)
                device = DEVICES[index % len(DEVICES)]
                outcomes = {
                    "sent": ["accept"],
                    "failed_then_sent": ["fail", "accept"],
                    "failed": ["fail"],
                    "budget_spent": ["fail", "fail", "fail"],
                    "mismatch": ["reject"],
                    "duplicate": ["duplicate"],
                    "verifying": ["confirm"],
                    "planned": [],
                }[kind]
                for number, outcome in enumerate(outcomes, start=1):
                    row = _attempt(action_id, number, device, created, outcome, next_row)
                    attempts.append(row)
                    if outcome == "duplicate":
                        duplicates.append(
                            (
                                device,
                                next_row[device],
                                "sms",
                                row["dispatch_id"],
                                row["last_event_at"],
                                "{}",
                            )
                        )
                        next_row[device] += 1
            db.executemany(
                "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
                " policy_json, created_at, deadline) VALUES (?, ?, ?, ?, ?, ?, ?)",
                actions,
            )
            db.executemany(_INSERT, attempts)
            db.executemany(
                "INSERT INTO duplicates (device, provider_object_id, provider_kind, dispatch_id,"
                " seen_at, evidence_json) VALUES (?, ?, ?, ?, ?, ?)",
                duplicates,
            )
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def _intent_columns(template: SmsIntent, body: str, *, check: bool) -> tuple[str, str]:
    """``fingerprint`` and ``intent_json`` of ``SmsIntent(template.recipient, body)``, as
    ``Ledger.create_action`` writes them, without parsing the number again for every action
    (``check``: compare with the real thing)."""
    canonical = {**template.canonical(), "body": canonical_body(body)}
    text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    fingerprint = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    intent_json = to_json({**converter.unstructure(template), "body": body})
    if check:
        real = SmsIntent(recipient=template.recipient, body=body)
        assert (real.fingerprint, to_json(converter.unstructure(real))) == (
            fingerprint,
            intent_json,
        )
    return fingerprint, intent_json


_INSERT = """
INSERT INTO attempts (dispatch_id, action_id, attempt, device, delivery, acceptance,
    provider_object_id, provider_kind, dispatched_at, confirmed_at, failed_at, accepted_at,
    rejected_at, evidence_json, review_reason, version, last_event, last_event_at, last_actor,
    last_evidence_json)
VALUES (:dispatch_id, :action_id, :attempt, :device, :delivery, :acceptance,
    :provider_object_id, :provider_kind, :dispatched_at, :confirmed_at, :failed_at,
    :accepted_at, :rejected_at, :evidence_json, :review_reason, :version, :last_event,
    :last_event_at, 'reconciler', '{}')
"""


def _attempt(
    action_id: str,
    number: int,
    device: str,
    created: datetime,
    outcome: str,
    next_row: dict[str, int],
) -> dict[str, Any]:
    """An attempts row already in the final state of ``outcome``."""
    dispatched = created + timedelta(minutes=10 * (number - 1))
    settled = format_time(dispatched + timedelta(seconds=5))
    confirmed = outcome in ("accept", "reject", "duplicate", "confirm")
    row: dict[str, Any] = {
        "dispatch_id": f"{action_id}-{number}",
        "action_id": action_id,
        "attempt": number,
        "device": device,
        "delivery": "CONFIRMED" if confirmed else "FAILED",
        "acceptance": {"accept": "ACCEPTED", "duplicate": "ACCEPTED", "reject": "REJECTED"}.get(
            outcome, "PENDING"
        ),
        "provider_object_id": next_row[device] if confirmed else None,
        "provider_kind": "sms" if confirmed else None,
        "dispatched_at": format_time(dispatched),
        "confirmed_at": settled if confirmed else None,
        "failed_at": None if confirmed else settled,
        "accepted_at": settled if outcome in ("accept", "duplicate") else None,
        "rejected_at": settled if outcome == "reject" else None,
        "evidence_json": "{}",
        "review_reason": {"reject": "MISMATCH", "duplicate": "DUPLICATE"}.get(outcome),
        "version": 2,
        "last_event": {"fail": "fail", "confirm": "confirm", "reject": "reject"}.get(
            outcome, "accept" if outcome == "accept" else "flag_review"
        ),
        "last_event_at": settled,
    }
    if confirmed:
        next_row[device] += 1
    return row


async def _create(path: Path) -> None:
    async with Ledger.open(path):
        pass


def check_ledger(path: Path, size: int) -> None:
    """The built ledger holds to SQLite's and the ledger's invariants (see the module doc).

    Raises:
        AssertionError: it does not.
    """
    db = sqlite3.connect(path)
    try:
        assert [("ok",)] == db.execute("PRAGMA integrity_check").fetchall()
        assert [] == db.execute("PRAGMA foreign_key_check").fetchall()
        assert size == db.execute("SELECT count(*) FROM actions").fetchone()[0]
        gaps = db.execute(
            "SELECT count(*) FROM (SELECT action_id, max(attempt) AS m, count(*) AS c"
            " FROM attempts GROUP BY action_id) WHERE m <> c"
        ).fetchone()[0]
        assert 0 == gaps, f"{gaps} actions with attempts not numbered 1..n"
        attempts = db.execute("SELECT count(*) FROM attempts").fetchone()[0]
        histories = db.execute("SELECT count(DISTINCT dispatch_id) FROM history").fetchone()[0]
        assert attempts == histories, "an attempt without history"
    finally:
        db.close()
    asyncio.run(_check_shapes(path, size))


async def _check_shapes(path: Path, size: int) -> None:
    now = datetime.now(UTC)
    async with Ledger.open(path, read_only=True) as ledger:
        seen: set[str] = set()
        for index in range(min(size, 1000)):
            kind = kind_of(index)
            if kind in seen:
                continue
            seen.add(kind)
            summary = await ledger.summary(f"A{index:07d}", now=now)
            assert EXPECTED[kind] == (summary.status, summary.review_reasons), (kind, summary)
            action = summary.action
            assert action.fingerprint == action.intent.fingerprint
            assert isinstance(action, Action)


# --------------------------------------------------------------------------- running


@contextlib.contextmanager
def working_copy(size: int) -> Iterator[Path]:
    """A fresh copy of the cached ledger of ``size`` actions, removed afterwards."""
    base = cached_ledger(size)
    with tempfile.TemporaryDirectory(prefix="bench-reads-") as folder:
        copy = Path(folder) / "ledger.db"
        shutil.copyfile(base, copy)
        os.chmod(copy, 0o600)
        yield copy


def starebrain() -> list[str]:
    """The ``starebrain`` command of this interpreter's environment."""
    script = Path(sys.executable).parent / "starebrain"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from starebrain_actions.cli.main import main; main()"]


def measure(argv: Sequence[str]) -> tuple[float, float, int]:
    """Run ``argv`` in a subprocess (stdout discarded): (wall seconds, peak RSS MB, exit)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as timing:
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-o", timing.name, "-f", "%M", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        text = Path(timing.name).read_text().strip().splitlines()
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, int(text[-1]) / 1024, done.returncode


FLOOR_SCRIPT = """
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = 0
for row in db.execute("SELECT * FROM actions ORDER BY created_at DESC, action_id"):
    rows += 1
for row in db.execute("SELECT * FROM attempts ORDER BY action_id, attempt"):
    rows += 1
print(rows)
"""


async def _run_size(
    size: int, root: Path, key: Path, authorized: Path, only: frozenset[str] | None = None
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with working_copy(size) as ledger_path:
        floor = await asyncio.to_thread(
            measure, [sys.executable, "-c", FLOOR_SCRIPT, str(ledger_path)]
        )
        results.append({"command": "floor: sqlite3 reads every row", "size": size, "s": floor[0]})
        results[-1]["mb"] = floor[1]
        reads = (
            ("review", ["review"]),
            ("list --limit 0", ["list", "--limit", "0"]),
            ("list --limit 0 --json", ["list", "--limit", "0", "--json"]),
            ("list --status MISMATCH", ["list", "--status", "MISMATCH", "--limit", "0"]),
        )
        for name, args in reads:
            if only is not None and name not in only:
                continue
            wall, rss, _code = await asyncio.to_thread(
                measure, [*starebrain(), "--db", str(ledger_path), *args]
            )
            results.append({"command": name, "size": size, "s": wall, "mb": rss})
        phones = [
            SimulatedPhone(
                store_path=root / f"phone-{size}-{n}.db",
                authorized_keys_path=authorized,
                latency_ms=LATENCY_MS,
            )
            for n in range(PHONES)
        ]
        async with contextlib.AsyncExitStack() as stack:
            for phone in phones:
                await stack.enter_async_context(phone)
            if only is not None and "nightly" not in only:
                phones = []
            async with Ledger.open(ledger_path) as ledger:
                for number, phone in enumerate(phones):
                    action_id = f"in-flight-{number}"
                    await ledger.create_action(
                        action_id, SmsIntent(recipient=RECIPIENTS[number], body="pending")
                    )
                    await ledger.begin_attempt(action_id, phone.serial)
            if phones:
                argv = [*starebrain(), "--db", str(ledger_path), "nightly", "--key", str(key)]
                wall, rss, _code = await asyncio.to_thread(measure, [*argv, "--json"])
                results.append({"command": "nightly", "size": size, "s": wall, "mb": rss})
    for row in results:
        row["ratio"] = row["s"] / floor[0] if floor[0] else None
    return results


def measure_all(sizes: Sequence[int], only: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """Every command at every size (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="bench-reads-keys-") as folder:
        root = Path(folder)
        key = ensure_key(root / "adbkey")
        authorized = root / "adb_keys"
        authorized.write_text(Path(str(key) + ".pub").read_text().strip() + "\n")
        found: list[dict[str, Any]] = []
        for size in sizes:
            cached_ledger(size)  # built outside the event loop the phones run on
            found += asyncio.run(_run_size(size, root, key, authorized, only))
        return found


def _target(command: str, size: int) -> tuple[str, bool | None, float | None, float | None]:
    """(target text, applies, seconds, MB) for a command at a size."""
    if command == "nightly":
        if size >= 1_000_000:
            return "< 60 s, < 200 MB", True, 60.0, 200.0
        if size >= 100_000:
            return "< 6 s", True, 6.0, None
        return "-", None, None, None
    if command.startswith("floor"):
        return "-", None, None, None
    if command.startswith("list --limit 0"):
        # issue 37: every action, at most 3x the bare read of the same rows (the ratio)
        return f"<= {LIST_ALL_RATIO:.0f}x floor", True, None, None
    if size >= 1_000_000:
        return "< 2 s, flat memory", True, 2.0, None
    return "-", None, None, None


#: ``list --limit 0`` (text or JSON) against the floor (issue 37).
LIST_ALL_RATIO = 3.0


def run(quick: bool) -> list[dict[str, Any]]:
    """Rows for ``benchmarks/run_all.py``: one per command and size."""
    rows = []
    results = measure_all((2_000,) if smoke() else QUICK_SIZES if quick else SIZES)
    smallest = {
        row["command"]: row["mb"]
        for row in sorted(results, key=lambda row: -row["size"])  # the smallest size wins
    }
    for result in results:
        target, applies, seconds, megabytes = _target(result["command"], result["size"])
        met: bool | None = None
        if applies:
            met = (seconds is None or result["s"] < seconds) and (
                megabytes is None or result["mb"] < megabytes
            )
            if result["command"].startswith("list --limit 0"):
                met = result["ratio"] is not None and result["ratio"] <= LIST_ALL_RATIO
            if "flat memory" in target:
                # flat: within 1.5x of the same command's peak at the smallest size measured
                met = met and result["mb"] <= 1.5 * smallest[result["command"]]
        rows.append(
            {
                "work": f"{result['command']}, {result['size']:,} actions",
                "figure": f"{result['s']:.2f} s, {result['mb']:.0f} MB"
                + (f" ({result['ratio']:.1f}x floor)" if result.get("ratio") else ""),
                "target": target,
                "met": met,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 actions only")
    parser.add_argument("--sizes", help="comma-separated sizes (default 10k, 100k, 1M)")
    parser.add_argument("--json", dest="json_path", help="also write the rows as JSON here")
    parser.add_argument(
        "--only",
        help="comma-separated commands to run: review, 'list --limit 0',"
        " 'list --status MISMATCH', nightly (default: all)",
    )
    args = parser.parse_args()
    sizes = (
        tuple(int(size) for size in args.sizes.split(","))
        if args.sizes
        else (QUICK_SIZES if args.quick else SIZES)
    )
    only = frozenset(name.strip() for name in args.only.split(",")) if args.only else None
    results = measure_all(sizes, only)
    print(f"{'command':<32} {'actions':>10} {'wall s':>8} {'peak MB':>8} {'x floor':>8}  target")
    for row in results:
        target, applies, _seconds, _megabytes = _target(row["command"], row["size"])
        print(
            f"{row['command']:<32} {row['size']:>10,} {row['s']:>8.2f} {row['mb']:>8.0f}"
            f" {row['ratio']:>8.1f}  {target if applies else '-'}"
        )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
