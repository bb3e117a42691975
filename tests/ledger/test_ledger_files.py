"""`Ledger.open` and the files it is given: a new ledger is private, a file that is not a
ledger is never changed, `create=False` and `read_only=True` do what they say, and a damaged
ledger is a clear LedgerUnavailable."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from starebrain_actions import (
    SCHEMA_VERSION,
    Ledger,
    LedgerUnavailable,
    RetryPolicy,
    SchemaTooNew,
    SmsIntent,
)

INTENT = SmsIntent(recipient="+12025550100", body="Your code is 4821")


def digest(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def siblings(path: Path) -> list[str]:
    """Names of the files in ``path``'s directory."""
    return sorted(item.name for item in path.parent.iterdir())


async def make_ledger(path: Path) -> str:
    """A ledger holding one action with one attempt; returns the dispatch id."""
    async with Ledger.open(path) as ledger:
        await ledger.create_action("A-17", INTENT, RetryPolicy(maximum_attempts=2))
        record = await ledger.begin_attempt("A-17", "127.0.0.1:5555")
        return record.dispatch_id


async def test_a_new_ledger_is_private(ledger_path: Path) -> None:
    """A ledger Ledger.open creates is mode 0600, and so are its -wal and -shm files."""
    async with Ledger.open(ledger_path) as ledger:
        await ledger.create_action("A-17", INTENT)
        files = list(ledger_path.parent.iterdir())
        assert {"ledger.db", "ledger.db-wal", "ledger.db-shm"} <= {item.name for item in files}
        for item in files:
            assert 0o600 == stat.S_IMODE(item.stat().st_mode), item


async def test_create_false_refuses_a_missing_or_empty_file(ledger_path: Path) -> None:
    """With create=False a missing path is not created and an empty file stays empty."""
    with pytest.raises(LedgerUnavailable, match="no ledger at"):
        async with Ledger.open(ledger_path, create=False):
            pass
    assert not ledger_path.exists()
    ledger_path.touch()
    with pytest.raises(LedgerUnavailable, match="is an empty file, not a ledger"):
        async with Ledger.open(ledger_path, create=False):
            pass
    assert 0 == ledger_path.stat().st_size
    assert ["ledger.db"] == siblings(ledger_path)


async def test_an_empty_file_or_database_becomes_a_ledger(tmp_path: Path) -> None:
    """A 0-byte file, or a SQLite database with nothing in it, is a new ledger by default."""
    empty_file = tmp_path / "empty.db"
    empty_file.touch()
    empty_database = tmp_path / "blank.db"
    with contextlib.closing(sqlite3.connect(empty_database)) as db:
        db.execute("VACUUM")
    for path in (empty_file, empty_database):
        async with Ledger.open(path) as ledger:
            await ledger.create_action("A-1", INTENT)
        async with Ledger.open(path, read_only=True) as ledger:
            assert ["A-1"] == [item.action.action_id for item in await ledger.summaries()]


@pytest.mark.parametrize(
    "flags", [{}, {"create": False}, {"read_only": True}], ids=["default", "no-create", "ro"]
)
async def test_a_foreign_database_is_refused_and_never_changed(
    ledger_path: Path, flags: dict[str, bool]
) -> None:
    """A SQLite database of another program (tables, no ledger schema) is refused, whatever
    the flags; not a table is added and its bytes are unchanged."""
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        db.execute("CREATE TABLE actions (id INTEGER)")  # one name in common is not enough
        db.execute("CREATE TABLE recipes (name TEXT)")
        db.commit()
    before = digest(ledger_path)
    with pytest.raises(LedgerUnavailable, match=r"not a starebrain ledger \(tables: actions,"):
        async with Ledger.open(
            ledger_path, create=flags.get("create", True), read_only=flags.get("read_only", False)
        ):
            pass
    assert before == digest(ledger_path)
    assert ["ledger.db"] == siblings(ledger_path)


async def test_a_foreign_database_with_a_user_version_is_refused(ledger_path: Path) -> None:
    """Another program's database that sets user_version is refused, not 'migrated'."""
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        db.execute("CREATE TABLE settings (key TEXT)")
        db.execute("PRAGMA user_version = 1")
        db.commit()
    before = digest(ledger_path)
    with pytest.raises(LedgerUnavailable, match="schema version 1"):
        async with Ledger.open(ledger_path):
            pass
    assert before == digest(ledger_path)


async def test_read_only_reads_and_refuses_writes(ledger_path: Path) -> None:
    """read_only=True reads everything; a write raises LedgerUnavailable and changes
    nothing."""
    await make_ledger(ledger_path)
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = digest(ledger_path)
    async with Ledger.open(ledger_path, read_only=True) as ledger:
        summary = await ledger.summary("A-17")
        assert 1 == len(summary.attempts)
        with pytest.raises(LedgerUnavailable, match="read-only"):
            await ledger.create_action("B-1", INTENT)
        with pytest.raises(LedgerUnavailable, match="read-only"):
            await ledger.resolve("A-17", as_sent=False, reason="r", operator="o")
    assert before == digest(ledger_path)


async def test_read_only_never_creates_or_migrates(ledger_path: Path) -> None:
    """read_only=True refuses a missing path (creating nothing), and a ledger of an older
    schema version, which it leaves unmigrated."""
    with pytest.raises(LedgerUnavailable, match="no ledger at"):
        async with Ledger.open(ledger_path, read_only=True):
            pass
    assert not ledger_path.exists()
    await make_ledger(ledger_path)
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    with pytest.raises(LedgerUnavailable, match="read-only commands never migrate"):
        async with Ledger.open(ledger_path, read_only=True):
            pass
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        assert SCHEMA_VERSION - 1 == db.execute("PRAGMA user_version").fetchone()[0]


async def test_read_only_refuses_a_newer_schema(ledger_path: Path) -> None:
    """read_only=True on a ledger from a newer version raises SchemaTooNew."""
    await make_ledger(ledger_path)
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaTooNew):
        async with Ledger.open(ledger_path, read_only=True):
            pass


def overwrite_pages(path: Path, pages: list[int]) -> None:
    """Write garbage over the given pages (numbered from 1) of a checkpointed database."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    for page in pages:
        start = (page - 1) * page_size
        data[start : start + page_size] = bytes(
            (index * 37 + 11) % 256 for index in range(page_size)
        )
    path.write_bytes(bytes(data))


def root_page(path: Path, table: str) -> int:
    """The first page of ``table``'s b-tree."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        row = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    return int(row[0])


@pytest.mark.parametrize("flags", [{}, {"read_only": True}], ids=["rw", "ro"])
async def test_a_damaged_table_page_is_ledger_unavailable(
    ledger_path: Path, flags: dict[str, bool]
) -> None:
    """Garbage in the page of one table: the ledger opens, and a read that meets the page
    raises LedgerUnavailable saying the ledger is damaged."""
    await make_ledger(ledger_path)
    overwrite_pages(ledger_path, [root_page(ledger_path, "history")])
    async with Ledger.open(ledger_path, read_only=flags.get("read_only", False)) as ledger:
        with pytest.raises(LedgerUnavailable, match="is damaged"):
            await ledger.history("A-17")


async def test_a_damaged_attempts_page_refuses_writes(ledger_path: Path) -> None:
    """A write that meets a damaged page raises LedgerUnavailable and writes nothing."""
    await make_ledger(ledger_path)
    overwrite_pages(ledger_path, [root_page(ledger_path, "attempts")])
    before = digest(ledger_path)
    async with Ledger.open(ledger_path) as ledger:
        with pytest.raises(LedgerUnavailable, match="is damaged"):
            await ledger.begin_attempt("A-17", "127.0.0.1:5556")
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert before == digest(ledger_path)


@pytest.mark.parametrize("flags", [{}, {"read_only": True}], ids=["rw", "ro"])
async def test_damage_everywhere_is_ledger_unavailable(
    ledger_path: Path, flags: dict[str, bool]
) -> None:
    """Garbage over every page but the first: opening or the first read says damaged."""
    await make_ledger(ledger_path)
    pages = ledger_path.stat().st_size // 4096
    overwrite_pages(ledger_path, list(range(2, pages + 1)))
    with pytest.raises(LedgerUnavailable, match="is damaged"):
        async with Ledger.open(ledger_path, read_only=flags.get("read_only", False)) as ledger:
            await ledger.summaries()


@pytest.mark.parametrize("path", ["/dev/null", "/dev/zero"])
async def test_a_device_is_not_a_ledger(path: str) -> None:
    """A character device is refused before SQLite opens it."""
    with pytest.raises(LedgerUnavailable, match="is not a regular file"):
        async with Ledger.open(path):
            pass


_WRITER = r"""
import asyncio, os, signal, subprocess, sys
from starebrain_actions import Ledger, SmsIntent
db = sys.argv[1]
async def main():
    async with Ledger.open(db) as first:
        await first.create_action("before", SmsIntent(recipient="+12025550100", body="one"))
        async with Ledger.open(db):  # a second handle in the same process
            pass
        subprocess.run([sys.executable, "-c", "import asyncio, sys\nfrom starebrain_actions import"
            " Ledger\nasync def m():\n    async with Ledger.open(sys.argv[1]): pass\n"
            "asyncio.run(m())", db], check=True)
        await first.create_action("after", SmsIntent(recipient="+12025550100", body="two"))
        os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""


@pytest.mark.slow
def test_opening_a_ledger_twice_in_a_process_keeps_its_locks(tmp_path: Path) -> None:
    """Found by the chaos test: checking a ledger file with a plain open()/close() dropped
    every POSIX lock the process held on it (fcntl semantics), SQLite's own included; another
    process then checkpointed and deleted the WAL under the live connection, and a commit
    made after that was lost when the process was killed. Every commit must survive."""
    db = tmp_path / "ledger.db"
    subprocess.run([sys.executable, "-c", _WRITER, str(db)], check=False, timeout=60)
    with sqlite3.connect(db) as reader:
        kept = sorted(row[0] for row in reader.execute("SELECT action_id FROM actions"))
    assert ["after", "before"] == kept
