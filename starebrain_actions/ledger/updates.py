"""Changing attempts: pure transitions applied with compare-and-set, duplicates recorded, and
a reconcile pass's writes in one transaction (``Ledger.apply``, ``apply_many``,
``record_duplicate``, ``apply_pass``).

Also what every write of the ledger shares, as functions of a connection run inside the
write's transaction: the JSON text stored (``to_json``), one transition's compare-and-set
(``apply_transition``: ``UPDATE … WHERE`` the states and version it expects; zero rows means
someone else moved the attempt, reported as ``StaleTransition``, never guessed at), a history
row of an event of the whole action (``history_row``), and the log events of transitions.
"""

from __future__ import annotations

import enum
import functools
import json
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.convert import format_time, to_jsonable
from starebrain_actions.core.exceptions import (
    InvalidInput,
    InvariantViolation,
    LedgerError,
    NotFound,
    PassOutdated,
    StaleTransition,
)
from starebrain_actions.core.model import (
    AcceptanceState,
    ActionRecord,
    DeliveryState,
    DuplicateSighting,
    Event,
    ProviderKind,
    ReviewReason,
    Transition,
    provider_row_name,
    require_aware,
    storable,
)
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.connection import LedgerConnection
from starebrain_actions.ledger.read import load_attempt

_log = get_logger("starebrain.ledger")

#: ``apply_many`` with at most this many transitions writes inline (``Ledger._write``).
_INLINE_TRANSITIONS: Final = 8

#: A duplicate as ``apply_pass`` takes it: a ``DuplicateSighting``, or the older tuple
#: ``(dispatch_id, provider_object_id, evidence)`` (an SMS row), optionally followed by the
#: row's ``ProviderKind``.
DuplicateInput = (
    DuplicateSighting
    | tuple[str, int, Mapping[str, Any]]
    | tuple[str, int, Mapping[str, Any], ProviderKind]
)


class Updates(LedgerConnection):
    """The ``Ledger``'s writes of what becomes of an attempt (see the module docstring)."""

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
            return apply_transitions(db, transitions)

        # PostgreSQL: one statement (``starebrain_apply``), autocommitted
        results = await self._write(
            work, inline=len(transitions) <= _INLINE_TRANSITIONS, pg_mode="one"
        )
        for transition, result in zip(transitions, results, strict=True):
            log_transition(transition, result)
        return results

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
                _check_pass_current(db, *snapshot)
            results = apply_transitions(db, transitions)
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
            log_transition(transition, result)
        for sighting, flag in added:
            _log_duplicate(sighting, flag)
        return results, len(added)


def _check_pass_current(
    db: sqlite3.Connection, device: str, listed_at: datetime, known: Collection[str]
) -> None:
    """Refuse a pass that did not consider every attempt of ``device`` started since it
    listed them at ``listed_at`` (``apply_pass``'s ``snapshot``); no attempt may start on the
    device from here until the pass commits.

    Raises:
        PassOutdated: an attempt not in ``known`` started since.
    """
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


# ---------------------------------------------------------------------- what writes share

_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=to_jsonable
)


def to_json(value: Mapping[str, Any]) -> str:
    """The JSON text the ledger stores: compact, key-sorted; records and enums inside go
    through the converter."""
    return _ENCODER.encode(value if isinstance(value, dict) else dict(value))


def history_row(
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
            to_json(evidence),
        ),
    )


#: Fields a transition may never change: they name the attempt.
_IDENTITY_FIELDS: Final[frozenset[str]] = frozenset(
    {"action_id", "dispatch_id", "attempt", "device", "dispatched_at"}
)


def apply_transitions(
    db: sqlite3.Connection, transitions: Sequence[Transition]
) -> list[ActionRecord | LedgerError]:
    """``apply_transition`` of each, in order. On PostgreSQL all of them in one statement
    (``starebrain_apply``, migration 0007: the same compare-and-set UPDATEs, run by the
    server), so that a batch costs one round trip however many it holds; outside a
    transaction that statement is the transaction.

    Raises:
        InvariantViolation: a transition changes a field naming the attempt (nothing is
            written: checked before anything is sent).
    """
    if not isinstance(db, _pg.PgConnection) or not transitions:
        return [apply_transition(db, transition) for transition in transitions]
    items = [_batch_item(transition) for transition in transitions]
    if db.in_transaction:
        if db.guarded:
            answers = db.apply_batch(items, guarded=True)
        else:
            with db.savepoint():  # a refusal: the transaction is run again, guarded
                answers = db.apply_batch(items, guarded=False)
    else:
        try:
            answers = db.apply_batch(items, guarded=False)
        except sqlite3.IntegrityError:
            # one was refused and nothing was written: again, each under a subtransaction
            answers = db.apply_batch(items, guarded=True)
    return [
        _batch_result(transition, answer)
        for transition, answer in zip(transitions, answers, strict=True)
    ]


def _batch_item(transition: Transition) -> dict[str, Any]:
    """One transition as ``starebrain_apply`` takes it: the columns it writes and their
    values, and the states and version it expects."""
    before, after = transition.before, transition.after
    changed = transition.changed or _diff(before, after)
    values: dict[str, Any] = {
        "last_event": transition.event.value,
        "last_event_at": format_time(transition.at),
        "last_actor": transition.actor,
        "last_evidence_json": to_json(transition.evidence),
    }
    for name in changed:
        if name in _IDENTITY_FIELDS:
            raise InvariantViolation(f"a transition cannot change the attempt's {name}")
        value = getattr(after, name)
        if name == "evidence":
            values["evidence_json"] = to_json(value)
        else:
            values[name] = _column_value(value)
    return {
        "dispatch_id": before.dispatch_id,
        "delivery": before.delivery.value,
        "acceptance": before.acceptance.value,
        "version": before.version,
        "columns": list(values),
        "values": values,
    }


def _batch_result(transition: Transition, answer: Any) -> ActionRecord | LedgerError:
    """``starebrain_apply``'s answer for one transition as ``apply_transition`` returns it."""
    before = transition.before
    if answer == "applied":
        return transition.after
    if answer == "missing":
        return NotFound(f"no attempt with dispatch id {before.dispatch_id!r}")
    kind, *rest = answer
    if kind == "stale":
        return StaleTransition(
            before.dispatch_id,
            expected=f"{before.delivery.value}/{before.acceptance.value} v{before.version}",
            found=f"{rest[0]}/{rest[1]} v{rest[2]}",
        )
    sqlstate, message, table, constraint, column, detail = rest
    refused = _pg.refusal_message(
        sqlstate, message, table=table, constraint=constraint, column=column, detail=detail
    )
    return LedgerError(f"attempt {before.dispatch_id}: the database refused it: {refused}")


def apply_transition(db: sqlite3.Connection, transition: Transition) -> ActionRecord | LedgerError:
    """Compare-and-set one transition: only the columns it changes, guarded by the states and
    version it expects. A refused statement is rolled back on its own (SQLite's ABORT).

    Returns the attempt as it now stands, or (nothing written) ``StaleTransition`` when it
    has moved on, ``NotFound``, or a ``LedgerError`` the database's constraints raised.

    Raises:
        InvariantViolation: the transition changes a field naming the attempt.
    """
    before, after = transition.before, transition.after
    changed = transition.changed or _diff(before, after)
    params: dict[str, Any] = {
        "dispatch_id": before.dispatch_id,
        "last_event": transition.event.value,
        "last_event_at": format_time(transition.at),
        "last_actor": transition.actor,
        "last_evidence_json": to_json(transition.evidence),
        "expected_delivery": before.delivery.value,
        "expected_acceptance": before.acceptance.value,
        "expected_version": before.version,
    }
    for name in changed:
        if name in _IDENTITY_FIELDS:
            raise InvariantViolation(f"a transition cannot change the attempt's {name}")
        value = getattr(after, name)
        if name == "evidence":
            params["evidence_json"] = to_json(value)
        else:
            params[name] = _column_value(value)
    sql = update_sql(changed)
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


def _diff(before: ActionRecord, after: ActionRecord) -> tuple[str, ...]:
    """The fields that differ (identity fields included, so that they are refused)."""
    names = [
        field.name
        for field in attrs.fields(ActionRecord)
        if getattr(before, field.name) != getattr(after, field.name)
    ]
    return tuple(names) if "version" in names else (*names, "version")


@functools.lru_cache(maxsize=64)
def update_sql(changed: tuple[str, ...]) -> str:
    """The compare-and-set UPDATE writing these fields of an attempt (one statement per
    shape, cached), guarded by the states and version the transition expects."""
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


# ---------------------------------------------------------------------- duplicates


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
    """Record the sighting's row as a duplicate of its confirmed attempt and flag the attempt
    for review (DUPLICATE; AMBIGUOUS when the row may be its owner's own text). Whether the
    row was new, and the flag written (None: none, the attempt was flagged already).

    Raises:
        NotFound: no such attempt.
        InvariantViolation: the attempt is not confirmed.
        LedgerError: the row cannot be a duplicate (it confirms an attempt).
    """
    record = load_attempt(db, sighting.dispatch_id)
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
                    to_json(storable(sighting.evidence)),
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
    outcome = apply_transition(db, transition)
    if isinstance(outcome, LedgerError):
        raise outcome
    return True, transition


# ---------------------------------------------------------------------- log events

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


def log_transition(transition: Transition, result: ActionRecord | LedgerError) -> None:
    """Log a transition once its transaction committed: its event (``_LOG_EVENTS``) and the
    states it left, or ``transition_refused`` with why."""
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


def _log_duplicate(sighting: DuplicateSighting, flag: Transition | None) -> None:
    _log.warning(
        "duplicate_recorded",
        action_id=flag.before.action_id if flag else None,
        dispatch_id=sighting.dispatch_id,
        provider_object_id=sighting.provider_object_id,
        provider_kind=sighting.kind.value,
    )
