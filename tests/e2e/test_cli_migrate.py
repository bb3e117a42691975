"""`starebrain migrate --from PATH --to URL`: what it prints, its exit statuses (0 copied, 1
refused or failed, 2 usage), and a URL's password never printed, whatever happens."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from click.testing import CliRunner, Result

from starebrain_actions import Ledger, SmsIntent
from starebrain_actions.cli.main import main
from tests.e2e.conftest import SEEDED, run_installed, seed_ledger

#: A password the local server (trust auth) accepts and ignores: it must never be printed.
SECRET = "hunter2-s3cret"


def migrate(*args: str) -> Result:
    """Run `starebrain migrate ARGS` in-process (no traceback may escape)."""
    return CliRunner().invoke(main, ["migrate", *args], catch_exceptions=False)


def with_password(url: str, password: str = SECRET) -> str:
    """``url`` with ``password`` added to its user."""
    parts = urlsplit(url)
    netloc = f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


async def seeded(tmp_path: Path, closed_port: int) -> Path:
    path = tmp_path / "ledger.db"
    await seed_ledger(path, waiting_device=f"127.0.0.1:{closed_port}")
    return path


async def test_migrate_prints_what_it_copied_and_checked(
    tmp_path: Path, closed_port: int, pg_url: str
) -> None:
    """A seeded ledger is copied: exit 0, the rows per table and the checks made, and the
    URL shown without its password; the copy then answers `status` through --db URL."""
    source = await seeded(tmp_path, closed_port)
    result = await asyncio.to_thread(migrate, "--from", str(source), "--to", with_password(pg_url))
    assert 0 == result.exit_code, result.output
    assert SECRET not in result.output
    assert f"{urlsplit(pg_url).username}:***@" in result.stdout
    lines = result.stdout.splitlines()
    assert f"  actions     {len(SEEDED):>9}" in lines
    assert any(line.startswith("  history ") for line in lines)
    assert f"  ok  {len(SEEDED)} action summaries equal" in result.stdout
    assert "ends in its current states" in result.stdout
    async with Ledger.open(pg_url, read_only=True) as ledger:
        assert set(SEEDED) == {s.action.action_id for s in await ledger.summaries()}


async def test_migrate_json_reports_counts_and_checks(
    tmp_path: Path, closed_port: int, pg_url: str
) -> None:
    """With --json: one object with the rows copied per table (equal to the source's),
    the summaries compared and the checks, and the target without its password."""
    source = await seeded(tmp_path, closed_port)
    result = await asyncio.to_thread(
        migrate, "--from", str(source), "--to", with_password(pg_url), "--json"
    )
    assert 0 == result.exit_code, result.output
    assert SECRET not in result.output
    data = json.loads(result.stdout)
    async with Ledger.open(source, read_only=True) as ledger:
        history = sum([len(await ledger.history(action_id)) for action_id in SEEDED])
    assert len(SEEDED) == data["copied"]["actions"]
    assert history == data["copied"]["history"]
    assert {
        "actions",
        "attempts",
        "duplicates",
        "history",
        "events",
        "phones",
        "phone_addresses",
        "framework_codes",
        "webhooks",
        "gate_policies",
        "owners",
        "replies",
        "opt_out_changes",
    } == set(data["copied"])
    assert len(SEEDED) == data["summaries_compared"]
    assert "***@" in data["target"]
    assert data["verified"]


async def test_a_non_empty_target_exits_1_and_says_why(
    tmp_path: Path, closed_port: int, pg_url: str
) -> None:
    """A target ledger that holds an action: exit 1, a one-line error saying it is not
    empty, in JSON too with --json; the target keeps only its own action."""
    source = await seeded(tmp_path, closed_port)
    async with Ledger.open(pg_url) as ledger:
        await ledger.create_action("mine", SmsIntent(recipient="+12025550100", body="x"))
    result = await asyncio.to_thread(migrate, "--from", str(source), "--to", with_password(pg_url))
    assert 1 == result.exit_code
    assert "is not empty (1 actions, 1 events)" in result.stderr
    assert SECRET not in result.output
    result = await asyncio.to_thread(
        migrate, "--from", str(source), "--to", with_password(pg_url), "--json"
    )
    assert 1 == result.exit_code
    assert 1 == json.loads(result.stdout)["exit_code"]
    assert SECRET not in result.output
    conn = await asyncpg.connect(pg_url)
    try:
        assert ["mine"] == [row[0] for row in await conn.fetch("SELECT action_id FROM actions")]
    finally:
        await conn.close()


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    """Missing options, a --to that is not a PostgreSQL URL (or whose port is not a
    number), a --from that does not exist or is not a ledger: exit 2, the reason, no
    password."""
    ledger = tmp_path / "ledger.db"
    asyncio.run(_empty_ledger(ledger))
    text = tmp_path / "notes.txt"
    text.write_text("not a ledger\n")
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:5432/test"
    cases = {
        ("--to", url): "Missing option '--from'",
        ("--from", str(ledger)): "Missing option '--to'",
        ("--from", str(ledger), "--to", str(tmp_path / "new.db")): "postgresql://",
        ("--from", str(ledger), "--to", f"postgresql://u:{SECRET}@h:port/db"): "port",
        ("--from", str(tmp_path / "missing.db"), "--to", url): "does not exist",
        ("--from", str(text), "--to", url): "not a SQLite database",
    }
    for args, reason in cases.items():
        result = migrate(*args)
        assert 2 == result.exit_code, (args, result.output)
        assert reason in result.stderr, (args, result.stderr)
        assert SECRET not in result.output, args


async def _empty_ledger(path: Path) -> None:
    async with Ledger.open(path):
        pass


async def test_refusals_exit_1_without_a_password(tmp_path: Path, closed_port: int) -> None:
    """A server that does not answer, and a source that needs a migration first: exit 1,
    the reason (the way out for the old ledger), never the password, never a traceback
    (the installed command, in a process of its own)."""
    source = await seeded(tmp_path, closed_port)
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{closed_port}/test"
    done = await asyncio.to_thread(
        run_installed, ["migrate", "--from", str(source), "--to", url, "--json"]
    )
    assert 1 == done.returncode, done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "postgres:***@" in json.loads(done.stdout)["error"]
    old = tmp_path / "old.db"
    await _empty_ledger(old)
    await asyncio.to_thread(_step_back, old)
    result = await asyncio.to_thread(migrate, "--from", str(old), "--to", url)
    assert 1 == result.exit_code
    assert "run a writing command" in result.stderr
    assert SECRET not in result.output


def _step_back(path: Path) -> None:
    """Make ``path`` claim the schema version before the current one."""
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as db:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        db.execute(f"PRAGMA user_version = {version - 1}")


def test_help_says_what_it_does() -> None:
    """`migrate --help` names both options, the one transaction and the exit statuses."""
    result = migrate("--help")
    assert 0 == result.exit_code
    for words in ("--from PATH", "--to URL", "one PostgreSQL", "transaction", "Exit status"):
        assert words in result.stdout
