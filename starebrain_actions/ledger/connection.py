"""An open ledger: opening (creating, migrating) it, and the connection every operation runs on.

Every write is one ``BEGIN IMMEDIATE`` transaction run as one call on aiosqlite's worker
thread (one thread hop per operation, however many statements it holds). The connection is
in autocommit mode, WAL, ``synchronous=FULL``: a receipt must survive a power cut as well as
a crash, because it is committed *before* the SMS leaves and is the only proof an attempt was
made; with ``NORMAL`` the last commits of a WAL database may roll back on power loss.

Opening never harms a file that is not a ledger: a file that is not SQLite, or a SQLite
database with other tables, is refused before anything is written to it. A new ledger file is
created mode 0600 (it holds phone numbers and bodies); ``read_only`` opens SQLite read-only
(``mode=ro``) for auditors and backups, and never migrates.

The checks of a file before and after SQLite opens it live in ``read``, which imports neither
asyncio nor aiosqlite; a ``postgresql://`` URL opens through ``postgres`` instead, and the same
``work(db)`` functions then run there. :class:`LedgerConnection` is the ``Ledger``'s base: its
parts (``receipts``, ``updates``, ``rulings``, ``queries``, ``devices``) run their work through
``_run`` and ``_write`` and know nothing else of the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import aiosqlite

from starebrain_actions.core.exceptions import LedgerError, LedgerUnavailable, SchemaTooNew
from starebrain_actions.core.model import Action, require_aware
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.read import (
    OPEN_RETRY_FIRST_S,
    OPEN_RETRY_LONGEST_S,
    FileKind,
    WalIndexUnavailable,
    check_path,
    check_schema,
    connecting,
    has_wal,
    ledger_error,
    load_action,
    migration_files,
    read_only_uri,
    retry_open,
    sqlite_errors,
)

if TYPE_CHECKING:
    from starebrain_actions.core.policy import Policy
    from starebrain_actions.ledger.postgres import PgBackend

T = TypeVar("T")
#: The kind of ledger an open makes (``Ledger``, or a subclass of it).
L = TypeVar("L", bound="LedgerConnection")

#: Actions kept in memory per ledger handle (actions never change once created): enough for
#: the watched attempts of a large reconcile pass (about 1 KB each).
_ACTION_CACHE: Final = 32_768


class LedgerConnection:
    """An open ledger's connection (SQLite) or backend (PostgreSQL), and how each operation
    runs on it: reads with ``_run``, writes with ``_write`` (one transaction, one thread hop),
    plus the ledger's clock, cross-process locks, read snapshots and cache of actions."""

    def __init__(
        self,
        connection: aiosqlite.Connection | None,
        path: Path | str,
        clock: Callable[[], datetime],
        *,
        backend: PgBackend | None = None,
    ) -> None:
        #: the SQLite connection (None on PostgreSQL)
        self._connection = connection
        #: the PostgreSQL backend (None on SQLite)
        self._pg = backend
        #: the file, or (PostgreSQL) the URL without its password
        self.path = path
        self._clock = clock
        # Actions never change once created and are never deleted: safe to keep.
        self._actions: dict[str, Action] = {}
        #: the ledger's own id once read (it never changes: ``DeviceReads.ledger_id``)
        self._ledger_id: str | None = None
        #: operations queued or running on the worker thread (see ``_write``'s ``inline``)
        self._on_worker = 0
        #: the busy timeout set on the connection, in ms
        self._busy_ms = 10_000
        #: the policy gate's rules (``core.policy.Policy``): checked by ``begin_attempt``
        #: before every attempt; None: no gate
        self.gate: Policy | None = None

    def _remember(self, action: Action) -> Action:
        if len(self._actions) >= _ACTION_CACHE:
            self._actions.clear()
        self._actions[action.action_id] = action
        return action

    def _action(self, db: sqlite3.Connection, action_id: str) -> Action:
        cached = self._actions.get(action_id)
        return cached if cached is not None else self._remember(load_action(db, action_id))

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return "sqlite" if self._pg is None else "postgresql"

    def now(self) -> datetime:
        """The ledger's clock (UTC)."""
        return require_aware("clock()", self._clock())

    # ------------------------------------------------------------------ running work

    async def _prepare_with_retries(
        self, file: Path, busy_timeout_s: float, *, read_only: bool = False, create: bool = True
    ) -> None:
        """Pragmas and migrations. Two processes creating one ledger at once can meet a lock
        SQLite reports at once, without waiting (switching a new file to WAL while the other
        migrates it): retry for as long as the busy timeout, then give up."""
        deadline = asyncio.get_running_loop().time() + busy_timeout_s
        delay = OPEN_RETRY_FIRST_S
        while True:
            try:
                await self._run(
                    lambda db: _prepare(
                        db, file, busy_timeout_s, read_only=read_only, create=create
                    )
                )
                return
            except LedgerUnavailable as exc:
                if not retry_open(exc, asyncio.get_running_loop().time(), deadline):
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, OPEN_RETRY_LONGEST_S)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` on the connection's worker thread: one thread hop."""
        if self._pg is not None:
            with self._translated():
                return await self._pg.run(work)
        raw = self._connection
        assert raw is not None
        busy = f"PRAGMA busy_timeout = {self._busy_ms}"

        def call() -> T:
            # on this thread SQLite waits for a lock for as long as the busy timeout; the
            # connection rests with none, for the inline writes of ``_write``
            raw._conn.execute(busy)
            try:
                return work(raw._conn)
            finally:
                raw._conn.execute("PRAGMA busy_timeout = 0")

        # aiosqlite's own execute() is built on _execute; using it directly lets a whole
        # transaction cross the thread boundary once instead of once per statement.
        # The job is counted until the worker has finished it, even when the caller is
        # cancelled meanwhile (the shield): no inline write may start on the connection
        # while a transaction of the worker may still be open on it.
        job: asyncio.Future[T] = asyncio.ensure_future(raw._execute(call))  # type: ignore[no-untyped-call]
        self._on_worker += 1
        job.add_done_callback(self._worker_done)
        with self._translated():
            return await asyncio.shield(job)

    def _worker_done(self, job: asyncio.Future[Any]) -> None:
        self._on_worker -= 1
        if not job.cancelled():
            job.exception()  # retrieved: a caller cancelled meanwhile is not told again

    def _translated(self) -> contextlib.AbstractContextManager[None]:
        """SQLite's errors as the ledger's (``read.sqlite_errors``)."""
        return sqlite_errors(self.path)

    async def _write(
        self,
        work: Callable[[sqlite3.Connection], T],
        *,
        inline: bool = False,
        pg_mode: str = "transaction",
    ) -> T:
        """Run ``work`` inside ``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any error.

        ``inline``, for the short writes of the send path (a receipt, one transition): run it
        on the event loop's thread, saving the two thread switches that cost more than the
        write itself, when that cannot make the loop wait for a lock: nothing else of this
        ledger is on the worker thread and SQLite grants the write lock at once (busy timeout
        0). Otherwise, and whenever the lock is taken, the write goes to the worker thread,
        which waits for the lock for as long as the busy timeout. The transaction, its
        ``synchronous=FULL`` commit and its result are the same either way; inline, the
        write also cannot be interrupted halfway by a cancellation of the caller.

        ``pg_mode``, on PostgreSQL: ``"transaction"`` (``BEGIN`` … ``COMMIT``); ``"one"``, for
        a ``work`` whose only write is its first statement (autocommitted: no round trip for
        ``BEGIN`` or ``COMMIT``); ``"locked"``, for a receipt (``PgBackend.write_locked``:
        session locks, released by its last write's own statement).
        """

        def transaction(db: sqlite3.Connection) -> T:
            db.execute("BEGIN IMMEDIATE")
            return _commit_or_roll_back(db, work)

        if self._pg is not None:
            with self._translated():
                if pg_mode == "one":
                    return await self._pg.write_one(work)
                if pg_mode == "locked":
                    return await self._pg.write_locked(work)
                return await self._pg.write(work)
        assert self._connection is not None
        if inline and self._on_worker == 0:
            with self._translated():
                db = self._connection._conn
                if self._begin_at_once(db):
                    return _commit_or_roll_back(db, work)
        return await self._run(transaction)

    def _begin_at_once(self, db: sqlite3.Connection) -> bool:
        """``BEGIN IMMEDIATE`` if the write lock is free now (the connection rests with busy
        timeout 0, see ``_run``); False, with nothing begun, if not."""
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return False
            raise
        return True

    # ------------------------------------------------------------------ locks and snapshots

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str, *, wait: bool = True) -> AsyncIterator[bool]:
        """Hold a lock named ``name`` across every process (every host) using this ledger,
        for the block; yields whether it is held. On PostgreSQL a session advisory lock (the
        server drops it when its holder's connection ends: a crash never leaves it taken);
        ``wait=False`` yields False at once when another holds it. On SQLite nothing is taken
        (yields True): its callers either lock a file of their own (the nightly job) or rely
        on SQLite's one writer (a reconcile pass's snapshot check)."""
        if self._pg is None:
            yield True
            return
        stop = threading.Event()
        holder = self._pg.database.session_lock(name, wait=wait, stop=stop)
        taking = asyncio.ensure_future(asyncio.to_thread(holder.__enter__))
        try:
            with self._translated():
                await asyncio.shield(taking)
        except _pg.LockBusy:
            yield False
            return
        except asyncio.CancelledError:
            # the caller gave up while the lock was awaited: stop waiting, and release it if
            # the thread took it meanwhile (else it would stay held until this process ends)
            stop.set()
            with contextlib.suppress(BaseException):
                await taking
                await asyncio.to_thread(holder.__exit__, None, None, None)
            raise
        try:
            yield True
        finally:
            await asyncio.to_thread(holder.__exit__, None, None, None)

    @contextlib.asynccontextmanager
    async def read_snapshot(self) -> AsyncIterator[None]:
        """Hold one read transaction for the block: every read in it sees the ledger as it
        stood when the block began (a paged read that must be consistent across pages).
        Nothing may be written through this ledger inside the block."""
        if self._pg is not None:
            async with self._pg.snapshot():
                yield
            return
        await self._run(lambda db: db.execute("BEGIN DEFERRED"))
        try:
            await self._run(lambda db: db.execute("SELECT 1 FROM actions LIMIT 1").fetchall())
            yield
        finally:
            await self._run(lambda db: db.execute("COMMIT"))


# ---------------------------------------------------------------------- opening


@contextlib.asynccontextmanager
async def open_sqlite(
    kind: type[L],
    file: Path,
    *,
    busy_timeout_s: float,
    clock: Callable[[], datetime] | None,
    read_only: bool,
    create: bool,
) -> AsyncIterator[L]:
    """``Ledger.open`` for a file: checked, created if missing (mode 0600), connected,
    migrated, as a ``kind``; closed when the block ends (see ``Ledger.open``)."""
    create = create and not read_only
    if check_path(file, read_only=read_only, create=create) is FileKind.MISSING:
        _create_private(file)
    attempts = (False, True) if read_only else (False,)
    for immutable in attempts:
        connection = await _connect(
            file, read_only=read_only, immutable=immutable, busy_timeout_s=busy_timeout_s
        )
        connection.row_factory = sqlite3.Row
        ledger = kind(connection, file, clock or _utc_now)
        ledger._busy_ms = int(busy_timeout_s * 1000)
        try:
            try:
                await ledger._prepare_with_retries(
                    file, busy_timeout_s, read_only=read_only, create=create
                )
            except WalIndexUnavailable:
                # No -shm can be made in a directory this user cannot write: with no
                # -wal either, no writer is active, and the file is read as it stands.
                if immutable or has_wal(file):
                    raise
                continue
            yield ledger
            return
        finally:
            await connection.close()


@contextlib.asynccontextmanager
async def open_postgresql(
    kind: type[L],
    url: str,
    *,
    busy_timeout_s: float,
    clock: Callable[[], datetime] | None,
    read_only: bool,
    create: bool,
) -> AsyncIterator[L]:
    """``Ledger.open`` for a ``postgresql://`` URL (see ``postgres``): ``busy_timeout_s``
    bounds how long a statement may wait for a lock (six times over, as SQLite's busy
    timeout is per lock and a write takes several)."""
    from starebrain_actions.ledger.postgres import PgBackend, prepare

    database = _pg.PgDatabase.shared(url)
    try:
        backend = PgBackend(
            database, read_only=read_only, statement_timeout_s=max(busy_timeout_s, 1.0) * 6
        )
        ledger = kind(None, database.where, clock or _utc_now, backend=backend)
        create = create and not read_only
        with ledger._translated():
            await backend.run(lambda db: prepare(db, read_only=read_only, create=create))
        yield ledger
    finally:
        await asyncio.to_thread(database.release)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _create_private(path: Path) -> None:
    """Create an empty ledger file readable and writable by its owner only (mode 0600): it
    will hold phone numbers and message bodies. SQLite gives its ``-wal`` and ``-shm`` files
    the same mode. Another process creating it first is fine."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise LedgerUnavailable(f"cannot create the ledger {path}: {exc.strerror}") from exc
    os.close(descriptor)


async def _connect(
    file: Path, *, read_only: bool, immutable: bool, busy_timeout_s: float
) -> aiosqlite.Connection:
    """An autocommit connection to ``file`` (a read-only URI when ``read_only``)."""
    target = read_only_uri(file, immutable=immutable) if read_only else str(file)
    with connecting(file):
        return await aiosqlite.connect(
            target,
            isolation_level=None,
            timeout=busy_timeout_s,
            check_same_thread=False,
            uri=read_only,
        )


def _commit_or_roll_back(db: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``work`` in the transaction just begun: committed if it returns, rolled back on
    any error (the error goes on)."""
    try:
        result = work(db)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return result


# ---------------------------------------------------------------------- migrating


def _prepare(
    db: sqlite3.Connection,
    path: Path,
    busy_timeout_s: float,
    *,
    read_only: bool = False,
    create: bool = True,
) -> None:
    """Check the file holds a ledger this open may use; then WAL, ``synchronous=FULL`` and
    the migrations it lacks (none of that when ``read_only``)."""
    check_schema(db, path, busy_timeout_s, read_only=read_only, create=create)
    if read_only:
        return
    try:
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise LedgerUnavailable(f"ledger {path}: cannot switch to WAL (journal_mode={mode})")
        db.execute("PRAGMA synchronous = FULL")
        _migrate(db, path)
    except sqlite3.DatabaseError as exc:
        raise ledger_error(path, exc) from exc


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    """Every migration the file lacks, in one ``BEGIN IMMEDIATE`` transaction, each one
    recorded in ``PRAGMA user_version``.

    Raises:
        SchemaTooNew: the file's version is newer than this package's (it is not changed).
    """
    # the files are listed, and read only when one is lacking: a ledger at the latest
    # version costs its one read of ``user_version`` (issue 37)
    files = migration_files()
    latest = len(files)
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > latest:
        raise SchemaTooNew(
            f"ledger {path} has schema version {version}, newer than this starebrain-actions"
            f" understands ({latest}); upgrade the package. The file was not changed."
        )
    if version == latest:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        for number, entry in files[version:]:
            for statement in split_statements(entry.read_text(encoding="utf-8")):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {number}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def split_statements(sql: str) -> Iterable[str]:
    """Split a SQLite migration into complete statements (trigger bodies kept whole), as the
    migrations are run; comment lines between statements are left out.

    Raises:
        LedgerError: the script ends with an incomplete statement.
    """
    pending = ""
    for line in sql.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not pending.strip():
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending
            pending = ""
    if pending.strip():
        raise LedgerError(f"migration ends with an incomplete statement: {pending[:60]!r}")
