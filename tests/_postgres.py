"""PostgreSQL for tests: each test gets a fresh, empty schema of its own on one shared server.

The server is the one ``STAREBRAIN_TEST_PG`` names (``.ci/run`` finds or starts one and sets it),
else ``postgresql://postgres@127.0.0.1:5432/test``. A test's URL carries
``?search_path=<schema>``: asyncpg sends query parameters it does not know as server settings,
so every connection made from that URL (``asyncpg.connect``, ``asyncpg.create_pool``) lands in
the schema. The schema is dropped with everything in it when the test ends. A server that
cannot be reached fails the test, never skips it: a skipped backend is an untested backend.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest

from starebrain_actions.ledger.pg import redact

#: Names the server (a base URL, no search_path) tests put their schemas on.
TEST_PG_ENV = "STAREBRAIN_TEST_PG"
#: The server used when ``STAREBRAIN_TEST_PG`` is unset: a local one with trust auth.
DEFAULT_TEST_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
#: How long connecting may take before the test fails, in seconds.
CONNECT_TIMEOUT_S = 10.0
#: How long teardown waits for a lock on the schema (a pool the test left open), as a setting.
DROP_LOCK_TIMEOUT = "10s"


def pg_base_url() -> str:
    """The server URL tests use: ``STAREBRAIN_TEST_PG`` if set and not empty, else the default."""
    return os.environ.get(TEST_PG_ENV) or DEFAULT_TEST_PG_URL


def pg_schema_url(base_url: str, schema: str) -> str:
    """``base_url`` with ``search_path=<schema>`` in its query, replacing any search_path there;
    other query parameters (``sslmode``...) are kept."""
    parts = urlsplit(base_url)
    query = [
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "search_path"
    ]
    query.append(("search_path", schema))
    return urlunsplit(parts._replace(query=urlencode(query)))


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``, fit for an error message (the
    package's own ``ledger.pg.redact``)."""
    return redact(url)


async def _connect(base_url: str, **kwargs: object) -> asyncpg.Connection:
    """One connection to ``base_url``, or a failed test naming the URL, the error and the fix."""
    try:
        return await asyncpg.connect(base_url, timeout=CONNECT_TIMEOUT_S, **kwargs)
    except Exception as exc:  # whatever it is, the test cannot run: say why, with the URL
        pytest.fail(
            f"PostgreSQL at {redact_url(base_url)} cannot be reached: {exc!r}. Run the tests "
            "through .ci/run, which finds or starts a server (STAREBRAIN_CI_PROVISION_ONLY=1 "
            f".ci/run python -m pytest ARGS runs only those tests), or set {TEST_PG_ENV} to the "
            "URL of a server and database where this user may create schemas.",
            pytrace=False,
        )


@asynccontextmanager
async def fresh_schema(base_url: str | None = None) -> AsyncIterator[str]:
    """Create an empty schema ``t_<random hex>`` on the server, yield a URL whose connections
    land in it, then drop it with everything in it, whether the body raised or not.

    Creating and dropping each use one short connection of their own, so no connection is held
    while the test runs and a test that terminates backends cannot break the teardown.

    Raises:
        pytest.fail.Exception: the server cannot be reached (the test fails, it is not skipped).
    """
    base_url = base_url or pg_base_url()
    schema = f"t_{secrets.token_hex(8)}"
    conn = await _connect(base_url)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
    finally:
        await conn.close()
    try:
        yield pg_schema_url(base_url, schema)
    finally:
        conn = await _connect(base_url, server_settings={"lock_timeout": DROP_LOCK_TIMEOUT})
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        except asyncpg.LockNotAvailableError as exc:
            raise AssertionError(
                f"schema {schema} could not be dropped within {DROP_LOCK_TIMEOUT}: a connection "
                "the test opened still holds a lock in it (close pools and connections)"
            ) from exc
        finally:
            await conn.close()


def pg_bindir() -> Path:
    """The bin directory of the newest ``initdb``: PATH's (symlinks resolved, so that
    ``pg_ctl`` and ``postgres`` come from the same install), else ``/usr/lib/postgresql/*/bin``'s
    (as ``.ci/run`` finds it).

    Raises:
        pytest.fail.Exception: no PostgreSQL binaries (CI installs them); never a skip.
    """
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: [int(part) for part in re.findall(r"\d+", path.parent.parent.name)],
    )
    if not candidates:
        pytest.fail(
            "no PostgreSQL binaries: initdb is neither in PATH nor in /usr/lib/postgresql/*/bin;"
            " install the distribution's postgresql package (.ci/run does)",
            pytrace=False,
        )
    return candidates[-1].parent


class OwnServer:
    """A throwaway PostgreSQL server of a test's own, for tests that stop or restart it (never
    the shared one): ``initdb`` in a temp dir as an unprivileged user (initdb refuses root),
    trust auth, superuser ``postgres``, 127.0.0.1 only on a free port, its socket in the dir,
    fsync off, database ``test``. :meth:`stop` removes everything, whatever state it is in.
    """

    def __init__(self) -> None:
        self.bindir = pg_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="starebrain-pg-"))
        self.data = self.dir / "data"
        self.port = 0
        if os.getuid() == 0:
            self.user = "postgres"
            try:
                pwd.getpwnam(self.user)
            except KeyError:
                self.user = "nobody"
        else:
            self.user = ""

    @property
    def url(self) -> str:
        """The base URL of its database ``test``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def _run(self, *command: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        return subprocess.run(
            [*prefix, *command],
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), *args)

    def start(self) -> None:
        """initdb, then start on a free port (three tries), then create database ``test``.

        Raises:
            pytest.fail.Exception: initdb or the server failed (with its log).
        """
        (self.dir / "sock").mkdir()
        if self.user:
            shutil.chown(self.dir, self.user)
            shutil.chown(self.dir / "sock", self.user)
        done = self._run(
            str(self.bindir / "initdb"),
            *("-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"),
            *("--locale=C", "--no-sync"),
        )
        if done.returncode:
            pytest.fail(f"initdb as {self.user or 'this user'} failed: {done.stderr}")
        for _ in range(3):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
            # the last setting in the file wins, so a retry's port replaces the one before
            with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
                conf.write(
                    f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                    f"unix_socket_directories = '{self.dir / 'sock'}'\nfsync = off\n"
                )
            if self.start_again():
                break
        else:
            log = (self.dir / "server.log").read_text(encoding="utf-8", errors="replace")
            pytest.fail(f"our own PostgreSQL did not start; its log ends:\n{log[-2000:]}")
        done = subprocess.run(
            [str(self.bindir / "psql"), "-X", "-q", "-d", self.url.replace("/test", "/postgres")],
            input="CREATE DATABASE test;\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode:
            pytest.fail(f"CREATE DATABASE test failed on our own server: {done.stderr}")

    def start_again(self) -> bool:
        """Start the (stopped) server on its port; True once it takes connections."""
        log = str(self.dir / "server.log")
        return self._pg_ctl("-l", log, "-w", "-t", "60", "start").returncode == 0

    def crash(self) -> None:
        """Stop it at once, as a crash would (``-m immediate``: no checkpoint, every
        connection cut; the next start recovers from the WAL)."""
        self._pg_ctl("-m", "immediate", "-w", "-t", "30", "stop")

    def stop(self) -> None:
        """Stop it (kill it if pg_ctl cannot) and remove its dir."""
        pid_file = self.data / "postmaster.pid"
        stopping = pid_file.exists()
        if stopping and self._pg_ctl("-m", "immediate", "-w", "-t", "30", "stop").returncode:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)
