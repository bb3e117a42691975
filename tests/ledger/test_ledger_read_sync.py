"""``open_read_only`` (no asyncio, for ``starebrain status`` and ``history``) and
``Ledger.open(read_only=True)`` read the same ledger alike: equal summaries, duplicates and
history, and for every file that is not a usable ledger the same exception with the same
message."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from starebrain_actions import SCHEMA_VERSION, DeliveryState, Ledger, confirm_delivery
from starebrain_actions.ledger.read import open_read_only
from tests.e2e.conftest import without_file_override
from tests.ledger.test_ledger_files import make_ledger, overwrite_pages, root_page

ROOT = Path(__file__).resolve().parents[2]
#: A fixed clock, so that both paths derive the same status.
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _outcome(read: Callable[[], Any]) -> list[str]:
    """``["ok", repr(result)]``, or ``["error", exception class, message]``."""
    try:
        return ["ok", repr(read())]
    except Exception as exc:
        return ["error", type(exc).__name__, str(exc)]


def sync_reads(path: str, action_id: str) -> list[list[str]]:
    """Summary, duplicates and history through ``open_read_only``; an open that fails is
    the one outcome."""

    def reads() -> list[list[str]]:
        with open_read_only(path) as ledger:
            return [
                _outcome(lambda: ledger.summary(action_id, now=NOW)),
                _outcome(lambda: ledger.duplicates(action_id)),
                _outcome(lambda: ledger.history(action_id)),
            ]

    try:
        return reads()
    except Exception as exc:
        return [["error", type(exc).__name__, str(exc)]]


async def async_reads(path: str, action_id: str) -> list[list[str]]:
    """The same reads through ``Ledger.open(read_only=True)``."""

    async def outcome(read: Callable[[], Any]) -> list[str]:
        try:
            return ["ok", repr(await read())]
        except Exception as exc:
            return ["error", type(exc).__name__, str(exc)]

    try:
        async with Ledger.open(path, read_only=True) as ledger:
            return [
                await outcome(lambda: ledger.summary(action_id, now=NOW)),
                await outcome(lambda: ledger.duplicates(action_id)),
                await outcome(lambda: ledger.history(action_id)),
            ]
    except Exception as exc:
        return [["error", type(exc).__name__, str(exc)]]


def compare(path: str, action_id: str = "A-17") -> dict[str, list[list[str]]]:
    """Both paths' outcomes for one ledger path."""
    return {"sync": sync_reads(path, action_id), "async": asyncio.run(async_reads(path, action_id))}


def compare_as_user(path: Path, action_id: str = "A-17") -> dict[str, list[list[str]]]:
    """``compare`` in a process where permission bits apply."""
    script = (
        "import json, sys; from tests.ledger.test_ledger_read_sync import compare;"
        " print(json.dumps(compare(sys.argv[1], sys.argv[2])))"
    )
    done = subprocess.run(
        without_file_override([sys.executable, "-c", script, str(path), action_id]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    result: dict[str, list[list[str]]] = json.loads(done.stdout)
    return result


async def duplicated_ledger(path: Path) -> None:
    """``make_ledger``'s action, its attempt confirmed, with a duplicate row recorded."""
    dispatch_id = await make_ledger(path)
    async with Ledger.open(path) as ledger:
        record = await ledger.get_attempt(dispatch_id)
        await ledger.apply(confirm_delivery(record, provider_object_id=40, now=ledger.now()))
        await ledger.record_duplicate(dispatch_id, provider_object_id=41, evidence={"_id": 41})


def test_a_ledger_reads_the_same_both_ways(ledger_path: Path) -> None:
    """A ledger with an attempt, a duplicate and history: equal summary, duplicates and
    history (and a missing action is the same NotFound)."""
    asyncio.run(duplicated_ledger(ledger_path))
    found = compare(str(ledger_path))
    assert found["async"] == found["sync"]
    assert ["ok", "ok", "ok"] == [item[0] for item in found["sync"]]
    assert DeliveryState.CONFIRMED.name in found["sync"][0][1]
    assert "41" in found["sync"][1][1]
    missing = compare(str(ledger_path), "no-such-action")
    assert missing["async"] == missing["sync"]
    assert ["error", "NotFound"] == missing["sync"][0][:2]
    assert ["ok", "[]"] == missing["sync"][1]


def _foreign(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.commit()


def _empty_database(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE gone (x)")
        db.execute("DROP TABLE gone")
        db.commit()


def _versioned(version: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        asyncio.run(make_ledger(path))
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(f"PRAGMA user_version = {version}")

    return make


def _damaged_everywhere(path: Path) -> None:
    asyncio.run(make_ledger(path))
    overwrite_pages(path, list(range(2, path.stat().st_size // 4096 + 1)))


def _damaged_history(path: Path) -> None:
    asyncio.run(make_ledger(path))
    overwrite_pages(path, [root_page(path, "history")])


@pytest.mark.parametrize(
    ("make", "error", "says"),
    [
        (lambda path: None, "LedgerUnavailable", "no ledger at"),
        (lambda path: path.mkdir(), "LedgerUnavailable", "is a directory"),
        (lambda path: path.write_bytes(b""), "LedgerUnavailable", "is an empty file"),
        (lambda path: path.write_text("hello\n" * 50), "LedgerUnavailable", "not a SQLite"),
        (_foreign, "LedgerUnavailable", "not a starebrain ledger"),
        (_empty_database, "LedgerUnavailable", "is an empty database"),
        (_versioned(SCHEMA_VERSION + 1), "SchemaTooNew", "newer than"),
        (_versioned(SCHEMA_VERSION - 1), "LedgerUnavailable", "never migrate"),
        (_damaged_everywhere, "LedgerUnavailable", "is damaged"),
    ],
    ids=[
        "missing",
        "directory",
        "empty-file",
        "not-sqlite",
        "foreign",
        "empty-database",
        "too-new",
        "needs-migration",
        "damaged",
    ],
)
def test_a_file_that_is_no_usable_ledger_is_refused_the_same_way(
    ledger_path: Path, make: Callable[[Path], None], error: str, says: str
) -> None:
    """Each file the async open refuses, the sync open refuses with the same exception and
    message (or, damaged, the same first read fails the same way)."""
    make(ledger_path)
    found = compare(str(ledger_path))
    assert found["async"] == found["sync"]
    assert "error" == found["sync"][0][0]
    assert error == found["sync"][0][1]
    assert says in found["sync"][0][2]


def test_a_device_is_refused_the_same_way() -> None:
    """``/dev/null`` is not a ledger, said alike."""
    found = compare("/dev/null")
    assert found["async"] == found["sync"]
    assert ["error", "LedgerUnavailable"] == found["sync"][0][:2]


def test_a_damaged_table_fails_the_same_read(ledger_path: Path) -> None:
    """Garbage in the history table: both open it, read the summary alike, and fail the
    history read with the same error."""
    _damaged_history(ledger_path)
    found = compare(str(ledger_path))
    assert found["async"] == found["sync"]
    assert "ok" == found["sync"][0][0]
    assert ["error", "LedgerUnavailable"] == found["sync"][2][:2]
    assert "is damaged" in found["sync"][2][2]


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Path]:
    """A folder for a ledger that will be made read-only (its mode restored afterwards)."""
    folder = tmp_path / "archive"
    folder.mkdir()
    yield folder
    folder.chmod(0o755)
    for item in folder.iterdir():
        item.chmod(0o644)


def test_a_read_only_directory_is_read_as_it_stands_both_ways(archive: Path) -> None:
    """A checkpointed ledger in a directory this user cannot write (no ``-shm`` can be
    made): both fall back to an immutable read and read the same; nothing is created."""
    path = archive / "ledger.db"
    asyncio.run(duplicated_ledger(path))
    path.chmod(0o444)
    archive.chmod(0o555)
    found = compare_as_user(path)
    assert found["async"] == found["sync"]
    assert ["ok", "ok", "ok"] == [item[0] for item in found["sync"]]
    assert ["ledger.db"] == sorted(item.name for item in archive.iterdir())


def test_a_live_wal_in_a_read_only_directory_is_refused_the_same_way(archive: Path) -> None:
    """A ledger whose ``-wal`` holds commits, in a directory where no ``-shm`` can be made:
    reading it as it stands would miss those commits, so both refuse alike."""
    source = archive.parent / "live.db"
    asyncio.run(make_ledger(source))
    with contextlib.closing(sqlite3.connect(source, isolation_level=None)) as db:
        db.execute("PRAGMA wal_autocheckpoint = 0")
        db.execute("INSERT INTO history SELECT * FROM history LIMIT 0")  # opens the WAL
        db.execute("UPDATE actions SET created_at = created_at")
        path = archive / "ledger.db"
        shutil.copyfile(source, path)
        shutil.copyfile(source.with_name("live.db-wal"), archive / "ledger.db-wal")
    assert (archive / "ledger.db-wal").stat().st_size > 0
    archive.chmod(0o555)
    found = compare_as_user(path)
    assert found["async"] == found["sync"]
    assert ["error", "LedgerUnavailable"] == found["sync"][0][:2]
    assert str(path) in found["sync"][0][2]


def test_an_unreadable_file_is_refused_the_same_way(ledger_path: Path) -> None:
    """A ledger this user may not read: the same refusal both ways."""
    asyncio.run(make_ledger(ledger_path))
    ledger_path.chmod(0o000)
    try:
        found = compare_as_user(ledger_path)
    finally:
        ledger_path.chmod(0o600)
    assert found["async"] == found["sync"]
    assert ["error", "LedgerUnavailable"] == found["sync"][0][:2]
    assert "not readable" in found["sync"][0][2]
