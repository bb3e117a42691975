"""Reading a ledger without asyncio: the checks that decide whether a file is a ledger this
version may open, and the queries behind one action's summary, duplicates and history.

``Ledger`` (aiosqlite) runs these same functions on its worker thread; ``open_read_only``
runs them on the caller's thread, for the one-action read commands (``starebrain status``,
``history``), which then start without importing asyncio or aiosqlite. One implementation of
each check and each query, so both paths refuse the same files with the same errors and
read the same results.

The names without an underscore are the ledger package's own interface: the async ledger
(``connection``, ``receipts``, ``updates``...) opens files and loads rows through them too.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.convert import (
    ATTEMPT_COLUMNS,
    action_from_row,
    history_from_row,
    record_from_row,
)
from starebrain_actions.core.exceptions import (
    CorruptRecord,
    InvalidInput,
    LedgerError,
    LedgerUnavailable,
    NotFound,
    SchemaTooNew,
)
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    ActionSummary,
    HistoryEntry,
    RedispatchReason,
    ReviewReason,
    Status,
    require_aware,
)

#: The first pause before trying again an open that met a lock, and the longest pause
#: (``retry_open``).
OPEN_RETRY_FIRST_S: Final = 0.05
OPEN_RETRY_LONGEST_S: Final = 0.5


# ---------------------------------------------------------------------- files and schema


def migration_files() -> list[tuple[int, Any]]:
    """Each migration's number and file (a ``Path``, or a ``Traversable`` when the package
    is not on a file system), in order.

    Raises:
        LedgerError: a migration is missing.
    """
    folder: Any = Path(__file__).with_name("schema") / "migrations"
    if not folder.is_dir():  # a zipped package: importlib.resources can read it
        import importlib.resources

        folder = importlib.resources.files("starebrain_actions.ledger").joinpath(
            "schema", "migrations"
        )
    found: list[tuple[int, Any]] = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{4})_.*\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    found.sort(key=lambda item: item[0])
    for expected, (number, _entry) in enumerate(found, start=1):
        if number != expected:
            raise LedgerError(f"migration {expected:04d} is missing from the package")
    return found


#: The schema version this code writes (counted without reading the migrations).
SCHEMA_VERSION: Final[int] = len(migration_files())


#: Tables every ledger has, whatever its schema version.
_LEDGER_TABLES: Final = frozenset({"actions", "attempts", "history"})


class FileKind(enum.Enum):
    """What is at the ledger path before SQLite touches it."""

    MISSING = "missing"
    EMPTY = "empty"
    SQLITE = "sqlite"


def _inspect(path: Path) -> FileKind:
    """Look at ``path`` without opening it with SQLite.

    Raises:
        LedgerUnavailable: a directory, a device or pipe (``/dev/null``), an unreadable file,
            or a file that is not SQLite (it is left unchanged).
    """
    try:
        status = path.stat()
    except FileNotFoundError:
        return FileKind.MISSING
    except OSError as exc:
        raise LedgerUnavailable(f"cannot use the ledger path {path}: {exc.strerror}") from exc
    if stat.S_ISDIR(status.st_mode):
        raise LedgerUnavailable(f"ledger path {path} is a directory; give a file path")
    if not stat.S_ISREG(status.st_mode):
        raise LedgerUnavailable(
            f"{path} is not a regular file (a device, a pipe or a socket), so not a ledger;"
            " give the path of a ledger file"
        )
    if status.st_size == 0:
        wal = path.with_name(path.name + "-wal")
        if not (wal.exists() and wal.stat().st_size > 0):
            return FileKind.EMPTY
        return FileKind.SQLITE
    if not os.access(path, os.R_OK):
        raise LedgerUnavailable(f"ledger file {path} is not readable by this user")
    if not _is_sqlite(path):
        raise LedgerUnavailable(
            f"{path} is not a SQLite database, so not a starebrain ledger; it was left unchanged"
        )
    return FileKind.SQLITE


#: The first 16 bytes of every SQLite 3 database file.
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"


def _is_sqlite(path: Path) -> bool:
    """Ask SQLite itself whether ``path`` holds a database (read-only; nothing is written).

    Never with a plain ``open()`` of the file: closing *any* descriptor of a file drops every
    POSIX record lock the process holds on it (``fcntl`` semantics), SQLite's own included,
    when a ledger is already open in this process (an agent per phone, say). Another process
    could then checkpoint and delete the WAL under the live connection, losing its commits.
    SQLite's unix VFS shares one lock record per file among a process's connections and keeps
    such descriptors open while locks are held, so asking through SQLite is safe. A quiescent
    file (no ``-shm``, no WAL content: nobody has it open) is read as immutable, which
    creates no ``-wal``/``-shm`` beside it.
    """
    wal, shm = path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")
    quiescent = not shm.exists() and not (wal.exists() and wal.stat().st_size > 0)
    try:
        connection = sqlite3.connect(read_only_uri(path, immutable=quiescent), uri=True)
    except sqlite3.Error:
        return True  # cannot tell here: the real open reports what is wrong
    try:
        connection.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        # anything but "file is not a database" (busy, damaged pages, a WAL file without its
        # index) is SQLite's to report when the ledger is really opened
        if "not a database" not in str(exc):
            return True
    else:
        return True
    finally:
        connection.close()
    # SQLite cannot read it: a damaged ledger keeps the magic string (its pages are
    # reported as damaged), anything else is not SQLite. Reading the magic directly is safe
    # now: no connection of this process can be using a file SQLite cannot read.
    try:
        with path.open("rb") as handle:
            return handle.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def check_path(path: Path, *, read_only: bool = False, create: bool = True) -> FileKind:
    """Refuse, with the reason, a path this open must not use; say what is there.

    Raises:
        LedgerUnavailable: see ``Ledger.open``.
    """
    kind = _inspect(path)
    parent = path.parent if str(path.parent) else Path()
    if kind is FileKind.MISSING:
        if not parent.is_dir():
            raise LedgerUnavailable(f"ledger directory {parent} does not exist")
        if read_only or not create:
            raise LedgerUnavailable(f"no ledger at {path}")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise LedgerUnavailable(f"cannot create the ledger in {parent}: directory is read-only")
        return kind
    if kind is FileKind.EMPTY and (read_only or not create):
        raise LedgerUnavailable(
            f"{path} is an empty file, not a ledger (only a command that creates ledgers, such"
            " as `starebrain send`, makes it one); it was left unchanged"
        )
    if read_only:
        if not os.access(path, os.R_OK):
            raise LedgerUnavailable(f"ledger file {path} is not readable by this user")
        return kind
    if not os.access(path, os.R_OK | os.W_OK):
        raise LedgerUnavailable(
            f"ledger file {path} is not readable and writable by this user (read commands"
            " such as `starebrain list` open it read-only)"
        )
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists() and not os.access(side, os.R_OK | os.W_OK):
            raise LedgerUnavailable(f"{side} is not readable and writable by this user")
    return kind


def read_only_uri(path: Path, *, immutable: bool) -> str:
    """A ``file:`` URI opening ``path`` read-only (``immutable``: no locks, no ``-shm``)."""
    quoted = urllib.parse.quote(os.fsencode(path.absolute()))
    return f"file:{quoted}?mode=ro" + ("&immutable=1" if immutable else "")


class WalIndexUnavailable(LedgerUnavailable):
    """A read-only open of a WAL database found no ``-shm`` file it could open or create."""


def inspect_ledger(path: str | os.PathLike[str], *, read_only: bool = False) -> None:
    """Check, without writing or creating anything, that ``path`` holds a starebrain ledger
    this version can use (``read_only``: without migrating it), for a caller about to create
    files next to it (a lock) before opening it.

    A quiescent ledger (no ``-shm``, no ``-wal`` content: nobody has it open) is read as
    immutable, so that not even SQLite's ``-wal`` and ``-shm`` files are created.

    Raises:
        LedgerUnavailable: missing, empty, not SQLite, a foreign SQLite database, damaged, or
            (``read_only``) in need of a migration.
        SchemaTooNew: written by a newer version.
    """
    file = Path(path)
    check_path(file, read_only=True, create=False)
    quiescent = not file.with_name(file.name + "-shm").exists() and not has_wal(file)
    for immutable in (True,) if quiescent else (False, True):
        try:
            with contextlib.closing(
                sqlite3.connect(read_only_uri(file, immutable=immutable), uri=True)
            ) as db:
                version, objects = _probe(db, file)
                _classify(file, version, objects, read_only=read_only, create=False)
                return
        except WalIndexUnavailable:
            if immutable or has_wal(file):
                raise
        except sqlite3.DatabaseError as exc:
            raise ledger_error(file, exc) from exc


def has_wal(path: Path) -> bool:
    """Whether ``path`` has a ``-wal`` file with something in it (a writer may be active)."""
    wal = path.with_name(path.name + "-wal")
    return wal.exists() and wal.stat().st_size > 0


def _probe(db: sqlite3.Connection, path: Path) -> tuple[int, list[tuple[str, str]]]:
    """The schema version and the ``(type, name)`` of every schema object, read only.

    Raises:
        WalIndexUnavailable: a read-only connection cannot open the WAL index.
    """
    try:
        objects = [
            (str(row[0]), str(row[1]))
            for row in db.execute("SELECT type, name FROM sqlite_master ORDER BY name")
        ]
    except sqlite3.OperationalError as exc:
        if "readonly" in str(exc) or "read-only" in str(exc):
            raise WalIndexUnavailable(
                f"ledger {path} is in WAL mode and this user can neither open its -shm file"
                f" nor create one: {exc}"
            ) from exc
        raise
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    return version, objects


def _classify(
    path: Path,
    version: int,
    objects: Sequence[tuple[str, str]],
    *,
    read_only: bool,
    create: bool,
) -> bool:
    """Decide from the probe whether ``path`` is a ledger to use; True when it is a new one.

    Raises:
        LedgerUnavailable: an empty database that may not be created, a foreign database
            (left unchanged), or (``read_only``) one that needs a migration.
        SchemaTooNew: a ledger from a newer version.
    """
    tables = sorted(name for kind, name in objects if kind == "table")
    if not objects and version == 0:
        if create and not read_only:
            return True
        raise LedgerUnavailable(
            f"{path} is an empty database, not a ledger (only a command that creates ledgers,"
            " such as `starebrain send`, makes it one); it was left unchanged"
        )
    if not _LEDGER_TABLES <= set(tables):
        shown = ", ".join(tables[:6]) + (", …" if len(tables) > 6 else "")
        raise LedgerUnavailable(
            f"{path} is a SQLite database but not a starebrain ledger (tables: {shown or 'none'},"
            f" schema version {version}); it was left unchanged"
        )
    latest = SCHEMA_VERSION
    if version > latest:
        raise SchemaTooNew(
            f"ledger {path} has schema version {version}, newer than this starebrain-actions"
            f" understands ({latest}); upgrade the package. The file was not changed."
        )
    if read_only and version < latest:
        raise LedgerUnavailable(
            f"ledger {path} has schema version {version} and this starebrain-actions reads"
            f" version {latest}; read-only commands never migrate: run a writing command"
            " (send, reconcile, resolve, nightly) on it once, with write access, to migrate it"
        )
    return False


def ledger_error(path: Path | str, exc: sqlite3.Error) -> LedgerError:
    """SQLite's error ``exc`` on the ledger at ``path`` as the ledger's own: read-only,
    damaged, locked, cannot be opened (``LedgerUnavailable``), else a ``LedgerError``."""
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return LedgerUnavailable(f"ledger {path} is read-only: {text}")
    if "not a database" in text or "malformed" in text:
        return LedgerUnavailable(
            f"ledger {path} is damaged (SQLite says: {text}); nothing was written: restore it"
            " from a backup (`sqlite3 PATH .recover` may save what is left)"
        )
    if "locked" in text or "busy" in text:
        return LedgerUnavailable(f"ledger {path} stayed locked by another writer: {text}")
    if "unable to open" in text:
        return LedgerUnavailable(f"cannot open ledger {path}: {text}")
    return LedgerError(f"ledger {path}: {text}")


def row_dict(row: Any) -> dict[str, Any]:
    """A row of either backend (``sqlite3.Row``, asyncpg's ``Record``) as a dict by column.

    Raises:
        CorruptRecord: ``row`` is neither.
    """
    if isinstance(row, sqlite3.Row) or callable(getattr(row, "items", None)):
        return dict(row.items()) if not isinstance(row, sqlite3.Row) else dict(row)
    raise CorruptRecord("internal: rows must be sqlite3.Row or asyncpg.Record")


def load_action(db: sqlite3.Connection, action_id: str) -> Action:
    """The action with this id, read from ``db``.

    Raises:
        NotFound: there is none.
    """
    row = db.execute("SELECT * FROM actions WHERE action_id = ?", (action_id,)).fetchone()
    if row is None:
        raise NotFound(f"no action with id {action_id!r}")
    return action_from_row(row_dict(row))


def load_attempts(db: sqlite3.Connection, action_id: str) -> list[ActionRecord]:
    """Every attempt of the action, oldest first (empty if it has none, or no such action)."""
    rows = db.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE action_id = ? ORDER BY attempt",
        (action_id,),
    ).fetchall()
    return [record_from_row(row_dict(row)) for row in rows]


def load_attempt(db: sqlite3.Connection, dispatch_id: str) -> ActionRecord:
    """The attempt with this dispatch id.

    Raises:
        NotFound: there is none.
    """
    row = db.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE dispatch_id = ?", (dispatch_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no attempt with dispatch id {dispatch_id!r}")
    return record_from_row(row_dict(row))


def _summarize(db: sqlite3.Connection, action: Action, now: datetime) -> ActionSummary:
    attempts = tuple(load_attempts(db, action.action_id))
    duplicates = int(
        db.execute(
            "SELECT count(*) FROM duplicates JOIN attempts USING (dispatch_id)"
            " WHERE attempts.action_id = ?",
            (action.action_id,),
        ).fetchone()[0]
    )
    return summarize(action, attempts, now, duplicates=duplicates)


def summarize(
    action: Action, attempts: Sequence[ActionRecord], now: datetime, *, duplicates: int = 0
) -> ActionSummary:
    """Derive an action's status and review reasons from its attempts (pure). An action whose
    latest attempt sent nothing because of the phone (not ready, unreachable) and that may
    be tried again reads PLANNED (``decisions.waiting_for_phone``), not FAILED."""
    ordered = tuple(sorted(attempts, key=lambda record: record.attempt))
    if not ordered:
        status = Status.PLANNED
        if action.denied:
            status = Status.DENIED
        elif _decisions.expired(action, (), now):
            status = Status.EXPIRED
        return ActionSummary(
            action=action, attempts=(), status=status, review_reasons=(), duplicates=0
        )
    latest = ordered[-1]
    status = _core.derive_status(latest, now, action.policy.grace_window)
    if status is Status.FAILED and action.denied:
        status = Status.DENIED  # nothing went out, and nothing ever will
    elif _decisions.expired(action, ordered, now):
        status = Status.EXPIRED  # nothing went out, and its time is over
    elif status is Status.FAILED and _decisions.waiting_for_phone(action, ordered, now):
        status = Status.PLANNED  # nothing was sent: the phone was not ready (or did not answer)
    reasons: list[ReviewReason] = []
    superseded: list[ReviewReason] = []
    for record in ordered:
        reason = record.review_reason
        rejected = record.acceptance is AcceptanceState.REJECTED
        if rejected and (record is not latest or reason is not ReviewReason.MISMATCH):
            # a wrong message went out: a later attempt (or a later flag) superseded its
            # MISMATCH, which stays on show
            if ReviewReason.MISMATCH not in superseded:
                superseded.append(ReviewReason.MISMATCH)
            if reason is ReviewReason.MISMATCH:
                continue
        if reason is None or reason in reasons:
            continue
        reasons.append(reason)
    if (
        latest.resolved_by is None
        and latest.is_final
        and status not in (Status.SUCCEEDED, Status.DENIED, Status.EXPIRED)
    ):
        decision = _decisions.should_redispatch(action, ordered, now)
        if decision.reason in (RedispatchReason.BUDGET_EXHAUSTED, RedispatchReason.DEADLINE_PASSED):
            reasons.append(ReviewReason.BUDGET_EXHAUSTED)
    return ActionSummary(
        action=action,
        attempts=ordered,
        status=status,
        review_reasons=tuple(reasons),
        duplicates=duplicates,
        superseded_reasons=tuple(r for r in superseded if r not in reasons),
    )


# ---------------------------------------------------------------------- opening, shared


@contextlib.contextmanager
def connecting(file: Path) -> Iterator[None]:
    """The errors of connecting to ``file`` (``sqlite3.connect``, aiosqlite's or not), as
    ``LedgerUnavailable``."""
    try:
        yield
    except sqlite3.Error as exc:
        raise LedgerUnavailable(f"cannot open ledger {file}: {exc}") from exc
    except UnicodeError as exc:
        raise LedgerUnavailable(
            f"cannot open ledger {file!r}: its path is not valid UTF-8, which SQLite needs"
        ) from exc


def check_schema(
    db: sqlite3.Connection, path: Path, busy_timeout_s: float, *, read_only: bool, create: bool
) -> None:
    """The busy timeout and foreign keys, once the probe found a ledger this open may use.

    Raises:
        WalIndexUnavailable: a read-only connection cannot open the WAL index.
        LedgerUnavailable, SchemaTooNew: see ``_classify`` (SQLite's errors via
            ``ledger_error``).
    """
    try:
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        version, objects = _probe(db, path)
        _classify(path, version, objects, read_only=read_only, create=create)
        db.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as exc:
        raise ledger_error(path, exc) from exc


def retry_open(exc: LedgerUnavailable, now: float, deadline: float) -> bool:
    """Whether an open that failed with ``exc`` is tried again (after a pause from
    ``OPEN_RETRY_FIRST_S`` doubling up to ``OPEN_RETRY_LONGEST_S``): only a lock SQLite
    reported at once (two processes creating one ledger), and only until ``deadline``."""
    return not isinstance(exc, WalIndexUnavailable) and "locked" in str(exc) and now < deadline


@contextlib.contextmanager
def sqlite_errors(path: Path | str) -> Iterator[None]:
    """SQLite's errors as the ledger's."""
    try:
        yield
    except UnicodeEncodeError as exc:
        # A str holding a lone surrogate (undecodable bytes from argv, say) cannot be
        # bound: SQLite stores UTF-8 only. Nothing was written (the write rolled back).
        raise InvalidInput(
            f"text holds {exc.object[exc.start : exc.end]!r}, which is not valid Unicode"
            " (a lone surrogate, e.g. from bytes that are not UTF-8); nothing was written"
        ) from exc
    except sqlite3.DatabaseError as exc:
        if type(exc) not in (sqlite3.DatabaseError, sqlite3.OperationalError):
            raise  # constraint violations and programming errors keep their class
        raise ledger_error(path, exc) from exc


# ---------------------------------------------------------------------- one action's reads


def read_summary(db: sqlite3.Connection, action_id: str, now: datetime) -> ActionSummary:
    """The action, its attempts and what is derived from them (``Ledger.summary``).

    Raises:
        NotFound: no such action.
    """
    return _summarize(db, load_action(db, action_id), now)


def read_duplicates(db: sqlite3.Connection, action_id: str) -> list[dict[str, Any]]:
    """Provider rows recorded as duplicates of the action's attempts, oldest first
    (``Ledger.duplicates``)."""
    rows = db.execute(
        "SELECT d.device, d.provider_kind, d.provider_object_id, d.dispatch_id,"
        " d.seen_at, d.evidence_json, d.provider_row_date_ms FROM duplicates d JOIN attempts a"
        " USING (dispatch_id) WHERE a.action_id = ?"
        " ORDER BY d.seen_at, d.provider_kind, d.provider_object_id",
        (action_id,),
    ).fetchall()
    return [
        {
            "device": row[0],
            "provider_kind": row[1],
            "provider_object_id": row[2],
            "provider_row_date_ms": row[6],
            "dispatch_id": row[3],
            "seen_at": row[4],
            "evidence": json.loads(row[5]),
        }
        for row in rows
    ]


def read_history(db: sqlite3.Connection, action_id: str) -> list[HistoryEntry]:
    """Every recorded change of every attempt of the action, in order (``Ledger.history``).

    Raises:
        NotFound: no such action.
    """
    load_action(db, action_id)
    rows = db.execute(
        "SELECT sequence, action_id, dispatch_id, event, at, actor, from_delivery,"
        " to_delivery, from_acceptance, to_acceptance, evidence_json"
        " FROM history WHERE action_id = ? ORDER BY sequence",
        (action_id,),
    ).fetchall()
    return [history_from_row(row_dict(row)) for row in rows]


# ---------------------------------------------------------------------- the synchronous path


class LedgerReader:
    """A ledger opened read-only on the caller's thread (``open_read_only``): the reads of
    ``Ledger`` that one action needs, by the same functions, with the same errors."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._connection = connection
        self.path = path

    def summary(self, action_id: str, *, now: datetime | None = None) -> ActionSummary:
        """As ``Ledger.summary``.

        Raises:
            NotFound: no such action.
        """
        when = require_aware("now", now) if now is not None else datetime.now(UTC)
        with sqlite_errors(self.path):
            return read_summary(self._connection, action_id, when)

    def duplicates(self, action_id: str) -> list[dict[str, Any]]:
        """As ``Ledger.duplicates``."""
        with sqlite_errors(self.path):
            return read_duplicates(self._connection, action_id)

    def history(self, action_id: str) -> list[HistoryEntry]:
        """As ``Ledger.history``.

        Raises:
            NotFound: no such action.
        """
        with sqlite_errors(self.path):
            return read_history(self._connection, action_id)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction for the block, begun at once: every read through the
        connection it yields (autocommit outside the block, rows as ``sqlite3.Row``,
        read-only) sees the ledger as it stood when the block began, whatever writers do
        meanwhile. For a reader of the whole ledger (``starebrain migrate``'s copy).

        Raises:
            sqlite3.Error: SQLite cannot begin the transaction (as SQLite says it).
        """
        db = self._connection
        db.execute("BEGIN")
        try:
            db.execute("SELECT count(*) FROM actions").fetchone()  # the snapshot starts
            yield db
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.execute("COMMIT")


@contextlib.contextmanager
def open_read_only(
    path: str | os.PathLike[str], *, busy_timeout_s: float = 10.0
) -> Iterator[LedgerReader]:
    """Open the ledger at ``path`` as ``Ledger.open(path, read_only=True)`` does (the same
    checks, the immutable fallback when no ``-shm`` can be made, the same errors), without
    asyncio: nothing is created, migrated or written.

    Raises:
        LedgerUnavailable: the path is missing, empty, a directory, a device, not SQLite, a
            SQLite database of something else, damaged, or in need of a migration.
        SchemaTooNew: the database was written by a newer version (it is not touched).
    """
    file = Path(path)
    check_path(file, read_only=True, create=False)
    for immutable in (False, True):
        with connecting(file):
            connection = sqlite3.connect(
                read_only_uri(file, immutable=immutable),
                isolation_level=None,
                timeout=busy_timeout_s,
                uri=True,
            )
        try:
            connection.row_factory = sqlite3.Row
            try:
                _check_read_only(connection, file, busy_timeout_s)
            except WalIndexUnavailable:
                # No -shm can be made in a directory this user cannot write: with no
                # -wal either, no writer is active, and the file is read as it stands.
                if immutable or has_wal(file):
                    raise
                continue
            yield LedgerReader(connection, file)
            return
        finally:
            connection.close()


def _check_read_only(db: sqlite3.Connection, file: Path, busy_timeout_s: float) -> None:
    """``check_schema`` for a read-only open, tried again while ``retry_open`` says so."""
    deadline = time.monotonic() + busy_timeout_s
    delay = OPEN_RETRY_FIRST_S
    while True:
        try:
            with sqlite_errors(file):
                check_schema(db, file, busy_timeout_s, read_only=True, create=False)
            return
        except LedgerUnavailable as exc:
            if not retry_open(exc, time.monotonic(), deadline):
                raise
        time.sleep(delay)
        delay = min(delay * 2, OPEN_RETRY_LONGEST_S)
