"""The PostgreSQL schema refuses what breaks an invariant, exactly as the SQLite schema does.

Every test runs raw SQL against a fresh PostgreSQL schema built from the scripts of
``starebrain_actions/ledger/schema/postgres/`` in order: a person with ``psql`` gets no further than
the ledger's own code. The server is ``STAREBRAIN_TEST_PG`` or the local test database;
when it cannot be reached the tests fail, they are not skipped.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import starebrain_actions
from starebrain_actions import Ledger
from tests.ledger.test_ledger_framework_codes import BAD_CODES_ROWS, bad_codes_insert

SCRIPTS = sorted(
    (Path(starebrain_actions.__file__).parent / "ledger" / "schema" / "postgres").glob("*.sql")
)
T = "2026-01-01T00:00:00.000000Z"

#: The statements that make one action A-17 with one PENDING attempt d-1 on device ``dev``.
MAKE_ATTEMPT = (
    "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts, policy_json,"
    f" created_at) VALUES ('A-17', 'sha256:00', '{{}}', 3, '{{}}', '{T}')",
    "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
    f" last_event_at, last_actor) VALUES ('d-1', 'A-17', 1, 'dev', '{T}', '{T}', 'agent')",
)
#: A second action A-18 with a PENDING attempt d-2 on the same device ``dev``.
SECOND_ON_DEV = (
    "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts, policy_json,"
    f" created_at) VALUES ('A-18', 'sha256:01', '{{}}', 3, '{{}}', '{T}')",
    "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
    f" last_event_at, last_actor) VALUES ('d-2', 'A-18', 1, 'dev', '{T}', '{T}', 'agent')",
)


def confirm(
    dispatch_id: str,
    provider_object_id: int | None = None,
    kind: str = "sms",
    *,
    date_ms: int | None = None,
) -> str:
    """An UPDATE confirming an attempt, naming a provider row when ``provider_object_id`` (and
    its date when ``date_ms``)."""
    artifact = (
        f", provider_object_id = {provider_object_id}, provider_kind = '{kind}'"
        if provider_object_id is not None
        else ""
    )
    if date_ms is not None:
        artifact += f", provider_row_date_ms = {date_ms}"
    return (
        f"UPDATE attempts SET delivery = 'CONFIRMED', confirmed_at = '{T}'{artifact},"
        f" version = version + 1, last_event = 'confirm' WHERE dispatch_id = '{dispatch_id}'"
    )


FAIL_D1 = (
    f"UPDATE attempts SET delivery = 'FAILED', failed_at = '{T}', version = version + 1,"
    " last_event = 'fail' WHERE dispatch_id = 'd-1'"
)


@pytest.fixture
async def db() -> AsyncIterator[asyncpg.Connection]:
    """A connection whose search_path is a fresh schema holding the ledger; dropped afterwards."""
    url = os.environ.get("STAREBRAIN_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
    connection = await asyncpg.connect(url, timeout=10)
    schema = f"t_{secrets.token_hex(6)}"
    try:
        await connection.execute(f"CREATE SCHEMA {schema}")
        # as the migration runner will: one script, one transaction, search_path set
        async with connection.transaction():
            await connection.execute(f"SET LOCAL search_path TO {schema}")
            for script in SCRIPTS:
                await connection.execute(script.read_text(encoding="utf-8"))
        await connection.execute(f"SET search_path TO {schema}")
        yield connection
    finally:
        await connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await connection.close()


async def run(db: asyncpg.Connection, statements: tuple[str, ...]) -> None:
    """Run each statement on its own (each commits)."""
    for statement in statements:
        await db.execute(statement)


async def everything(db: asyncpg.Connection) -> dict[str, list[asyncpg.Record]]:
    """Every row of every table, in a fixed order: to show a refusal changed nothing."""
    return {
        table: await db.fetch(f"SELECT * FROM {table} ORDER BY 1, 2")
        for table in ("actions", "attempts", "duplicates", "history")
    }


CheckViolation = asyncpg.CheckViolationError
UniqueViolation = asyncpg.UniqueViolationError
#: SQLSTATE 23000, what the triggers raise (asyncpg's base class of the integrity errors)
TriggerRefusal = asyncpg.IntegrityConstraintViolationError

#: (what breaks, the statements that set the scene, the refused statement, the error, what it
#: names: the message of a trigger or the name of the constraint)
REFUSALS: list[tuple[str, tuple[str, ...], str, type[Exception], str]] = [
    (
        "accepting an unconfirmed attempt",
        (),
        f"UPDATE attempts SET acceptance = 'ACCEPTED', accepted_at = '{T}',"
        " version = version + 1 WHERE dispatch_id = 'd-1'",
        CheckViolation,
        "attempts_acceptance_needs_confirmation",
    ),
    (
        "inserting an accepted unconfirmed row",
        (),
        "INSERT INTO attempts (dispatch_id, action_id, attempt, device, delivery, acceptance,"
        " dispatched_at, accepted_at, last_event_at, last_actor)"
        " VALUES ('x', 'A-17', 2, 'other', 'PENDING', 'ACCEPTED', 't', 't', 't', 'me')",
        CheckViolation,
        "attempts_acceptance_needs_confirmation",
    ),
    (
        "leaving a final state without an operator resolution",
        (FAIL_D1,),
        "UPDATE attempts SET delivery = 'PENDING', failed_at = NULL, version = version + 1,"
        " last_event = 'note_error' WHERE dispatch_id = 'd-1'",
        TriggerRefusal,
        "a final state is left only by an operator resolution",
    ),
    (
        "leaving an accepted state without an operator resolution",
        (
            confirm("d-1"),
            "UPDATE attempts SET acceptance = 'ACCEPTED', accepted_at = 't',"
            " version = version + 1, last_event = 'accept' WHERE dispatch_id = 'd-1'",
        ),
        "UPDATE attempts SET acceptance = 'REJECTED', accepted_at = NULL, rejected_at = 't',"
        " version = version + 1, last_event = 'reject' WHERE dispatch_id = 'd-1'",
        TriggerRefusal,
        "a final state is left only by an operator resolution",
    ),
    (
        "a change that keeps the version",
        (),
        "UPDATE attempts SET last_error = 'x', last_event = 'note_error'",
        TriggerRefusal,
        "every change to an attempt must bump its version by one",
    ),
    (
        "a change that skips a version",
        (),
        "UPDATE attempts SET last_error = 'x', version = version + 2",
        TriggerRefusal,
        "every change to an attempt must bump its version by one",
    ),
    (
        "a change that erases the version",
        (),
        "UPDATE attempts SET last_error = 'x', version = NULL",
        TriggerRefusal,
        "every change to an attempt must bump its version by one",
    ),
    (
        "deleting an attempt",
        (),
        "DELETE FROM attempts WHERE dispatch_id = 'd-1'",
        TriggerRefusal,
        "attempts are never deleted",
    ),
    (
        "truncating the attempts",
        (),
        "TRUNCATE attempts CASCADE",
        TriggerRefusal,
        "attempts are never deleted",
    ),
    (
        "updating history",
        (),
        "UPDATE history SET actor = 'someone else'",
        TriggerRefusal,
        "history is append-only",
    ),
    (
        "deleting history",
        (),
        "DELETE FROM history",
        TriggerRefusal,
        "history is append-only",
    ),
    (
        "truncating history",
        (),
        "TRUNCATE history",
        TriggerRefusal,
        "history is append-only",
    ),
    (
        "two PENDING attempts of one action",
        (),
        "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
        " last_event_at, last_actor) VALUES ('d-9', 'A-17', 2, 'other', 't', 't', 'agent')",
        UniqueViolation,
        "attempts_one_in_flight_per_action",
    ),
    (
        "two lease-holding PENDING attempts on one device",
        (SECOND_ON_DEV[0],),
        SECOND_ON_DEV[1],
        UniqueViolation,
        "attempts_device_lease",
    ),
    (
        "the same attempt number twice in one action",
        (FAIL_D1,),
        "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
        " last_event_at, last_actor) VALUES ('d-9', 'A-17', 1, 'dev', 't', 't', 'agent')",
        UniqueViolation,
        "attempts_action_id_attempt_key",
    ),
    (
        "the same provider row confirming two attempts",
        (confirm("d-1", 5), *SECOND_ON_DEV),
        confirm("d-2", 5),
        UniqueViolation,
        "attempts_provider_row",
    ),
    (
        "the same provider row and date confirming two attempts",
        (confirm("d-1", 5, date_ms=1000), *SECOND_ON_DEV),
        confirm("d-2", 5, date_ms=1000),
        UniqueViolation,
        "attempts_provider_row",
    ),
    (
        "a row's date without its _id",
        (),
        "UPDATE attempts SET provider_row_date_ms = 1000, version = version + 1",
        CheckViolation,
        "attempts_row_date_names_a_row",
    ),
    (
        "a duplicate that is an artifact",
        (confirm("d-1", 5),),
        "INSERT INTO duplicates (device, provider_object_id, provider_kind, dispatch_id, seen_at)"
        " VALUES ('dev', 5, 'sms', 'd-1', 't')",
        TriggerRefusal,
        "this provider row already confirms an attempt",
    ),
    (
        "an artifact that is a duplicate",
        (
            confirm("d-1", 5),
            "INSERT INTO duplicates (device, provider_object_id, provider_kind, dispatch_id,"
            " seen_at) VALUES ('dev', 6, 'mms', 'd-1', 't')",
            *SECOND_ON_DEV,
        ),
        confirm("d-2", 6, "mms"),
        TriggerRefusal,
        "this provider row is recorded as a duplicate",
    ),
    (
        "a provider id without its table",
        (),
        f"UPDATE attempts SET delivery = 'CONFIRMED', confirmed_at = '{T}',"
        " provider_object_id = 5, version = version + 1",
        CheckViolation,
        "attempts_provider_kind_names_the_id",
    ),
    (
        "a provider id on an unconfirmed attempt",
        (),
        "UPDATE attempts SET provider_object_id = 5, provider_kind = 'sms', version = version + 1",
        CheckViolation,
        "attempts_artifact_only_when_confirmed",
    ),
    (
        "a failed attempt without its failure time",
        (),
        "UPDATE attempts SET delivery = 'FAILED', version = version + 1",
        CheckViolation,
        "attempts_failed_at_iff_failed",
    ),
    (
        "invalid JSON as evidence",
        (),
        "UPDATE attempts SET evidence_json = '{', version = version + 1",
        CheckViolation,
        "attempts_evidence_json_check",
    ),
    (
        "invalid JSON as the evidence of the latest change",
        (),
        "UPDATE attempts SET last_evidence_json = '{\"a\": 1,}', version = version + 1",
        CheckViolation,
        "attempts_last_evidence_json_check",
    ),
    (
        "invalid JSON as an intent",
        (),
        "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
        " policy_json, created_at) VALUES ('A-2', 'sha256:0', 'NaN', 1, '{}', 't')",
        CheckViolation,
        "actions_intent_json_check",
    ),
    (
        "a fingerprint that is not sha256",
        (),
        "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
        " policy_json, created_at) VALUES ('A-2', 'md5:0', '{}', 1, '{}', 't')",
        CheckViolation,
        "actions_fingerprint_check",
    ),
    (
        "a resolve event by a non-operator actor",
        (FAIL_D1,),
        "UPDATE attempts SET delivery = 'PENDING', failed_at = NULL, version = version + 1,"
        " last_event = 'resolve_not_sent', last_actor = 'bot' WHERE dispatch_id = 'd-1'",
        CheckViolation,
        "attempts_only_an_operator_resolves",
    ),
    (
        "a resolve event by an operator with no name",
        (),
        "UPDATE attempts SET version = version + 1, last_event = 'resolve_sent',"
        " last_actor = 'operator:'",
        CheckViolation,
        "attempts_only_an_operator_resolves",
    ),
    (
        "an unknown review_reason",
        (),
        "UPDATE attempts SET review_reason = 'MAYBE', version = version + 1",
        CheckViolation,
        "attempts_review_reason_check",
    ),
    (
        "an unknown delivery state",
        (),
        "UPDATE attempts SET delivery = 'MAYBE', version = version + 1",
        CheckViolation,
        "attempts_delivery_check",
    ),
    (
        "an attempt of an action that does not exist",
        (),
        "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
        " last_event_at, last_actor) VALUES ('d-9', 'A-99', 1, 'other', 't', 't', 'agent')",
        asyncpg.ForeignKeyViolationError,
        "attempts_action_id_fkey",
    ),
]


@pytest.mark.parametrize(
    ("scene", "refused", "error", "names"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSALS],
)
async def test_the_database_refuses_what_breaks_an_invariant(
    db: asyncpg.Connection,
    scene: tuple[str, ...],
    refused: str,
    error: type[Exception],
    names: str,
) -> None:
    """Each statement is refused with the SQLite schema's message or the constraint's name,
    and leaves every row as it was."""
    await run(db, (*MAKE_ATTEMPT, *scene))
    before = await everything(db)
    with pytest.raises(error) as caught:
        await db.execute(refused)
    assert names in {str(caught.value), getattr(caught.value, "constraint_name", None)}
    assert before == await everything(db)


@pytest.mark.parametrize("values", BAD_CODES_ROWS)
async def test_the_framework_codes_table_refuses_what_sqlite_refuses(
    db: asyncpg.Connection, values: str
) -> None:
    """The build codes' CHECKs, as in the SQLite schema: codes or a reason, codes from 1, a
    multipart code only beside a text code, a build named, a proof never retried."""
    for statement in (
        bad_codes_insert(values),
        bad_codes_insert("'b', 34, 5, NULL, NULL", "'2026-12-05T09:00:00.000000Z'"),
    ):
        with pytest.raises(asyncpg.CheckViolationError):
            await db.execute(statement)
    assert [] == await db.fetch("SELECT * FROM framework_codes")


@pytest.mark.parametrize(
    ("reason", "holds_lease"),
    [
        ("UNVERIFIED", False),
        ("RCS_SUSPECTED", False),
        ("AMBIGUOUS", False),
        ("STUCK", False),
        ("DUPLICATE", True),
        ("MISMATCH", True),
        ("BUDGET_EXHAUSTED", True),
    ],
)
async def test_a_pending_attempt_in_review_holds_the_lease_by_its_reason(
    db: asyncpg.Connection, reason: str, holds_lease: bool
) -> None:
    """A PENDING attempt in a review whose command is over frees its device for another
    action; in any other review it keeps the device."""
    await run(db, MAKE_ATTEMPT)
    await db.execute(
        "UPDATE attempts SET review_reason = $1, version = version + 1,"
        " last_event = 'flag_review' WHERE dispatch_id = 'd-1'",
        reason,
    )
    await db.execute(SECOND_ON_DEV[0])
    if holds_lease:
        with pytest.raises(UniqueViolation, match="attempts_device_lease"):
            await db.execute(SECOND_ON_DEV[1])
    else:
        await db.execute(SECOND_ON_DEV[1])
    expected = 1 if holds_lease else 2
    assert expected == await db.fetchval(
        "SELECT count(*) FROM attempts WHERE device = 'dev' AND delivery = 'PENDING'"
    )


async def test_one_provider_id_in_both_tables_is_two_rows(db: asyncpg.Connection) -> None:
    """An SMS _id and an MMS _id of the same number are different messages: each may confirm
    its own attempt."""
    await run(db, (*MAKE_ATTEMPT, confirm("d-1", 5, "sms"), *SECOND_ON_DEV))
    await db.execute(confirm("d-2", 5, "mms"))
    assert [("d-1", "sms"), ("d-2", "mms")] == [
        tuple(row)
        for row in await db.fetch(
            "SELECT dispatch_id, provider_kind FROM attempts WHERE provider_object_id = 5"
            " ORDER BY dispatch_id"
        )
    ]


async def test_history_gets_one_row_per_insert_and_per_update(db: asyncpg.Connection) -> None:
    """The triggers write one history row for every insert and every update, with the states
    before (none on insert) and after, and the event, actor and evidence of the change."""
    await run(db, MAKE_ATTEMPT)
    await db.execute(
        f"UPDATE attempts SET delivery = 'CONFIRMED', confirmed_at = '{T}', version = 1,"
        " last_event = 'confirm', last_actor = 'reconciler', last_evidence_json = '{\"id\":5}'"
    )
    await db.execute(
        f"UPDATE attempts SET acceptance = 'ACCEPTED', accepted_at = '{T}', version = 2,"
        " last_event = 'accept', last_actor = 'agent', last_evidence_json = '{\"ok\":true}'"
    )
    rows = await db.fetch(
        "SELECT action_id, dispatch_id, event, actor, from_delivery, to_delivery,"
        " from_acceptance, to_acceptance, evidence_json FROM history ORDER BY sequence"
    )
    assert [
        ("A-17", "d-1", "created", "agent", None, "PENDING", None, "PENDING", "{}"),
        (
            "A-17",
            "d-1",
            "confirm",
            "reconciler",
            "PENDING",
            "CONFIRMED",
            "PENDING",
            "PENDING",
            '{"id":5}',
        ),
        (
            "A-17",
            "d-1",
            "accept",
            "agent",
            "CONFIRMED",
            "CONFIRMED",
            "PENDING",
            "ACCEPTED",
            '{"ok":true}',
        ),
    ] == [tuple(row) for row in rows]


async def test_an_update_of_many_attempts_writes_a_history_row_for_each(
    db: asyncpg.Connection,
) -> None:
    """One statement changing two attempts writes two history rows, each naming its attempt."""
    await run(db, (*MAKE_ATTEMPT, *SECOND_ON_DEV[:1]))
    await db.execute(SECOND_ON_DEV[1].replace("'dev'", "'dev2'"))
    await db.execute(
        "UPDATE attempts SET last_error = 'x', version = version + 1, last_event = 'note_error'"
    )
    assert 4 == await db.fetchval("SELECT count(*) FROM history")
    assert ["d-1", "d-2"] == [
        row[0]
        for row in await db.fetch(
            "SELECT dispatch_id FROM history WHERE event = 'note_error' ORDER BY dispatch_id"
        )
    ]


async def test_history_sequence_is_the_database_s_own(db: asyncpg.Connection) -> None:
    """The history sequence is assigned by the database: an insert naming one is refused."""
    with pytest.raises(asyncpg.GeneratedAlwaysError):
        await db.execute(
            "INSERT INTO history (sequence, action_id, dispatch_id, event, at, actor,"
            " to_delivery, to_acceptance, evidence_json)"
            " VALUES (1, 'A', 'd', 'created', 't', 'me', 'PENDING', 'PENDING', '{}')"
        )


@pytest.mark.parametrize(
    ("scene", "resolution", "event", "after"),
    [
        pytest.param(
            (FAIL_D1,),
            f"delivery = 'CONFIRMED', failed_at = NULL, confirmed_at = '{T}'",
            "resolve_sent",
            ("CONFIRMED", "PENDING"),
            id="failed to confirmed",
        ),
        pytest.param(
            (confirm("d-1"),),
            f"delivery = 'FAILED', confirmed_at = NULL, failed_at = '{T}'",
            "resolve_not_sent",
            ("FAILED", "PENDING"),
            id="confirmed to failed",
        ),
        pytest.param(
            (FAIL_D1,),
            "delivery = 'PENDING', failed_at = NULL",
            "resolve_not_sent",
            ("PENDING", "PENDING"),
            id="failed back to pending",
        ),
    ],
)
async def test_an_operator_resolution_may_leave_a_final_state(
    db: asyncpg.Connection, scene: tuple[str, ...], resolution: str, event: str, after: Any
) -> None:
    """An operator's resolution is the one change allowed out of a final state, and history
    records who made it."""
    await run(db, (*MAKE_ATTEMPT, *scene))
    before = await db.fetchval("SELECT delivery FROM attempts WHERE dispatch_id = 'd-1'")
    await db.execute(
        f"UPDATE attempts SET {resolution}, version = version + 1, last_event = $1,"
        " last_actor = 'operator:x', resolved_by = 'operator:x' WHERE dispatch_id = 'd-1'",
        event,
    )
    assert after == tuple(
        await db.fetchrow("SELECT delivery, acceptance FROM attempts WHERE dispatch_id = 'd-1'")
    )
    assert (event, "operator:x", before, after[0]) == tuple(
        await db.fetchrow(
            "SELECT event, actor, from_delivery, to_delivery FROM history"
            " ORDER BY sequence DESC LIMIT 1"
        )
    )


JSON_TEXTS = [
    "{}",
    "[]",
    "1",
    '"x"',
    "null",
    ' {"a" : 1} ',
    '{"a":1,"a":2}',
    '{"a":"\\u0000"}',
    '"\\ud800"',
    "1e999",
    "-0",
    "{",
    "",
    "{'a':1}",
    '{"a":1,}',
    "NaN",
    "[1,2",
    "tru",
    '{"a":1}{"b":2}',
    '"\x01"',
    "01",
    ".5",
]


@pytest.mark.parametrize("text", JSON_TEXTS)
async def test_json_is_valid_exactly_when_sqlite_says_so(db: asyncpg.Connection, text: str) -> None:
    """starebrain_json_valid agrees with SQLite's json_valid, so a JSON column accepts the
    same texts on both backends."""
    with sqlite3.connect(":memory:") as lite:
        expected = bool(lite.execute("SELECT json_valid(?)", (text,)).fetchone()[0])
    assert expected == await db.fetchval("SELECT starebrain_json_valid($1)", text)


FAILED_ROWS_QUERY = (
    "SELECT evidence_json::jsonb -> 'provider_object_id' FROM attempts"
    " WHERE delivery = 'FAILED' AND device = $1"
    " AND coalesce(evidence_json::jsonb ->> 'provider_kind', 'sms') = $2"
    " AND evidence_json::jsonb -> 'provider_object_id' > to_jsonb($3::bigint)"
)


async def test_failed_rows_are_found_above_an_anchor_by_number(db: asyncpg.Connection) -> None:
    """The ids a FAILED attempt names in its evidence compare as numbers (10 is above 9) and
    by kind (an evidence without one is an SMS row), as json_extract gives them in SQLite."""
    await run(db, MAKE_ATTEMPT[:1])
    evidence = [
        '{"provider_object_id":9}',
        '{"provider_object_id":10}',
        '{"provider_kind":"mms","provider_object_id":11}',
        "{}",
    ]
    for number, text in enumerate(evidence, start=1):
        await db.execute(
            "INSERT INTO attempts (dispatch_id, action_id, attempt, device, delivery, failed_at,"
            " evidence_json, dispatched_at, last_event_at, last_actor)"
            " VALUES ($1, 'A-17', $2, 'dev', 'FAILED', 't', $3, 't', 't', 'agent')",
            f"d-{number}",
            number,
            text,
        )
    assert ["10"] == [row[0] for row in await db.fetch(FAILED_ROWS_QUERY, "dev", "sms", 9)]
    assert ["11"] == [row[0] for row in await db.fetch(FAILED_ROWS_QUERY, "dev", "mms", 2)]


async def test_the_failed_rows_index_serves_its_query(db: asyncpg.Connection) -> None:
    """A query spelling the index's expressions is an index range on attempts_failed_rows,
    all three columns in its condition; the brief's two-column form uses it too."""
    async with db.transaction():
        await db.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(
            row[0] for row in await db.fetch(f"EXPLAIN {FAILED_ROWS_QUERY}", "dev", "sms", 9)
        )
        short = "\n".join(
            row[0]
            for row in await db.fetch(
                "EXPLAIN SELECT dispatch_id FROM attempts WHERE delivery = 'FAILED'"
                " AND device = $1"
                " AND coalesce(evidence_json::jsonb ->> 'provider_kind', 'sms') = $2",
                "dev",
                "sms",
            )
        )
    assert "attempts_failed_rows" in plan, plan
    condition = next(line for line in plan.splitlines() if "Index Cond" in line)
    assert "provider_object_id" in condition, plan
    assert "attempts_failed_rows" in short, short


async def sqlite_catalog(path: Path) -> dict[str, Any]:
    """Tables with their (column, type) lists, index names and trigger names of a fresh
    SQLite ledger made by the ledger itself."""
    async with Ledger.open(path):
        pass
    with sqlite3.connect(path) as lite:
        tables = [
            row[0]
            for row in lite.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {
            "columns": {
                table: [(row[1], row[2]) for row in lite.execute(f"PRAGMA table_info({table})")]
                for table in tables
            },
            "indexes": {
                row[0]
                for row in lite.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
                )
            },
            "triggers": {
                row[0]
                for row in lite.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            },
        }


async def test_every_sqlite_table_column_index_and_trigger_has_its_twin(
    db: asyncpg.Connection, tmp_path: Path
) -> None:
    """The PostgreSQL schema has the SQLite ledger's tables and columns in the same order with
    matching types, the same named indexes, and the same triggers plus the five that refuse
    TRUNCATE. One difference: the events are numbered once committed (``sequence`` orders
    the numbering, ``events_unplaced`` finds the events not numbered yet)."""
    lite = await sqlite_catalog(tmp_path / "ledger.db")
    lite["columns"]["events"].insert(0, ("sequence", "INTEGER"))
    lite["indexes"].add("events_unplaced")
    types = {"INTEGER": "bigint", "TEXT": "text"}
    columns: dict[str, list[tuple[str, str]]] = {}
    for row in await db.fetch(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    ):
        columns.setdefault(row[0], []).append((row[1], row[2]))
    assert {
        table: [(name, types[kind]) for name, kind in listed]
        for table, listed in lite["columns"].items()
    } == columns
    assert lite["indexes"] == {
        row[0]
        for row in await db.fetch(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            " AND indexname NOT IN (SELECT conname FROM pg_constraint"
            " WHERE connamespace = current_schema()::regnamespace)"
        )
    }
    assert lite["triggers"] | {
        "attempts_no_truncate",
        "history_no_truncate",
        "events_no_truncate",
        "replies_no_truncate",
        "opt_out_changes_no_truncate",
    } == {
        row[0]
        for row in await db.fetch(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
            " AND tgrelid::regclass::text IN ('actions', 'attempts', 'duplicates', 'history',"
            " 'phones', 'phone_addresses', 'framework_codes', 'gate_policies', 'owners',"
            " 'events', 'webhooks', 'replies', 'opt_out_changes')"
        )
    }


async def test_the_triggers_keep_to_their_schema(db: asyncpg.Connection) -> None:
    """A session with another search_path still writes history into the ledger's schema."""
    schema = await db.fetchval("SELECT current_schema()")
    await run(db, MAKE_ATTEMPT)
    await db.execute("SET search_path TO public")
    try:
        await db.execute(
            f"UPDATE {schema}.attempts SET last_error = 'x', version = version + 1,"
            " last_event = 'note_error'"
        )
        assert 2 == await db.fetchval(f"SELECT count(*) FROM {schema}.history")
    finally:
        await db.execute(f"SET search_path TO {schema}")


def transition_item(values: dict[str, Any], *, version: int = 0, delivery: str = "PENDING") -> str:
    """One transition of attempt d-1 as ``starebrain_apply`` takes it (a JSON array of one),
    expecting ``delivery``/PENDING at ``version``; ``values``: the columns it writes."""
    values = {
        "version": version + 1,
        "last_event_at": T,
        "last_actor": "agent",
        "last_evidence_json": "{}",
        **values,
    }
    item = {
        "dispatch_id": "d-1",
        "delivery": delivery,
        "acceptance": "PENDING",
        "version": version,
        "columns": list(values),
        "values": values,
    }
    return json.dumps([item])


async def apply(db: asyncpg.Connection, items: str, *, guarded: bool = False) -> Any:
    """``starebrain_apply``'s answer, read from its JSON."""
    return json.loads(await db.fetchval("SELECT starebrain_apply($1::jsonb, $2)", items, guarded))


async def test_a_transition_writes_the_columns_it_names_and_keeps_the_others(
    db: asyncpg.Connection,
) -> None:
    """``starebrain_apply`` writes a transition with a statement naming every column a
    transition may change (migration 15: planned once, not per call): the columns the
    transition names take its values, every other keeps its own, one history row is written,
    and the same transition again is stale."""
    await run(db, MAKE_ATTEMPT)
    await db.execute(
        "UPDATE attempts SET last_error = 'kept', version = 1, last_event = 'note_error'"
    )
    before = dict(await db.fetchrow("SELECT * FROM attempts"))
    items = transition_item(
        {"watermark_id": 5, "device_clock_ms": 9, "last_event": "submitted"}, version=1
    )
    assert ["applied"] == await apply(db, items)
    after = dict(await db.fetchrow("SELECT * FROM attempts"))
    named = {"watermark_id", "device_clock_ms", "last_event", "version", "last_event_at"}
    named |= {"last_actor", "last_evidence_json"}
    assert {name: before[name] for name in before if name not in named} == {
        name: after[name] for name in after if name not in named
    }
    assert (5, 9, "submitted", 2, "kept") == (
        after["watermark_id"],
        after["device_clock_ms"],
        after["last_event"],
        after["version"],
        after["last_error"],
    )
    assert ["created", "note_error", "submitted"] == [
        row[0] for row in await db.fetch("SELECT event FROM history ORDER BY sequence")
    ]
    assert [["stale", "PENDING", "PENDING", 2]] == await apply(db, items)


async def test_a_transition_naming_a_duplicate_row_is_refused_by_its_trigger(
    db: asyncpg.Connection,
) -> None:
    """The trigger that keeps a duplicate from becoming an artifact fires only when an UPDATE
    names the provider row's columns; ``starebrain_apply``'s statement for transitions that
    name them still fires it: refused unguarded (nothing written) and reported in place
    guarded, as a raw UPDATE is."""
    await run(db, MAKE_ATTEMPT)
    await run(
        db,
        (
            "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
            f" policy_json, created_at) VALUES ('A-9', 'sha256:09', '{{}}', 3, '{{}}', '{T}')",
            "INSERT INTO attempts (dispatch_id, action_id, attempt, device, dispatched_at,"
            f" last_event_at, last_actor) VALUES ('d-9', 'A-9', 1, 'dev-9', '{T}', '{T}', 'a')",
            f"UPDATE attempts SET delivery = 'CONFIRMED', confirmed_at = '{T}',"
            " provider_object_id = 5, provider_kind = 'sms', version = version + 1,"
            " last_event = 'confirm' WHERE dispatch_id = 'd-9'",
            "INSERT INTO duplicates (device, provider_object_id, provider_kind, dispatch_id,"
            " seen_at) VALUES ('dev', 6, 'sms', 'd-9', 't')",
        ),
    )
    state = await everything(db)
    items = transition_item(
        {
            "delivery": "CONFIRMED",
            "confirmed_at": T,
            "provider_object_id": 6,
            "provider_kind": "sms",
            "last_event": "confirm",
        }
    )
    with pytest.raises(TriggerRefusal, match="this provider row is recorded as a duplicate"):
        await apply(db, items)
    [answer] = await apply(db, items, guarded=True)
    assert ["refused", "23000", "this provider row is recorded as a duplicate"] == answer[:3]
    assert state == await everything(db)


async def test_a_transition_naming_another_column_is_written_or_refused_never_ignored(
    db: asyncpg.Connection,
) -> None:
    """A column outside the statement's list (one the ledger never changes, or none of the
    table's) goes to the statement built for the transition's own columns: written, or
    refused by the server; never silently left out."""
    await run(db, MAKE_ATTEMPT)
    later = "2026-01-02T00:00:00.000000Z"
    assert ["applied"] == await apply(
        db, transition_item({"dispatched_at": later, "last_event": "note_error"})
    )
    assert later == await db.fetchval("SELECT dispatched_at FROM attempts")
    with pytest.raises(asyncpg.UndefinedColumnError):
        await apply(
            db, transition_item({"no_such_column": 1, "last_event": "note_error"}, version=1)
        )
