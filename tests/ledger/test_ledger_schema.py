"""The database itself enforces the invariants, and the schema migrates and fails safely."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import starebrain_actions
from starebrain_actions import (
    SCHEMA_VERSION,
    CorruptRecord,
    Ledger,
    LedgerUnavailable,
    SchemaTooNew,
    SmsIntent,
)

ROOT = Path(__file__).resolve().parents[2]
INTENT = SmsIntent(recipient="+12025550100", body="hi")


async def make_attempt(path: Path) -> str:
    """A ledger with one action and one PENDING attempt; returns its dispatch id."""
    async with Ledger.open(path) as ledger:
        await ledger.create_action("A-17", INTENT)
        return (await ledger.begin_attempt("A-17", "dev")).dispatch_id


def raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection, as a person with the sqlite3 shell would have."""
    return sqlite3.connect(path, isolation_level=None)


def digest(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_raw_sql_cannot_accept_an_unconfirmed_attempt(ledger_path: Path) -> None:
    """UPDATE setting acceptance on a PENDING delivery is refused by the CHECK constraint."""
    dispatch_id = await make_attempt(ledger_path)
    with raw(ledger_path) as db, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        db.execute(
            "UPDATE attempts SET acceptance = 'ACCEPTED', accepted_at = '2026-01-01T00:00:00Z',"
            " version = version + 1 WHERE dispatch_id = ?",
            (dispatch_id,),
        )
    with raw(ledger_path) as db:
        assert ("PENDING", "PENDING") == db.execute(
            "SELECT delivery, acceptance FROM attempts"
        ).fetchone()


async def test_raw_sql_cannot_insert_an_accepted_unconfirmed_row(ledger_path: Path) -> None:
    """Even an INSERT of an accepted-but-pending row is refused."""
    await make_attempt(ledger_path)
    with raw(ledger_path) as db, pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO attempts (dispatch_id, action_id, attempt, device, delivery, acceptance,"
            " dispatched_at, accepted_at, last_event_at, last_actor)"
            " VALUES ('x', 'A-17', 2, 'other', 'PENDING', 'ACCEPTED', 't', 't', 't', 'me')"
        )


async def test_raw_sql_cannot_leave_a_final_state(ledger_path: Path) -> None:
    """Moving a FAILED delivery back to PENDING is refused unless it is an operator resolution."""
    dispatch_id = await make_attempt(ledger_path)
    with raw(ledger_path) as db:
        db.execute(
            "UPDATE attempts SET delivery = 'FAILED', failed_at = 't', version = version + 1,"
            " last_event = 'fail' WHERE dispatch_id = ?",
            (dispatch_id,),
        )
        with pytest.raises(sqlite3.IntegrityError, match="operator"):
            db.execute(
                "UPDATE attempts SET delivery = 'PENDING', failed_at = NULL,"
                " version = version + 1, last_event = 'note_error' WHERE dispatch_id = ?",
                (dispatch_id,),
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            db.execute(
                "UPDATE attempts SET delivery = 'PENDING', failed_at = NULL,"
                " version = version + 1, last_event = 'resolve_not_sent', last_actor = 'bot'"
                " WHERE dispatch_id = ?",
                (dispatch_id,),
            )


async def test_every_change_writes_history_and_history_is_append_only(ledger_path: Path) -> None:
    """An update that skips the version bump is refused; history rows cannot change or vanish."""
    dispatch_id = await make_attempt(ledger_path)
    with raw(ledger_path) as db:
        with pytest.raises(sqlite3.IntegrityError, match="version"):
            db.execute("UPDATE attempts SET last_error = 'x' WHERE dispatch_id = ?", (dispatch_id,))
        db.execute(
            "UPDATE attempts SET last_error = 'x', version = version + 1,"
            " last_event = 'note_error' WHERE dispatch_id = ?",
            (dispatch_id,),
        )
        assert 2 == db.execute("SELECT count(*) FROM history").fetchone()[0]
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute("UPDATE history SET actor = 'someone else'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute("DELETE FROM history")
        with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
            db.execute("DELETE FROM attempts")


async def test_unknown_states_are_refused_by_the_database(ledger_path: Path) -> None:
    """A state outside the enum cannot be stored."""
    dispatch_id = await make_attempt(ledger_path)
    with raw(ledger_path) as db, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        db.execute(
            "UPDATE attempts SET delivery = 'MAYBE', version = version + 1 WHERE dispatch_id = ?",
            (dispatch_id,),
        )


async def test_unknown_states_smuggled_in_are_reported_clearly(ledger_path: Path) -> None:
    """A row with an unknown state (checks bypassed) raises CorruptRecord naming the attempt."""
    dispatch_id = await make_attempt(ledger_path)
    with raw(ledger_path) as db:
        db.execute("PRAGMA ignore_check_constraints = ON")
        db.execute(
            "UPDATE attempts SET delivery = 'MAYBE', version = version + 1 WHERE dispatch_id = ?",
            (dispatch_id,),
        )
    async with Ledger.open(ledger_path) as ledger:
        with pytest.raises(CorruptRecord, match=f"{dispatch_id}.*MAYBE"):
            await ledger.get_attempt(dispatch_id)


def load_dump_script() -> object:
    """Import scripts/dump_schema.py as a module."""
    spec = importlib.util.spec_from_file_location("dump_schema", ROOT / "scripts/dump_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_migrating_an_empty_database_gives_the_shipped_schema(ledger_path: Path) -> None:
    """An empty file migrated to the latest version has exactly the schema in schema.sql."""
    async with Ledger.open(ledger_path):
        pass
    dump = load_dump_script()
    shipped = (
        Path(starebrain_actions.__file__).parent / "ledger" / "schema" / "schema.sql"
    ).read_text()
    assert shipped == dump.schema_text(ledger_path)  # type: ignore[attr-defined]
    with raw(ledger_path) as db:
        assert SCHEMA_VERSION == db.execute("PRAGMA user_version").fetchone()[0]
        assert "wal" == db.execute("PRAGMA journal_mode").fetchone()[0]


async def test_reopening_keeps_data_and_does_not_migrate_again(ledger_path: Path) -> None:
    """Opening an up-to-date ledger twice changes nothing stored."""
    await make_attempt(ledger_path)
    async with Ledger.open(ledger_path) as ledger:
        assert 1 == len(await ledger.attempts("A-17"))


async def test_a_newer_schema_is_refused_and_left_untouched(ledger_path: Path) -> None:
    """A database from a newer version raises SchemaTooNew and its bytes are unchanged."""
    await make_attempt(ledger_path)
    with raw(ledger_path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = digest(ledger_path)
    with pytest.raises(SchemaTooNew, match="newer"):
        async with Ledger.open(ledger_path):
            pass
    assert before == digest(ledger_path)


async def test_a_directory_path_is_refused(tmp_path: Path) -> None:
    """Opening a directory as the ledger names the problem."""
    with pytest.raises(LedgerUnavailable, match="is a directory"):
        async with Ledger.open(tmp_path):
            pass


async def test_a_missing_parent_directory_is_refused(tmp_path: Path) -> None:
    """A path in a directory that does not exist names that directory."""
    with pytest.raises(LedgerUnavailable, match="does not exist"):
        async with Ledger.open(tmp_path / "nope" / "ledger.db"):
            pass


async def test_a_file_that_is_not_a_database_is_refused_and_kept(tmp_path: Path) -> None:
    """A text file given as the ledger raises LedgerUnavailable and is not modified."""
    path = tmp_path / "notes.txt"
    path.write_text("my precious notes\n" * 100)
    before = digest(path)
    with pytest.raises(LedgerUnavailable, match="not a starebrain ledger"):
        async with Ledger.open(path):
            pass
    assert before == digest(path)


READ_ONLY_PROBE = """
import asyncio, sys
from starebrain_actions import Ledger, LedgerUnavailable
async def main():
    try:
        async with Ledger.open(sys.argv[1]) as ledger:
            await ledger.create_action("B-1", __import__("starebrain_actions").SmsIntent(
                recipient="+12025550100", body="x"))
    except LedgerUnavailable as exc:
        print("refused:", exc)
asyncio.run(main())
"""


async def test_a_read_only_ledger_is_refused_with_nothing_lost(tmp_path: Path) -> None:
    """A ledger the user cannot write is refused clearly and its contents stay intact."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "ledger.db"
    await make_attempt(path)
    with raw(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = digest(path)
    for item in (*folder.iterdir(), folder):
        item.chmod(0o555 if item.is_dir() else 0o444)
    command = [sys.executable, "-c", READ_ONLY_PROBE, str(path)]
    if os.geteuid() == 0:
        # root ignores permission bits; drop the capabilities that let it, as a user lacks them
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: permission bits cannot apply")
        caps = "-dac_override,-dac_read_search"
        command = [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", *command]
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=60,
            check=False,
        )
    finally:
        folder.chmod(0o755)
    assert "refused:" in result.stdout, result.stdout + result.stderr
    assert "not readable and writable" in result.stdout
    assert before == digest(path)
