"""A version-1 ledger with data migrates to version 2 with every row, constraint, index and
trigger kept, its provider rows named as SMS rows."""

from __future__ import annotations

import importlib.resources
import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import starebrain_actions
from starebrain_actions import (
    SCHEMA_VERSION,
    AcceptanceState,
    DeliveryState,
    DeviceBusy,
    Event,
    Ledger,
    LedgerError,
    MatchVerdict,
    ProviderKind,
    RetryPolicy,
    SmsIntent,
    Status,
    confirm_delivery,
    converter,
    try_accept,
)
from starebrain_actions.ledger.connection import split_statements

from .test_ledger_schema import load_dump_script

T0 = "2026-11-29T12:00:00.000000Z"
T1 = "2026-11-29T12:00:05.000000Z"
T2 = "2026-11-29T12:01:00.000000Z"
#: Inside the default grace window of attempts dispatched at T0.
SOON = datetime(2026, 11, 29, 12, 0, 10, tzinfo=UTC)


def v1_sql() -> str:
    """The text of migration 0001, the schema a version-1 ledger has."""
    folder = importlib.resources.files("starebrain_actions.ledger").joinpath("schema", "migrations")
    return folder.joinpath("0001_initial.sql").read_text(encoding="utf-8")


def insert_action(db: sqlite3.Connection, action_id: str, body: str) -> None:
    """An actions row as version 1 wrote it."""
    intent = SmsIntent(recipient="+12025550100", body=body)
    policy = RetryPolicy()
    db.execute(
        "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
        " policy_json, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        (
            action_id,
            intent.fingerprint,
            json.dumps(converter.unstructure(intent)),
            policy.maximum_attempts,
            json.dumps(converter.unstructure(policy)),
            T0,
        ),
    )


def insert_attempt(
    db: sqlite3.Connection, dispatch_id: str, action_id: str, attempt: int, device: str
) -> None:
    """A receipt as version 1 wrote it (its trigger writes the 'created' history row)."""
    db.execute(
        "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
        " last_event_at, last_actor, last_evidence_json)"
        " VALUES (?, ?, ?, ?, ?, ?, 'agent', '{}')",
        (dispatch_id, action_id, attempt, device, T0, T0),
    )


def change(db: sqlite3.Connection, dispatch_id: str, event: str, **columns: Any) -> None:
    """A compare-and-set style change as version 1 made it: one version step, one history row."""
    evidence = json.dumps({key: value for key, value in columns.items() if key.endswith("_id")})
    assignments = "".join(f"{name} = :{name}, " for name in columns)
    db.execute(
        f"UPDATE attempts SET {assignments}version = version + 1, last_event = :event,"
        " last_event_at = :at, last_actor = :actor, last_evidence_json = :evidence,"
        " evidence_json = :evidence WHERE dispatch_id = :dispatch_id",
        {
            **columns,
            "event": event,
            "at": T1,
            "actor": "operator:ana" if event.startswith("resolve") else "reconciler",
            "evidence": evidence,
            "dispatch_id": dispatch_id,
        },
    )


def make_v1_ledger(path: Path) -> None:
    """A version-1 ledger holding every kind of row: a succeeded attempt confirmed by SMS
    _id 7 with a duplicate (_id 8), a failed one and its in-flight retry, a mismatch, and an
    operator's ruling as sent with no row."""
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("BEGIN IMMEDIATE")
        for statement in split_statements(v1_sql()):
            db.execute(statement)
        db.execute("PRAGMA user_version = 1")
        for action_id in ("A-1", "A-2", "A-3", "A-4"):
            insert_action(db, action_id, f"body of {action_id}")
        insert_attempt(db, "d-1", "A-1", 1, "dev")
        change(db, "d-1", "submitted", watermark_id=6, device_clock_ms=1_000)
        change(db, "d-1", "confirm", delivery="CONFIRMED", confirmed_at=T1, provider_object_id=7)
        change(db, "d-1", "accept", acceptance="ACCEPTED", accepted_at=T1)
        db.execute(
            "INSERT INTO duplicates (device, provider_object_id, dispatch_id, seen_at,"
            " evidence_json) VALUES ('dev', 8, 'd-1', ?, '{\"date_ms\":2000}')",
            (T2,),
        )
        change(db, "d-1", "flag_review", review_reason="DUPLICATE")
        insert_attempt(db, "d-2", "A-2", 1, "dev")
        change(db, "d-2", "fail", delivery="FAILED", failed_at=T1, last_error="refused")
        insert_attempt(db, "d-3", "A-2", 2, "dev-b")
        change(db, "d-3", "submitted", watermark_id=41, device_clock_ms=2_000)
        insert_attempt(db, "d-4", "A-3", 1, "dev")
        change(db, "d-4", "confirm", delivery="CONFIRMED", confirmed_at=T1, provider_object_id=9)
        change(
            db,
            "d-4",
            "reject",
            acceptance="REJECTED",
            rejected_at=T1,
            review_reason="MISMATCH",
        )
        insert_attempt(db, "d-5", "A-4", 1, "dev")
        change(
            db,
            "d-5",
            "resolve_sent",
            delivery="CONFIRMED",
            acceptance="ACCEPTED",
            confirmed_at=T1,
            accepted_at=T1,
            resolved_by="ana",
        )
        db.execute("COMMIT")


#: The tables a version-1 ledger holds, each with an order that lists its rows stably.
ORDERS = {
    "actions": "action_id",
    "attempts": "dispatch_id",
    "duplicates": "device, provider_object_id",
    "history": "sequence",
    "sqlite_sequence": "name",
}


def rows(path: Path, table: str, order: str) -> list[dict[str, Any]]:
    """Every row of ``table`` as dicts, in ``order``."""
    with closing(sqlite3.connect(path)) as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute(f"SELECT * FROM {table} ORDER BY {order}")]


def schema_names(path: Path) -> set[tuple[str, str]]:
    """(type, name) of every table, index and trigger."""
    with closing(sqlite3.connect(path)) as db:
        return set(
            db.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        )


async def test_a_version_1_ledger_migrates_with_every_row_kept(tmp_path: Path) -> None:
    """Actions, history (and its sequence) are unchanged; attempts and duplicates keep every
    column, their rows gaining kind 'sms' exactly where an _id is stored; the schema then is
    exactly the shipped one, with the same tables, indexes and triggers as before."""
    path = tmp_path / "v1.db"
    make_v1_ledger(path)
    before = {table: rows(path, table, order) for table, order in ORDERS.items()}
    names = schema_names(path)
    async with Ledger.open(path):
        pass
    assert 4 <= SCHEMA_VERSION
    for table in ("history", "sqlite_sequence"):
        assert before[table] == rows(path, table, ORDERS[table]), table
    # versions 8, 9 and 11: no grant, no phone named by a sender, no approval, no gate
    # verdict, not queued
    queue = dict.fromkeys(("pool", "queue_after", "claimed_by", "claimed_device", "claimed_at"))
    assert [
        {
            **row,
            "grant_json": None,
            "planned_device": None,
            "approval": None,
            "gate_json": None,
            **queue,
            # version 12: no policy pinned, no owner
            "gate_policy": None,
            "owner": None,
            # version 16: no deadline, no schedule, no expiry
            "not_after": None,
            "not_before": None,
            "expired_at": None,
        }
        for row in before["actions"]
    ] == rows(path, "actions", ORDERS["actions"])
    expected_attempts = [
        {
            **row,
            "provider_kind": None if row["provider_object_id"] is None else "sms",
            # version 7: the row's date, from the evidence its confirmation kept
            "provider_row_date_ms": (
                json.loads(row["evidence_json"]).get("date_ms")
                if row["provider_object_id"] is not None
                else None
            ),
        }
        for row in before["attempts"]
    ]
    assert expected_attempts == rows(path, "attempts", ORDERS["attempts"])
    assert [
        {
            **row,
            "provider_kind": "sms",
            "provider_row_date_ms": json.loads(row["evidence_json"]).get("date_ms"),
        }
        for row in before["duplicates"]
    ] == rows(path, "duplicates", ORDERS["duplicates"])
    # every table, index and trigger kept; version 3 adds the duplicates' dispatch index,
    # version 4 the indexes of paged reads (later versions more indexes: the whole schema is
    # compared with the shipped one below)
    assert names | {
        ("index", "duplicates_by_dispatch"),
        ("index", "actions_by_created"),
        ("index", "attempts_notable"),
    } <= schema_names(path)
    shipped = (
        Path(starebrain_actions.__file__).parent / "ledger" / "schema" / "schema.sql"
    ).read_text()
    assert shipped == load_dump_script().schema_text(path)  # type: ignore[attr-defined]
    with closing(sqlite3.connect(path)) as db:
        assert [] == db.execute("PRAGMA foreign_key_check").fetchall()
        assert [("ok",)] == db.execute("PRAGMA integrity_check").fetchall()
        assert SCHEMA_VERSION == db.execute("PRAGMA user_version").fetchone()[0]
    async with Ledger.open(path) as ledger:
        first = await ledger.get_attempt("d-1")
        assert (7, ProviderKind.SMS, DeliveryState.CONFIRMED, AcceptanceState.ACCEPTED) == (
            first.provider_object_id,
            first.provider_kind,
            first.delivery,
            first.acceptance,
        )
        ruled = await ledger.get_attempt("d-5")
        assert (None, None, "ana") == (
            ruled.provider_object_id,
            ruled.provider_kind,
            ruled.resolved_by,
        )
        assert [("sms", 8, {"date_ms": 2000})] == [
            (row["provider_kind"], row["provider_object_id"], row["evidence"])
            for row in await ledger.duplicates("A-1")
        ]
        assert [Status.SUCCEEDED, Status.IN_FLIGHT, Status.MISMATCH, Status.SUCCEEDED] == [
            (await ledger.summary(action_id, now=SOON)).status
            for action_id in ("A-1", "A-2", "A-3", "A-4")
        ]


async def test_a_migrated_ledger_enforces_the_version_2_constraints(tmp_path: Path) -> None:
    """After migrating, an MMS _id 7 confirms another attempt beside the old SMS _id 7; the
    same (kind, _id) cannot confirm two; a duplicate row cannot become an artifact; and the
    lease, version step, monotone states and append-only history still hold."""
    path = tmp_path / "v1.db"
    make_v1_ledger(path)
    async with Ledger.open(path) as ledger:
        history_rows = len(rows(path, "history", "sequence"))
        await ledger.create_action("A-5", SmsIntent(recipient="+12025550100", body="five"))
        with pytest.raises(DeviceBusy):
            await ledger.begin_attempt("A-5", "dev-b")
        mms = await ledger.begin_attempt("A-5", "dev")
        mms = await ledger.apply(
            confirm_delivery(
                mms, provider_object_id=7, provider_kind=ProviderKind.MMS, now=ledger.now()
            )
        )
        await ledger.apply(try_accept(mms, MatchVerdict(matched=True), now=ledger.now()))
        await ledger.create_action("A-6", SmsIntent(recipient="+12025550100", body="six"))
        other = await ledger.begin_attempt("A-6", "dev")
        # version 7: a row is named by its _id and its date (the duplicate's, 2000, from the
        # evidence it kept; none known for the v1 artifact)
        for kind, provider_id, date_ms, refusal in [
            (ProviderKind.SMS, 7, None, "UNIQUE"),
            (ProviderKind.MMS, 7, None, "UNIQUE"),
            (ProviderKind.SMS, 8, 2000, "recorded as a duplicate"),
        ]:
            with pytest.raises(LedgerError, match=refusal):
                await ledger.apply(
                    confirm_delivery(
                        other,
                        provider_object_id=provider_id,
                        provider_kind=kind,
                        row_date_ms=date_ms,
                        now=ledger.now(),
                    )
                )
        other = await ledger.apply(
            confirm_delivery(
                other, provider_object_id=8, provider_kind=ProviderKind.MMS, now=ledger.now()
            )
        )
        history = await ledger.history("A-5")
        assert [Event.CREATED, Event.CONFIRM, Event.ACCEPT] == [entry.event for entry in history]
        assert history[0].sequence > history_rows
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        with pytest.raises(sqlite3.IntegrityError, match="version"):
            db.execute("UPDATE attempts SET last_error = 'x' WHERE dispatch_id = 'd-1'")
        with pytest.raises(sqlite3.IntegrityError, match="operator"):
            db.execute(
                "UPDATE attempts SET delivery = 'FAILED', failed_at = 't', provider_object_id"
                " = NULL, provider_kind = NULL, acceptance = 'PENDING', accepted_at = NULL,"
                " version = version + 1, last_event = 'fail' WHERE dispatch_id = 'd-1'"
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            db.execute(
                "UPDATE attempts SET provider_kind = NULL, version = version + 1"
                " WHERE dispatch_id = 'd-4'"
            )
        with pytest.raises(sqlite3.IntegrityError, match="already confirms"):
            db.execute(
                "INSERT INTO duplicates (device, provider_object_id, provider_kind, dispatch_id,"
                " seen_at) VALUES ('dev', 8, 'mms', 'd-1', 't')"
            )
        with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
            db.execute("DELETE FROM attempts WHERE dispatch_id = 'd-2'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute("DELETE FROM history")
        db.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            db.execute(
                "INSERT INTO duplicates (device, provider_object_id, provider_kind, dispatch_id,"
                " seen_at) VALUES ('dev', 99, 'sms', 'no-such-attempt', 't')"
            )


async def test_a_migration_that_cannot_finish_changes_nothing(tmp_path: Path) -> None:
    """A version-1 ledger with a duplicate pointing at no attempt (written with foreign keys
    off, as the sqlite3 shell does) is refused and left at version 1 with its rows intact."""
    path = tmp_path / "v1.db"
    make_v1_ledger(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(
            "INSERT INTO duplicates (device, provider_object_id, dispatch_id, seen_at)"
            " VALUES ('dev', 50, 'gone', 't')"
        )
    attempts = rows(path, "attempts", "dispatch_id")
    names = schema_names(path)
    with pytest.raises(LedgerError, match="FOREIGN KEY"):
        async with Ledger.open(path):
            pass
    with closing(sqlite3.connect(path)) as db:
        assert 1 == db.execute("PRAGMA user_version").fetchone()[0]
    assert names == schema_names(path)
    assert attempts == rows(path, "attempts", "dispatch_id")
    assert 2 == len(rows(path, "duplicates", "provider_object_id"))
