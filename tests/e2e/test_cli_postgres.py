"""The command line on a PostgreSQL ledger (issue 13): ``--db`` and ``$STAREBRAIN_DB`` take a
``postgresql://`` URL, reads print what they print on SQLite, the password is never shown, and
a server that cannot be reached or a schema with no ledger is a clear error, not a traceback."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from click.testing import CliRunner, Result

from starebrain_actions.cli.main import main, nightly_main
from tests.e2e.conftest import SEEDED, run_installed, seed_ledger

#: A password the server ignores (trust authentication) but the URL carries.
PASSWORD = "s3cret"


def with_password(url: str, password: str = PASSWORD) -> str:
    """``url`` with ``password`` for its user."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    host = parts.hostname or "127.0.0.1"
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}{port}"))


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """``starebrain ARGS`` in-process; stdout and stderr are both in ``output``."""
    return CliRunner(env=env).invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
async def seeded_pg(pg_url: str, closed_port: int) -> str:
    """A fresh schema holding the actions of ``SEEDED``, as a URL with a password in it."""
    url = with_password(pg_url)
    await seed_ledger(url, waiting_device=f"127.0.0.1:{closed_port}")
    return url


def test_db_option_and_environment_take_a_url(
    seeded_pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same URL given with --db or in $STAREBRAIN_DB reads the same PostgreSQL ledger."""
    monkeypatch.delenv("STAREBRAIN_DB", raising=False)
    by_option = invoke("--db", seeded_pg, "list", "--json")
    assert 0 == by_option.exit_code, by_option.output
    assert SEEDED == {
        item["action"]["action_id"]: item["status"] for item in json.loads(by_option.stdout)
    }
    by_env = invoke("list", "--json", env={"STAREBRAIN_DB": seeded_pg})
    assert 0 == by_env.exit_code, by_env.output
    assert by_option.stdout == by_env.stdout
    status = invoke("status", "ok-1", "--json", env={"STAREBRAIN_DB": seeded_pg})
    assert "SUCCEEDED" == json.loads(status.stdout)["status"]


def test_the_password_is_never_printed(seeded_pg: str, closed_port: int) -> None:
    """Reads, rulings, errors, the nightly report and debug logs on a URL with a password
    name the ledger as ``user:***@host``: the password itself appears in no output."""
    commands = [
        ["status", "ok-dup"],
        ["status", "ok-dup", "--json"],
        ["status", "no-such-action"],
        ["history", "bad-text"],
        ["history", "no-such-action", "--json"],
        ["list"],
        ["review", "--json"],
        ["resolve", "waiting", "--as", "sent", "--reason", "seen", "--expect", "999"],
        ["nightly", "--json"],
        ["nightly", "--dry-run"],
        ["--log-level", "debug", "list"],
    ]
    seen: list[str] = []
    for args in commands:
        result = invoke("--db", seeded_pg, *args)
        seen.append(result.output)
        assert PASSWORD not in result.output, args
    assert any("postgres:***@" in text for text in seen)
    # a real process: its log lines on stderr too, and a server that does not answer
    unreachable = with_password(f"postgresql://postgres@127.0.0.1:{closed_port}/test")
    for db in (seeded_pg, unreachable):
        done = run_installed(["--db", db, "--log-level", "debug", "nightly"])
        assert PASSWORD not in done.stdout + done.stderr


def normalised(text: str) -> str:
    """``text`` with what differs between two seedings of the same actions (attempt ids,
    times) replaced by placeholders, numbered in order of appearance."""
    found: dict[str, str] = {}

    def token(kind: str) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            return found.setdefault(match.group(0), f"<{kind}{len(found)}>")

        return replace

    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    text = re.sub(uuid, token("id"), text)
    stamp = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?"
    return re.sub(stamp, "<time>", text)


def test_status_and_history_print_the_same_on_both_backends(
    pg_url: str, ledger_path: Path, closed_port: int
) -> None:
    """The same actions recorded on SQLite and on PostgreSQL: ``status`` and ``history`` (text
    and JSON) print the same, the SQLite file read without asyncio, the URL through the async
    ledger."""
    device = f"127.0.0.1:{closed_port}"
    asyncio.run(seed_ledger(ledger_path, waiting_device=device))
    asyncio.run(seed_ledger(pg_url, waiting_device=device))
    for action_id in SEEDED:
        for args in (["status", action_id], ["history", action_id]):
            for extra in ([], ["--json"], ["--show-private"]):
                on_file = invoke("--db", str(ledger_path), *args, *extra)
                on_server = invoke("--db", pg_url, *args, *extra)
                assert on_file.exit_code == on_server.exit_code, (args, on_server.output)
                assert normalised(on_file.output) == normalised(on_server.output), (args, extra)


def test_an_unreachable_server_is_a_clear_error(closed_port: int) -> None:
    """A URL nobody answers: every command says it cannot reach the ledger, with no
    traceback; reads exit 1 and the nightly job 2, as for an unusable ledger file."""
    url = with_password(f"postgresql://postgres@127.0.0.1:{closed_port}/test")
    for args, code in ((["status", "x"], 1), (["list"], 1), (["nightly"], 2)):
        done = run_installed(["--db", url, *args])
        assert code == done.returncode, (args, done.stderr)
        assert "cannot reach" in done.stderr
        assert "Traceback" not in done.stderr
        assert f"postgres:***@127.0.0.1:{closed_port}" in done.stderr


def test_a_schema_without_a_ledger_is_refused_and_left_empty(pg_url: str) -> None:
    """Reads and the nightly job on an empty schema say it holds no ledger and create none
    (a URL has no "no ledger at PATH" check: the ledger's own error tells)."""
    url = pg_url
    for args, code in ((["status", "x"], 1), (["history", "x"], 1), (["review"], 1)):
        result = invoke("--db", url, *args)
        assert code == result.exit_code, (args, result.output)
        assert "holds no ledger" in result.output
    nightly = CliRunner().invoke(nightly_main, ["--db", url], catch_exceptions=False)
    assert 2 == nightly.exit_code
    assert "holds no ledger" in nightly.output
    assert 0 == asyncio.run(table_count(url))


async def table_count(url: str) -> int:
    """How many tables the schema of ``url`` (its ``search_path``) holds."""
    schema = urlsplit(url).query.partition("search_path=")[2]
    conn = await asyncpg.connect(url.partition("?")[0])
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", schema
        )
    finally:
        await conn.close()
    return count


def test_help_says_a_path_or_a_url() -> None:
    """``--db``'s help, in ``starebrain``, the nightly script and ``starebrain mcp``, says it
    takes a file path or a postgresql:// URL."""
    for command, args in (
        (main, ["--help"]),
        (nightly_main, ["--help"]),
        (main, ["mcp", "--help"]),
    ):
        text = " ".join(CliRunner().invoke(command, args).output.split())
        assert "SQLite file path, or a postgresql://" in text, args
