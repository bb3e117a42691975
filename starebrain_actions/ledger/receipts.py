"""New actions, and the receipt of each new attempt, committed before anything is sent
(``Ledger.create_action``, ``get_action``, ``begin_attempt``).

A receipt is decided and written in one write transaction, as named steps (see
``Receipts.begin_attempt``): lock and read the action afresh, ask ``should_redispatch``, ask
the policy gate (``gate``: the recipient's opt-out, then the policies), check the
phone's lease, a last check of the caller's
(``_admit``), then insert the attempt. Any step refusing writes nothing, but for the gate's
verdict, which is kept before the refusal is raised.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core.convert import (
    ATTEMPT_COLUMNS,
    action_from_row,
    format_time,
    record_from_row,
    to_jsonable,
)
from starebrain_actions.core.exceptions import (
    AttemptInFlight,
    AttemptRefused,
    BudgetExhausted,
    DeviceBusy,
    InvalidInput,
    NotFound,
    PolicyRefused,
    WrongPhone,
)
from starebrain_actions.core.model import (
    LEASE_RELEASING_REVIEWS,
    Action,
    ActionRecord,
    IntentTimes,
    RedispatchDecision,
    RedispatchReason,
    RetryPolicy,
    SmsIntent,
    check_action_id,
    intent_conflict,
    require_aware,
    storable,
)
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.connection import LedgerConnection
from starebrain_actions.ledger.deadlines import record_expiry
from starebrain_actions.ledger.devices import lease_holder
from starebrain_actions.ledger.gate import READ_OPT_OUT, gate_refusal, gate_since
from starebrain_actions.ledger.phones import phone_address, phone_key_for
from starebrain_actions.ledger.read import load_action, load_attempts, row_dict
from starebrain_actions.ledger.updates import to_json

if TYPE_CHECKING:
    from starebrain_actions.core.policy import GateDecision, Policy

_log = get_logger("starebrain.ledger")

#: The columns of an attempt's row ``record_from_row`` reads.
_ATTEMPT_NAMES: Final = tuple(name.strip() for name in ATTEMPT_COLUMNS.split(","))

#: A new attempt's receipt: both axes PENDING, version 0, and its ``created`` history row
#: (written by the table's trigger from ``last_event``).
INSERT_ATTEMPT: Final = """
INSERT INTO attempts (
    dispatch_id, action_id, attempt, device, delivery, acceptance, dispatched_at,
    evidence_json, version, last_event, last_event_at, last_actor, last_evidence_json)
VALUES (:dispatch_id, :action_id, :attempt, :device, 'PENDING', 'PENDING', :dispatched_at,
    :record_evidence_json, 0, 'created', :dispatched_at, :actor, :evidence_json)
"""


class Receipts(LedgerConnection):
    """The ``Ledger``'s writes of new actions and new attempts (see the module docstring)."""

    # ------------------------------------------------------------------ actions

    async def create_action(
        self,
        action_id: str,
        intent: SmsIntent,
        policy: RetryPolicy | None = None,
        *,
        now: datetime | None = None,
        device: str | None = None,
        owner: str | None = None,
        times: IntentTimes | None = None,
    ) -> Action:
        """Create the action, or return the existing one with the same id and fingerprint.
        ``device``: the phone (its key) the sender means to send it through, kept as
        ``planned_device``: no other phone sends it (an existing action keeps what it has).
        ``owner``: the client of ``starebrain mcp --clients`` creating it, whose namespace
        (``OWNER/``) holds its id. ``times``: a deadline or a schedule given as a duration
        (``IntentTimes``), counted from the action's creation.

        Raises:
            InvalidInput: the id is empty, too long or holds spaces or control characters, or
                it lies in a client's namespace (``register_owners``) and the caller is not
                that client; a new action's deadline has passed already; nothing is written.
            FingerprintConflict: the id exists with another intent; nothing is written.
        """
        when = require_aware("now", now) if now is not None else self.now()
        candidate = new_action(
            action_id,
            intent,
            policy or RetryPolicy(),
            when,
            device=device,
            owner=owner,
            times=times,
        )
        await check_not_past(self, candidate)

        def work(db: sqlite3.Connection) -> tuple[Action, bool]:
            return insert_action(db, candidate, times)

        # PostgreSQL: its INSERT is the only write and comes first, autocommitted
        action, created = await self._write(work, inline=True, pg_mode="one")
        self._remember(action)
        _log.info(
            "action_created" if created else "action_reused",
            action_id=action_id,
            fingerprint=candidate.fingerprint,
        )
        return action

    async def register_owners(self, names: Sequence[str], *, now: datetime | None = None) -> None:
        """Record the clients of ``starebrain mcp --clients`` as the owners of their
        namespaces: from then on only a caller acting as client ``NAME`` (``owner=NAME``)
        creates an action whose id starts ``NAME/``, whoever else uses this ledger (the CLI,
        another server, a Python agent). Kept for good; registering again changes nothing.

        Raises:
            InvalidInput: an empty name, or one holding the separator.
        """
        for name in names:
            if not name or OWNER_SEPARATOR in name or len(name) > 100:
                raise InvalidInput(f"a client's name must be 1-100 characters without /: {name!r}")
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> None:
            register_owners(db, names, when)

        await self._write(work)

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
        another in-flight attempt holds the device. The steps run in one write transaction,
        in order: ``_lock_and_load``, ``should_redispatch``, ``check_route`` (the phone or
        pool the action is bound to), ``gate.gate_refusal`` (what the ledger keeps with the
        action: its standing verdicts and pinned policy, then ``gate``), ``_check_lease``,
        ``_admit``, ``_insert_receipt``; the first to refuse ends it.

        Raises:
            NotFound: no such action.
            AttemptInFlight: an earlier attempt of this action is unresolved.
            BudgetExhausted: attempts or deadline used up.
            DeviceBusy: another action's attempt holds the device.
            PolicyRefused: the policy gate denies or holds it (its verdict is kept).
            WrongPhone: the action is bound to another phone, or to a pool whose worker has
                not claimed it for this phone.
            AttemptRefused: anything else ``should_redispatch`` refuses (success, review...).
        """
        if not device or not device.strip():
            raise InvalidInput("device must not be empty (an ADB serial or host:port)")
        when = require_aware("now", now) if now is not None else self.now()
        kept = storable(dict(evidence or {}))  # NUL: U+FFFD on both backends
        active = gate if gate is not None else self.gate

        def work(db: sqlite3.Connection) -> ActionRecord | GateDecision | RedispatchDecision:
            loaded = self._lock_and_load(db, action_id, device, gated=active is not None, when=when)
            action, attempts = loaded.action, loaded.attempts
            decision = _decisions.should_redispatch(action, attempts, when)
            if not decision:
                if decision.reason is RedispatchReason.EXPIRED and _decisions.expired(
                    action, attempts, when
                ):
                    record_expiry(db, action_id, when)
                    return decision  # committed with the expiry recorded, raised below
                raise _refusal(action_id, decision)
            check_route(db, action, device)
            counted = loaded.counts if action.owner is None else None  # "new" per client
            if active is None and action.gate_policy is not None:
                # its pinned rules count across every action: one gated writer at a time
                _pg.lock(db, "policy-gate")
                counted = None
            refusing = gate_refusal(
                db,
                active,
                action,
                attempts,
                when,
                counted=counted,
                opt_out=loaded.opt_out if loaded.prefetched else READ_OPT_OUT,
            )
            if refusing is not None:
                return refusing  # committed with the verdict the gate kept, raised below
            _check_lease(db, device, loaded)
            self._admit(db, action_id, device, when)
            return _insert_receipt(db, action, attempts, device, when, actor=actor, evidence=kept)

        made = await self._write(work, inline=True, pg_mode="locked")
        # the gate may have kept a verdict or pinned its policy: read the action afresh
        self._actions.pop(action_id, None)
        if isinstance(made, RedispatchDecision):
            raise _refusal(action_id, made)
        if not isinstance(made, ActionRecord):
            raise _policy_refused(action_id, made)
        _log.info(
            "attempt_created",
            action_id=action_id,
            dispatch_id=made.dispatch_id,
            device=device,
            attempt=made.attempt,
        )
        return made

    def _lock_and_load(
        self, db: sqlite3.Connection, action_id: str, device: str, *, gated: bool, when: datetime
    ) -> Loaded:
        """The first step of ``begin_attempt``: from here to COMMIT one writer per action and
        per device (SQLite: the write lock already; PostgreSQL: advisory locks), so that the
        checks after hold at insert; ``gated``, one writer of every gated attempt (the gate's
        counts span all actions). Then the action and its attempts, read afresh (an
        operator's grant, ``retry``, may have changed it since it was cached).

        On PostgreSQL the locks are session locks, held until the receipt's own statement
        commits (``PgBackend.write_locked``), and the reads come with them in one round
        trip (``PgConnection.lock_and_read``): the lease holder and, ``gated``, the gate's
        counts too, read under the same locks.

        Raises:
            NotFound: no such action.
        """
        gate_lock = ("policy-gate",) if gated else ()
        names = (f"action:{action_id}", f"device:{device}", *gate_lock)
        if isinstance(db, _pg.PgConnection) and db.locked_mode:
            found = db.lock_and_read(
                names,
                action_id,
                device,
                sorted(reason.value for reason in LEASE_RELEASING_REVIEWS),
                gate_since(when) if gated else None,
            )
            if found["action"] is None:
                raise NotFound(f"no action with id {action_id!r}")
            action = self._remember(action_from_row(found["action"]))
            attempts = [
                record_from_row({name: row.get(name) for name in _ATTEMPT_NAMES})
                for row in found["attempts"]
            ]
            lease = found["lease"]
            counts = found["counts"]
            return Loaded(
                action,
                attempts,
                tuple(lease) if lease is not None else None,
                tuple(counts) if counts is not None else None,
                prefetched=True,
                opt_out=found.get("opt_out"),
            )
        _pg.lock(db, *names)
        action = self._remember(load_action(db, action_id))
        return Loaded(action, load_attempts(db, action_id))

    def _admit(self, db: sqlite3.Connection, action_id: str, device: str, when: datetime) -> None:
        """A last check of a new attempt, run inside ``begin_attempt``'s write transaction
        (so it holds across processes: SQLite lets one writer at a time); raising refuses
        the attempt and writes nothing. Subclasses add limits here (``starebrain mcp``'s
        hourly send cap); this one admits everything."""


def check_route(db: sqlite3.Connection, action: Action, device: str) -> None:
    """Refuse an attempt of ``action`` on ``device`` (a phone's key) unless the action may
    leave through it: a queued action only through a worker of its pool holding its claim
    for this phone; an action whose sender named a phone (``planned_device``: its key, or
    an address the ledger maps to it) only through that phone, or the phone that answers
    now at the address it was last reached at (the same place in the fleet, wiped or reset).
    Nothing is written.

    Raises:
        WrongPhone: the action is bound elsewhere.
    """
    if action.pool is not None:
        claim = action.claim
        if claim is None or claim.device != device:
            held = "" if claim is None else f" (claimed for phone {claim.device})"
            raise WrongPhone(
                f"action {action.action_id} is queued for pool {action.pool!r}{held}: only a"
                f" worker of that pool sends it (`starebrain worker --pool {action.pool}`);"
                f" nothing was sent through {device}"
            )
        return
    planned = action.planned_device
    if planned is None or planned == device or phone_key_for(db, planned) == device:
        return
    # the phone that answers now at the address the sender named, or at the one its phone
    # was reached at last: the same place in the fleet (a phone wiped or reset there)
    for address in {planned, phone_address(db, planned)}:
        row = db.execute(
            "SELECT phone_key FROM phone_addresses WHERE address = ?", (address,)
        ).fetchone()
        if row is not None and row[0] == device:
            return
    raise WrongPhone(
        f"action {action.action_id} is meant for phone {planned} (its sender named it):"
        f" nothing was sent through {device}; a send or resume on {planned} sends it"
    )


def new_action(
    action_id: str,
    intent: SmsIntent,
    policy: RetryPolicy,
    when: datetime,
    *,
    device: str | None = None,
    pool: str | None = None,
    owner: str | None = None,
    times: IntentTimes | None = None,
) -> Action:
    """The action ``create_action`` (``device``: its planned phone) or ``enqueue`` (``pool``:
    queued for that pool from ``when``, or from its schedule) records, checked (``owner``:
    the client creating it, whose namespace holds the id; ``times``: durations from
    ``when`` that set the intent's deadline and schedule).

    Raises:
        InvalidInput: a bad id, an intent that is not valid Unicode, an empty device, times
            given both in the intent and as durations.
    """
    check_action_id(action_id)
    if times is not None:
        intent = times.applied(intent, when)
    try:
        fingerprint = intent.fingerprint
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"the intent holds {exc.object[exc.start : exc.end]!r}, which is not valid"
            " Unicode (a lone surrogate, e.g. from bytes that are not UTF-8)"
        ) from exc
    if device is not None and not device.strip():
        raise InvalidInput("device must not be empty (an ADB serial or host:port)")
    if owner is not None and not action_id.startswith(owner + OWNER_SEPARATOR):
        raise InvalidInput(f"client {owner!r} creates ids under {owner}{OWNER_SEPARATOR} only")
    return Action(
        action_id=action_id,
        fingerprint=fingerprint,
        intent=intent,
        policy=policy,
        created_at=when,
        planned_device=device,
        pool=pool,
        queue_after=max(when, intent.not_before or when) if pool is not None else None,
        owner=owner,
    )


async def check_not_past(ledger: LedgerConnection, candidate: Action) -> None:
    """Refuse to create an action whose deadline has passed already (it could never be
    sent); an action stored under the id is read back as ever (a rerun after the deadline
    learns it is EXPIRED).

    Raises:
        InvalidInput: no action has the id and the candidate's deadline has passed.
    """
    deadline = candidate.intent.not_after
    if deadline is None or deadline > candidate.created_at:
        return

    def stored(db: sqlite3.Connection) -> bool:
        found = db.execute(
            "SELECT 1 FROM actions WHERE action_id = ?", (candidate.action_id,)
        ).fetchone()
        return found is not None

    if not await ledger._run(stored):
        raise InvalidInput(
            f"the deadline {format_time(deadline)} has passed already (it is"
            f" {format_time(candidate.created_at)}): the message could never be sent;"
            " nothing was written"
        )


def insert_action(
    db: sqlite3.Connection, candidate: Action, times: IntentTimes | None = None
) -> tuple[Action, bool]:
    """Insert ``candidate``, or read the action already stored under its id; and whether it
    was inserted. ``times``: the durations ``candidate``'s deadline and schedule were set
    from: an action already stored is the same intent when they give its times counted from
    its own creation (a rerun of the same command, later).

    Raises:
        FingerprintConflict: the id exists with another intent; nothing is written.
    """
    check_namespace(db, candidate)
    deadline = candidate.deadline
    intent = candidate.intent
    inserted = db.execute(
        "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts,"
        " policy_json, created_at, deadline, planned_device, pool, queue_after, owner,"
        " not_after, not_before)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (action_id) DO NOTHING",
        (
            candidate.action_id,
            candidate.fingerprint,
            to_json(to_jsonable(candidate.intent)),
            candidate.policy.maximum_attempts,
            to_json(to_jsonable(candidate.policy)),
            format_time(candidate.created_at),
            format_time(deadline) if deadline else None,
            candidate.planned_device,
            candidate.pool,
            format_time(candidate.queue_after) if candidate.queue_after else None,
            candidate.owner,
            format_time(intent.not_after) if intent.not_after else None,
            format_time(intent.not_before) if intent.not_before else None,
        ),
    )
    if inserted.rowcount == 1:
        return candidate, True
    stored = row_dict(
        db.execute("SELECT * FROM actions WHERE action_id = ?", (candidate.action_id,)).fetchone()
    )
    if candidate.owner is not None and stored.get("owner") != candidate.owner:
        raise InvalidInput(
            f"action id {candidate.action_id} was created by another caller of this ledger"
            f" before client {candidate.owner!r} did: it is not this client's; use another id"
        )
    if stored["fingerprint"] == candidate.fingerprint:
        return action_from_row(stored), False
    action = action_from_row(stored)
    if times is not None:
        # the durations count from the stored action's creation: the same times, the same intent
        again = times.applied(times.cleared(intent), action.created_at)
        if again.fingerprint == stored["fingerprint"]:
            return action, False
    raise intent_conflict(action, candidate.intent)


#: Between a client's name and its own id in the ledger (``starebrain mcp --clients``).
OWNER_SEPARATOR: Final = "/"


def check_namespace(db: sqlite3.Connection, candidate: Action) -> None:
    """Refuse to create ``candidate`` when its id lies in a registered client's namespace
    (``NAME/…``, ``register_owners``) and it is not that client's (DESIGN.md invariant 9:
    an action's owner is data; only that client's token creates its ids). An id already
    stored is no creation: ``insert_action`` reads it back (a sender's rerun, an operator's
    ``send`` of the same intent, and ``SmsAgent.send`` inside the MCP server).

    Raises:
        InvalidInput: the id is another caller's; nothing is written.
    """
    name, separator, _rest = candidate.action_id.partition(OWNER_SEPARATOR)
    if not separator or candidate.owner == name:
        return
    if db.execute("SELECT 1 FROM owners WHERE name = ?", (name,)).fetchone() is None:
        return
    stored = db.execute(
        "SELECT 1 FROM actions WHERE action_id = ?", (candidate.action_id,)
    ).fetchone()
    if stored is not None:
        return  # not a creation: the stored action is read back as it is (its owner kept)
    raise InvalidInput(
        f"action id {candidate.action_id} lies in the namespace of client {name!r} of"
        f" `starebrain mcp --clients`: only that client's token creates ids under {name}/;"
        " nothing was written (use an id outside it)"
    )


def register_owners(db: sqlite3.Connection, names: Sequence[str], when: datetime) -> None:
    """Record ``names`` as clients owning the ids under ``NAME/`` (kept for good)."""
    for name in names:
        db.execute(
            "INSERT INTO owners (name, registered_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            (name, format_time(when)),
        )


@attrs.frozen
class Loaded:
    """What ``_lock_and_load`` read: the action and its attempts; on PostgreSQL also the
    lease holder (``lease``, as ``lease_holder`` gives it; None: the phone is free) and the
    gate's counts (``counts``, None: not read), taken in the same round trip."""

    action: Action
    attempts: list[ActionRecord]
    lease: tuple[Any, ...] | None = None
    counts: tuple[int, ...] | None = None
    #: were the lease and the counts read (False: ask the database)
    prefetched: bool = False
    #: the recipient's opt-out change in force, as its row (None: never changed), read
    #: with the rest when ``prefetched``
    opt_out: Mapping[str, Any] | None = None


def _check_lease(db: sqlite3.Connection, device: str, loaded: Loaded | None = None) -> None:
    """Refuse a new attempt on a phone another unresolved attempt holds (read under the
    receipt's lock by ``_lock_and_load`` on PostgreSQL, ``loaded``).

    Raises:
        DeviceBusy: naming the holder (``holder_dispatch_id``, ``holder_action_id``,
            ``holder_since``).
    """
    holder = loaded.lease if loaded is not None and loaded.prefetched else lease_holder(db, device)
    if holder is None:
        return
    busy = DeviceBusy(
        f"device {device} is leased to attempt {holder[0]} of action {holder[1]},"
        f" unresolved since {holder[2]}"
    )
    busy.holder_dispatch_id = str(holder[0])
    busy.holder_action_id = str(holder[1])
    busy.holder_since = str(holder[2])
    raise busy


def _insert_receipt(
    db: sqlite3.Connection,
    action: Action,
    attempts: Sequence[ActionRecord],
    device: str,
    when: datetime,
    *,
    actor: str,
    evidence: Mapping[str, Any],
) -> ActionRecord:
    """Insert the next attempt of ``action`` on ``device`` (both axes PENDING, a new dispatch
    id), its ``evidence`` kept from the start; the attempt as inserted.

    Raises:
        AttemptInFlight: a concurrent attempt of the action won (the unique attempt number).
    """
    record = ActionRecord(
        action_id=action.action_id,
        dispatch_id=str(uuid.uuid4()),
        attempt=len(attempts) + 1,
        device=device,
        dispatched_at=when,
        evidence=dict(evidence),
    )
    params = {
        "dispatch_id": record.dispatch_id,
        "action_id": action.action_id,
        "attempt": record.attempt,
        "device": device,
        "dispatched_at": format_time(when),
        "actor": actor,
        "evidence_json": to_json({"attempt": record.attempt, "device": device, **evidence}),
        "record_evidence_json": to_json(dict(evidence)),
    }
    try:
        if isinstance(db, _pg.PgConnection):
            db.finish(INSERT_ATTEMPT, params)  # written, and the locks released, at once
        else:
            db.execute(INSERT_ATTEMPT, params)
    except sqlite3.IntegrityError as exc:
        raise AttemptInFlight(
            f"action {action.action_id}: a concurrent attempt won: {exc}"
        ) from exc
    return record


def _refusal(action_id: str, decision: RedispatchDecision) -> AttemptRefused:
    """``should_redispatch``'s refusal as the error ``begin_attempt`` raises."""
    reason = decision.reason
    if reason is RedispatchReason.IN_FLIGHT:
        return AttemptInFlight(
            f"action {action_id} has an unresolved attempt: reconcile it first", decision
        )
    if reason is RedispatchReason.EXPIRED:
        return AttemptRefused(
            f"action {action_id}: its deadline has passed: it is never sent (no ruling lifts"
            " a deadline; to send the message after all, create a new action)",
            decision,
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


def _policy_refused(action_id: str, verdict: GateDecision) -> PolicyRefused:
    """The gate's refusing verdict (kept, committed) as the error ``begin_attempt`` raises,
    logged as ``policy_refused``."""
    _log.info(
        "policy_refused",
        action_id=action_id,
        verdict=verdict.verdict.value,
        rule=verdict.rule,
        digest=verdict.digest,
    )
    refused = PolicyRefused(
        f"action {action_id}: {verdict.verdict.value} by {verdict.rule}: {verdict.detail}"
    )
    refused.gate = verdict
    return refused
