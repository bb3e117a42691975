"""A ledger from before actions kept what binds them (SQLite schema 11, PostgreSQL 7) migrates
with its verdicts in force: an action a gate denied stays DENIED and a held one stays held,
for a sender with no gate of its own; an action with neither is sent as before."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import asyncpg
import pytest

from starebrain_actions import Ledger, SmsIntent, Status
from starebrain_actions.core.convert import to_jsonable
from starebrain_actions.core.exceptions import PolicyRefused
from starebrain_actions.core.model import RetryPolicy
from starebrain_actions.ledger.connection import split_statements
from starebrain_actions.ledger.postgres import VERSION_TABLE, migrations
from starebrain_actions.ledger.read import migration_files
from tests._postgres import fresh_schema

#: The last versions before this change.
SQLITE_BEFORE = 11
PG_BEFORE = 7
CREATED = "2026-12-01T10:00:00.000000Z"
VERDICTS = {
    "denied": {"verdict": "DENY", "rule": "recipients.deny", "detail": "matches +1202555*"},
    "held": {"verdict": "HOLD", "rule": "recipients.approve", "detail": "every SMS"},
    "plain": None,
}


def action_rows() -> list[tuple[object, ...]]:
    """Rows of ``actions`` as a version-11 ledger holds them: one denied by a rule, one held
    for approval, one plain."""
    rows = []
    for action_id, verdict in VERDICTS.items():
        intent = SmsIntent(recipient="+12025550100", body=action_id)
        gate = None
        if verdict is not None:
            gate = json.dumps({**verdict, "until": None, "digest": "sha256:0", "at": CREATED})
        rows.append(
            (
                action_id,
                intent.fingerprint,
                json.dumps(to_jsonable(intent)),
                3,
                json.dumps(to_jsonable(RetryPolicy())),
                CREATED,
                gate,
            )
        )
    return rows


INSERT = (
    "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts, policy_json,"
    " created_at, gate_json) VALUES ({})"
)


@pytest.fixture(params=("sqlite", "postgresql"))
async def old_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A ledger at the version before this change, holding ``action_rows``."""
    if request.param == "sqlite":
        path = tmp_path / "ledger.db"
        with closing(sqlite3.connect(path)) as db:
            for number, entry in migration_files()[:SQLITE_BEFORE]:
                for statement in split_statements(entry.read_text(encoding="utf-8")):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")
            db.executemany(INSERT.format(", ".join("?" * 7)), action_rows())
            db.commit()
        yield str(path)
        return
    async with fresh_schema() as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f"CREATE TABLE {VERSION_TABLE} (version INTEGER NOT NULL)")
            for number, script in migrations()[:PG_BEFORE]:
                await conn.execute(script)
                await conn.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES ($1)", number)
            marks = ", ".join(f"${n}" for n in range(1, 8))
            await conn.executemany(INSERT.format(marks), action_rows())
        finally:
            await conn.close()
        yield url


async def test_verdicts_kept_before_the_migration_still_bind(old_ledger: str) -> None:
    """After the migration the denied action reads DENIED and the held one waits for a
    person: a receipt with no gate is refused for both; the plain one gets its receipt."""
    async with Ledger.open(old_ledger) as ledger:
        statuses = {action_id: (await ledger.summary(action_id)).status for action_id in VERDICTS}
        refused = {}
        for action_id in ("denied", "held"):
            with pytest.raises(PolicyRefused) as caught:
                await ledger.begin_attempt(action_id, "10.0.0.1:5555")
            refused[action_id] = caught.value.gate.verdict.value
        record = await ledger.begin_attempt("plain", "10.0.0.1:5555")
        resumable = [s.action.action_id for s in await ledger.resumable("10.0.0.2:5555")]
    assert {"denied": Status.DENIED, "held": Status.PLANNED, "plain": Status.PLANNED} == statuses
    assert {"denied": "DENY", "held": "HOLD"} == refused
    assert 1 == record.attempt
    assert [] == resumable  # denied, held, and plain now in flight
