"""The SQLite ledger on aiosqlite: durable receipts, compare-and-set transitions, history.

Every write is one ``BEGIN IMMEDIATE`` transaction run as one call on aiosqlite's worker
thread (one thread hop per operation, however many statements it holds). The connection is
in autocommit mode, WAL, ``synchronous=FULL``: a receipt must survive a power cut as well as
a crash, because it is committed *before* the SMS leaves and is the only proof an attempt was
made; with ``NORMAL`` the last commits of a WAL database may roll back on power loss.

Opening never harms a file that is not a ledger: a file that is not SQLite, or a SQLite
database with other tables, is refused before anything is written to it. A new ledger file is
created mode 0600 (it holds phone numbers and bodies); ``read_only`` opens SQLite read-only
(``mode=ro``) for auditors and backups, and never migrates.

The checks of a file before and after SQLite opens it, and the queries one action's reads
run (summary, duplicates, history), live in ``_ledger_read``, which imports neither asyncio
nor aiosqlite: ``open_read_only`` there runs the same functions on the caller's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import aiosqlite
import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core import derived_ids
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.convert import (
    ATTEMPT_COLUMNS,
    _stored_intent,
    action_from_row,
    format_time,
    parse_time,
    record_from_row,
    stored_gate,
    stored_grant,
    stored_planned_device,
    structure,
    to_jsonable,
)
from starebrain_actions.core.exceptions import (
    AttemptInFlight,
    AttemptRefused,
    BudgetExhausted,
    CorruptRecord,
    DeviceBusy,
    FingerprintConflict,
    InvalidInput,
    InvariantViolation,
    LedgerError,
    LedgerUnavailable,
    NotFound,
    PassOutdated,
    PolicyRefused,
    SchemaTooNew,
    StaleTransition,
)
from starebrain_actions.core.model import (
    LEASE_RELEASING_REVIEWS,
    AcceptanceState,
    Action,
    ActionRecord,
    ActionSummary,
    DeliveryState,
    DuplicateSighting,
    Event,
    HistoryEntry,
    ProviderKind,
    RedispatchReason,
    RetryPolicy,
    ReviewReason,
    SmsIntent,
    Status,
    Transition,
    check_action_id,
    provider_row_name,
    require_aware,
    storable,
)
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger import phones as _ledger_phones
from starebrain_actions.ledger.phones import PhoneBinding, PhoneInfo
from starebrain_actions.ledger.read import (
    _OPEN_RETRY_FIRST_S,
    _OPEN_RETRY_LONGEST_S,
    _check_path,
    _check_schema,
    _connecting,
    _FileKind,
    _has_wal,
    _load_action,
    _load_attempts,
    _migration_files,
    _operational,
    _read_only_uri,
    _retry_open,
    _row_dict,
    _sqlite_errors,
    _WalIndexUnavailable,
    read_duplicates,
    read_history,
    read_summary,
)
from starebrain_actions.ledger.read import (
    SCHEMA_VERSION as SCHEMA_VERSION,
)
from starebrain_actions.ledger.read import (
    inspect_ledger as inspect_ledger,
)
from starebrain_actions.ledger.read import (
    summarize as summarize,
)

if TYPE_CHECKING:
    from starebrain_actions.core.policy import GateDecision, Policy
    from starebrain_actions.ledger.postgres import PgBackend

T = TypeVar("T")

_log = get_logger("starebrain.ledger")

#: ``apply_many`` with at most this many transitions writes inline (``Ledger._write``).
_INLINE_TRANSITIONS: Final = 8

#: The log event written for each kind of history event.
_LOG_EVENTS: Final[Mapping[Event, str]] = {
    Event.CREATED: "attempt_created",
    Event.SUBMITTED: "dispatch_submitted",
    Event.CONFIRM: "delivery_confirmed",
    Event.FAIL: "delivery_failed",
    Event.ACCEPT: "acceptance_accepted",
    Event.REJECT: "acceptance_rejected",
    Event.RESOLVE_SENT: "operator_resolved_sent",
    Event.RESOLVE_NOT_SENT: "operator_resolved_not_sent",
    Event.FLAG_REVIEW: "review_flagged",
    Event.NOTE_ERROR: "error_noted",
}

#: Fields a transition may never change: they name the attempt.
_IDENTITY_FIELDS: Final[frozenset[str]] = frozenset(
    {"action_id", "dispatch_id", "attempt", "device", "dispatched_at"}
)

_INSERT_ATTEMPT = """
INSERT INTO attempts (
    dispatch_id, action_id, attempt, device, delivery, acceptance, dispatched_at,
    evidence_json, version, last_event, last_event_at, last_actor, last_evidence_json)
VALUES (:dispatch_id, :action_id, :attempt, :device, 'PENDING', 'PENDING', :dispatched_at,
    :record_evidence_json, 0, 'created', :dispatched_at, :actor, :evidence_json)
"""


#: A duplicate as ``apply_pass`` takes it: a ``DuplicateSighting``, or the older tuple
#: ``(dispatch_id, provider_object_id, evidence)`` (an SMS row), optionally followed by the
#: row's ``ProviderKind``.
DuplicateInput = (
    DuplicateSighting
    | tuple[str, int, Mapping[str, Any]]
    | tuple[str, int, Mapping[str, Any], ProviderKind]
)


_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=to_jsonable
)


def _json(value: Mapping[str, Any]) -> str:
    """Compact, key-sorted JSON; records and enums inside go through the converter."""
    return _ENCODER.encode(value if isinstance(value, dict) else dict(value))


#: The reviews that release a device's lease, as SQL (``LEASE_RELEASING_REVIEWS``).
_RELEASING: Final = ", ".join(f"'{reason.value}'" for reason in sorted(LEASE_RELEASING_REVIEWS))


#: Actions per page of ``Ledger.iter_summaries``.
SUMMARY_PAGE: Final = 1000
#: Actions kept in memory per ledger handle (actions never change once created): enough for
#: the watched attempts of a large reconcile pass (about 1 KB each).
_ACTION_CACHE: Final = 32_768


def _migrations() -> list[tuple[int, str]]:
    """Each migration's number and SQL, in order."""
    return [(number, entry.read_text(encoding="utf-8")) for number, entry in _migration_files()]


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


class Ledger:
    """The durable two-axis action ledger. Open it with ``async with Ledger.open(path)``."""

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
        #: operations queued or running on the worker thread (see ``_write``'s ``inline``)
        self._on_worker = 0
        #: the busy timeout set on the connection, in ms
        self._busy_ms = 10_000
        #: the policy gate's rules (``_policy.Policy``): checked by ``begin_attempt`` before
        #: every attempt; None: no gate
        self.gate: Policy | None = None

    def _remember(self, action: Action) -> Action:
        if len(self._actions) >= _ACTION_CACHE:
            self._actions.clear()
        self._actions[action.action_id] = action
        return action

    def _action(self, db: sqlite3.Connection, action_id: str) -> Action:
        cached = self._actions.get(action_id)
        return cached if cached is not None else self._remember(_load_action(db, action_id))

    # ------------------------------------------------------------------ opening

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 10.0,
        clock: Callable[[], datetime] | None = None,
        read_only: bool = False,
        create: bool = True,
    ) -> AsyncIterator[Ledger]:
        """Open (creating and migrating if needed) the ledger at ``path``.

        ``create``: a missing path, an empty (0-byte) file or an empty SQLite database becomes
        a new ledger (a new file is made mode 0600); with False they are refused.
        ``read_only``: open SQLite read-only (``file:…?mode=ro``; in a directory this user
        cannot write, with no ``-wal`` file, as an immutable snapshot), for auditors and
        backups: nothing is created or migrated, and every write raises LedgerUnavailable.
        Whatever the flags, a file that is not a ledger is refused and left byte for byte
        unchanged.

        Raises:
            LedgerUnavailable: the path is a directory, a device, read-only (unless
                ``read_only``), missing or empty (unless ``create``), not SQLite, a SQLite
                database of something else, damaged, or (``read_only``) in need of a migration.
            SchemaTooNew: the database was written by a newer version (it is not touched).
        """
        if _pg.is_url(path):
            async with cls._open_postgresql(
                str(path),
                busy_timeout_s=busy_timeout_s,
                clock=clock,
                read_only=read_only,
                create=create,
            ) as ledger:
                yield ledger
            return
        file = Path(path)
        create = create and not read_only
        kind = _check_path(file, read_only=read_only, create=create)
        if kind is _FileKind.MISSING:
            _create_private(file)
        attempts = (False, True) if read_only else (False,)
        for immutable in attempts:
            connection = await _connect(
                file, read_only=read_only, immutable=immutable, busy_timeout_s=busy_timeout_s
            )
            connection.row_factory = sqlite3.Row
            ledger = cls(connection, file, clock or _utc_now)
            ledger._busy_ms = int(busy_timeout_s * 1000)
            try:
                try:
                    await ledger._prepare_with_retries(
                        file, busy_timeout_s, read_only=read_only, create=create
                    )
                except _WalIndexUnavailable:
                    # No -shm can be made in a directory this user cannot write: with no
                    # -wal either, no writer is active, and the file is read as it stands.
                    if immutable or _has_wal(file):
                        raise
                    continue
                yield ledger
                return
            finally:
                await connection.close()

    @classmethod
    @contextlib.asynccontextmanager
    async def _open_postgresql(
        cls,
        url: str,
        *,
        busy_timeout_s: float,
        clock: Callable[[], datetime] | None,
        read_only: bool,
        create: bool,
    ) -> AsyncIterator[Ledger]:
        """``open`` for a ``postgresql://`` URL (see ``_ledger_pg``): ``busy_timeout_s`` bounds
        how long a statement may wait for a lock (six times over, as SQLite's busy timeout
        is per lock and a write takes several)."""
        from starebrain_actions.ledger.postgres import PgBackend, prepare

        database = _pg.PgDatabase.shared(url)
        try:
            backend = PgBackend(
                database, read_only=read_only, statement_timeout_s=max(busy_timeout_s, 1.0) * 6
            )
            ledger = cls(None, database.where, clock or _utc_now, backend=backend)
            create = create and not read_only
            with ledger._translated():
                await backend.run(lambda db: prepare(db, read_only=read_only, create=create))
            yield ledger
        finally:
            await asyncio.to_thread(database.release)

    async def _prepare_with_retries(
        self, file: Path, busy_timeout_s: float, *, read_only: bool = False, create: bool = True
    ) -> None:
        """Pragmas and migrations. Two processes creating one ledger at once can meet a lock
        SQLite reports at once, without waiting (switching a new file to WAL while the other
        migrates it): retry for as long as the busy timeout, then give up."""
        deadline = asyncio.get_running_loop().time() + busy_timeout_s
        delay = _OPEN_RETRY_FIRST_S
        while True:
            try:
                await self._run(
                    lambda db: _prepare(
                        db, file, busy_timeout_s, read_only=read_only, create=create
                    )
                )
                return
            except LedgerUnavailable as exc:
                if not _retry_open(exc, asyncio.get_running_loop().time(), deadline):
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, _OPEN_RETRY_LONGEST_S)

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
        """SQLite's errors as the ledger's (``_sqlite_errors``)."""
        return _sqlite_errors(self.path)

    async def _write(self, work: Callable[[sqlite3.Connection], T], *, inline: bool = False) -> T:
        """Run ``work`` inside ``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any error.

        ``inline``, for the short writes of the send path (a receipt, one transition): run it
        on the event loop's thread, saving the two thread switches that cost more than the
        write itself, when that cannot make the loop wait for a lock: nothing else of this
        ledger is on the worker thread and SQLite grants the write lock at once (busy timeout
        0). Otherwise, and whenever the lock is taken, the write goes to the worker thread,
        which waits for the lock for as long as the busy timeout. The transaction, its
        ``synchronous=FULL`` commit and its result are the same either way; inline, the
        write also cannot be interrupted halfway by a cancellation of the caller.
        """

        def transaction(db: sqlite3.Connection) -> T:
            db.execute("BEGIN IMMEDIATE")
            return _commit_or_roll_back(db, work)

        if self._pg is not None:
            with self._translated():
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

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return "sqlite" if self._pg is None else "postgresql"

    def now(self) -> datetime:
        """The ledger's clock (UTC)."""
        return require_aware("clock()", self._clock())

    # ------------------------------------------------------------------ actions

    async def create_action(
        self,
        action_id: str,
        intent: SmsIntent,
        policy: RetryPolicy | None = None,
        *,
        now: datetime | None = None,
        device: str | None = None,
    ) -> Action:
        """Create the action, or return the existing one with the same id and fingerprint.
        ``device``: the phone (its key) the sender means to send it through, kept as
        ``planned_device`` so that ``resume`` sends it there while it has no attempt (an
        existing action keeps what it has).

        Raises:
            InvalidInput: the id is empty, too long or holds spaces or control characters.
            FingerprintConflict: the id exists with another intent; nothing is written.
        """
        check_action_id(action_id)
        when = require_aware("now", now) if now is not None else self.now()
        policy = policy or RetryPolicy()
        try:
            fingerprint = intent.fingerprint
        except UnicodeEncodeError as exc:
            raise InvalidInput(
                f"the intent holds {exc.object[exc.start : exc.end]!r}, which is not valid"
                " Unicode (a lone surrogate, e.g. from bytes that are not UTF-8)"
            ) from exc
        if device is not None and not device.strip():
            raise InvalidInput("device must not be empty (an ADB serial or host:port)")
        candidate = Action(
            action_id=action_id,
            fingerprint=fingerprint,
            intent=intent,
            policy=policy,
            created_at=when,
            planned_device=device,
        )

        def work(db: sqlite3.Connection) -> tuple[Action, bool]:
            deadline = candidate.deadline
            inserted = db.execute(
                "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
                " policy_json, created_at, deadline, planned_device)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (action_id) DO NOTHING",
                (
                    action_id,
                    fingerprint,
                    _json(to_jsonable(intent)),
                    policy.maximum_attempts,
                    _json(to_jsonable(policy)),
                    format_time(when),
                    format_time(deadline) if deadline else None,
                    device,
                ),
            )
            if inserted.rowcount == 1:
                return candidate, True
            stored = _row_dict(
                db.execute("SELECT * FROM actions WHERE action_id = ?", (action_id,)).fetchone()
            )
            if stored["fingerprint"] != fingerprint:
                raise FingerprintConflict(action_id, stored["fingerprint"], fingerprint)
            return action_from_row(stored), False

        action, created = await self._write(work, inline=True)
        self._remember(action)
        _log.info(
            "action_created" if created else "action_reused",
            action_id=action_id,
            fingerprint=fingerprint,
        )
        return action

    async def get_action(self, action_id: str) -> Action:
        """The action with this id.

        Raises:
            NotFound: there is none.
        """

        def work(db: sqlite3.Connection) -> Action:
            return self._action(db, action_id)

        return await self._run(work)

    # ------------------------------------------------------------------ attempts

    async def begin_attempt(
        self,
        action_id: str,
        device: str,
        *,
        now: datetime | None = None,
        actor: str = "agent",
        evidence: Mapping[str, Any] | None = None,
        gate: Policy | None = None,
    ) -> ActionRecord:
        """Commit the receipt of a new attempt, taking the device's lease, before any send.
        ``gate``: the policy gate for this attempt (None: the ledger's, ``Ledger.gate``).

        ``evidence`` (JSON-able) is kept on the attempt from the start, e.g. the phone's fence
        epoch that lets a later pass prove the attempt never ran.

        Atomic: refuses when ``should_redispatch`` says no, when the budget is spent, or when
        another in-flight attempt holds the device.

        Raises:
            NotFound: no such action.
            AttemptInFlight: an earlier attempt of this action is unresolved.
            BudgetExhausted: attempts or deadline used up.
            DeviceBusy: another action's attempt holds the device.
            AttemptRefused: anything else ``should_redispatch`` refuses (success, review...).
        """
        if not device or not device.strip():
            raise InvalidInput("device must not be empty (an ADB serial or host:port)")
        when = require_aware("now", now) if now is not None else self.now()
        evidence = storable(dict(evidence or {}))  # NUL: U+FFFD on both backends

        active = gate if gate is not None else self.gate

        def work(db: sqlite3.Connection) -> ActionRecord | GateDecision:
            # one writer per action and per device from here to COMMIT (SQLite: the write
            # lock already; PostgreSQL: advisory locks), so the checks below hold at insert;
            # with a gate, one writer of every gated attempt (its counts span all actions)
            gated = ("policy-gate",) if active is not None else ()
            _pg.lock(db, f"action:{action_id}", f"device:{device}", *gated)
            # read afresh: an operator's grant (``retry``) may have changed it since cached
            action = self._remember(_load_action(db, action_id))
            attempts = _load_attempts(db, action_id)
            decision = _decisions.should_redispatch(action, attempts, when)
            if not decision:
                raise _refusal(action_id, decision)
            if active is not None:
                verdict = self._judge(db, active, action, when)
                if not verdict.allowed:
                    self._note_verdict(db, action, attempts, verdict, when)
                    return verdict
                if action.gate is not None:
                    self._note_verdict(db, action, attempts, verdict, when)
            else:
                # without a gate of its own, a sender still honours a person's denial and a
                # hold for approval another sender's gate recorded: nothing bypasses them
                standing = _standing_verdict(action)
                if standing is not None:
                    return standing
            holder = db.execute(
                "SELECT dispatch_id, action_id, dispatched_at FROM attempts"
                " WHERE device = ? AND delivery = 'PENDING'"
                f" AND coalesce(review_reason, '') NOT IN ({_RELEASING})",
                (device,),
            ).fetchone()
            if holder is not None:
                busy = DeviceBusy(
                    f"device {device} is leased to attempt {holder[0]} of action {holder[1]},"
                    f" unresolved since {holder[2]}"
                )
                busy.holder_dispatch_id = str(holder[0])
                busy.holder_action_id = str(holder[1])
                busy.holder_since = str(holder[2])
                raise busy
            self._admit(db, action_id, device, when)
            record = ActionRecord(
                action_id=action_id,
                dispatch_id=str(uuid.uuid4()),
                attempt=len(attempts) + 1,
                device=device,
                dispatched_at=when,
                evidence=dict(evidence or {}),
            )
            params = {
                "dispatch_id": record.dispatch_id,
                "action_id": action_id,
                "attempt": record.attempt,
                "device": device,
                "dispatched_at": format_time(when),
                "actor": actor,
                "evidence_json": _json(
                    {"attempt": record.attempt, "device": device, **dict(evidence or {})}
                ),
                "record_evidence_json": _json(dict(evidence or {})),
            }
            try:
                db.execute(_INSERT_ATTEMPT, params)
            except sqlite3.IntegrityError as exc:
                raise AttemptInFlight(
                    f"action {action_id}: a concurrent attempt won: {exc}"
                ) from exc
            return record

        made = await self._write(work, inline=True)
        if not isinstance(made, ActionRecord):
            _log.info(
                "policy_refused",
                action_id=action_id,
                verdict=made.verdict.value,
                rule=made.rule,
                digest=made.digest,
            )
            refused = PolicyRefused(
                f"action {action_id}: {made.verdict.value} by {made.rule}: {made.detail}"
            )
            refused.gate = made
            raise refused
        record = made
        _log.info(
            "attempt_created",
            action_id=action_id,
            dispatch_id=record.dispatch_id,
            device=device,
            attempt=record.attempt,
        )
        return record

    def _judge(
        self, db: sqlite3.Connection, gate: Policy, action: Action, when: datetime
    ) -> GateDecision:
        """The gate's verdict on a new attempt of ``action`` now, counted in the ledger."""
        from starebrain_actions.core.policy import GateCounts, judge

        recipient = _RECIPIENT[_pg.dialect(db)]
        here = action.intent.recipient

        def count(sql: str, *params: Any) -> int:
            return int(db.execute(sql, params).fetchone()[0])

        others = (
            "SELECT count(DISTINCT attempts.action_id) FROM attempts"
            " JOIN actions ON actions.action_id = attempts.action_id"
            " WHERE attempts.dispatched_at >= ? AND attempts.action_id <> ?"
        )
        counts = GateCounts(
            to_recipient_today=count(
                f"{others} AND {recipient} = ?",
                format_time(when - timedelta(days=1)),
                action.action_id,
                here,
            ),
            last_hour=count(others, format_time(when - timedelta(hours=1)), action.action_id),
            known_recipient=count(
                "SELECT count(*) FROM attempts JOIN actions"
                " ON actions.action_id = attempts.action_id"
                f" WHERE attempts.delivery = 'CONFIRMED' AND {recipient} = ?",
                here,
            )
            > 0,
            approved=action.approval == "APPROVED",
            denied=action.approval == "DENIED",
        )
        return judge(gate, action.intent, counts, now=when)

    def _note_verdict(
        self,
        db: sqlite3.Connection,
        action: Action,
        attempts: Sequence[ActionRecord],
        verdict: GateDecision,
        when: datetime,
    ) -> None:
        """Keep the gate's verdict on the action, and in its history when it changed."""
        from starebrain_actions.core.policy import Verdict

        kept = None
        if verdict.verdict is not Verdict.ALLOW:
            kept = {
                "verdict": verdict.verdict.value,
                "rule": verdict.rule,
                "detail": verdict.detail,
                "until": format_time(verdict.until) if verdict.until else None,
                "digest": verdict.digest,
                "at": format_time(when),
            }
        previous = action.gate or {}
        if kept is not None and (previous.get("verdict"), previous.get("rule")) == (
            kept["verdict"],
            kept["rule"],
        ):
            return
        db.execute(
            "UPDATE actions SET gate_json = ? WHERE action_id = ?",
            (_json(kept) if kept is not None else None, action.action_id),
        )
        _history_row(
            db,
            action.action_id,
            attempts,
            Event.POLICY_VERDICT,
            "policy",
            when,
            {
                "verdict": verdict.verdict.value,
                "rule": verdict.rule,
                "detail": verdict.detail,
                "digest": verdict.digest,
            },
        )

    def _admit(self, db: sqlite3.Connection, action_id: str, device: str, when: datetime) -> None:
        """A last check of a new attempt, run inside ``begin_attempt``'s write transaction
        (so it holds across processes: SQLite lets one writer at a time); raising refuses
        the attempt and writes nothing. Subclasses add limits here (``starebrain mcp``'s
        hourly send cap); this one admits everything."""

    async def apply(self, transition: Transition) -> ActionRecord:
        """Apply one pure transition with compare-and-set, in its own transaction.

        Raises:
            StaleTransition: the record is no longer in the transition's ``before`` state.
            NotFound: no such attempt.
        """
        results = await self.apply_many([transition])
        result = results[0]
        if isinstance(result, LedgerError):
            raise result
        return result

    async def apply_many(
        self, transitions: Sequence[Transition]
    ) -> list[ActionRecord | LedgerError]:
        """Apply transitions in order, all in one transaction (one thread hop).

        Each one is compare-and-set on its own: a stale or refused one is reported in its
        place (as ``StaleTransition`` or another ``LedgerError``) and the others still apply.
        """

        def work(db: sqlite3.Connection) -> list[ActionRecord | LedgerError]:
            return [_apply_one(db, transition) for transition in transitions]

        results = await self._write(work, inline=len(transitions) <= _INLINE_TRANSITIONS)
        for transition, result in zip(transitions, results, strict=True):
            _log_transition(transition, result)
        return results

    async def resolve(
        self,
        action_id: str,
        *,
        as_sent: bool,
        reason: str,
        operator: str,
        dispatch_id: str | None = None,
        now: datetime | None = None,
        expect_version: int | None = None,
        force: bool = False,
        row: tuple[ProviderKind, int] | None = None,
    ) -> ActionRecord:
        """An operator's ruling on the latest (or the named) attempt, recorded in history.

        ``expect_version``: the attempt's version the operator saw (``status``/``review``);
        anything changed since refuses the ruling. ``force`` and ``row``: see
        ``_core.resolve``. Repeating a ruling still in force (``_core.ruling_in_force``)
        writes nothing and returns the attempt as it stands (its version unchanged).

        Raises:
            NotFound: no such action, it has no attempt, or ``dispatch_id`` is not one of its
                attempts (the message names the action it belongs to, if any).
            InvalidInput: no reason or operator; see ``_core.resolve``.
            StaleTransition: the attempt is no longer at ``expect_version``.
        """
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> tuple[Transition | None, ActionRecord | LedgerError]:
            _load_action(db, action_id)
            attempts = _load_attempts(db, action_id)
            if dispatch_id is not None:
                chosen = [record for record in attempts if record.dispatch_id == dispatch_id]
                if not chosen:
                    raise NotFound(_not_this_action(db, action_id, dispatch_id, attempts))
            else:
                chosen = attempts[-1:]
            if not chosen:
                raise NotFound(f"action {action_id} has no attempt to resolve")
            if expect_version is not None and chosen[0].version != expect_version:
                now_status = _core.derive_status(chosen[0], when, timedelta(0)).value
                raise StaleTransition(
                    chosen[0].dispatch_id,
                    f"version {expect_version} (what you saw)",
                    f"version {chosen[0].version} ({now_status} now)",
                )
            if _core.ruling_in_force(chosen[0], as_sent=as_sent, row=row):
                return None, chosen[0]
            transition = _core.resolve(
                chosen[0],
                as_sent=as_sent,
                reason=reason,
                operator=operator,
                now=when,
                force=force,
                row=row,
            )
            return transition, _apply_one(db, transition)

        transition, result = await self._write(work)
        if transition is None:
            _log.info(
                "operator_ruling_repeated",
                action_id=action_id,
                dispatch_id=getattr(result, "dispatch_id", None),
            )
        else:
            _log_transition(transition, result)
        if isinstance(result, LedgerError):
            raise result
        return result

    async def retry(
        self,
        action_id: str,
        *,
        reason: str,
        operator: str,
        attempts: int = 1,
        now: datetime | None = None,
    ) -> ActionSummary:
        """An operator gives an action whose budget is spent, or whose retries were refused
        (a repeated mismatch, a passed deadline), ``attempts`` new attempts: the attempts so
        far stay as evidence and no longer count (``_decisions.grant_retry``). Recorded on the
        action and as a ``retry_granted`` row of its history, with who and why. The next
        ``send`` or ``resume`` of the action sends it.

        Raises:
            NotFound: no such action.
            InvalidInput: ``attempts`` below 1, no reason or no operator.
            RetryRefused: an attempt is unresolved (in flight, verifying, in review), or the
                action succeeded or may be retried already; nothing is written.
        """
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> Action:
            _pg.lock(db, f"action:{action_id}")
            action = _load_action(db, action_id)
            records = _load_attempts(db, action_id)
            was = _decisions.should_redispatch(action, records, when).reason
            granted = _decisions.grant_retry(
                action, records, granted=attempts, now=when, by=operator, reason=reason
            )
            grant = granted.grant
            assert grant is not None
            db.execute(
                "UPDATE actions SET grant_json = ? WHERE action_id = ?",
                (_json(to_jsonable(grant)), action_id),
            )
            _history_row(
                db,
                action_id,
                records,
                Event.RETRY_GRANTED,
                f"operator:{operator}",
                when,
                {
                    "reason": reason,
                    "refused_because": was.value,
                    "attempts_granted": attempts,
                    "after_attempt": grant.after_attempt,
                },
            )
            return granted

        action = await self._write(work)
        self._remember(action)
        _log.info(
            "retry_granted",
            action_id=action_id,
            attempts=attempts,
            operator=operator,
        )
        return await self.summary(action_id, now=now)

    async def approve(
        self, action_id: str, *, operator: str, reason: str = "", now: datetime | None = None
    ) -> ActionSummary:
        """A person's approval of an action the policy gate holds (``approve = "new"`` or
        ``"always"``): the next ``send``, ``send_sms`` or ``resume`` of it sends it (the
        other rules still apply). Recorded on the action and in its history.

        Raises:
            NotFound: no such action.
            InvalidInput: no operator.
            InvariantViolation: a person denied it already (a denial is final).
        """
        return await self._rule_on(action_id, "APPROVED", operator, reason, now)

    async def deny(
        self, action_id: str, *, operator: str, reason: str, now: datetime | None = None
    ) -> ActionSummary:
        """A person's denial: nothing more is ever sent for this action (an attempt already
        under way is not called back; the gate refuses every later one). Recorded on the
        action and in its history.

        Raises:
            NotFound: no such action.
            InvalidInput: no operator or no reason.
        """
        if not reason.strip():
            raise InvalidInput("a denial needs a reason (it is kept in the history)")
        return await self._rule_on(action_id, "DENIED", operator, reason, now)

    async def _rule_on(
        self, action_id: str, ruling: str, operator: str, reason: str, now: datetime | None
    ) -> ActionSummary:
        if not operator.strip():
            raise InvalidInput("an approval or a denial needs who gives it (operator)")
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> None:
            _pg.lock(db, f"action:{action_id}")
            action = _load_action(db, action_id)
            if action.approval == ruling:
                return  # already in force: nothing written
            if action.approval == "DENIED":
                raise InvariantViolation(
                    f"action {action_id} was denied by a person: a denial is final (send the"
                    " text as a new action if it must go after all)"
                )
            db.execute("UPDATE actions SET approval = ? WHERE action_id = ?", (ruling, action_id))
            _history_row(
                db,
                action_id,
                _load_attempts(db, action_id),
                Event.APPROVED if ruling == "APPROVED" else Event.DENIED,
                f"operator:{operator}",
                when,
                {"reason": reason},
            )

        await self._write(work)
        self._actions.pop(action_id, None)
        _log.info("action_" + ruling.lower(), action_id=action_id, operator=operator)
        return await self.summary(action_id, now=now)

    async def record_duplicate(
        self,
        dispatch_id: str,
        *,
        provider_object_id: int,
        evidence: Mapping[str, Any] | None = None,
        now: datetime | None = None,
        actor: str = "reconciler",
        provider_kind: ProviderKind = ProviderKind.SMS,
        row_date_ms: int | None = None,
    ) -> bool:
        """Record a provider row (``provider_object_id`` in the table ``provider_kind`` names,
        dated ``row_date_ms``) that repeats an already-confirmed attempt, and flag the attempt
        for review.

        Returns False when that row was already recorded as a duplicate.

        Raises:
            NotFound: no such attempt.
            InvariantViolation: the attempt is not confirmed.
            InvalidInput: ``provider_kind`` is not a ``ProviderKind``.
            LedgerError: the row already confirms an attempt.
        """
        when = require_aware("now", now) if now is not None else self.now()
        sighting = DuplicateSighting(
            dispatch_id=dispatch_id,
            provider_object_id=provider_object_id,
            kind=provider_kind,
            row_date_ms=row_date_ms,
            evidence=dict(evidence or {}),
        )

        def work(db: sqlite3.Connection) -> tuple[bool, Transition | None]:
            return _insert_duplicate(db, sighting, when, actor)

        added, transition = await self._write(work)
        if added:
            _log_duplicate(sighting, transition)
        return added

    async def apply_pass(
        self,
        transitions: Sequence[Transition],
        duplicates: Sequence[DuplicateInput] = (),
        *,
        now: datetime | None = None,
        actor: str = "reconciler",
        snapshot: tuple[str, datetime, Collection[str]] | None = None,
    ) -> tuple[list[ActionRecord | LedgerError], int]:
        """Apply a reconcile pass in one transaction: the transitions (as ``apply_many``),
        then the duplicates seen, each a ``DuplicateSighting`` or a tuple
        ``(dispatch_id, provider_object_id, evidence[, kind])`` (no kind: an SMS row).

        ``snapshot=(device, listed_at, dispatch_ids)``: the attempts the pass listed before it
        read the phone. If an attempt was started on that device since (one the pass never
        considered, whose row the read may hold), nothing is written: ``PassOutdated``.

        Returns the per-transition results and how many duplicates were new. A duplicate
        that cannot be recorded (its attempt not confirmed, the row claimed) is skipped and
        logged, never fatal to the pass.

        Raises:
            InvalidInput: a duplicate is malformed (checked before anything is written).
            PassOutdated: see ``snapshot``.
        """
        when = require_aware("now", now) if now is not None else self.now()
        sightings = [_sighting(item) for item in duplicates]

        def work(
            db: sqlite3.Connection,
        ) -> tuple[
            list[ActionRecord | LedgerError], list[tuple[DuplicateSighting, Transition | None]]
        ]:
            if snapshot is not None:
                device, listed_at, known = snapshot
                # no attempt may start on the device until this pass commits
                _pg.lock(db, f"device:{device}")
                newer = [
                    row[0]
                    for row in db.execute(
                        "SELECT dispatch_id FROM attempts WHERE device = ? AND dispatched_at >= ?",
                        (device, format_time(require_aware("listed_at", listed_at))),
                    )
                    if row[0] not in known
                ]
                if newer:
                    raise PassOutdated(
                        f"device {device}: attempt {newer[0]} started after the pass listed"
                        " its attempts; redo the pass"
                    )
            results = [_apply_one(db, transition) for transition in transitions]
            added: list[tuple[DuplicateSighting, Transition | None]] = []
            for sighting in sightings:
                try:
                    new, flag = _insert_duplicate(db, sighting, when, actor)
                except (LedgerError, InvariantViolation) as exc:
                    _log.warning(
                        "duplicate_skipped",
                        dispatch_id=sighting.dispatch_id,
                        provider_object_id=sighting.provider_object_id,
                        provider_kind=sighting.kind.value,
                        error=str(exc),
                    )
                    continue
                if new:
                    added.append((sighting, flag))
            return results, added

        results, added = await self._write(work)
        for transition, result in zip(transitions, results, strict=True):
            _log_transition(transition, result)
        for sighting, flag in added:
            _log_duplicate(sighting, flag)
        return results, len(added)

    # ------------------------------------------------------------------ queries

    async def get_attempt(self, dispatch_id: str) -> ActionRecord:
        """The attempt with this dispatch id.

        Raises:
            NotFound: there is none.
        """
        return await self._run(lambda db: _load_attempt(db, dispatch_id))

    async def attempts_by_id(self, dispatch_ids: Iterable[str]) -> dict[str, ActionRecord]:
        """The attempts with these dispatch ids, by id (ids the ledger does not know are
        absent), in one query."""
        wanted = list(dict.fromkeys(dispatch_ids))

        def work(db: sqlite3.Connection) -> dict[str, ActionRecord]:
            found: dict[str, ActionRecord] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                rows = db.execute(
                    f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE dispatch_id IN"
                    f" ({', '.join('?' for _ in chunk)})",
                    chunk,
                ).fetchall()
                for row in rows:
                    record = record_from_row(_row_dict(row))
                    found[record.dispatch_id] = record
            return found

        return await self._run(work)

    async def attempts(self, action_id: str) -> list[ActionRecord]:
        """Every attempt of the action, oldest first (empty if it has none).

        Raises:
            NotFound: no such action.
        """

        def work(db: sqlite3.Connection) -> list[ActionRecord]:
            _load_action(db, action_id)
            return _load_attempts(db, action_id)

        return await self._run(work)

    async def in_flight(self, device: str | None = None) -> list[ActionRecord]:
        """Attempts whose delivery is unresolved, on one device or all; oldest first."""
        return await self._pending(device, holding=False)

    async def awaiting_approval(self, *, now: datetime | None = None) -> list[ActionSummary]:
        """The actions the policy gate holds for a person's approval (its latest verdict
        HOLD, no approval or denial yet), oldest first."""
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> list[str]:
            verdict = _GATE_VERDICT[_pg.dialect(db)]
            rows = db.execute(
                "SELECT action_id FROM actions WHERE approval IS NULL AND gate_json IS NOT NULL"
                f" AND {verdict} = 'HOLD' ORDER BY created_at, action_id"
            ).fetchall()
            return [str(row[0]) for row in rows]

        ids = await self._run(work)
        return [await self.summary(action_id, now=when) for action_id in ids]

    async def holders(self, device: str | None = None) -> list[ActionRecord]:
        """The unresolved attempts that hold their phone's lease (delivery PENDING, not in a
        review that releases it), on one device or all; oldest first."""
        return await self._pending(device, holding=True)

    async def _pending(self, device: str | None, *, holding: bool) -> list[ActionRecord]:
        def work(db: sqlite3.Connection) -> list[ActionRecord]:
            sql = f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE delivery = 'PENDING'"
            if holding:
                sql += f" AND coalesce(review_reason, '') NOT IN ({_RELEASING})"
            params: tuple[str, ...] = ()
            if device is not None:
                sql += " AND device = ?"
                params = (device,)
            # +: sorted after the lookup (attempts_by_device_state), not by walking every
            # attempt of the device in dispatch order
            sql += " ORDER BY +dispatched_at, dispatch_id"
            return [record_from_row(_row_dict(row)) for row in db.execute(sql, params)]

        return await self._run(work)

    async def devices_in_flight(self) -> list[str]:
        """Devices (phone keys) with an unresolved attempt, or a confirmed one whose row has not
        settled (VERIFYING): what a pass must read."""

        def work(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(
                "SELECT device FROM attempts WHERE delivery = 'PENDING'"
                " UNION SELECT device FROM attempts"
                " WHERE delivery = 'CONFIRMED' AND acceptance = 'PENDING' ORDER BY 1"
            )
            return [str(row[0]) for row in rows]

        return await self._run(work)

    # ------------------------------------------------------------------ phones

    async def bind_phone(
        self,
        address: str,
        identity: str | None,
        *,
        serialno: str | None = None,
        now: datetime | None = None,
    ) -> PhoneBinding:
        """Which phone of the ledger answers at ``address`` with ``identity`` (registered if
        new; a legacy key named by the address is bound to it), and remember the address as
        one of its aliases. ``PhoneBinding.key`` is the name its attempts go by: one lease,
        one watermark, one send rate per phone, whatever address reaches it; another phone
        at a known address gets a key of its own (``PhoneBinding.replaced`` says so).

        Raises:
            InvalidInput: an empty address or identity.
        """
        if not address or not address.strip():
            raise InvalidInput("address must not be empty")
        if identity is not None and not identity.strip():
            raise InvalidInput("identity must not be empty (None: unknown)")
        when = require_aware("now", now) if now is not None else self.now()
        binding = await self._write(
            lambda db: _ledger_phones.bind_phone(db, address, identity, serialno, when),
            inline=True,
        )
        if binding.replaced is not None:
            _log.warning(
                "phone_replaced",
                address=address,
                device=binding.key,
                previous_device=binding.replaced,
            )
        elif binding.new or binding.adopted:
            _log.info("phone_bound", address=address, device=binding.key, adopted=binding.adopted)
        return binding

    async def phone_identity(self, key: str) -> tuple[bool, str | None]:
        """Whether the ledger knows ``key`` as a phone, and its identity (None: a legacy key
        not yet bound, or a phone whose identity could not be read)."""
        return await self._run(lambda db: _ledger_phones.phone_identity(db, key))

    async def phone_address(self, key: str) -> str:
        """The address the phone ``key`` was reached at last (``key`` itself if none)."""
        return await self._run(lambda db: _ledger_phones.phone_address(db, key))

    async def phone_key_for(self, name: str) -> str:
        """The key of the phone ``name`` names: a key, or an address it was reached at
        (``name`` itself when the ledger knows neither)."""
        return await self._run(lambda db: _ledger_phones.phone_key_for(db, name))

    async def phones(self) -> list[PhoneInfo]:
        """Every phone the ledger knows, with its identity and addresses."""
        return await self._run(_ledger_phones.phones)

    async def summary(self, action_id: str, *, now: datetime | None = None) -> ActionSummary:
        """The action, its attempts and what is derived from them.

        Raises:
            NotFound: no such action.
        """
        when = require_aware("now", now) if now is not None else self.now()
        return await self._run(lambda db: read_summary(db, action_id, when))

    async def summaries(
        self,
        *,
        status: Status | None = None,
        device: str | None = None,
        needs_review: bool | None = None,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> list[ActionSummary]:
        """Actions (newest first) with their derived status, optionally filtered (a list of
        what ``iter_summaries`` yields)."""
        return [
            summary
            async for summary in self.iter_summaries(
                status=status, device=device, needs_review=needs_review, limit=limit, now=now
            )
        ]

    async def iter_summaries(
        self,
        *,
        status: Status | None = None,
        device: str | None = None,
        needs_review: bool | None = None,
        notable_only: bool = False,
        limit: int | None = None,
        now: datetime | None = None,
        page_size: int = SUMMARY_PAGE,
    ) -> AsyncIterator[ActionSummary]:
        """Actions newest first (``created_at`` descending, then ``action_id``) with their
        derived status, optionally filtered, read a page at a time: memory stays flat
        however large the ledger.

        Each page is one query for its actions (a keyset range of ``actions_by_created``),
        one for their attempts and one for their duplicate counts. Filters are narrowed in
        SQL only to a superset of what they keep (``_prefilter``); every summary is then
        derived by ``summarize`` and checked in Python, so the result is exactly the filter
        applied to every action. ``notable_only``: only actions with an attempt that is not
        a clean success (see ``ledger_tally``: the others are SUCCEEDED, nothing to review).
        """
        when = require_aware("now", now) if now is not None else self.now()
        if page_size < 1:
            raise InvalidInput(f"page_size must be >= 1; got {page_size}")
        where, params = _prefilter(
            status,
            device,
            needs_review,
            notable_only=notable_only,
            dialect="sqlite" if self._pg is None else "postgresql",
        )
        after: tuple[str, str] | None = None
        left = limit
        while left is None or left > 0:
            # a small limit reads a small page (the SQL filter may keep a few too many)
            size = page_size if left is None else min(page_size, max(left, 16))
            page, after = await self._run(
                functools.partial(
                    _summary_page, where=where, params=params, after=after, size=size, now=when
                )
            )
            for summary in page:
                if status is not None and summary.status is not status:
                    continue
                if needs_review is not None and summary.needs_review is not needs_review:
                    continue
                yield summary
                if left is not None:
                    left -= 1
                    if left == 0:
                        return
            if after is None:
                return

    async def resumable(
        self, device: str | None = None, *, now: datetime | None = None
    ) -> list[ActionSummary]:
        """The actions a ``resume`` may send now or after their backoff, oldest first: PLANNED
        ones (planned for ``device`` or for no phone in particular), and those whose latest
        attempt FAILED or was REJECTED (on ``device``, if given) while ``should_redispatch``
        allows another attempt."""
        when = require_aware("now", now) if now is not None else self.now()
        found: list[ActionSummary] = []
        for status in (Status.PLANNED, Status.FAILED, Status.MISMATCH):
            async for summary in self.iter_summaries(status=status, now=when):
                latest = summary.latest
                # an action goes on the phone of its latest attempt, or (none yet) the one
                # its sender named, if any
                where = latest.device if latest is not None else summary.action.planned_device
                if device is not None and where is not None and where != device:
                    continue
                decision = _decisions.should_redispatch(summary.action, summary.attempts, when)
                if decision.redispatch or decision.reason is RedispatchReason.BACKOFF:
                    found.append(summary)
        found.sort(key=lambda summary: (summary.action.created_at, summary.action.action_id))
        return found

    async def ledger_tally(self) -> LedgerTally:
        """Counts over every action, in a few index scans: the actions with no attempt
        (PLANNED), those whose attempts are all clean successes (SUCCEEDED with nothing to
        review, which ``iter_summaries(notable_only=True)`` leaves out), and the provider rows
        ever recorded as duplicates."""

        def work(db: sqlite3.Connection) -> LedgerTally:
            actions = int(db.execute("SELECT count(*) FROM actions").fetchone()[0])
            attempted = int(
                db.execute("SELECT count(DISTINCT action_id) FROM attempts").fetchone()[0]
            )
            notable = int(
                db.execute(
                    f"SELECT count(DISTINCT action_id) FROM attempts WHERE {_NOTABLE}"
                ).fetchone()[0]
            )
            duplicates = int(
                db.execute(
                    "SELECT count(*) FROM duplicates JOIN attempts USING (dispatch_id)"
                ).fetchone()[0]
            )
            return LedgerTally(
                actions=actions,
                planned=actions - attempted,
                quietly_succeeded=attempted - notable,
                duplicates=duplicates,
            )

        return await self._run(work)

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

    async def devices(self) -> list[str]:
        """Every device any attempt was made on, sorted (an index scan)."""

        def work(db: sqlite3.Connection) -> list[str]:
            rows = db.execute("SELECT DISTINCT device FROM attempts ORDER BY device")
            return [str(row[0]) for row in rows]

        return await self._run(work)

    async def needing_review(self, *, now: datetime | None = None) -> list[ActionSummary]:
        """Actions a person must look at: ambiguous, stuck, mismatched, duplicated, or out of
        budget."""
        return await self.summaries(needs_review=True, now=now)

    async def history(self, action_id: str) -> list[HistoryEntry]:
        """Every recorded change of every attempt of the action, in order.

        Raises:
            NotFound: no such action.
        """
        return await self._run(lambda db: read_history(db, action_id))

    async def duplicates(self, action_id: str) -> list[dict[str, Any]]:
        """Provider rows recorded as duplicates of the action's attempts: ``device``,
        ``provider_kind`` (``"sms"`` or ``"mms"``), ``provider_object_id``, ``dispatch_id``,
        ``seen_at`` and ``evidence``, oldest first."""
        return await self._run(lambda db: read_duplicates(db, action_id))

    async def device_floor(self, device: str, before: datetime) -> int:
        """The highest ``content://sms`` ``_id`` the ledger has seen on ``device`` from
        attempts dispatched before ``before`` (their watermarks and SMS artifacts); 0 if none.

        SMS rows of an attempt dispatched at ``before`` must lie above it: a lower bound for an
        attempt whose own watermark was never recorded (a crash right after the send). MMS
        ``_id``s are another numbering and never raise it.
        """
        return (await self.device_floor_row(device, before))[0]

    async def device_floor_row(self, device: str, before: datetime) -> tuple[int, int | None]:
        """``device_floor`` and that row's ``date`` when the ledger knows it (the watermark's
        ``watermark_date_ms``, the artifact's ``provider_row_date_ms``): ids are reused once the
        latest rows are deleted, so the floor is trusted only while that row is still there."""
        when = format_time(require_aware("before", before))

        # each maximum walks an index from the top and stops at the first attempt dispatched
        # before ``before``: a few rows, however many attempts the device has (the unary +
        # keeps the planner off the dispatch-time index: every attempt before ``before``)
        def work(db: sqlite3.Connection) -> tuple[int, int | None]:
            watermark = db.execute(
                "SELECT watermark_id, evidence_json FROM attempts WHERE device = ?"
                " AND watermark_id IS NOT NULL AND +dispatched_at < ?"
                " ORDER BY watermark_id DESC LIMIT 1",
                (device, when),
            ).fetchone()
            artifact = db.execute(
                "SELECT provider_object_id, provider_row_date_ms FROM attempts"
                " WHERE device = ? AND provider_kind = ?"
                " AND provider_object_id IS NOT NULL AND +dispatched_at < ?"
                " ORDER BY provider_object_id DESC LIMIT 1",
                (device, ProviderKind.SMS.value, when),
            ).fetchone()
            found: list[tuple[int, int | None]] = []
            if watermark is not None:
                date = json.loads(watermark[1]).get("watermark_date_ms")
                found.append((int(watermark[0]), date if isinstance(date, int) else None))
            if artifact is not None:
                found.append(
                    (int(artifact[0]), artifact[1] if isinstance(artifact[1], int) else None)
                )
            return max(found, key=lambda row: row[0], default=(0, None))

        return await self._run(work)

    async def recent_attempts(self, device: str, since: datetime) -> list[ActionRecord]:
        """Attempts on ``device`` still unresolved, unverified, or confirmed since ``since``:
        what a reconcile pass of that device looks at (oldest first)."""
        when = format_time(require_aware("since", since))

        # three disjoint index ranges (an OR over them would scan every attempt of the
        # device): unresolved and unverified (attempts_by_device_state), and accepted or
        # rejected since ``since`` (attempts_by_device_confirmed: the unary + keeps the
        # planner from scanning every settled attempt of the device in the other index)
        def work(db: sqlite3.Connection) -> list[ActionRecord]:
            rows = db.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE device = :device"
                " AND delivery = 'PENDING'"
                f" UNION ALL SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE device = :device"
                " AND delivery = 'CONFIRMED' AND acceptance = 'PENDING'"
                f" UNION ALL SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE device = :device"
                " AND +delivery = 'CONFIRMED' AND +acceptance IN ('ACCEPTED', 'REJECTED')"
                " AND confirmed_at >= :since",
                {"device": device, "since": when},
            ).fetchall()
            records = [record_from_row(_row_dict(row)) for row in rows]
            # sorted here: an ORDER BY would lead the planner to walk every attempt of the
            # device in dispatch order instead
            return sorted(records, key=lambda record: (record.dispatched_at, record.dispatch_id))

        return await self._run(work)

    async def latest_attempts(self, device: str, limit: int) -> list[ActionRecord]:
        """The ``limit`` attempts started last on ``device``, newest first (an index range of
        ``attempts_by_device_time``)."""

        def work(db: sqlite3.Connection) -> list[ActionRecord]:
            rows = db.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE device = ?"
                " ORDER BY dispatched_at DESC, dispatch_id DESC LIMIT ?",
                (device, limit),
            ).fetchall()
            return [record_from_row(_row_dict(row)) for row in rows]

        return await self._run(work)

    async def dispatches_since(self, device: str, since: datetime) -> int:
        """How many attempts were started on ``device`` at or after ``since`` (a send rate)."""
        when = format_time(require_aware("since", since))
        return await self._run(lambda db: dispatches_since(db, device, when))

    async def confirmation_delays(self, device: str, limit: int) -> list[timedelta]:
        """For the ``limit`` attempts on ``device`` confirmed last, the time from each one's
        receipt to its confirmation, latest first: how soon a read found what the phone sent
        (an upper bound; a later pass may have confirmed some)."""

        def work(db: sqlite3.Connection) -> list[timedelta]:
            rows = db.execute(
                "SELECT dispatched_at, confirmed_at FROM attempts WHERE device = ?"
                " AND confirmed_at IS NOT NULL ORDER BY confirmed_at DESC LIMIT ?",
                (device, limit),
            ).fetchall()
            return [parse_time(row[1]) - parse_time(row[0]) for row in rows]

        return await self._run(work)

    async def actions(self, action_ids: Iterable[str]) -> dict[str, Action]:
        """The actions with these ids (unknown ids are left out)."""
        wanted = sorted(set(action_ids))

        def work(db: sqlite3.Connection) -> dict[str, Action]:
            found: dict[str, Action] = {}
            missing: list[str] = []
            for action_id in wanted:
                cached = self._actions.get(action_id)
                if cached is None:
                    missing.append(action_id)
                else:
                    found[action_id] = cached
            # the rest in one query per 500 ids (a pass over 10,000 watched attempts would
            # otherwise run 10,000 queries), read as summaries read them
            for start in range(0, len(missing), 500):
                chunk = missing[start : start + 500]
                marks = ", ".join("?" for _ in chunk)
                for row in db.execute(f"SELECT * FROM actions WHERE action_id IN ({marks})", chunk):
                    action = _cached_action(_row_dict(row))
                    found[action.action_id] = self._remember(action)
            return found

        return await self._run(work)

    async def derived_generations(
        self, base_id: str, *, now: datetime | None = None
    ) -> list[ActionSummary]:
        """The actions holding the generations of a derived id, in order: ``base_id``
        (generation 1), ``base_id-2``, ``base_id-3``… (``_core.derived_generation_id``), up
        to the first generation no action holds, which is ``len(result) + 1``. Each with its
        attempts, whatever intent it holds (``derived_ids.choose_derived_generation`` skips those
        holding another).

        Lookups by exact id on the primary key, in batches of 8, 16, 32… ids (``IN (…)``,
        with one query for the attempts and one for the duplicate counts of what a batch
        found): never a scan of the actions table, however many generations there are.

        Raises:
            InvalidInput: ``base_id`` is not a valid action id.
        """
        check_action_id(base_id)
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> list[ActionSummary]:
            found: list[ActionSummary] = []
            size = _GENERATIONS_FIRST_BATCH
            while True:
                first = len(found) + 1
                wanted = [
                    derived_ids.derived_generation_id(base_id, generation)
                    for generation in range(first, first + size)
                ]
                marks = ", ".join("?" for _ in wanted)
                rows = db.execute(
                    f"SELECT * FROM actions WHERE action_id IN ({marks})", wanted
                ).fetchall()
                stored = {str(row["action_id"]): row for row in rows}
                present: list[Action] = []
                for action_id in wanted:
                    if action_id not in stored:
                        break
                    present.append(_cached_action(_row_dict(stored[action_id])))
                attempts, duplicates = _load_page(db, [action.action_id for action in present])
                found += [
                    summarize(
                        action,
                        attempts.get(action.action_id, ()),
                        when,
                        duplicates=duplicates.get(action.action_id, 0),
                    )
                    for action in present
                ]
                if len(present) < size:
                    return found
                size = min(size * 2, _GENERATIONS_LAST_BATCH)

        return await self._run(work)

    async def claimed_provider_ids(self, device: str, above_id: int) -> set[tuple[int, int | None]]:
        """``content://sms`` rows above ``_id`` ``above_id`` on ``device`` already tied to an
        attempt (as its artifact or as a duplicate), as ``(_id, date)``: an ``_id`` is reused
        once the latest rows are deleted, so the date says which message (None: not known,
        the claim holds every row of that ``_id``)."""
        return await self._claimed_ids(device, ProviderKind.SMS, above_id)

    async def claimed_mms_ids(self, device: str, above_id: int) -> set[tuple[int, int | None]]:
        """``content://mms`` rows above ``_id`` ``above_id`` on ``device`` already tied to an
        attempt (as its artifact or as a duplicate), as ``(_id, date)``."""
        return await self._claimed_ids(device, ProviderKind.MMS, above_id)

    async def _claimed_ids(
        self, device: str, kind: ProviderKind, above_id: int
    ) -> set[tuple[int, int | None]]:
        # a FAILED attempt keeps the phone's FAILED row only in its evidence (delivery FAILED
        # names no artifact); that row is still its own, never another attempt's proof. Each
        # SELECT is an index range (the third: attempts_failed_rows, migration 0006, whose
        # expressions it must spell exactly as the index does)
        def work(db: sqlite3.Connection) -> set[tuple[int, int | None]]:
            rows = db.execute(
                "SELECT provider_object_id, provider_row_date_ms FROM attempts"
                " WHERE device = :device AND provider_kind = :kind AND provider_object_id > :above"
                " UNION SELECT provider_object_id, provider_row_date_ms FROM duplicates"
                " WHERE device = :device AND provider_kind = :kind AND provider_object_id > :above"
                f" UNION {_FAILED_ROWS[_pg.dialect(db)]}",
                {"device": device, "kind": kind.value, "above": above_id},
            )
            return {
                (int(row[0]), row[1] if isinstance(row[1], int) else None)
                for row in rows
                if isinstance(row[0], int)
            }

        return await self._run(work)


#: The FAILED rows a device's failed attempts keep in their evidence, above ``:above``, spelled
#: as the index ``attempts_failed_rows`` is (SQLite: migration 0006; PostgreSQL: the jsonb
#: number compares as a number, and a value that is not one never passes ``>``).
_FAILED_ROWS: Final[Mapping[str, str]] = {
    "sqlite": "SELECT json_extract(evidence_json, '$.provider_object_id'),"
    " json_extract(evidence_json, '$.date_ms') FROM attempts"
    " WHERE device = :device AND delivery = 'FAILED'"
    " AND coalesce(json_extract(evidence_json, '$.provider_kind'), 'sms') = :kind"
    " AND json_extract(evidence_json, '$.provider_object_id') > :above",
    "postgresql": "SELECT (evidence_json::jsonb ->> 'provider_object_id')::bigint,"
    " CASE WHEN jsonb_typeof(evidence_json::jsonb -> 'date_ms') = 'number'"
    " THEN (evidence_json::jsonb ->> 'date_ms')::bigint END FROM attempts"
    " WHERE device = :device AND delivery = 'FAILED'"
    " AND coalesce(evidence_json::jsonb ->> 'provider_kind', 'sms') = :kind"
    " AND jsonb_typeof(evidence_json::jsonb -> 'provider_object_id') = 'number'"
    " AND (evidence_json::jsonb -> 'provider_object_id') > to_jsonb(:above::bigint)",
}


# ---------------------------------------------------------------------- helpers (worker thread)


#: The first batch of derived id generations ``derived_generations`` looks up, and the
#: largest (each batch doubles): most intents have one generation, a daily reminder a few
#: hundred after a year.
_GENERATIONS_FIRST_BATCH: Final = 8
_GENERATIONS_LAST_BATCH: Final = 256


def _json_field(column: str, key: str, cast: str = "") -> Mapping[str, str]:
    """A JSON text column's field in SQL, per dialect (PostgreSQL reads the text as jsonb;
    ``cast`` is appended there, e.g. ``::bigint``)."""
    return {
        "sqlite": f"json_extract({column}, '$.{key}')",
        "postgresql": f"({column}::jsonb ->> '{key}'){cast}",
    }


#: The policy gate's latest verdict on an action, in SQL, per dialect.
_GATE_VERDICT: Final = _json_field("actions.gate_json", "verdict")
#: An action's recipient in SQL, per dialect.
_RECIPIENT: Final = _json_field("actions.intent_json", "recipient")


def _standing_verdict(action: Action) -> GateDecision | None:
    """What binds every sender of ``action``, gate or not: a person's denial (DENY), or a
    hold for a person's approval recorded by a gate and not lifted (HOLD)."""
    from starebrain_actions.core.policy import GateDecision, Verdict

    gate = action.gate or {}
    if action.approval == "DENIED":
        return GateDecision(
            verdict=Verdict.DENY,
            rule="approval",
            detail="a person denied this action",
            digest=str(gate.get("digest", "default")),
        )
    if action.approval is None and gate.get("verdict") == Verdict.HOLD.value:
        return GateDecision(
            verdict=Verdict.HOLD,
            rule=str(gate.get("rule")),
            detail=str(gate.get("detail")),
            digest=str(gate.get("digest", "default")),
        )
    return None


def _history_row(
    db: sqlite3.Connection,
    action_id: str,
    attempts: Sequence[ActionRecord],
    event: Event,
    actor: str,
    when: datetime,
    evidence: Mapping[str, Any],
) -> None:
    """A history row of an event of the whole action (``ACTION_EVENTS``): kept with its
    latest attempt (none: an empty dispatch id), both axes unchanged."""
    latest = attempts[-1] if attempts else None
    delivery = latest.delivery if latest is not None else DeliveryState.PENDING
    acceptance = latest.acceptance if latest is not None else AcceptanceState.PENDING
    db.execute(
        "INSERT INTO history (action_id, dispatch_id, event, at, actor, from_delivery,"
        " to_delivery, from_acceptance, to_acceptance, evidence_json)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            action_id,
            latest.dispatch_id if latest is not None else "",
            event.value,
            format_time(when),
            actor,
            delivery.value if latest is not None else None,
            delivery.value,
            acceptance.value if latest is not None else None,
            acceptance.value,
            _json(evidence),
        ),
    )


def dispatches_since(db: sqlite3.Connection, device: str, since: str) -> int:
    """How many attempts were started on ``device`` at or after ``since`` (stored form)."""
    row = db.execute(
        "SELECT count(*) FROM attempts WHERE device = ? AND dispatched_at >= ?", (device, since)
    ).fetchone()
    return int(row[0])


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


async def _connect(
    file: Path, *, read_only: bool, immutable: bool, busy_timeout_s: float
) -> aiosqlite.Connection:
    """An autocommit connection to ``file`` (a read-only URI when ``read_only``)."""
    target = _read_only_uri(file, immutable=immutable) if read_only else str(file)
    with _connecting(file):
        return await aiosqlite.connect(
            target,
            isolation_level=None,
            timeout=busy_timeout_s,
            check_same_thread=False,
            uri=read_only,
        )


def _prepare(
    db: sqlite3.Connection,
    path: Path,
    busy_timeout_s: float,
    *,
    read_only: bool = False,
    create: bool = True,
) -> None:
    _check_schema(db, path, busy_timeout_s, read_only=read_only, create=create)
    if read_only:
        return
    try:
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise LedgerUnavailable(f"ledger {path}: cannot switch to WAL (journal_mode={mode})")
        db.execute("PRAGMA synchronous = FULL")
        _migrate(db, path)
    except sqlite3.DatabaseError as exc:
        raise _operational(path, exc) from exc


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    migrations = _migrations()
    latest = len(migrations)
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
        for number, sql in migrations[version:]:
            for statement in _statements(sql):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {number}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _statements(sql: str) -> Iterable[str]:
    """Split a migration into complete statements (trigger bodies kept whole)."""
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


def _not_this_action(
    db: sqlite3.Connection, action_id: str, dispatch_id: str, attempts: Sequence[ActionRecord]
) -> str:
    """Why ``dispatch_id`` cannot be ruled on as an attempt of ``action_id``."""
    owner = db.execute(
        "SELECT action_id, attempt FROM attempts WHERE dispatch_id = ?", (dispatch_id,)
    ).fetchone()
    if owner is not None:
        return (
            f"dispatch id {dispatch_id} is attempt {owner[1]} of action {owner[0]}, not of"
            f" action {action_id}: check which action you mean"
        )
    known = ", ".join(record.dispatch_id for record in attempts) or "none"
    return (
        f"action {action_id} has no attempt with dispatch id {dispatch_id} (its attempts: {known})"
    )


def _load_attempt(db: sqlite3.Connection, dispatch_id: str) -> ActionRecord:
    row = db.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE dispatch_id = ?", (dispatch_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no attempt with dispatch id {dispatch_id!r}")
    return record_from_row(_row_dict(row))


def _diff(before: ActionRecord, after: ActionRecord) -> tuple[str, ...]:
    """The fields that differ (identity fields included, so that they are refused)."""
    names = [
        field.name
        for field in attrs.fields(ActionRecord)
        if getattr(before, field.name) != getattr(after, field.name)
    ]
    return tuple(names) if "version" in names else (*names, "version")


@functools.lru_cache(maxsize=64)
def _update_sql(changed: tuple[str, ...]) -> str:
    """The compare-and-set UPDATE writing these fields (one statement per shape, cached)."""
    columns = ["evidence_json" if name == "evidence" else name for name in changed]
    assignments = ", ".join(f"{column} = :{column}" for column in columns)
    return (
        f"UPDATE attempts SET {assignments}, last_event = :last_event,"
        " last_event_at = :last_event_at, last_actor = :last_actor,"
        " last_evidence_json = :last_evidence_json"
        " WHERE dispatch_id = :dispatch_id AND delivery = :expected_delivery"
        " AND acceptance = :expected_acceptance AND version = :expected_version"
    )


def _column_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return format_time(value)
    return value


def _apply_one(db: sqlite3.Connection, transition: Transition) -> ActionRecord | LedgerError:
    """Compare-and-set one transition: only the columns it changes, guarded by the states and
    version it expects. A refused statement is rolled back on its own (SQLite's ABORT)."""
    before, after = transition.before, transition.after
    changed = transition.changed or _diff(before, after)
    params: dict[str, Any] = {
        "dispatch_id": before.dispatch_id,
        "last_event": transition.event.value,
        "last_event_at": format_time(transition.at),
        "last_actor": transition.actor,
        "last_evidence_json": _json(transition.evidence),
        "expected_delivery": before.delivery.value,
        "expected_acceptance": before.acceptance.value,
        "expected_version": before.version,
    }
    for name in changed:
        if name in _IDENTITY_FIELDS:
            raise InvariantViolation(f"a transition cannot change the attempt's {name}")
        value = getattr(after, name)
        if name == "evidence":
            params["evidence_json"] = _json(value)
        else:
            params[name] = _column_value(value)
    sql = _update_sql(changed)
    try:
        with _pg.savepoint(db):
            cursor = db.execute(sql, params)
    except sqlite3.IntegrityError as exc:
        return LedgerError(f"attempt {before.dispatch_id}: the database refused it: {exc}")
    if cursor.rowcount == 1:
        return after
    current = db.execute(
        "SELECT delivery, acceptance, version FROM attempts WHERE dispatch_id = ?",
        (before.dispatch_id,),
    ).fetchone()
    if current is None:
        return NotFound(f"no attempt with dispatch id {before.dispatch_id!r}")
    return StaleTransition(
        before.dispatch_id,
        expected=f"{before.delivery.value}/{before.acceptance.value} v{before.version}",
        found=f"{current[0]}/{current[1]} v{current[2]}",
    )


def _sighting(item: DuplicateInput) -> DuplicateSighting:
    """A duplicate given to ``apply_pass`` as a record; a tuple without a kind is an SMS row.

    Raises:
        InvalidInput: neither a ``DuplicateSighting`` nor a 3- or 4-tuple, or a bad kind.
    """
    if isinstance(item, DuplicateSighting):
        return item
    if not isinstance(item, tuple) or len(item) not in (3, 4):
        raise InvalidInput(
            "a duplicate is a DuplicateSighting or (dispatch_id, provider_object_id, evidence"
            f"[, kind]); got {item!r}"
        )
    dispatch_id, provider_object_id, evidence = item[0], item[1], item[2]
    kind = item[3] if len(item) == 4 else ProviderKind.SMS
    return DuplicateSighting(
        dispatch_id=dispatch_id,
        provider_object_id=provider_object_id,
        kind=kind,
        evidence=dict(evidence or {}),
    )


def _insert_duplicate(
    db: sqlite3.Connection, sighting: DuplicateSighting, when: datetime, actor: str
) -> tuple[bool, Transition | None]:
    record = _load_attempt(db, sighting.dispatch_id)
    if record.delivery is not DeliveryState.CONFIRMED:
        raise InvariantViolation(
            f"attempt {sighting.dispatch_id} is not confirmed: a duplicate needs an original"
        )
    try:
        with _pg.savepoint(db):
            cursor = db.execute(
                "INSERT INTO duplicates (device, provider_kind, provider_object_id,"
                " provider_row_date_ms, dispatch_id, seen_at, evidence_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    record.device,
                    sighting.kind.value,
                    sighting.provider_object_id,
                    sighting.row_date_ms,
                    sighting.dispatch_id,
                    format_time(when),
                    _json(storable(sighting.evidence)),
                ),
            )
    except sqlite3.IntegrityError as exc:
        raise LedgerError(
            f"provider row {provider_row_name(sighting.kind, sighting.provider_object_id)}"
            f" on {record.device} cannot be a duplicate: {exc}"
        ) from exc
    if cursor.rowcount == 0:
        return False, None
    if record.review_reason in (ReviewReason.DUPLICATE, ReviewReason.AMBIGUOUS):
        return True, None
    # an identical row the messaging app wrote could be its owner's own text: whose it is
    # cannot be told, so it is AMBIGUOUS; a provable second copy of ours is a DUPLICATE
    unknown = sighting.evidence.get("origin") == "unknown"
    transition = _core.flag_for_review(
        record,
        ReviewReason.AMBIGUOUS if unknown else ReviewReason.DUPLICATE,
        now=when,
        actor=actor,
        evidence={
            "duplicate_provider_object_id": sighting.provider_object_id,
            "duplicate_provider_kind": sighting.kind.value,
        },
    )
    outcome = _apply_one(db, transition)
    if isinstance(outcome, LedgerError):
        raise outcome
    return True, transition


def _log_duplicate(sighting: DuplicateSighting, flag: Transition | None) -> None:
    _log.warning(
        "duplicate_recorded",
        action_id=flag.before.action_id if flag else None,
        dispatch_id=sighting.dispatch_id,
        provider_object_id=sighting.provider_object_id,
        provider_kind=sighting.kind.value,
    )


#: An attempt that is not a clean success: unsettled, failed, rejected, or flagged for review.
#: Written exactly as the WHERE of the partial index ``attempts_notable`` (migration 0004), so
#: that SQLite can use it. ``summarize`` derives SUCCEEDED with no review and no superseded
#: reason for an action whose attempts include none of these (the status of a CONFIRMED and
#: ACCEPTED latest attempt; reasons come only from ``review_reason``, REJECTED attempts, and a
#: spent budget, which is looked at only when the status is not SUCCEEDED).
_NOTABLE: Final = (
    "NOT (delivery = 'CONFIRMED' AND acceptance = 'ACCEPTED' AND review_reason IS NULL)"
)

#: The (delivery, acceptance) pair of the latest attempt for each status that has one.
_STATUS_PAIRS: Final[Mapping[Status, tuple[str, str]]] = {
    **{
        status: (delivery.value, acceptance.value)
        for (delivery, acceptance), status in _core.STATUS_TABLE.items()
    },
    Status.UNKNOWN: (DeliveryState.PENDING.value, AcceptanceState.PENDING.value),
}


@attrs.frozen(kw_only=True)
class LedgerTally:
    """Counts over a whole ledger (``Ledger.ledger_tally``)."""

    #: every action
    actions: int
    #: actions with no attempt yet (status PLANNED)
    planned: int
    #: actions whose every attempt is CONFIRMED, ACCEPTED and unflagged: SUCCEEDED, nothing
    #: to review, no superseded reason
    quietly_succeeded: int
    #: provider rows ever recorded as duplicates
    duplicates: int


#: An action's policy fields in SQL, per dialect.
_POLICY_DEADLINE: Final = _json_field("actions.policy_json", "schedule_to_close")
_POLICY_MAXIMUM: Final = _json_field("actions.policy_json", "maximum_attempts", "::bigint")


def _prefilter(
    status: Status | None,
    device: str | None,
    needs_review: bool | None,
    *,
    notable_only: bool,
    dialect: str = "sqlite",
) -> tuple[str, list[Any]]:
    """SQL conditions on ``actions`` keeping a superset of the actions the filters keep.

    ``summarize`` gives an action review reasons only from its attempts' ``review_reason``
    (such an attempt is notable, ``_NOTABLE``), and BUDGET_EXHAUSTED when its latest attempt
    is FAILED or REJECTED and ``should_redispatch`` finds the budget spent (at least
    ``maximum_attempts`` attempts) or the deadline passed (the policy has one). An action of a
    status other than SUCCEEDED and PLANNED has a latest attempt with that status's pair of
    states, which is never CONFIRMED and ACCEPTED, so notable.

    Each condition is a correlated ``EXISTS`` probing one action's attempts by key: a page
    walks ``actions_by_created`` from where the last one stopped, so reading every page costs
    one walk of the actions whatever the filter (an ``IN (subquery)`` would sort the whole
    candidate set again for every page).
    """
    conditions: list[str] = []
    params: list[Any] = []
    own = "SELECT 1 FROM attempts WHERE attempts.action_id = actions.action_id"
    if device is not None:
        conditions.append(f"EXISTS ({own} AND device = ?)")
        params.append(device)
    if status is Status.PLANNED:
        conditions.append(f"NOT EXISTS ({own})")
    elif status is not None and status is not Status.SUCCEEDED:
        conditions.append(f"EXISTS ({own} AND {_NOTABLE} AND delivery = ? AND acceptance = ?)")
        params.extend(_STATUS_PAIRS[status])
    elif notable_only:
        conditions.append(f"EXISTS ({own} AND {_NOTABLE})")
    if needs_review:
        # reasons come from a review_reason, or from a spent budget (BUDGET_EXHAUSTED or
        # DEADLINE_PASSED in should_redispatch), which needs a FAILED or REJECTED attempt and
        # as many attempts as the policy allows, or a policy with a deadline
        # (one probe of the action's notable attempts, which most actions do not have)
        conditions.append(
            f"EXISTS ({own} AND {_NOTABLE} AND (review_reason IS NOT NULL"
            " OR ((delivery = 'FAILED' OR acceptance = 'REJECTED')"
            " AND (actions.grant_json IS NOT NULL"
            f" OR {_POLICY_DEADLINE[dialect]} IS NOT NULL"
            f" OR coalesce({_POLICY_MAXIMUM[dialect]}, 0)"
            " <= (SELECT count(*) FROM attempts AS every"
            " WHERE every.action_id = actions.action_id)))))"
        )
    return " AND ".join(conditions), params


def _summary_page(
    db: sqlite3.Connection,
    where: str,
    params: Sequence[Any],
    after: tuple[str, str] | None,
    size: int,
    now: datetime,
) -> tuple[list[ActionSummary], tuple[str, str] | None]:
    """One page of summaries after the keyset ``after`` (``created_at``, ``action_id`` of the
    last action of the page before), and the keyset of this page's last action (None: it was
    the last page). Three queries, whatever the page holds."""
    conditions = [where] if where else []
    bound: list[Any] = list(params)
    if after is not None:
        conditions.append("created_at <= ? AND NOT (created_at = ? AND action_id <= ?)")
        bound += [after[0], after[0], after[1]]
    sql = "SELECT * FROM actions"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    sql += " ORDER BY created_at DESC, action_id LIMIT ?"
    rows = db.execute(sql, [*bound, size]).fetchall()
    if not rows:
        return [], None
    actions = [_cached_action(_row_dict(row)) for row in rows]
    attempts, duplicates = _load_page(db, [action.action_id for action in actions])
    page = [
        summarize(
            action,
            attempts.get(action.action_id, ()),
            now,
            duplicates=duplicates.get(action.action_id, 0),
        )
        for action in actions
    ]
    last = rows[-1]
    return page, (None if len(rows) < size else (str(last["created_at"]), str(last["action_id"])))


def _load_page(
    db: sqlite3.Connection, action_ids: Sequence[str]
) -> tuple[dict[str, list[ActionRecord]], dict[str, int]]:
    """The attempts (oldest first) and duplicate counts of these actions: one query each per
    500 ids, through the ``(action_id, attempt)`` key and ``duplicates_by_dispatch``."""
    attempts: dict[str, list[ActionRecord]] = {}
    duplicates: dict[str, int] = {}
    for start in range(0, len(action_ids), 500):
        chunk = action_ids[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for row in db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE action_id IN ({marks})"
            " ORDER BY action_id, attempt",
            chunk,
        ):
            record = record_from_row(_row_dict(row))
            attempts.setdefault(record.action_id, []).append(record)
        for action_id, count in db.execute(
            "SELECT attempts.action_id, count(*) FROM attempts JOIN duplicates"
            " ON duplicates.dispatch_id = attempts.dispatch_id"
            f" WHERE attempts.action_id IN ({marks}) GROUP BY attempts.action_id",
            chunk,
        ):
            duplicates[str(action_id)] = int(count)
    return attempts, duplicates


def _cached_action(row: Mapping[str, Any]) -> Action:
    """``action_from_row``, with the policy read once per distinct stored text (policies are
    frozen records; a ledger holds few distinct ones). Anything unreadable is left to
    ``action_from_row``, which names what is wrong."""
    try:
        policy = _stored_policy(row["policy_json"])
        intent = json.loads(row["intent_json"])
    except (CorruptRecord, ValueError, TypeError):
        return action_from_row(row)
    what = f"action {row['action_id']!r}"
    return Action(
        action_id=row["action_id"],
        fingerprint=row["fingerprint"],
        intent=_stored_intent(intent, what + " intent", fingerprint=row["fingerprint"]),
        policy=policy,
        created_at=structure(row["created_at"], datetime, what + " created_at"),
        grant=stored_grant(row),
        planned_device=stored_planned_device(row),
        approval=row["approval"] if "approval" in row.keys() else None,  # noqa: SIM118
        gate=stored_gate(row),
    )


@functools.lru_cache(maxsize=64)
def _stored_policy(text: str) -> RetryPolicy:
    """The policy stored as ``text`` (a frozen record, shared by every action storing it).

    Raises:
        CorruptRecord: it cannot be read.
    """
    try:
        return structure(json.loads(text), RetryPolicy, "policy")
    except ValueError as exc:
        raise CorruptRecord("policy is not JSON") from exc


def _refusal(action_id: str, decision: Any) -> AttemptRefused:
    reason = decision.reason
    if reason is RedispatchReason.IN_FLIGHT:
        return AttemptInFlight(
            f"action {action_id} has an unresolved attempt: reconcile it first", decision
        )
    if reason in (RedispatchReason.BUDGET_EXHAUSTED, RedispatchReason.DEADLINE_PASSED):
        return BudgetExhausted(
            f"action {action_id}: {reason.value.lower().replace('_', ' ')}; a person must review",
            decision,
        )
    detail = reason.value.lower().replace("_", " ")
    if decision.retry_at is not None:
        detail += f" until {format_time(decision.retry_at)}"
    return AttemptRefused(f"action {action_id}: no new attempt ({detail})", decision)


def _log_transition(transition: Transition, result: ActionRecord | LedgerError) -> None:
    record = transition.before
    fields: dict[str, Any] = {
        "action_id": record.action_id,
        "dispatch_id": record.dispatch_id,
        "device": record.device,
        "actor": transition.actor,
    }
    if isinstance(result, LedgerError):
        _log.warning(
            "transition_refused", event_type=transition.event.value, error=str(result), **fields
        )
        return
    _log.info(
        _LOG_EVENTS[transition.event],
        delivery=result.delivery.value,
        acceptance=result.acceptance.value,
        **fields,
    )
