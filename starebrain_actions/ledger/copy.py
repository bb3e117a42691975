"""Moving a ledger from SQLite to PostgreSQL (``starebrain migrate``), history included.

:func:`copy_ledger` reads the SQLite ledger read-only, in one read transaction (one snapshot,
whatever agents still write to it), and writes every row of ``actions``, ``attempts``,
``duplicates``, ``history``, ``events``, ``phones``, ``phone_addresses``,
``framework_codes`` and ``webhooks`` (with their secrets and cursors) unchanged (the same values,
the same JSON text, the same history sequence numbers) into an empty PostgreSQL ledger, in ONE
transaction, with the ledger's own id (``ledger_identity``: the copy is the same ledger):

1. the target's tables are locked (``ACCESS EXCLUSIVE``: an agent already pointed at the new
   ledger waits for the copy to end) and found empty, else nothing is written;
2. the history-writing triggers of ``attempts`` are disabled for this transaction only
   (``ALTER TABLE`` is transactional; no superuser needed), so that an attempt copied with
   its current states does not write a second, invented history row; every other trigger,
   CHECK, UNIQUE and foreign key judges each copied row as it would a new one;
3. the rows go in by ``COPY`` in batches, parents first; ``COPY`` writes the identity
   column ``history.sequence`` as given (as ``INSERT … OVERRIDING SYSTEM VALUE`` would);
4. the triggers are enabled again and the identity moves past the highest sequence SQLite
   ever issued, so new history rows follow the copied ones;
5. before ``COMMIT``, still inside the transaction, the copy is checked: the row count of
   every table, a digest of every row (the multiset of rows is the same on both sides), the
   summary every action derives to (status, review reasons, attempts, duplicates; the very
   functions ``Ledger.iter_summaries`` runs) on both sides, and the invariants in the target
   (every attempt's history ends in its current states and events, no history row without
   its attempt, the triggers enabled). Any difference rolls everything back.

Any refusal (a row the PostgreSQL schema refuses, a lost connection) rolls back as well: the
target is left as it was found, an empty ledger.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import attrs

from starebrain_actions.core.exceptions import (
    CorruptRecord,
    LedgerError,
    LedgerUnavailable,
    SchemaTooNew,
)
from starebrain_actions.core.model import ACTION_EVENTS, ActionSummary
from starebrain_actions.ledger import pg as _pg

#: The tables copied, parents before children (foreign keys are checked row by row).
TABLES: Final = (
    "gate_policies",
    "owners",
    "actions",
    "attempts",
    "duplicates",
    "history",
    "events",
    "phones",
    "phone_addresses",
    "framework_codes",
    "webhooks",
    "replies",
    "opt_out_changes",
)
#: How many rows one ``COPY`` sends.
BATCH_ROWS: Final = 5_000
#: How many actions one page of the summary check derives, on each side.
SUMMARY_PAGE: Final = 1_000
#: The triggers that write history and events, by table; off while the history and the
#: events themselves are copied (a copied row must not write a second, invented one).
HISTORY_TRIGGERS: Final = (
    ("attempts", "attempts_history_on_insert"),
    ("attempts", "attempts_history_on_update"),
    ("history", "history_events"),
    ("actions", "actions_events_on_insert"),
    ("webhooks", "webhooks_events_on_disable"),
    ("replies", "replies_events"),
    ("opt_out_changes", "opt_out_changes_events"),
)
#: Columns only the PostgreSQL table has: ``events.sequence`` orders the numbering of events
#: committed (``starebrain_place_events``); a copied event has its position already.
_TARGET_ONLY: Final = {"events": frozenset({"sequence"})}
#: How long the copy waits for an agent using the target to let go of its tables.
LOCK_TIMEOUT: Final = "10s"
#: Differences listed at most in an error (the count says how many there were).
_SHOWN: Final = 20


class MigrationError(LedgerError):
    """The copy was refused or failed; the target is as it was (``rolled_back``) or, if it
    says so, committed and different as ``differences`` list."""

    #: the caller's mistake (a source that is not a ledger, a target that is not a URL)
    usage: bool = False

    def __init__(self, message: str, *, differences: Sequence[str] = ()) -> None:
        super().__init__(message)
        #: what differs between the two sides, one line each (at most ``_SHOWN``)
        self.differences = tuple(differences)


class SourceRefused(MigrationError):
    """The SQLite file is not a ledger this version can copy (nothing was read or written)."""


class TargetRefused(MigrationError):
    """The PostgreSQL schema holds something other than an empty ledger (nothing written)."""


class CopyFailed(MigrationError):
    """PostgreSQL refused a row, or the connection failed: the copy was rolled back."""


class VerificationFailed(MigrationError):
    """The copy differs from the source: it was rolled back, and ``differences`` say how."""


@attrs.frozen(kw_only=True)
class CopyReport:
    """What :func:`copy_ledger` copied and checked."""

    #: the SQLite file
    source: str
    #: the PostgreSQL URL, without its password
    target: str
    #: rows copied per table (equal to the rows in each table on both sides)
    rows: dict[str, int]
    #: action summaries derived on both sides and found equal
    summaries_compared: int
    #: attempts whose history was found to end in their current states
    attempts_checked: int
    #: the highest history sequence copied (0: none); new history rows come after it
    last_sequence: int
    #: what was checked, one line each
    checks: tuple[str, ...]
    #: seconds spent writing the rows, and checking them
    copy_seconds: float
    verify_seconds: float


Step = Callable[[str], None]


def copy_ledger(
    source: str | Path,
    target: str,
    *,
    now: datetime | None = None,
    batch_rows: int = BATCH_ROWS,
    on_step: Step | None = None,
) -> CopyReport:
    """Copy the SQLite ledger at ``source`` into the empty PostgreSQL ledger at ``target``
    (created in an empty schema), in one transaction, checked before it commits (see the
    module docstring). Synchronous: call it from a thread, not from an event loop's.

    ``now``: the time summaries are derived at (status depends on it); the same on both
    sides. ``on_step``: told each step as it starts (``"copying attempts"``...).

    Raises:
        SourceRefused: ``source`` is not a ledger (``usage``), needs a migration, or is newer.
        TargetRefused: ``target`` is not a usable PostgreSQL URL (``usage``; it is shown
            without its secrets, ``ledger.pg.redact``), or its schema holds
            other tables, a ledger with rows, or a newer ledger.
        CopyFailed: PostgreSQL refused a row or could not be reached; nothing was kept.
        VerificationFailed: the copy differed from the source; nothing was kept.
    """
    if not _pg.is_url(target):
        shown = _pg.redact(target)
        raise _refused(TargetRefused, f"{shown!r} is not a postgresql:// URL", usage=True)
    try:
        _pg.check_url(target)
    except _pg.BadUrl as exc:
        raise _refused(TargetRefused, str(exc), usage=True) from None
    when = now if now is not None else datetime.now(UTC)
    step = on_step or (lambda _text: None)
    with _source(Path(source)) as (source_db, source_name):
        database = _pg.PgDatabase.shared(target)
        try:
            with _target_errors(database.where), database.connection(600.0) as target_db:
                _prepare_target(target_db)
                return _copy_in_one_transaction(
                    source_db,
                    target_db,
                    names=(source_name, database.where),
                    now=when,
                    batch_rows=batch_rows,
                    step=step,
                )
        finally:
            database.release()


# ------------------------------------------------------------------------- the two sides


@contextlib.contextmanager
def _source(path: Path) -> Iterator[tuple[sqlite3.Connection, str]]:
    """The source ledger opened as read-only commands open one (the same checks and errors),
    inside one read transaction: every read below sees one snapshot."""
    from starebrain_actions.ledger.read import open_read_only

    with contextlib.ExitStack() as stack:
        try:
            reader = stack.enter_context(open_read_only(path))
            db = stack.enter_context(reader.snapshot())
        except SchemaTooNew as exc:
            raise SourceRefused(str(exc)) from exc
        except LedgerUnavailable as exc:
            text = str(exc)
            if "never migrate" in text:
                raise SourceRefused(
                    f"{text}; then run migrate again (the copy reads the source read-only)"
                ) from exc
            raise _refused(SourceRefused, text, usage="locked" not in text) from exc
        except sqlite3.Error as exc:
            raise SourceRefused(f"cannot read the ledger {path}: {exc}") from exc
        yield db, str(path)


def _refused(kind: type[MigrationError], message: str, *, usage: bool) -> MigrationError:
    error = kind(message)
    error.usage = usage
    return error


@contextlib.contextmanager
def _target_errors(where: str) -> Iterator[None]:
    """The target's errors as this module's: a refused open is ``TargetRefused``, anything
    else PostgreSQL says (a refused row, a lost connection) ``CopyFailed``."""
    try:
        yield
    except MigrationError:
        raise
    except SchemaTooNew as exc:
        raise TargetRefused(str(exc)) from exc
    except LedgerUnavailable as exc:
        text = str(exc)
        if "cannot open" in text or "cannot reach" in text or "connection" in text:
            raise CopyFailed(f"{text}; nothing was copied") from exc
        raise TargetRefused(text) from exc
    except sqlite3.Error as exc:  # what PgConnection raises for a server's refusal
        raise CopyFailed(
            f"the copy to {where} failed: {exc}; it was rolled back, the target holds nothing of it"
        ) from exc


def _prepare_target(db: _pg.PgConnection) -> None:
    """Refuse a target holding a ledger with rows before writing anything; then create (or
    migrate) the empty ledger, as ``Ledger.open`` would."""
    from starebrain_actions.ledger.postgres import prepare, schema_version, table_names

    if schema_version(db) is not None and set(TABLES) <= table_names(db):
        _refuse_rows(db)
    prepare(db, read_only=False, create=True)


def _refuse_rows(db: _pg.PgConnection) -> None:
    counts = _counts(db)
    if any(counts.values()):
        held = ", ".join(f"{count} {table}" for table, count in counts.items() if count)
        raise TargetRefused(
            f"ledger {db.where} is not empty ({held}); migrate copies into an empty ledger"
            " only: name an empty schema (?search_path=…). Nothing was written."
        )


def _counts(db: Any) -> dict[str, int]:
    return {
        table: int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]) for table in TABLES
    }


def _columns(source_db: sqlite3.Connection, target_db: _pg.PgConnection, table: str) -> list[str]:
    """The table's columns (SQLite's order), the same set on both sides or refused."""
    mine = [str(row[1]) for row in source_db.execute(f"PRAGMA table_info({table})")]
    theirs = {
        str(row[0])
        for row in target_db.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
    } - _TARGET_ONLY.get(table, frozenset())
    if set(mine) != theirs:
        raise VerificationFailed(
            f"table {table} has columns {sorted(mine)} in the source and {sorted(theirs)} in"
            " the target: this version cannot copy between them. Nothing was written."
        )
    return mine


# ------------------------------------------------------------------------- the copy


def _copy_in_one_transaction(
    source_db: sqlite3.Connection,
    target_db: _pg.PgConnection,
    *,
    names: tuple[str, str],
    now: datetime,
    batch_rows: int,
    step: Step,
) -> CopyReport:
    target_db.execute("BEGIN")
    try:
        target_db.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        target_db.execute(f"LOCK TABLE {', '.join(TABLES)} IN ACCESS EXCLUSIVE MODE")
        _refuse_rows(target_db)  # again, under the lock: nobody wrote meanwhile
        started = time.monotonic()
        for table, trigger in HISTORY_TRIGGERS:
            target_db.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
        rows: dict[str, int] = {}
        digests: dict[str, int] = {}
        for table in TABLES:
            step(f"copying {table}")
            columns = _columns(source_db, target_db, table)
            rows[table], digests[table] = _copy_table(
                source_db, target_db, table, columns, batch_rows
            )
        for table, trigger in HISTORY_TRIGGERS:
            target_db.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
        _carry_ledger_id(source_db, target_db)
        last_sequence = _continue_sequence(source_db, target_db)
        # statistics of the new rows (seen by this transaction), for the checks' queries and
        # the ledger's first ones: autovacuum sees nothing until COMMIT
        target_db.execute(f"ANALYZE {', '.join(TABLES)}")
        copied = time.monotonic()
        step("checking the copy")
        report = _verify(
            source_db,
            target_db,
            names=names,
            rows=rows,
            digests=digests,
            now=now,
            last_sequence=last_sequence,
        )
        checked = time.monotonic()
    except BaseException:
        with contextlib.suppress(Exception):
            target_db.execute("ROLLBACK")
        raise
    try:
        target_db.execute("COMMIT")
    except LedgerUnavailable as exc:
        raise CopyFailed(
            f"the connection to {target_db.where} failed during COMMIT ({exc}): the copy may or"
            " may not have been kept. Run migrate again: an empty target is copied into, one"
            " holding the whole copy is refused as not empty"
        ) from exc
    return attrs.evolve(
        report, copy_seconds=round(copied - started, 3), verify_seconds=round(checked - copied, 3)
    )


def _carry_ledger_id(source_db: sqlite3.Connection, target_db: _pg.PgConnection) -> None:
    """The source's own id (``ledger_identity``) in place of the one the empty target was
    created with: the copy is the same ledger, and the phones it sent from name that id
    beside its attempts' fences (``orchestration.phone_ledger``)."""
    row = source_db.execute("SELECT ledger_id FROM ledger_identity WHERE singleton = 1").fetchone()
    if row is None:
        raise VerificationFailed("the source ledger has no id (ledger_identity is empty)")
    target_db.execute(
        "UPDATE ledger_identity SET ledger_id = ? WHERE singleton = 1", (str(row[0]),)
    )


def _copy_table(
    source_db: sqlite3.Connection,
    target_db: _pg.PgConnection,
    table: str,
    columns: list[str],
    batch_rows: int,
) -> tuple[int, int]:
    """Every row of ``table``, in batches of ``COPY``; the count and the rows' digest."""
    order = {"history": "sequence", "events": "position"}.get(table, "rowid")
    count = digest = 0
    try:
        cursor = source_db.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}")
    except sqlite3.Error as exc:
        raise _unreadable(table, count, exc) from exc
    while True:
        try:
            batch = cursor.fetchmany(batch_rows)
        except sqlite3.Error as exc:
            raise _unreadable(table, count, exc) from exc
        if not batch:
            break
        records = [tuple(row) for row in batch]
        try:
            target_db.copy_records(table, records, columns)
        except sqlite3.Error as exc:
            raise CopyFailed(
                f"PostgreSQL refused {_refused_row(exc, table, columns, records, count)};"
                " the copy was rolled back and the target holds nothing of it"
            ) from exc
        count += len(records)
        digest = _add_digests(digest, records)
    return count, digest


def _unreadable(table: str, count: int, exc: sqlite3.Error) -> CopyFailed:
    return CopyFailed(
        f"cannot read {table} from the source after {count} rows: {exc}; the copy was rolled"
        " back and the target holds nothing of it"
    )


#: The columns naming a row of each table in messages.
_ROW_NAMES: Final = {
    "actions": ("action_id",),
    "attempts": ("dispatch_id", "action_id"),
    "duplicates": ("device", "provider_kind", "provider_object_id"),
    "history": ("sequence", "dispatch_id"),
    "events": ("position", "event_id"),
    "phones": ("phone_key",),
    "phone_addresses": ("address",),
    "framework_codes": ("build",),
    "webhooks": ("endpoint_id",),
    "replies": ("reply_id", "device"),
    "opt_out_changes": ("change_id", "number"),
}


def _refused_row(
    exc: BaseException,
    table: str,
    columns: Sequence[str],
    records: Sequence[tuple[Any, ...]],
    before: int,
) -> str:
    """Which row PostgreSQL refused (the server says at which line of the ``COPY`` it
    stopped), and why."""
    cause = exc.__cause__
    why = str(exc)
    detail = getattr(cause, "detail", None)
    if detail and detail not in why:
        why += f" ({detail})"
    context = str(getattr(cause, "context", None) or "")
    line = re.search(rf"COPY {table}, line (\d+)", context)
    if line is None or not 1 <= int(line.group(1)) <= len(records):
        return f"a row of {table} (rows {before + 1}..{before + len(records)}): {why}"
    number = int(line.group(1))
    row = records[number - 1]
    named = ", ".join(f"{name} {row[columns.index(name)]!r}" for name in _ROW_NAMES[table])
    return f"row {before + number} of {table} ({named}): {why}"


def _continue_sequence(source_db: sqlite3.Connection, target_db: _pg.PgConnection) -> int:
    """Move ``history.sequence``'s identity past the highest sequence the source ever issued
    (its rows, and SQLite's AUTOINCREMENT counter); return the highest copied."""
    copied = source_db.execute("SELECT max(sequence) FROM history").fetchone()[0] or 0
    issued = 0
    with contextlib.suppress(sqlite3.Error):  # no sqlite_sequence until the first history row
        row = source_db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'history'").fetchone()
        issued = int(row[0]) if row is not None and row[0] is not None else 0
    highest = max(int(copied), issued)
    if highest > 0:
        target_db.execute(
            "SELECT setval(pg_get_serial_sequence('history', 'sequence'), ?::bigint)", (highest,)
        )
    for table, column in _IDENTITIES:
        # the replies' and opt-out changes' ids go on after the copied ones
        top = source_db.execute(f"SELECT max({column}) FROM {table}").fetchone()[0]
        if top:
            target_db.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), ?::bigint)",
                (int(top),),
            )
    return int(copied)


#: Identity columns copied with their values, whose sequence must go on after them.
_IDENTITIES: Final = (("replies", "reply_id"), ("opt_out_changes", "change_id"))


# ------------------------------------------------------------------------- the checks


def _digest(row: Iterable[Any]) -> int:
    text = repr(tuple(row)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=16).digest(), "big")


def _add_digests(total: int, rows: Iterable[Iterable[Any]]) -> int:
    """``total`` plus the rows' digests: a sum, so equal multisets of rows give equal
    totals whatever order each side reads them in."""
    for row in rows:
        total = (total + _digest(row)) % (1 << 128)
    return total


def _target_digest(db: _pg.PgConnection, table: str, columns: Sequence[str]) -> int:
    """The digest of every row of ``table`` in the target, read through a cursor of the
    open transaction (it sees the uncommitted copy)."""
    cursor = f"starebrain_check_{table}"
    db.execute(f"DECLARE {cursor} NO SCROLL CURSOR FOR SELECT {', '.join(columns)} FROM {table}")
    total = 0
    while rows := db.execute(f"FETCH {BATCH_ROWS} FROM {cursor}").fetchall():
        total = _add_digests(total, rows)
    db.execute(f"CLOSE {cursor}")
    return total


def _verify(
    source_db: sqlite3.Connection,
    target_db: _pg.PgConnection,
    *,
    names: tuple[str, str],
    rows: dict[str, int],
    digests: dict[str, int],
    now: datetime,
    last_sequence: int,
) -> CopyReport:
    """Every check of the module docstring's step 5, inside the open transaction.

    Raises:
        VerificationFailed: anything differs (the caller rolls back).
    """
    differences: list[str] = []
    source_counts, target_counts = _counts(source_db), _counts(target_db)
    for table in TABLES:
        counts = (source_counts[table], rows[table], target_counts[table])
        if len(set(counts)) != 1:
            differences.append(
                f"{table}: {counts[0]} rows in the source, {counts[1]} copied,"
                f" {counts[2]} in the target"
            )
        columns = _columns(source_db, target_db, table)
        if _target_digest(target_db, table, columns) != digests[table]:
            differences.append(f"{table}: the rows' contents differ (digest)")
    ids = [
        [tuple(row) for row in db.execute("SELECT singleton, ledger_id FROM ledger_identity")]
        for db in (source_db, target_db)
    ]
    if ids[0] != ids[1]:
        differences.append(f"ledger_identity: {ids[0]} in the source, {ids[1]} in the target")
    compared, summary_differences = _compare_summaries(source_db, target_db, now)
    differences += summary_differences
    attempts, invariant_differences = _check_invariants(target_db)
    differences += invariant_differences
    if differences:
        shown = differences[:_SHOWN]
        more = len(differences) - len(shown)
        raise VerificationFailed(
            f"the copy differs from the source in {len(differences)} way(s); it was rolled back"
            " and the target holds nothing of it:\n  "
            + "\n  ".join(shown)
            + (f"\n  … and {more} more" if more else ""),
            differences=shown,
        )
    return CopyReport(
        source=names[0],
        target=names[1],
        rows=rows,
        summaries_compared=compared,
        attempts_checked=attempts,
        last_sequence=last_sequence,
        checks=(
            "row counts equal in every table",
            "every row identical (same values, same JSON text, same history sequence)",
            f"{compared} action summaries equal (status, review reasons, attempts, duplicates)",
            f"the history of each of {attempts} attempts ends in its current states",
            "no history row without its attempt",
            "history triggers enabled; new history sequences follow the copied ones",
            "the ledger's own id carried (the phones it sent from name it)",
        ),
        copy_seconds=0.0,
        verify_seconds=0.0,
    )


def _compare_summaries(
    source_db: sqlite3.Connection, target_db: _pg.PgConnection, now: datetime
) -> tuple[int, list[str]]:
    """Derive every action's summary on both sides, a page at a time (the pages of
    ``Ledger.iter_summaries``), and compare them by action id; the count compared and the
    differences. Pages are newest first on both sides; an order that differs (another
    collation) only keeps a few more summaries waiting for their pair."""
    from starebrain_actions.ledger.queries import summary_page

    waiting: tuple[dict[str, ActionSummary], dict[str, ActionSummary]] = ({}, {})
    after: list[tuple[str, str] | None] = [None, None]
    done = [False, False]
    compared = 0
    differences: list[str] = []
    sides: tuple[Any, Any] = (source_db, target_db)
    while not all(done):
        for side in (0, 1):
            if done[side]:
                continue
            try:
                page, after[side] = summary_page(
                    sides[side], after=after[side], size=SUMMARY_PAGE, now=now
                )
            except CorruptRecord as exc:
                name = ("source", "target")[side]
                differences.append(f"the {name} holds an action that cannot be read: {exc}")
                return compared, differences
            done[side] = after[side] is None
            mine, other = waiting[side], waiting[1 - side]
            for summary in page:
                action_id = summary.action.action_id
                pair = other.pop(action_id, None)
                if pair is None:
                    mine[action_id] = summary
                    continue
                compared += 1
                source, copy = (summary, pair) if side == 0 else (pair, summary)
                if source != copy:
                    differences.append(_summary_difference(source, copy))
    differences += [f"action {key!r}: not in the target" for key in sorted(waiting[0])]
    differences += [f"action {key!r}: not in the source" for key in sorted(waiting[1])]
    return compared, differences


def _summary_difference(source: ActionSummary, copy: ActionSummary) -> str:
    fields = [
        name
        for name in (
            "status",
            "review_reasons",
            "superseded_reasons",
            "attempts",
            "duplicates",
            "action",
        )
        if getattr(source, name) != getattr(copy, name)
    ]
    what = ", ".join(fields) or "the summary"
    return (
        f"action {source.action.action_id!r}: {what} differ"
        f" (source {source.status.value}, target {copy.status.value})"
    )


def _check_invariants(db: _pg.PgConnection) -> tuple[int, list[str]]:
    """What the target's constraints cannot say for themselves; the attempts checked and
    what is wrong."""
    differences: list[str] = []
    attempts = int(db.execute("SELECT count(*) FROM attempts").fetchone()[0])
    # an event of the whole action (a verdict, an approval...) is kept with its latest
    # attempt (or none yet: an empty dispatch id) and changes no state: not the attempt's own
    action_events = sorted(event.value for event in ACTION_EVENTS)
    marks = ", ".join("?" for _ in action_events)
    broken = db.execute(
        "SELECT a.dispatch_id, a.delivery, a.acceptance, a.last_event,"
        " last.to_delivery, last.to_acceptance, last.event"
        " FROM attempts AS a LEFT JOIN LATERAL ("
        "   SELECT h.to_delivery, h.to_acceptance, h.event, h.at, h.actor FROM history AS h"
        f"   WHERE h.dispatch_id = a.dispatch_id AND h.event NOT IN ({marks})"
        "   ORDER BY h.sequence DESC LIMIT 1"
        " ) AS last ON true"
        " WHERE last.to_delivery IS DISTINCT FROM a.delivery"
        "    OR last.to_acceptance IS DISTINCT FROM a.acceptance"
        "    OR last.event IS DISTINCT FROM a.last_event"
        "    OR last.at IS DISTINCT FROM a.last_event_at"
        "    OR last.actor IS DISTINCT FROM a.last_actor"
        " ORDER BY a.dispatch_id LIMIT ?",
        (*action_events, _SHOWN),
    ).fetchall()
    for row in broken:
        if row[4] is None:
            differences.append(f"attempt {row[0]!r}: no history")
        else:
            differences.append(
                f"attempt {row[0]!r}: its history ends in {row[4]}/{row[5]} ({row[6]}),"
                f" the attempt is {row[1]}/{row[2]} ({row[3]})"
            )
    orphans = int(
        db.execute(
            "SELECT count(*) FROM history AS h WHERE NOT EXISTS (SELECT 1 FROM attempts AS a"
            " WHERE a.dispatch_id = h.dispatch_id AND a.action_id = h.action_id)"
            f" AND NOT (h.dispatch_id = '' AND h.event IN ({marks})"
            " AND EXISTS (SELECT 1 FROM actions WHERE actions.action_id = h.action_id))",
            tuple(action_events),
        ).fetchone()[0]
    )
    if orphans:
        differences.append(f"history: {orphans} row(s) name no attempt of their action")
    disabled = [
        str(row[0])
        for row in db.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'attempts'::regclass"
            " AND NOT tgisinternal AND tgenabled = 'D' ORDER BY tgname"
        )
    ]
    if disabled:
        differences.append(f"attempts: trigger(s) still disabled: {', '.join(disabled)}")
    last = db.execute(
        "SELECT pg_sequence_last_value(pg_get_serial_sequence('history', 'sequence')::regclass)"
    ).fetchone()[0]
    highest = int(db.execute("SELECT coalesce(max(sequence), 0) FROM history").fetchone()[0])
    if highest and (last is None or int(last) < highest):
        differences.append(
            f"history: the next sequence would not follow the copied ones (highest {highest},"
            f" the identity at {last})"
        )
    return attempts, differences
