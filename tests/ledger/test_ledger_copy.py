"""Copying a SQLite ledger into PostgreSQL (``ledger.copy.copy_ledger``, behind ``starebrain
migrate``): every row and every history entry arrives unchanged, the PostgreSQL ledger goes on
from there, and a copy that is refused or differs leaves the target as it was found.

The source is always a real SQLite file and the target a real, fresh PostgreSQL schema."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from starebrain_actions import (
    DeviceBusy,
    Event,
    Ledger,
    MatchVerdict,
    ProviderKind,
    ReviewReason,
    SmsIntent,
    Status,
    confirm_delivery,
    fail_delivery,
    flag_for_review,
    note_error,
    record_submission,
    try_accept,
)
from starebrain_actions.ledger.copy import (
    TABLES,
    CopyFailed,
    CopyReport,
    SourceRefused,
    TargetRefused,
    VerificationFailed,
    copy_ledger,
)
from starebrain_actions.ledger.phones import FrameworkCodes
from tests._postgres import fresh_schema
from tests.ledger.test_ledger_reads import LATER, T0, seed_spread

#: The device the copied in-flight action (``seed_spread``'s ``in-flight``) holds.
HELD_DEVICE = "10.0.0.9:5555"
MMS_DEVICE = "10.0.0.5:5555"


async def seed_every_shape(path: Path) -> None:
    """``seed_spread``'s actions (every status, review reasons, duplicates, an operator's
    ruling, one in flight) and the rest a ledger holds: MMS artifacts and an MMS duplicate,
    a ruling that it was not sent, dispatch evidence, a noted error, UNVERIFIED and AMBIGUOUS
    flags."""
    async with Ledger.open(path) as ledger:
        await seed_spread(ledger)
        at = T0 + timedelta(days=1)
        intent = SmsIntent(recipient="+12025550177", body="a picture")
        await ledger.create_action("mms-sent", intent, now=at)
        record = await ledger.begin_attempt("mms-sent", MMS_DEVICE, now=at)
        record = await ledger.apply(
            record_submission(record, watermark_id=41, device_clock_ms=1_700_000, now=at)
        )
        confirm = confirm_delivery(
            record, provider_object_id=42, provider_kind=ProviderKind.MMS, now=at
        )
        record = await ledger.apply(confirm)
        record = await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=at))
        await ledger.record_duplicate(
            record.dispatch_id, provider_object_id=43, provider_kind=ProviderKind.MMS, now=at
        )
        await ledger.create_action("ruled-not-sent", intent, now=at)
        record = await ledger.begin_attempt("ruled-not-sent", MMS_DEVICE, now=at)
        record = await ledger.apply(note_error(record, "adb: device offline", now=at))
        await ledger.apply(flag_for_review(record, ReviewReason.AMBIGUOUS, now=at))
        await ledger.resolve(
            "ruled-not-sent", as_sent=False, reason="not on the phone", operator="bo", now=at
        )
        await ledger.create_action("unverified", intent, now=at)
        record = await ledger.begin_attempt("unverified", MMS_DEVICE, now=at)
        await ledger.apply(
            flag_for_review(record, ReviewReason.UNVERIFIED, now=at, evidence={"why": "é ✓"})
        )
        await ledger.keep_framework_codes(
            FrameworkCodes(build="b/p:14/X/1:user/k", sdk=34, send_text=5, read_at=at)
        )
        await ledger.keep_framework_codes(
            FrameworkCodes(
                build="b/p:15/Y/2:user/k",
                sdk=35,
                send_text=None,
                reason="cut short",
                read_at=at,
                retry_after=at + timedelta(hours=1),
            )
        )
        # webhook endpoints, one turned off (its webhook.disabled event written by the
        # trigger: the copy must not write a second)
        await ledger.add_webhook("https://hooks.example.com/a", types=["action.*"])
        off = await ledger.add_webhook("https://hooks.example.com/b", after=0)
        assert await ledger.claim_webhook(
            off.endpoint_id, "host:1", until=at + timedelta(minutes=1), now=at
        )
        assert await ledger.webhook_failed(
            off.endpoint_id,
            "host:1",
            cursor=0,
            position=1,
            failures=8,
            status=500,
            error="HTTP 500",
            now=at,
            next_try_at=None,
        )


def copy(source: Path, target: str) -> Any:
    """``copy_ledger`` on a worker thread (it is synchronous), summaries derived at LATER."""
    return asyncio.to_thread(copy_ledger, source, target, now=LATER)


def sqlite_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    """Every row of ``table`` in the SQLite file, columns in its order, sorted."""
    with closing(sqlite3.connect(path)) as db:
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
        rows = db.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
    return sorted(tuple(row) for row in rows)


async def pg_rows(url: str, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """Every row of ``table`` in the PostgreSQL schema, the same columns, sorted."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(f"SELECT {', '.join(columns)} FROM {table}")
    finally:
        await conn.close()
    return sorted(tuple(row) for row in rows)


def columns_of(path: Path, table: str) -> list[str]:
    with closing(sqlite3.connect(path)) as db:
        return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


async def pg_counts(url: str) -> dict[str, int]:
    """Rows per ledger table in the schema (0 where the table does not exist)."""
    conn = await asyncpg.connect(url)
    try:
        counts = {}
        for table in TABLES:
            exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table)
            counts[table] = await conn.fetchval(f"SELECT count(*) FROM {table}") if exists else 0
        return counts
    finally:
        await conn.close()


async def disabled_triggers(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass('attempts')"
            " AND NOT tgisinternal AND tgenabled <> 'O'"
        )
    finally:
        await conn.close()
    return [row[0] for row in rows]


async def test_every_row_summary_and_history_entry_arrives_unchanged(
    tmp_path: Path, pg_url: str
) -> None:
    """A ledger with actions in every status, review reasons, duplicates (SMS and MMS),
    operator rulings both ways and MMS artifacts is copied row for row (the same values, the
    same JSON text, the same history sequences); every action's summary, history and
    duplicates read through ``Ledger`` are equal on both sides; the report counts them."""
    source = tmp_path / "ledger.db"
    await seed_every_shape(source)
    report: CopyReport = await copy(source, pg_url)
    for table in TABLES:
        columns = columns_of(source, table)
        assert sqlite_rows(source, table) == await pg_rows(pg_url, table, columns), table
    assert {table: len(sqlite_rows(source, table)) for table in TABLES} == report.rows
    async with Ledger.open(source, read_only=True) as before, Ledger.open(pg_url) as after:
        summaries = await before.summaries(now=LATER)
        assert summaries == await after.summaries(now=LATER)
        assert set(Status) == {summary.status for summary in summaries}
        reasons = {reason for summary in summaries for reason in summary.review_reasons}
        assert {
            ReviewReason.DUPLICATE,
            ReviewReason.MISMATCH,
            ReviewReason.BUDGET_EXHAUSTED,
            ReviewReason.STUCK,
            ReviewReason.UNVERIFIED,
        } <= reasons
        for summary in summaries:
            action_id = summary.action.action_id
            assert await before.history(action_id) == await after.history(action_id)
            assert await before.duplicates(action_id) == await after.duplicates(action_id)
        mms = (await after.summary("mms-sent", now=LATER)).attempts[0]
        assert (ProviderKind.MMS, 42) == (mms.provider_kind, mms.provider_object_id)
        ruled = await after.history("ruled-not-sent")
        assert Event.RESOLVE_NOT_SENT == ruled[-1].event
        assert "operator:bo" == ruled[-1].actor
    assert len(summaries) == report.summaries_compared
    assert max(row[0] for row in sqlite_rows(source, "history")) == report.last_sequence
    assert [] == await disabled_triggers(pg_url)


async def test_the_postgresql_ledger_goes_on_from_the_copy(tmp_path: Path, pg_url: str) -> None:
    """After the copy, new history gets sequences above every copied one, a copied lease
    still holds its device (``begin_attempt`` of another action there is refused), and the
    copied in-flight attempt moves on with its version and history continuing."""
    source = tmp_path / "ledger.db"
    await seed_every_shape(source)
    report: CopyReport = await copy(source, pg_url)
    async with Ledger.open(pg_url) as ledger:
        await ledger.create_action("after", SmsIntent(recipient="+12025550111", body="new"))
        with pytest.raises(DeviceBusy):
            await ledger.begin_attempt("after", HELD_DEVICE, now=LATER)
        record = await ledger.begin_attempt("after", "10.0.0.42:5555", now=LATER)
        [created] = await ledger.history("after")
        assert record.dispatch_id == created.dispatch_id
        assert created.sequence > report.last_sequence
        held = (await ledger.summary("in-flight", now=LATER)).attempts[-1]
        moved = await ledger.apply(
            confirm_delivery(held, provider_object_id=9001, now=LATER + timedelta(seconds=1))
        )
        assert held.version + 1 == moved.version
        entries = await ledger.history("in-flight")
        assert [Event.CREATED, Event.CONFIRM] == [entry.event for entry in entries]
        assert entries[0].sequence <= report.last_sequence < created.sequence < entries[1].sequence
        # the lease went with the confirmation: the device is free again
        await ledger.create_action("after-2", SmsIntent(recipient="+12025550112", body="n"))
        await ledger.begin_attempt("after-2", HELD_DEVICE, now=LATER)


async def test_the_copy_keeps_the_ledger_s_own_id(tmp_path: Path, pg_url: str) -> None:
    """The PostgreSQL ledger is the same ledger: it answers with the SQLite ledger's id (the
    one phones name beside its attempts' fences), not the one it was created with."""
    source = tmp_path / "ledger.db"
    await seed_every_shape(source)
    async with Ledger.open(source) as ledger:
        expected = await ledger.ledger_id()
    async with Ledger.open(pg_url) as ledger:
        created_with = await ledger.ledger_id()
    assert expected != created_with
    report: CopyReport = await copy(source, pg_url)
    async with Ledger.open(pg_url) as ledger:
        assert expected == await ledger.ledger_id()
    assert any("own id" in check for check in report.checks)


async def test_a_target_holding_actions_is_refused_and_left_untouched(
    tmp_path: Path, pg_url: str
) -> None:
    """A PostgreSQL ledger that already holds an action is refused before anything is
    written: its one action, attempt and history row are all it holds afterwards."""
    source = tmp_path / "ledger.db"
    await seed_every_shape(source)
    async with Ledger.open(pg_url) as ledger:
        await ledger.create_action("mine", SmsIntent(recipient="+12025550100", body="x"))
        await ledger.begin_attempt("mine", "10.0.0.1:5555")
        history = await ledger.history("mine")
    with pytest.raises(TargetRefused, match="not empty") as refused:
        await copy(source, pg_url)
    assert not refused.value.usage
    assert {
        "actions": 1,
        "attempts": 1,
        "duplicates": 0,
        "history": 1,
        "events": 2,
        "phones": 0,
        "phone_addresses": 0,
        "framework_codes": 0,
        "webhooks": 0,
        "gate_policies": 0,
        "owners": 0,
        "replies": 0,
        "opt_out_changes": 0,
    } == await pg_counts(pg_url)
    async with Ledger.open(pg_url) as ledger:
        assert history == await ledger.history("mine")


async def test_a_schema_of_other_tables_is_refused_and_left_untouched(
    tmp_path: Path, pg_url: str
) -> None:
    """A schema holding tables of something else is refused: no ledger table is created
    in it, and its own table keeps its row."""
    source = tmp_path / "ledger.db"
    await seed_every_shape(source)
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("CREATE TABLE invoices (id int); INSERT INTO invoices VALUES (7)")
        with pytest.raises(TargetRefused, match="other tables"):
            await copy(source, pg_url)
        assert [7] == [row[0] for row in await conn.fetch("SELECT id FROM invoices")]
        assert {"invoices"} == {
            row[0]
            for row in await conn.fetch(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        }
    finally:
        await conn.close()


async def test_a_row_postgresql_refuses_leaves_the_target_empty(
    tmp_path: Path, pg_url: str
) -> None:
    """A FAILED attempt whose evidence holds the JSON escape \\u0000 (which SQLite keeps and
    PostgreSQL's jsonb index refuses; a ledger written before NUL was stored as U+FFFD may
    hold it) stops the copy after the actions went in: everything is rolled back, the target
    is an empty ledger with its triggers on, and it takes new work."""
    source = tmp_path / "ledger.db"
    await seed_every_shape(source)
    async with Ledger.open(source) as ledger:
        await ledger.create_action("nul", SmsIntent(recipient="+12025550133", body="x"))
        record = await ledger.begin_attempt("nul", "10.0.0.8:5555")
        await ledger.apply(
            fail_delivery(record, reason="refused", now=ledger.now(), evidence={"e": "a\x00b"})
        )
    with sqlite3.connect(source) as db:  # as an older version stored it
        db.execute(
            "UPDATE attempts SET evidence_json = replace(evidence_json, ?, ?),"
            " version = version + 1 WHERE action_id = 'nul'",
            ("a\ufffdb", "a\\u0000b"),
        )
    with pytest.raises(CopyFailed, match="attempts") as failed:
        await copy(source, pg_url)
    assert "of attempts" in str(failed.value) and "action_id 'nul'" in str(failed.value)
    assert "rolled back" in str(failed.value)
    assert dict.fromkeys(TABLES, 0) == await pg_counts(pg_url)
    assert [] == await disabled_triggers(pg_url)
    async with Ledger.open(pg_url) as ledger:
        await ledger.create_action("fresh", SmsIntent(recipient="+12025550100", body="x"))
        record = await ledger.begin_attempt("fresh", "10.0.0.1:5555")
        [entry] = await ledger.history("fresh")
        assert (Event.CREATED, record.dispatch_id) == (entry.event, entry.dispatch_id)


async def test_a_history_that_does_not_end_in_the_attempts_states_is_rolled_back(
    tmp_path: Path, pg_url: str
) -> None:
    """A source whose history of one attempt ends in states the attempt is not in (a row
    appended by hand) copies without a refused row, but the check before COMMIT finds it,
    names the attempt, and the target is left empty."""
    source = tmp_path / "ledger.db"
    await seed_every_shape(source)
    with closing(sqlite3.connect(source)) as db, db:
        dispatch_id, action_id = db.execute(
            "SELECT dispatch_id, action_id FROM attempts WHERE action_id = 'sent-000'"
        ).fetchone()
        db.execute(
            "INSERT INTO history (action_id, dispatch_id, event, at, actor, from_delivery,"
            " to_delivery, from_acceptance, to_acceptance, evidence_json) VALUES"
            " (?, ?, 'fail', '2026-11-30T00:00:00.000000Z', 'someone', 'CONFIRMED', 'FAILED',"
            " 'ACCEPTED', 'PENDING', '{}')",
            (action_id, dispatch_id),
        )
    with pytest.raises(VerificationFailed) as failed:
        await copy(source, pg_url)
    assert any(dispatch_id in line and "history ends" in line for line in failed.value.differences)
    assert dict.fromkeys(TABLES, 0) == await pg_counts(pg_url)


async def test_sources_that_are_not_current_ledgers_are_refused(tmp_path: Path) -> None:
    """A file that is not a ledger is the caller's mistake (``usage``); a ledger at an older
    schema version is refused with the way out (a writing command migrates it), since the
    copy reads it read-only. No target is touched in either case."""
    async with fresh_schema() as url:
        other = tmp_path / "notes.txt"
        other.write_text("hello\n")
        with pytest.raises(SourceRefused, match="not a SQLite database") as refused:
            await copy(other, url)
        assert refused.value.usage
        old = tmp_path / "old.db"
        async with Ledger.open(old):
            pass
        with closing(sqlite3.connect(old)) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            db.execute(f"PRAGMA user_version = {version - 1}")
        with pytest.raises(SourceRefused, match="writing command") as refused:
            await copy(old, url)
        assert not refused.value.usage
        assert dict.fromkeys(TABLES, 0) == await pg_counts(url)
        with pytest.raises(TargetRefused, match="postgresql://") as refused:
            await copy(old, str(tmp_path / "target.db"))
        assert refused.value.usage


async def test_the_source_is_copied_as_one_snapshot(tmp_path: Path, pg_url: str) -> None:
    """An action written to the source while the copy runs (between its tables, through
    another connection) is neither copied nor counted against it: the copy and its checks
    read one snapshot; small batches make many COPYs of each table."""
    source = tmp_path / "ledger.db"
    await seed_every_shape(source)
    before = len(sqlite_rows(source, "actions"))

    def write_meanwhile(step: str) -> None:
        if step == "copying attempts":
            with closing(sqlite3.connect(source)) as db, db:
                db.execute(
                    "INSERT INTO actions SELECT 'late', fingerprint, intent_json,"
                    " maximum_attempts, policy_json, created_at, deadline, grant_json,"
                    " planned_device, approval, gate_json, pool, queue_after, claimed_by,"
                    " claimed_device, claimed_at, gate_policy, owner, not_after, not_before,"
                    " expired_at FROM actions LIMIT 1"
                )

    report = await asyncio.to_thread(
        copy_ledger, source, pg_url, now=LATER, batch_rows=7, on_step=write_meanwhile
    )
    assert before == report.rows["actions"] == report.summaries_compared
    assert before + 1 == len(sqlite_rows(source, "actions"))
    assert before == (await pg_counts(pg_url))["actions"]
