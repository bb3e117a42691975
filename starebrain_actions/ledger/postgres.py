"""The ledger on PostgreSQL: opening, migrating, and running the ledger's operations.

``Ledger.open("postgresql://…")`` comes here. The ledger lives in the URL's schema (the
``search_path`` query parameter, else the server's default, usually ``public``): its tables,
triggers and version table (``starebrain_schema_version``) are created there by the
migrations in ``schema/postgres``, under an advisory lock so that two processes opening one
new ledger never both migrate it. A schema holding other tables and no ledger is refused and
left as it is, as SQLite refuses a database of something else.

Operations run as on SQLite (see :mod:`starebrain_actions.ledger.pg`): each is one synchronous
``work(db)`` on a worker thread with a connection of the process's pool; a write is one
READ COMMITTED transaction, committed before its result returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any, Final, TypeVar

from starebrain_actions.core.exceptions import LedgerUnavailable, SchemaTooNew
from starebrain_actions.ledger.pg import PgConnection, PgDatabase, Unguarded

T = TypeVar("T")

#: The table recording the PostgreSQL ledger's schema version (one row).
VERSION_TABLE: Final = "starebrain_schema_version"
_LEDGER_TABLES: Final = frozenset({"actions", "attempts", "history", "duplicates"})


def migrations() -> list[tuple[int, str]]:
    """``(number, script)`` of every PostgreSQL migration, in order."""
    folder = resources.files("starebrain_actions.ledger") / "schema" / "postgres"
    found = sorted(
        (int(entry.name.split("_", 1)[0]), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql") and entry.name[:4].isdigit()
    )
    numbers = [number for number, _sql in found]
    if numbers != list(range(1, len(found) + 1)):
        raise RuntimeError(f"internal: PostgreSQL migrations are numbered {numbers}")
    return found


#: The schema version this package writes on PostgreSQL.
PG_SCHEMA_VERSION: Final[int] = len(migrations())


class NoLedger(LedgerUnavailable):
    """The URL's schema holds no ledger yet, and this open may not create one (what a
    missing file is on SQLite)."""


class PgBackend:
    """Runs the ledger's ``work(db)`` functions on PostgreSQL (the ``Ledger``'s backend)."""

    def __init__(self, database: PgDatabase, *, read_only: bool, statement_timeout_s: float):
        self.database = database
        self.where = database.where
        self._read_only = read_only
        self._timeout = statement_timeout_s
        #: the connection a ``snapshot`` block pinned for the task running it
        self._pinned: contextvars.ContextVar[PgConnection | None] = contextvars.ContextVar(
            "starebrain_pg_pinned", default=None
        )

    @property
    def writable(self) -> bool:
        """May this backend write now (not opened read-only, not inside a read snapshot)?"""
        return not self._read_only and self._pinned.get() is None

    async def run(self, work: Callable[[Any], T]) -> T:
        """``work`` with a connection, statements autocommitted (reads)."""
        pinned = self._pinned.get()
        if pinned is not None:
            return await asyncio.to_thread(work, pinned)
        return await asyncio.to_thread(self._call, work, False)

    async def write(self, work: Callable[[Any], T]) -> T:
        """``work`` inside ``BEGIN`` … ``COMMIT``, rolled back on any error."""
        if self._read_only:
            raise LedgerUnavailable(f"ledger {self.where} was opened read-only: nothing is written")
        if self._pinned.get() is not None:
            raise LedgerUnavailable("internal: no write inside a read snapshot")
        return await asyncio.to_thread(self._call, work, True)

    async def write_one(self, work: Callable[[Any], T]) -> T:
        """``work`` that writes with one statement (reads may follow it, none precede it),
        autocommitted: the statement is its own transaction, atomic as any, and no round trip
        goes to ``BEGIN`` or ``COMMIT``.

        Run inline, on the caller's thread (as SQLite's short writes are, ``Ledger._write``):
        the thread switches to and from a worker cost more than the statement. It takes no
        advisory lock, and no transaction of the ledger's stays open across an ``await``, so
        the caller's event loop waits at most for one statement and any row lock another
        process's short transaction holds; like an inline SQLite write, it cannot be
        interrupted halfway by a cancellation of the caller."""
        if self._read_only:
            raise LedgerUnavailable(f"ledger {self.where} was opened read-only: nothing is written")
        if self._pinned.get() is not None:
            raise LedgerUnavailable("internal: no write inside a read snapshot")
        return self._call(work, False)

    async def write_locked(self, work: Callable[[Any], T]) -> T:
        """``work`` in ``locked`` mode (:class:`PgConnection`): no ``BEGIN``; its locks are
        session locks (``lock``, ``lock_and_read``) held from when they are taken until its
        last write (``finish``) commits, which releases them in the same statement. A write
        before the last one begins a transaction then (committed at the end). Every read
        happens under the locks, as in a transaction that took them first; the locks are
        given up whatever happens."""
        if self._read_only:
            raise LedgerUnavailable(f"ledger {self.where} was opened read-only: nothing is written")
        if self._pinned.get() is not None:
            raise LedgerUnavailable("internal: no write inside a read snapshot")
        return await asyncio.to_thread(self._call_locked, work)

    def _call_locked(self, work: Callable[[Any], T]) -> T:
        with self.database.connection(self._timeout) as db:
            db.locked_mode = True
            db.guarded = False
            try:
                result = work(db)
            except BaseException:
                with contextlib.suppress(Exception):  # the pool's reset undoes what is left
                    db.end_locked(False)
                raise
            db.end_locked(True)
            return result

    def _call(self, work: Callable[[Any], T], transaction: bool) -> T:
        with self.database.connection(self._timeout) as db:
            if not transaction:
                return work(db)
            # first without savepoints; if a statement that may be refused was (a race lost),
            # PostgreSQL aborted the whole transaction: run it again, with them (_pg.Unguarded)
            for guarded in (False, True):
                db.guarded = guarded
                db.execute("BEGIN IMMEDIATE")
                try:
                    result = work(db)
                except Unguarded:
                    db.execute("ROLLBACK")
                    continue
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
                return result
            raise AssertionError("unreachable: a guarded run raises no Unguarded")

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[None]:
        """One REPEATABLE READ transaction for the block, on one connection: every read of
        this task inside it sees the ledger as it stood when the block began."""
        holder = self.database.connection(self._timeout)
        db = await asyncio.to_thread(holder.__enter__)
        token = self._pinned.set(db)
        try:
            await asyncio.to_thread(db.execute, "BEGIN DEFERRED")
            yield
        finally:
            self._pinned.reset(token)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(db.execute, "COMMIT")
            await asyncio.to_thread(holder.__exit__, None, None, None)


def prepare(db: PgConnection, *, read_only: bool, create: bool) -> None:
    """Check the URL's schema holds a ledger this package may use; create or migrate it.

    Raises:
        LedgerUnavailable: the schema does not exist, holds other tables and no ledger, is
            empty and ``create`` is False, or (``read_only``) needs a migration.
        SchemaTooNew: a newer package wrote it (nothing is changed).
    """
    where = db.where
    schema = db.execute("SELECT current_schema()").fetchone()[0]
    if schema is None:
        raise LedgerUnavailable(
            f"ledger {where}: the schema in its search_path does not exist; create it"
            " (CREATE SCHEMA …) or name another"
        )
    # one look at the tables: a process migrating the same new schema may commit between two
    # (every table at once), which must not read as "other tables and no ledger"
    tables = table_names(db)
    version = schema_version(db, tables)
    latest = PG_SCHEMA_VERSION
    if version is None:
        others = tables - {VERSION_TABLE}
        if others:
            raise LedgerUnavailable(
                f"ledger {where}: schema {schema} holds other tables"
                f" ({', '.join(sorted(others)[:5])}) and no ledger; nothing was written: name an"
                " empty schema (search_path=…)"
            )
        if not create or read_only:
            raise NoLedger(f"ledger {where}: schema {schema} holds no ledger")
    elif version > latest:
        raise SchemaTooNew(
            f"ledger {where} has schema version {version}, newer than this starebrain-actions"
            f" understands ({latest}); upgrade the package. Nothing was changed."
        )
    if version == latest:
        return
    if read_only:
        raise LedgerUnavailable(
            f"ledger {where} has schema version {version} and this starebrain-actions reads"
            f" version {latest}; read-only commands never migrate: run a writing command on it"
            " once to migrate it"
        )
    _migrate(db, str(schema))


def schema_version(db: PgConnection, tables: set[str] | None = None) -> int | None:
    """The schema version of the ledger in the connection's schema (``VERSION_TABLE``; 0: the
    table holds no version yet), or None when there is no ledger there. ``tables``: the
    schema's tables if the caller has just read them (``table_names``), to look once.

    Part of the ledger package's interface: ``prepare`` decides with it, and ``starebrain
    migrate`` (``copy``) refuses a target that already holds a ledger with rows."""
    if VERSION_TABLE not in (table_names(db) if tables is None else tables):
        return None
    row = db.execute(f"SELECT max(version) FROM {VERSION_TABLE}").fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def table_names(db: PgConnection) -> set[str]:
    """The names of the tables in the connection's schema (the URL's ``search_path``), the
    ledger's and any other. Part of the ledger package's interface (see ``schema_version``)."""
    rows = db.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    ).fetchall()
    return {str(row[0]) for row in rows}


def _migrate(db: PgConnection, schema: str) -> None:
    """Every migration not yet applied, in one transaction, under an advisory lock on the
    schema (a second process opening the same new ledger waits, then finds it migrated)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.lock(f"starebrain-migrate:{schema}")
        db.script(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER NOT NULL)")
        row = db.execute(f"SELECT max(version) FROM {VERSION_TABLE}").fetchone()
        version = int(row[0]) if row[0] is not None else 0
        if version == 0 and table_names(db) & _LEDGER_TABLES:
            raise LedgerUnavailable(
                f"ledger {db.where}: schema {schema} holds ledger tables with no version;"
                " nothing was written"
            )
        for number, script in migrations()[version:]:
            db.script(script)
            db.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES (?)", (number,))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
