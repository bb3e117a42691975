"""The per-device queries a sender and a reconcile pass run on every poll give what the plain
SQL they replace gave, and find their rows through indexes (``EXPLAIN QUERY PLAN``)."""

from __future__ import annotations

import random
import re
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from starebrain_actions import Ledger, SmsIntent
from starebrain_actions.core.convert import format_time

DEVICES = ("127.0.0.1:5555", "127.0.0.1:5556")
START = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

#: The state combinations an attempt can be in, with its review reason (None or one that
#: releases the device's lease, so that several unresolved attempts may share a device).
_STATES = (
    ("PENDING", "PENDING", None),
    ("PENDING", "PENDING", "UNVERIFIED"),
    ("PENDING", "PENDING", "STUCK"),
    ("CONFIRMED", "PENDING", None),
    ("CONFIRMED", "ACCEPTED", None),
    ("CONFIRMED", "ACCEPTED", "DUPLICATE"),
    ("CONFIRMED", "REJECTED", "MISMATCH"),
    ("FAILED", "PENDING", None),
)


async def _crafted(path: Path, count: int, seed: int) -> list[dict[str, Any]]:
    """A ledger of ``count`` attempts on two devices in every state, some without a
    watermark, some confirmed by an MMS (another numbering), written directly: one action
    each (its template made through the API), states consistent with every CHECK."""
    async with Ledger.open(path) as ledger:
        await ledger.create_action("template", SmsIntent(recipient="+12025550143", body="hi"))
    chooser = random.Random(seed)
    rows: list[dict[str, Any]] = []
    leased: set[str] = set()
    next_sms = {device: 10 for device in DEVICES}
    for index in range(count):
        device = chooser.choice(DEVICES)
        delivery, acceptance, review = chooser.choice(_STATES)
        if delivery == "PENDING" and review is None:
            if device in leased:
                review = "UNVERIFIED"
            leased.add(device)
        dispatched = START + timedelta(seconds=index * 7 + chooser.randint(0, 5))
        confirmed = dispatched + timedelta(seconds=chooser.choice((1, 30, 600, 86_400)))
        next_sms[device] += chooser.randint(1, 3)
        watermark = None if chooser.random() < 0.2 else next_sms[device] - 1
        kind = None
        artifact = None
        if delivery == "CONFIRMED":
            kind = "mms" if chooser.random() < 0.15 else "sms"
            artifact = 50_000 + index if kind == "mms" else next_sms[device]
        rows.append(
            {
                "dispatch_id": f"d-{index:04d}",
                "action_id": f"a-{index:04d}",
                "device": device,
                "delivery": delivery,
                "acceptance": acceptance,
                "review_reason": review,
                "provider_object_id": artifact,
                "provider_kind": kind,
                "watermark_id": watermark,
                "dispatched_at": format_time(dispatched),
                "confirmed_at": format_time(confirmed) if delivery == "CONFIRMED" else None,
                "failed_at": format_time(confirmed) if delivery == "FAILED" else None,
                "accepted_at": format_time(confirmed) if acceptance == "ACCEPTED" else None,
                "rejected_at": format_time(confirmed) if acceptance == "REJECTED" else None,
                "last_event_at": format_time(confirmed),
            }
        )
    with closing(sqlite3.connect(path)) as db, db:
        template = db.execute(
            "SELECT fingerprint, intent_json, maximum_attempts, policy_json, created_at"
            " FROM actions WHERE action_id = 'template'"
        ).fetchone()
        db.executemany(
            "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
            " policy_json, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [(row["action_id"], *template) for row in rows],
        )
        db.executemany(
            "INSERT INTO attempts (dispatch_id, action_id, attempt, device, delivery, acceptance,"
            " review_reason, provider_object_id, provider_kind, watermark_id, dispatched_at,"
            " confirmed_at, failed_at, accepted_at, rejected_at, last_event, last_event_at,"
            " last_actor) VALUES (:dispatch_id, :action_id, 1, :device, :delivery, :acceptance,"
            " :review_reason, :provider_object_id, :provider_kind, :watermark_id,"
            " :dispatched_at, :confirmed_at, :failed_at, :accepted_at, :rejected_at,"
            " 'note_error', :last_event_at, 'test')",
            rows,
        )
    return rows


def _times(rows: list[dict[str, Any]]) -> list[datetime]:
    """Instants around and between the attempts' times, and before and after them all."""
    stamps = sorted(
        {
            datetime.fromisoformat(row[column])
            for row in rows
            for column in ("dispatched_at", "confirmed_at")
            if row[column] is not None
        }
    )
    picked = stamps[:: max(1, len(stamps) // 12)]
    return [
        START - timedelta(days=1),
        *picked,
        *(stamp + timedelta(microseconds=1) for stamp in picked),
        stamps[-1] + timedelta(days=1),
    ]


async def test_device_queries_give_what_the_plain_sql_gave(tmp_path: Path) -> None:
    """On a crafted ledger (every state, two devices, missing watermarks, MMS artifacts),
    ``recent_attempts``, ``device_floor``, ``dispatches_since`` and ``in_flight`` return, for
    many instants, exactly what the single-statement SQL they replace returned, and
    ``confirmation_delays`` the last confirmations' delays."""
    path = tmp_path / "ledger.db"
    rows = await _crafted(path, 240, seed=14)
    with closing(sqlite3.connect(path)) as db:
        async with Ledger.open(path) as ledger:
            for device in (*DEVICES, "127.0.0.1:9"):
                for when in _times(rows):
                    stamp = format_time(when)
                    expected_recent = [
                        row[0]
                        for row in db.execute(
                            "SELECT dispatch_id FROM attempts WHERE device = ? AND"
                            " (delivery = 'PENDING' OR (delivery = 'CONFIRMED' AND"
                            " (acceptance = 'PENDING' OR confirmed_at >= ?)))"
                            " ORDER BY dispatched_at, dispatch_id",
                            (device, stamp),
                        )
                    ]
                    recent = await ledger.recent_attempts(device, when)
                    assert expected_recent == [record.dispatch_id for record in recent]
                    expected_floor = db.execute(
                        "SELECT max(max(coalesce(watermark_id, 0),"
                        " CASE WHEN provider_kind = 'sms' THEN provider_object_id ELSE 0 END))"
                        " FROM attempts WHERE device = ? AND dispatched_at < ?",
                        (device, stamp),
                    ).fetchone()[0]
                    assert (expected_floor or 0) == await ledger.device_floor(device, when)
                    expected_count = db.execute(
                        "SELECT count(*) FROM attempts WHERE device = ? AND dispatched_at >= ?",
                        (device, stamp),
                    ).fetchone()[0]
                    assert expected_count == await ledger.dispatches_since(device, when)
                expected_flight = [
                    row[0]
                    for row in db.execute(
                        "SELECT dispatch_id FROM attempts WHERE delivery = 'PENDING'"
                        " AND device = ? ORDER BY dispatched_at, dispatch_id",
                        (device,),
                    )
                ]
                assert expected_flight == [r.dispatch_id for r in await ledger.in_flight(device)]
                expected_delays = [
                    datetime.fromisoformat(row[1]) - datetime.fromisoformat(row[0])
                    for row in db.execute(
                        "SELECT dispatched_at, confirmed_at FROM attempts WHERE device = ?"
                        " AND delivery = 'CONFIRMED' ORDER BY confirmed_at DESC LIMIT 5",
                        (device,),
                    )
                ]
                assert expected_delays == await ledger.confirmation_delays(device, 5)
    assert any(row["watermark_id"] is None for row in rows)
    assert any(row["provider_kind"] == "mms" for row in rows)


_SCAN = re.compile(r"^SCAN ")


async def test_per_poll_queries_use_device_indexes(tmp_path: Path) -> None:
    """Every statement of ``recent_attempts``, ``device_floor``, ``dispatches_since``,
    ``confirmation_delays`` and ``in_flight(device)`` finds its rows through an index range
    (no scan of ``attempts``, no walk over the device's attempts in dispatch order): the cost
    of a poll does not grow with the attempts already on the device."""
    path = tmp_path / "ledger.db"
    await _crafted(path, 40, seed=3)
    statements: list[str] = []
    when = START + timedelta(minutes=2)
    async with Ledger.open(path) as ledger:
        raw = ledger._connection._conn  # the sqlite3 connection aiosqlite drives
        raw.set_trace_callback(statements.append)
        try:
            await ledger.recent_attempts(DEVICES[0], when)
            await ledger.device_floor(DEVICES[0], when)
            await ledger.dispatches_since(DEVICES[0], when)
            await ledger.confirmation_delays(DEVICES[0], 8)
            await ledger.in_flight(DEVICES[0])
        finally:
            raw.set_trace_callback(None)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 6, selects
    used: set[str] = set()
    with closing(sqlite3.connect(path)) as db:
        for statement in selects:
            steps = [str(row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + statement)]
            for step in steps:
                assert not _SCAN.match(step), (statement, steps)
                if step.startswith("SEARCH attempts"):
                    # the device and something narrower than the device: never ``(device=?)``
                    # alone on the dispatch-time index, which is every attempt of the device
                    assert "attempts_by_device_time (device=?)" not in step, (statement, steps)
                    used.add(step.split(" USING ")[1].split(" (")[0])
    assert {
        "INDEX attempts_by_device_state",
        "INDEX attempts_by_device_confirmed",
        "INDEX attempts_by_device_watermark",
        "COVERING INDEX attempts_by_device_time",
    } <= used, used
