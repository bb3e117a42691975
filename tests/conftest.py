"""Shared fixtures: an ADB key pair, simulated phones to talk to with adb-shell, and a fresh
PostgreSQL schema per test."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import structlog
from adb_shell.auth.keygen import keygen
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._apps import AOSP_MESSAGING, GOOGLE_MESSAGES
from tests._postgres import TEST_PG_ENV, OwnServer, fresh_schema

PhoneFactory = Callable[..., Awaitable[SimulatedPhone]]
#: Google Messages' profile, but writing its row OUTBOX first and SENT once the radio sent it
#: (no app is known to: every real profile writes SENT before sending). For the tests of a
#: message queued where the shell cannot see it (a `stuck-outbox` row stays OUTBOX, not SENT).
OUTBOX_FIRST = attrs.evolve(GOOGLE_MESSAGES, optimistic_sent=False)
#: AOSP Messaging's profile, writing its row OUTBOX first (as ``OUTBOX_FIRST``).
AOSP_OUTBOX_FIRST = attrs.evolve(AOSP_MESSAGING, optimistic_sent=False)


@pytest.fixture(autouse=True)
def _settle_windows_of_the_simulated_phones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's settle windows for the simulated phones (their radios answer within tens of
    milliseconds, their framework updates a failed row 50 ms after writing it), for every
    ``starebrain send``/``mcp`` a test runs, in process or as a child; the defaults (30
    minutes, 0.5 s) fit a real phone. A test of the defaults removes the variables."""
    monkeypatch.setenv("STAREBRAIN_SETTLE_AFTER", "0.3")
    monkeypatch.setenv("STAREBRAIN_FRAMEWORK_SETTLE_AFTER", "0.2")


@pytest.fixture(scope="session")
def adb_key_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh ADB private key (mode 0600) with its public key alongside as ``<path>.pub``."""
    path = tmp_path_factory.mktemp("adbkey") / "adbkey"
    keygen(str(path))
    os.chmod(path, 0o600)
    return path


@pytest.fixture(scope="session")
def adb_signer(adb_key_path: Path) -> PythonRSASigner:
    """An adb-shell signer for ``adb_key_path``."""
    return PythonRSASigner.FromRSAKeyPath(str(adb_key_path))


@pytest.fixture
def authorized_keys_path(tmp_path: Path, adb_key_path: Path) -> Path:
    """An ``adb_keys`` file that authorizes ``adb_key_path``."""
    path = tmp_path / "adb_keys"
    public_key = Path(f"{adb_key_path}.pub").read_text(encoding="utf-8").strip()
    path.write_text(public_key + "\n", encoding="utf-8")
    return path


@pytest.fixture
async def phone_factory(tmp_path: Path, authorized_keys_path: Path) -> AsyncIterator[PhoneFactory]:
    """Start simulated phones with custom settings; every one is stopped at teardown.

    Each phone gets its own store file unless ``store_path`` is given.
    """
    phones: list[SimulatedPhone] = []

    async def factory(**kwargs: Any) -> SimulatedPhone:
        kwargs.setdefault("store_path", tmp_path / f"sms-{len(phones)}.db")
        kwargs.setdefault("authorized_keys_path", authorized_keys_path)
        kwargs.setdefault("host", "127.0.0.1")
        kwargs.setdefault("port", 0)
        kwargs.setdefault("send_delay_ms", 0)
        phone = SimulatedPhone(**kwargs)
        await phone.start()
        phones.append(phone)
        return phone

    yield factory
    for phone in phones:
        await phone.stop()


@pytest.fixture
async def phone(phone_factory: PhoneFactory) -> SimulatedPhone:
    """A started simulated phone in shell mode on a free port, with a fresh store and no delay."""
    return await phone_factory()


_SESSION_SERVER: OwnServer | None = None


def pytest_configure(config: pytest.Config) -> None:
    """PostgreSQL for the tests that need it: ``STAREBRAIN_TEST_PG`` if set (``.ci/run``
    sets it), else the server on 127.0.0.1:5432 if one listens, else a throwaway server of
    the session's own from the distribution's binaries (so that a plain ``pytest`` works on
    a machine with PostgreSQL installed but not running), stopped at the end. With none of
    these, the tests that need PostgreSQL fail, they are not skipped. Run before test workers
    start (``pytest -n``), which find the server in the environment they inherit."""
    global _SESSION_SERVER
    own = os.environ.get("STAREBRAIN_TEST_PG_OWN") == "1"  # ignore 5432 (to try this path)
    if os.environ.get(TEST_PG_ENV) or (not own and _default_server_listens()):
        return
    if not (shutil.which("initdb") or any(Path("/usr/lib/postgresql").glob("*/bin/initdb"))):
        return
    server = OwnServer()
    try:
        server.start()
    except BaseException:
        server.stop()
        return
    _SESSION_SERVER = server
    os.environ[TEST_PG_ENV] = server.url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``long(seconds)`` first, the longest first, the rest in their order.
    pytest-xdist runs tests in collection order, so a long test collected last ran on alone
    while the other workers had finished (the benchmarks' test, 46 s, ended a run 32 s after
    them); first, the long ones run beside the short ones, and with ``--dist worksteal`` the
    other workers take the short tests queued behind them. Stable and the same in every
    worker, as xdist requires."""

    def seconds(item: pytest.Item) -> float:
        marker = item.get_closest_marker("long")
        return -float(marker.args[0]) if marker is not None else 0.0

    items.sort(key=seconds)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the session's own PostgreSQL, if this process started one."""
    if _SESSION_SERVER is not None:
        _SESSION_SERVER.stop()


def _default_server_listens() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A PostgreSQL URL whose connections land in a fresh, empty schema of this test's own,
    dropped at teardown. The server is ``STAREBRAIN_TEST_PG``'s (``.ci/run`` provides one); if
    it cannot be reached the test fails, it is not skipped."""
    async with fresh_schema() as url:
        yield url


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    """Code under test may configure structlog for its process (the CLI, the demo); keep that
    from leaking into other tests."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """Code under test may give the root logger handlers and a level: the CLI, and the MCP
    SDK's server, which a test builds in process (``MCPServer`` calls ``logging.basicConfig``
    with a ``RichHandler`` when the root logger has none). Left there, a later test's CLI run
    in the same worker printed a warning through it into its output."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


async def until(
    condition: Callable[[], Awaitable[bool]], what: str, *, within: float = 30.0
) -> None:
    """Wait for ``await condition()`` to hold, looked at every 20 ms (the ledger and the
    simulated phone's store offer no event to wait on).

    Raises:
        AssertionError: it did not within ``within`` seconds (naming ``what``).
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not await condition():
        if loop.time() > end:
            raise AssertionError(f"never within {within} s: {what}")
        await asyncio.sleep(0.02)


async def until_time(moment: datetime, *, within: float = 60.0) -> None:
    """Wait until the wall clock, which the ledger reads, has passed ``moment`` (a deadline
    the test lets pass): the clock is the condition here, read every 20 ms.

    Raises:
        AssertionError: it did not within ``within`` seconds.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while datetime.now(UTC) < moment:
        if loop.time() > end:
            raise AssertionError(f"the clock never reached {moment}")
        await asyncio.sleep(min(0.02, max(0.0, (moment - datetime.now(UTC)).total_seconds())))
