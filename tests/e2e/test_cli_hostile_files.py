"""Files and privacy through the CLI: a private ledger, other files left alone, read-only
ledgers for auditors and backups, and the nightly job's report and lock."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import stat
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from starebrain_actions.cli.main import main
from tests.e2e.conftest import (
    BODY,
    RECIPIENT,
    RunCli,
    seed_ledger,
    starebrain_command,
    without_file_override,
)

SEND = ("send", "--device", "127.0.0.1:9", "--to", RECIPIENT, "--body", BODY)
#: Every read command, on the seeded ledger.
READS = [["status", "ok-1"], ["list"], ["history", "bad-text"], ["review"]]


def mode(path: Path) -> int:
    """Permission bits of ``path``."""
    return stat.S_IMODE(path.stat().st_mode)


def digest(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> dict[str, str]:
    """Every file of ``folder`` with its digest."""
    return {item.name: digest(item) for item in sorted(folder.iterdir()) if item.is_file()}


def error_line(result: Result) -> str:
    """The one error line on stderr."""
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    return line


def run_process(
    args: Sequence[str], *, env: dict[str, str] | None = None, umask: int = -1
) -> subprocess.CompletedProcess[str]:
    """The installed command in a process where permission bits apply."""
    full = {k: v for k, v in os.environ.items() if k != "STAREBRAIN_DB"} | (env or {})
    return subprocess.run(
        without_file_override([*starebrain_command(), *args]),
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
        check=False,
        umask=umask,
    )


# --------------------------------------------------------------------------- private files


def test_send_creates_a_private_ledger_in_a_private_directory(tmp_path: Path) -> None:
    """With the default path, `send` creates the directory 0700 (and every missing parent:
    here $XDG_DATA_HOME itself) and the ledger 0600 (its -wal and -shm too), even under a
    permissive umask; the phone being down changes nothing."""
    data_home = tmp_path / "xdg"
    result = run_process(
        [*SEND, "--connect-timeout", "1", "--wait", "1.5"],
        env={"XDG_DATA_HOME": str(data_home)},
        umask=0o000,
    )
    assert 7 == result.returncode, result.stderr  # the phone is down (not ready)
    folder = data_home / "starebrain"
    assert (0o700, 0o700) == (mode(data_home), mode(folder))
    assert 0o600 == mode(folder / "ledger.db")
    for item in folder.iterdir():
        assert 0o600 == mode(item), item


def test_send_keeps_an_explicit_directory_as_it_is(tmp_path: Path, ledger_path: Path) -> None:
    """`--db` in an existing directory: the ledger is 0600, the directory is not touched."""
    tmp_path.chmod(0o755)
    result = CliRunner().invoke(
        main, ["--db", str(ledger_path), *SEND, "--connect-timeout", "1", "--wait", "1.5"]
    )
    assert 7 == result.exit_code, result.output
    assert (0o600, 0o755) == (mode(ledger_path), mode(tmp_path))


@pytest.mark.parametrize("bits", [0o640, 0o604, 0o644])
def test_a_ledger_readable_by_others_gets_a_warning(
    run_cli: RunCli, ledger_path: Path, bits: int
) -> None:
    """A ledger readable by its group or by others: a warning on stderr naming the fix; the
    command still works. A private one gets none."""
    asyncio.run(seed_ledger(ledger_path, waiting_device="127.0.0.1:9"))
    quiet = run_cli("list")
    assert 0 == quiet.exit_code and "warning" not in quiet.stderr
    ledger_path.chmod(bits)
    result = run_cli("list")
    assert 0 == result.exit_code, result.output
    assert f"the ledger {ledger_path} is readable by other users (mode {bits:04o})" in (
        result.stderr
    )
    assert f"chmod 600 {ledger_path}" in result.stderr
    assert "ok-1" in result.stdout


# --------------------------------------------------------------------------- other files

#: Commands that open the ledger, with the exit status each gives a file that is not one.
OPENERS = [
    (list(SEND), 1),
    (["list"], 1),
    (["status", "x"], 1),
    (["reconcile", "--device", "127.0.0.1:9"], 1),
    (["resolve", "x", "--as", "sent", "--reason", "r", "--operator", "o"], 1),
    (["nightly"], 2),
    (["nightly", "--dry-run"], 2),
]


def foreign_sqlite(path: Path) -> None:
    """Another program's SQLite database."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        db.execute("INSERT INTO notes (text) VALUES ('buy milk')")
        db.commit()


@pytest.mark.parametrize(("args", "code"), OPENERS)
def test_a_foreign_sqlite_file_is_refused_and_left_unchanged(
    run_cli: RunCli, ledger_path: Path, args: list[str], code: int
) -> None:
    """A SQLite database with other tables is refused (naming its tables) by every command,
    send included; its bytes and its directory stay as they were (no lock file, no -wal)."""
    foreign_sqlite(ledger_path)
    before = listing(ledger_path.parent)
    result = run_cli(*args)
    assert code == result.exit_code, result.output
    line = error_line(result)
    assert "is a SQLite database but not a starebrain ledger (tables: notes" in line
    assert before == listing(ledger_path.parent)
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        assert [("notes",)] == db.execute("SELECT name FROM sqlite_master").fetchall()


@pytest.mark.parametrize(("args", "code"), OPENERS)
def test_a_file_that_is_not_sqlite_is_refused_and_left_unchanged(
    run_cli: RunCli, ledger_path: Path, args: list[str], code: int
) -> None:
    """A text file given as the ledger is refused by every command and left byte for byte
    unchanged, with nothing created next to it."""
    ledger_path.write_text("my precious notes\n" * 50)
    before = listing(ledger_path.parent)
    result = run_cli(*args)
    assert code == result.exit_code, result.output
    assert "is not a SQLite database, so not a starebrain ledger" in error_line(result)
    assert before == listing(ledger_path.parent)


@pytest.mark.parametrize(("args", "code"), OPENERS[1:])
def test_an_empty_file_is_not_a_ledger_for_commands_that_do_not_create(
    run_cli: RunCli, ledger_path: Path, args: list[str], code: int
) -> None:
    """A 0-byte file: every command but `send` refuses it and leaves it empty."""
    ledger_path.touch()
    result = run_cli(*args)
    assert code == result.exit_code, result.output
    assert "is an empty file, not a ledger" in error_line(result)
    assert 0 == ledger_path.stat().st_size
    assert ["ledger.db"] == [item.name for item in ledger_path.parent.iterdir()]


def test_send_makes_a_ledger_of_an_empty_file(run_cli: RunCli, ledger_path: Path) -> None:
    """A 0-byte file is a new ledger for `send` (it creates ledgers); reads then work."""
    ledger_path.touch()
    sent = run_cli(*SEND, "--action-id", "A-1", "--connect-timeout", "1", "--wait", "1.5")
    assert 7 == sent.exit_code, sent.output  # the phone is down; the ledger is made
    assert "could not connect" in error_line(sent)
    assert ledger_path.read_bytes().startswith(b"SQLite format 3\x00")
    listed = run_cli("list", "--json")
    assert 0 == listed.exit_code, listed.output
    assert [] == json.loads(listed.stdout)


# --------------------------------------------------------------------------- read-only


@pytest.fixture
def read_only_ledger(tmp_path: Path) -> Iterator[Path]:
    """A seeded ledger, mode 0444, alone in a directory of mode 0555 (restored afterwards)."""
    folder = tmp_path / "archive"
    folder.mkdir()
    path = folder / "ledger.db"
    asyncio.run(seed_ledger(path, waiting_device="127.0.0.1:9"))
    assert ["ledger.db"] == [item.name for item in folder.iterdir()]  # checkpointed, closed
    path.chmod(0o444)
    folder.chmod(0o555)
    yield path
    folder.chmod(0o755)


@pytest.mark.parametrize(
    "args", [*READS, ["nightly", "--dry-run"], ["nightly", "--dry-run", "--json"]]
)
def test_read_commands_work_on_a_read_only_ledger(read_only_ledger: Path, args: list[str]) -> None:
    """`status`, `list`, `history`, `review` and `nightly --dry-run` work on a ledger in a
    read-only file and directory (as a user the bits apply to), and change nothing."""
    before = listing(read_only_ledger.parent)
    result = run_process(["--db", str(read_only_ledger), *args])
    assert "Traceback" not in result.stderr
    assert "Error" not in result.stderr, result.stderr
    expected = 1 if args[0] == "nightly" else 0  # the seeded ledger needs a person
    assert expected == result.returncode, result.stdout + result.stderr
    assert result.stdout.strip()
    assert before == listing(read_only_ledger.parent)


def test_nightly_dry_run_reports_without_reading_phones(read_only_ledger: Path) -> None:
    """`nightly --dry-run --json` reports the ledger as it stands: no device read, the review
    items listed, marked as a dry run."""
    result = run_process(["--db", str(read_only_ledger), "nightly", "--dry-run", "--json"])
    report = json.loads(result.stdout)
    assert report["dry_run"] is True
    assert [] == report["devices"]
    assert {"ok-dup", "bad-text", "spent"} <= {item["action_id"] for item in report["review"]}


def test_a_read_only_file_in_a_writable_directory_is_read_read_only(
    tmp_path: Path, ledger_path: Path
) -> None:
    """A 0444 ledger in a writable directory: reads work and its bytes stay the same."""
    asyncio.run(seed_ledger(ledger_path, waiting_device="127.0.0.1:9"))
    ledger_path.chmod(0o444)
    before = digest(ledger_path)
    for args in READS:
        result = run_process(["--db", str(ledger_path), *args])
        assert 0 == result.returncode, result.stderr
    assert before == digest(ledger_path)


@pytest.mark.parametrize(
    "args",
    [
        ["resolve", "waiting", "--as", "sent", "--reason", "r", "--operator", "o"],
        ["nightly"],
    ],
)
def test_writing_commands_refuse_a_read_only_ledger_clearly(
    read_only_ledger: Path, args: list[str]
) -> None:
    """Commands that write refuse a read-only ledger with one line that says read
    commands work on it; nothing changes."""
    before = listing(read_only_ledger.parent)
    result = run_process(["--db", str(read_only_ledger), *args])
    assert result.returncode in (1, 2), result.stderr
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert "read-only" in line or "not readable and writable" in line
    assert before == listing(read_only_ledger.parent)


def test_a_read_only_ledger_needing_a_migration_is_a_clear_error(
    run_cli: RunCli, ledger_path: Path
) -> None:
    """A version-1 ledger opened by a read command: a clear error saying read commands do not
    migrate and how to migrate it; the file is unchanged."""
    from starebrain_actions.ledger.connection import split_statements
    from tests.ledger.test_ledger_migration import v1_sql

    with contextlib.closing(sqlite3.connect(ledger_path, isolation_level=None)) as db:
        for statement in split_statements(v1_sql()):
            db.execute(statement)
        db.execute("PRAGMA user_version = 1")
    before = digest(ledger_path)
    result = run_cli("list")
    assert 1 == result.exit_code, result.output
    line = error_line(result)
    assert "has schema version 1" in line and "read-only commands never migrate" in line
    assert before == digest(ledger_path)


# --------------------------------------------------------------------------- nightly files


def test_nightly_report_does_not_create_directories(
    run_cli: RunCli, ledger_path: Path, tmp_path: Path
) -> None:
    """`nightly --report` into a directory that does not exist: a usage error naming it
    (exit 2); the directory is not created and no lock is taken."""
    asyncio.run(seed_ledger(ledger_path, waiting_device="127.0.0.1:9"))
    report = tmp_path / "reports" / "2026" / "night.json"
    result = run_cli("nightly", "--report", str(report))
    assert 2 == result.exit_code, result.output
    assert f"directory {report.parent} does not exist (it is not created)" in error_line(result)
    assert not (tmp_path / "reports").exists()
    assert not Path(f"{ledger_path}.nightly.lock").exists()


@pytest.mark.parametrize(
    "make",
    [
        lambda path: path.write_text("not a ledger"),
        lambda path: path.touch(),
        foreign_sqlite,
        lambda path: None,
    ],
    ids=["text", "empty", "foreign", "missing"],
)
def test_nightly_leaves_no_lock_next_to_an_invalid_db(
    run_cli: RunCli, ledger_path: Path, make: object
) -> None:
    """`nightly` on something that is not a ledger: exit 2 and no lock file next to it."""
    make(ledger_path)  # type: ignore[operator]
    result = run_cli("nightly")
    assert 2 == result.exit_code, result.output
    assert not Path(f"{ledger_path}.nightly.lock").exists()
