"""Secrets in a PostgreSQL URL never reach the nightly header, its `--report` JSON, its
archived Markdown, `migrate`'s output or an error; a malformed URL is a one-line usage error;
the nightly lock file is never followed through a symlink nor used unless a regular file."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner, Result

from starebrain_actions.cli.main import main
from starebrain_actions.core.exceptions import LedgerUnavailable
from starebrain_actions.orchestration.nightly.lock import lock_path_for, nightly_lock
from starebrain_actions.orchestration.nightly.report import build_report
from tests.e2e.conftest import SEEDED, run_installed, seed_ledger, starebrain_command

#: A password the local server (trust auth) accepts and ignores: it must never be printed.
SECRET = "Qz7-hunter2-s3cret"


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run `starebrain ARGS` in-process (no traceback may escape)."""
    return CliRunner(env=env).invoke(main, list(args), catch_exceptions=False)


def run_with_env(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the installed command in a real process, with ``env`` (``$STAREBRAIN_DB`` kept)."""
    full_env = {key: value for key, value in os.environ.items() if key != "STAREBRAIN_DB"}
    return subprocess.run(
        [*starebrain_command(), *args],
        capture_output=True,
        text=True,
        env={**full_env, **env},
        timeout=60,
        check=False,
    )


def secret_forms(pg_url: str) -> dict[str, str]:
    """``pg_url`` with :data:`SECRET` in each place a URL can carry a password."""
    parts = urlsplit(pg_url)
    with_user_password = pg_url.replace(f"{parts.username}@", f"{parts.username}:{SECRET}@", 1)
    return {
        "user info": with_user_password,
        "query": f"{pg_url}&password={SECRET}",
        "both": f"{with_user_password}&password={SECRET}&sslpassword={SECRET}",
    }


@pytest.mark.parametrize("form", ["user info", "query", "both"])
async def test_nightly_shows_no_password_anywhere(
    form: str, pg_url: str, closed_port: int, tmp_path: Path
) -> None:
    """`nightly --report --archive` on a URL holding a password: the header, the JSON report,
    the Markdown archive, stdout and stderr show the URL masked, never the password."""
    await seed_ledger(pg_url, waiting_device=f"127.0.0.1:{closed_port}")
    url = secret_forms(pg_url)[form]
    report, archive = tmp_path / "report.json", tmp_path / "archive"
    archive.mkdir()
    done = await asyncio.to_thread(
        cli, "--db", url, "nightly", "--report", str(report), "--archive", str(archive)
    )
    assert done.exit_code in (0, 1), done.output
    markdown = [path.read_text(encoding="utf-8") for path in archive.iterdir()]
    assert 1 == len(markdown)
    shown = json.loads(report.read_text(encoding="utf-8"))["ledger"]
    for text in (done.stdout, done.stderr, report.read_text(encoding="utf-8"), markdown[0]):
        assert SECRET not in text
    assert "***" in shown and shown in done.stdout and shown in markdown[0]
    assert urlsplit(pg_url).path in shown  # the database is still named
    json_run = await asyncio.to_thread(cli, "--db", url, "nightly", "--json")
    assert SECRET not in json_run.output
    assert shown == json.loads(json_run.stdout)["ledger"]


def test_report_built_from_a_raw_url_shows_no_password() -> None:
    """`build_report`, the report's pure builder, masks a URL it is given unmasked too."""
    url = f"postgresql://sb:{SECRET}@db/sms?password={SECRET}"
    report = build_report(
        ledger_path=url, now=datetime.now(UTC), duration_s=0.0, devices=[], summaries=[]
    )
    assert "postgresql://sb:***@db/sms?password=***" == report.ledger


@pytest.mark.parametrize("form", ["user info", "query"])
def test_errors_show_no_password(form: str, closed_port: int) -> None:
    """A server that cannot be reached, or a database that does not exist: the error, as
    text and as JSON, names the ledger masked."""
    for url in (
        f"postgresql://postgres@127.0.0.1:{closed_port}/test?search_path=x",
        "postgresql://postgres@127.0.0.1:5432/no_such_db_p3?search_path=x",
    ):
        with_secret = secret_forms(url)[form]
        for args in (["status", "A-1"], ["status", "A-1", "--json"], ["nightly", "--json"]):
            done = cli("--db", with_secret, *args)
            assert done.exit_code in (1, 2), done.output
            assert SECRET not in done.output
            assert "***" in done.output


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://h:notaport/db", "the port is not a number"),
        (f"postgresql://u:{SECRET}@h:notaport/db", "the port is not a number"),
        ("postgresql://h1,h2/db", "several hosts are not supported"),
        (f"postgresql://u:{SECRET}@h1:5432,h2:5432/db", "several hosts are not supported"),
        (f"postgresql://u:pa/{SECRET}@h/db", "percent-encode it"),
    ],
)
def test_malformed_url_is_a_one_line_usage_error(url: str, problem: str) -> None:
    """A malformed URL in --db or $STAREBRAIN_DB exits 2 with one line on stderr naming the
    problem (no traceback, no password); with --json the error object is on stdout."""
    for argv, env in (
        (["--db", url, "status", "A-1"], {}),
        (["status", "A-1"], {"STAREBRAIN_DB": url}),
        (["--db", url, "nightly"], {}),
    ):
        done = run_with_env(argv, env)
        assert 2 == done.returncode, done.stderr
        assert 1 == len(done.stderr.splitlines()), done.stderr
        assert problem in done.stderr and "--db" in done.stderr
        assert "Traceback" not in done.stderr and SECRET not in done.stderr
        as_json = run_with_env([*argv, "--json"], env)
        assert 2 == as_json.returncode
        error = json.loads(as_json.stdout)
        assert 2 == error["exit_code"] and problem in error["error"]
        assert SECRET not in as_json.stdout + as_json.stderr


def test_malformed_url_refused_by_mcp_and_migrate(tmp_path: Path) -> None:
    """`mcp --db` and `migrate --to` refuse a malformed URL the same way: exit 2, no
    traceback, no password."""
    url = f"postgresql://u:{SECRET}@h:notaport/db"
    ledger = tmp_path / "ledger.db"
    ledger.write_bytes(b"")
    for argv in (["mcp", "--db", url], ["migrate", "--from", str(ledger), "--to", url]):
        done = run_installed(argv)
        assert 2 == done.returncode, done.stderr
        assert "the port is not a number" in done.stderr
        assert "Traceback" not in done.stderr and SECRET not in done.stderr


async def test_migrate_suggests_a_url_that_works_and_how_to_give_the_password(
    tmp_path: Path, closed_port: int, pg_url: str
) -> None:
    """After a copy to a URL holding a password, `migrate` suggests the URL without it (no
    `***` to paste) and names $PGPASSWORD and ~/.pgpass; that URL opens the copy."""
    source = tmp_path / "ledger.db"
    await seed_ledger(source, waiting_device=f"127.0.0.1:{closed_port}")
    url = secret_forms(pg_url)["both"]
    done = await asyncio.to_thread(cli, "migrate", "--from", str(source), "--to", url)
    assert 0 == done.exit_code, done.output
    assert SECRET not in done.output
    assert f"--db '{pg_url}'" in done.stdout
    assert "$PGPASSWORD" in done.stdout and "~/.pgpass" in done.stdout
    action = sorted(SEEDED)[0]
    status = await asyncio.to_thread(
        cli, "--db", pg_url, "status", action, "--json", env={"PGPASSWORD": SECRET}
    )
    assert 0 == status.exit_code, status.output
    assert action == json.loads(status.stdout)["action"]["action_id"]


# --------------------------------------------------------------------------- the lock


def lock_refusal(ledger: Path) -> str:
    """What :func:`nightly_lock` of ``ledger`` says when it refuses to take the lock."""
    try:
        with nightly_lock(ledger):
            pytest.fail("the lock was taken")
    except LedgerUnavailable as exc:
        return str(exc)


async def _ledger(tmp_path: Path, closed_port: int) -> Path:
    path = tmp_path / "ledger.db"
    await seed_ledger(path, waiting_device=f"127.0.0.1:{closed_port}")
    return path


async def test_lock_symlink_to_a_file_is_refused_and_its_target_untouched(
    tmp_path: Path, closed_port: int
) -> None:
    """A symlink planted at the lock path is refused (the library and `nightly`, exit 2);
    the file it points to keeps its bytes and mode."""
    ledger = await _ledger(tmp_path, closed_port)
    victim = tmp_path / "victim.conf"
    victim.write_bytes(b"do not truncate me\n")
    victim.chmod(0o640)
    lock_path_for(ledger).symlink_to(victim)
    assert re.search(r"is not a regular file.*\(a symlink\)", lock_refusal(ledger))
    done = await asyncio.to_thread(cli, "--db", str(ledger), "nightly")
    assert 2 == done.exit_code, done.output
    assert "not a regular file" in done.stderr and "a symlink" in done.stderr
    assert b"do not truncate me\n" == victim.read_bytes()
    assert 0o640 == victim.stat().st_mode & 0o777
    assert lock_path_for(ledger).is_symlink()


async def test_lock_dangling_symlink_creates_nothing(tmp_path: Path, closed_port: int) -> None:
    """A symlink to a missing file is refused, and no file is created where it points."""
    ledger = await _ledger(tmp_path, closed_port)
    target = tmp_path / "elsewhere" / "created-by-the-lock"
    target.parent.mkdir()
    lock_path_for(ledger).symlink_to(target)
    assert re.search("a symlink", lock_refusal(ledger))
    assert not target.exists()


async def test_lock_directory_is_refused(tmp_path: Path, closed_port: int) -> None:
    """A directory at the lock path is refused with a clear message, and left as it is."""
    ledger = await _ledger(tmp_path, closed_port)
    lock_path_for(ledger).mkdir()
    (lock_path_for(ledger) / "keep").write_text("x")
    assert re.search(r"is not a regular file.*\(a directory\)", lock_refusal(ledger))
    assert ["keep"] == [path.name for path in lock_path_for(ledger).iterdir()]


async def test_lock_fifo_is_refused_without_blocking(tmp_path: Path, closed_port: int) -> None:
    """A FIFO at the lock path is refused at once (opening it does not wait for a reader),
    and nothing is written into it."""
    ledger = await _ledger(tmp_path, closed_port)
    os.mkfifo(lock_path_for(ledger))
    probe = "\n".join(
        [
            "import sys",
            "from pathlib import Path",
            "from starebrain_actions.orchestration.nightly.lock import nightly_lock",
            "from starebrain_actions.core.exceptions import LedgerUnavailable",
            "try:",
            "    with nightly_lock(Path(sys.argv[1])):",
            "        print('locked')",
            "except LedgerUnavailable as exc:",
            "    print(exc)",
        ]
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [os.environ.get("PYTHON", "python"), "-c", probe, str(ledger)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert "is not a regular file" in done.stdout and "(a FIFO)" in done.stdout, done
    reader = os.open(lock_path_for(ledger), os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert b"" == os.read(reader, 64)
    finally:
        os.close(reader)


async def test_lock_regular_file_still_works_and_is_0600(tmp_path: Path, closed_port: int) -> None:
    """The usual case is unchanged: a new lock file is created 0600 and holds the pid."""
    ledger = await _ledger(tmp_path, closed_port)
    with nightly_lock(ledger) as path:
        assert f"{os.getpid()}\n" == path.read_text()
        assert 0o600 == path.stat().st_mode & 0o777


@pytest.mark.parametrize("form", ["user info", "query"])
async def test_a_password_in_argv_is_warned_of(form: str, pg_url: str) -> None:
    """A password in `--db` on the command line (which `ps` shows every user) gets a warning
    on stderr naming the ways that keep it out of sight; the same URL in $STAREBRAIN_DB, or a
    URL without a password, gets none. The command itself runs as ever."""
    from starebrain_actions import Ledger

    async with Ledger.open(pg_url):
        pass  # an empty ledger to list
    with_secret = secret_forms(pg_url)[form]
    warned = await asyncio.to_thread(run_with_env, ["--db", with_secret, "list"], {})
    assert 0 == warned.returncode, warned.stderr
    assert "holds a password" in warned.stderr
    assert "$PGPASSWORD" in warned.stderr and "$STAREBRAIN_DB" in warned.stderr
    assert SECRET not in warned.stderr + warned.stdout
    quiet = [
        await asyncio.to_thread(run_with_env, ["list"], {"STAREBRAIN_DB": with_secret}),
        await asyncio.to_thread(run_with_env, ["--db", pg_url, "list"], {}),
    ]
    for done in quiet:
        assert 0 == done.returncode, done.stderr
        assert "holds a password" not in done.stderr
