"""End-to-end fixtures: real ledgers in known states, the CLI runner, the installed command,
and a loopback port nobody listens on.

Backends (issue 13): a test whose fixtures reach ``ledger_target`` (``seeded_ledger`` does,
and ``run_cli`` follows it) runs twice, on a SQLite file and on a fresh PostgreSQL schema,
unless it names ``ledger_path`` among its own arguments: that says it needs the file itself
(its bytes, its mode, a lock file beside it, ``sqlite3``), and it stays SQLite's.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import structlog
from click.testing import CliRunner, Result

from starebrain_actions import (
    Ledger,
    MatchVerdict,
    RetryPolicy,
    SmsIntent,
    confirm_delivery,
    fail_delivery,
    try_accept,
)
from starebrain_actions.cli.main import main
from starebrain_actions.ledger.pg import is_url
from tests._postgres import fresh_schema

#: What ``seeded_ledger`` holds: action id -> derived status.
SEEDED = {
    "ok-1": "SUCCEEDED",
    "ok-dup": "SUCCEEDED",
    "bad-text": "MISMATCH",
    "spent": "FAILED",
    "waiting": "UNKNOWN",
    "planned": "PLANNED",
}
RECIPIENT = "+12025550100"
BODY = "Your code is 4821"

RunCli = Callable[..., Result]
#: Where a ledger lives: a SQLite file, or a PostgreSQL URL.
Target = Path | str
BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests reaching ``ledger_target`` run on both backends, except those that name
    ``ledger_path`` themselves (they reach into the SQLite file)."""
    if "ledger_target" not in metafunc.fixturenames:
        return
    own = inspect.signature(metafunc.function).parameters
    backends = ("sqlite",) if "ledger_path" in own else BACKENDS
    metafunc.parametrize("ledger_target", backends, indirect=True)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """The CLI configures structlog for its process; in-process runs must not leak that
    configuration (its level filter) into the other tests."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """Where the test's ledger file lives (not created yet)."""
    return tmp_path / "ledger.db"


@pytest.fixture
async def ledger_target(request: pytest.FixtureRequest, ledger_path: Path) -> AsyncIterator[Target]:
    """Where the test's ledger lives: ``ledger_path`` (not created yet), or the URL of a fresh,
    empty PostgreSQL schema dropped after the test."""
    if request.param == "sqlite":
        yield ledger_path
        return
    async with fresh_schema() as url:
        yield url


@pytest.fixture
def closed_port() -> int:
    """A loopback TCP port with nothing listening on it (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def run_cli(
    request: pytest.FixtureRequest, ledger_path: Path, monkeypatch: pytest.MonkeyPatch
) -> RunCli:
    """Invoke ``starebrain --db <ledger> ARGS...`` in-process with click's runner: the test's
    ``ledger_target`` when it has one (either backend), else ``ledger_path``."""
    monkeypatch.delenv("STAREBRAIN_DB", raising=False)
    target: Target = (
        request.getfixturevalue("ledger_target")
        if "ledger_target" in request.fixturenames
        else ledger_path
    )

    def run(*args: str, db: Target | None = None) -> Result:
        runner = CliRunner()
        return runner.invoke(main, ["--db", str(db or target), *args], catch_exceptions=False)

    return run


def starebrain_command() -> list[str]:
    """The installed ``starebrain`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "starebrain"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from starebrain_actions.cli.main import main; main()"]


async def spawn_interruptible(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """Start ``argv`` as a child that a test may interrupt with SIGINT, whatever this process
    was started with. A shell without job control starts a background job with SIGINT ignored
    (bash, POSIX "Signals": ``cmd &``), the child inherits ``SIG_IGN`` across exec, and Python
    then installs no KeyboardInterrupt handler (nor asyncio's Runner its own), so a SIGINT sent
    to it does nothing: a ``.ci/run`` started that way saw every Ctrl-C test time out. A handler
    of our own is reset to ``SIG_DFL`` by exec, so it is held only while the child is forked;
    this process keeps ignoring SIGINT as it was told to."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, lambda _signum, _frame: None)
    try:
        return await asyncio.create_subprocess_exec(*argv, **kwargs)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_installed(
    args: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the installed command in a real process."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("STAREBRAIN_DB", None)
    return subprocess.run(
        [*starebrain_command(), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def json_of(result: Result) -> Any:
    """Parse the runner's stdout as JSON."""
    return json.loads(result.stdout)


async def seed_ledger(path: Target, *, waiting_device: str) -> None:
    """Fill a ledger with one action per interesting state (see ``SEEDED``)."""
    intent = SmsIntent(recipient=RECIPIENT, body=BODY)
    one_try = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=1,
        grace_window=timedelta(seconds=60),
    )
    matched = MatchVerdict(matched=True)
    mangled = MatchVerdict(matched=False, reason="body differs", details={"body": "Your cod 4821"})
    old = datetime.now(UTC) - timedelta(hours=3)
    async with Ledger.open(path) as ledger:
        for action_id in ("ok-1", "ok-dup"):
            await ledger.create_action(action_id, intent, one_try)
            record = await ledger.begin_attempt(action_id, "10.0.0.1:5555")
            confirm = confirm_delivery(
                record, provider_object_id=len(action_id), now=ledger.now(), evidence={}
            )
            await ledger.apply(confirm)
            await ledger.apply(try_accept(confirm.after, matched, now=ledger.now()))
        await ledger.record_duplicate(
            (await ledger.attempts("ok-dup"))[0].dispatch_id,
            provider_object_id=99,
            evidence={"address": RECIPIENT, "body": BODY},
        )
        await ledger.create_action("bad-text", intent, one_try)
        record = await ledger.begin_attempt("bad-text", "10.0.0.1:5555")
        confirm = confirm_delivery(record, provider_object_id=7, now=ledger.now())
        await ledger.apply(confirm)
        await ledger.apply(try_accept(confirm.after, mangled, now=ledger.now()))
        await ledger.create_action("spent", intent, one_try)
        record = await ledger.begin_attempt("spent", "10.0.0.1:5555")
        await ledger.apply(
            fail_delivery(record, reason="the phone marked the message failed", now=ledger.now())
        )
        await ledger.create_action("waiting", intent, one_try, now=old)
        await ledger.begin_attempt("waiting", waiting_device, now=old)
        await ledger.create_action("planned", intent, one_try)


@pytest.fixture
async def seeded_ledger(ledger_target: Target, closed_port: int) -> Target:
    """A ledger holding the actions of ``SEEDED``; the in-flight one is on ``closed_port``.
    A file path, or on the PostgreSQL run a URL (see the module's docstring)."""
    await seed_ledger(ledger_target, waiting_device=f"127.0.0.1:{closed_port}")
    return ledger_target


def without_file_override(command: list[str]) -> list[str]:
    """``command`` run so that permission bits apply (root drops its override capabilities)."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permission bits cannot apply")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", *command]


def history_rows(target: Target) -> int:
    """Rows in the ledger's append-only history (a SQLite file, or a PostgreSQL URL), read
    around the product's own code."""
    if is_url(str(target)):

        async def count() -> int:
            db = await asyncpg.connect(str(target))
            try:
                return int(await db.fetchval("SELECT count(*) FROM history"))
            finally:
                await db.close()

        return asyncio.run(count())
    with sqlite3.connect(target) as db:
        return int(db.execute("SELECT count(*) FROM history").fetchone()[0])


def at(text: str) -> datetime:
    """A time as the CLI prints it (``…Z``)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def default_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's own settle times (30 minutes, 0.5 s), not the tests' short ones."""
    monkeypatch.delenv("STAREBRAIN_SETTLE_AFTER", raising=False)
    monkeypatch.delenv("STAREBRAIN_FRAMEWORK_SETTLE_AFTER", raising=False)
