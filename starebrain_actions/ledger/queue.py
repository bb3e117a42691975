"""The queue: actions recorded with no phone yet (``enqueue``), taken by the workers beside the
phones of their pool (``claim_next``, ``release``), and which worker holds which phone, with
its heartbeat (``hold_phones``, ``heartbeat``, ``let_go``, ``phone_workers``).

An action's claim is a scheduling hint, never the guarantee: a claimed action is still sent
through ``begin_attempt``'s receipt, whose one-unresolved-attempt-per-action and per-phone
leases keep every send single whatever the claims say. The claim keeps workers from queueing
up behind one action, and shows where each action went. It holds while its worker's heartbeat
is fresh: a worker killed with ``kill -9`` stops beating, and its claims and phones pass to
whoever asks after ``stale_after``, or at once to the same host once its process is gone.

``queue_after`` orders the queue and spares it the actions with nothing to do: a worker looks
at an action only from that time on (its backoff, the end of quiet hours), and sets it to NULL
when the action leaves the queue (sent and settled, refused, in a person's hands); a person's
ruling (``retry``, ``approve``, ``resolve``) puts it back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core.convert import format_time, structure
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import (
    Action,
    ActionRecord,
    ActionSummary,
    IntentTimes,
    QueueClaim,
    RedispatchReason,
    RetryPolicy,
    SmsIntent,
    require_aware,
)
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.connection import LedgerConnection
from starebrain_actions.ledger.gate import gate_refusal, standing_verdict
from starebrain_actions.ledger.queries import cached_action, summaries_of
from starebrain_actions.ledger.read import load_action, load_attempts, row_dict
from starebrain_actions.ledger.receipts import check_not_past, insert_action, new_action

if TYPE_CHECKING:
    from starebrain_actions.core.policy import GateDecision, Policy

_log = get_logger("starebrain.ledger")

#: The pool an action is queued for when none is named.
DEFAULT_POOL: Final = "default"
#: A worker's phones and claims are its own while its heartbeat is younger than this.
STALE_AFTER: Final = timedelta(seconds=30)
#: An action waiting on something no ruling announces (an attempt unresolved on another
#: phone, a row settling, a limit of the gate) is looked at again after this long at most.
RECHECK: Final = timedelta(seconds=10)
#: Actions one claim looks at, at most (the oldest due first).
CLAIM_BATCH: Final = 16

#: Why an action leaves the queue (``queue_after`` NULL): nothing a worker can do changes it.
_LEAVES: Final = frozenset(
    {
        RedispatchReason.SUCCEEDED,
        RedispatchReason.NEEDS_REVIEW,
        RedispatchReason.BUDGET_EXHAUSTED,
        RedispatchReason.DEADLINE_PASSED,
        RedispatchReason.EXPIRED,
        RedispatchReason.REPEATED_MISMATCH,
    }
)


def check_pool(pool: str) -> str:
    """``pool``, checked: 1 to 100 printable characters, no spaces.

    Raises:
        InvalidInput: it is not.
    """
    if not isinstance(pool, str) or not 1 <= len(pool) <= 100:
        raise InvalidInput(f"a pool is a name of 1 to 100 characters; got {pool!r}")
    if any(not c.isprintable() or c.isspace() for c in pool):
        raise InvalidInput(f"a pool name holds no spaces or control characters; got {pool!r}")
    return pool


@attrs.frozen(kw_only=True)
class Queued:
    """What ``enqueue`` recorded: the action (new, or the one already stored under its id)
    and where it stands, and the policy gate's verdict when it refused it."""

    summary: ActionSummary
    #: False: the id was already in the ledger (the stored action is kept as it is)
    created: bool
    #: the gate's refusing verdict (DENY and HOLD take it out of the queue; WAIT and
    #: OVER_LIMIT leave it queued for a worker's gate to judge again); None: allowed
    gate: GateDecision | None = None


@attrs.frozen(kw_only=True)
class PhoneWorker:
    """A worker holding a phone (a row of ``phone_workers``)."""

    #: the phone's key in the ledger
    device: str
    #: the worker's name (``host:pid``)
    worker: str
    host: str
    pid: int
    #: the pool it serves
    pool: str
    #: the address the worker reaches the phone at
    address: str
    claimed_at: datetime
    heartbeat_at: datetime
    #: what it was doing at its latest heartbeat
    doing: str = ""

    def stale(self, now: datetime, stale_after: timedelta = STALE_AFTER) -> bool:
        """Has its heartbeat stopped (its phone and claims may be taken over)?"""
        return now - self.heartbeat_at >= stale_after


def requeue(db: sqlite3.Connection, action_id: str, when: datetime) -> None:
    """A person's ruling on the action (``retry``, ``approve``, ``deny``, ``resolve``): a
    queued action is looked at again from ``when`` (a worker finds what it allows now)."""
    db.execute(
        "UPDATE actions SET queue_after = ? WHERE action_id = ? AND pool IS NOT NULL",
        (format_time(when), action_id),
    )


def next_look(action: Action, attempts: Sequence[ActionRecord], now: datetime) -> datetime | None:
    """When a worker should look at a queued ``action`` again (``queue_after``): now when an
    attempt may start, the end of its backoff, a short recheck while something else decides
    (an attempt unresolved on its phone, a row settling), None when it leaves the queue
    (sent and settled, in review, out of budget, held or denied by a person's gate)."""
    if standing_verdict(action) is not None:
        return None  # a person rules first; ``approve`` puts it back
    decision = _decisions.should_redispatch(action, attempts, now)
    if decision.redispatch:
        return _gate_wait(action, now)
    if decision.reason in _LEAVES:
        return None
    if decision.waits and decision.retry_at is not None:
        return decision.retry_at
    return now + RECHECK


class QueueWork(LedgerConnection):
    """The ``Ledger``'s queue (see the module docstring)."""

    async def enqueue(
        self,
        action_id: str,
        intent: SmsIntent,
        policy: RetryPolicy | None = None,
        *,
        pool: str = DEFAULT_POOL,
        gate: Policy | None = None,
        now: datetime | None = None,
        owner: str | None = None,
        times: IntentTimes | None = None,
    ) -> Queued:
        """Record the action with no phone, queued for ``pool``'s workers, and return at once.
        ``gate``: the policy gate judges it now (None: the ledger's, ``Ledger.gate``; and each
        worker's gate judges it again before its attempt). An id already in the ledger keeps
        what it has (its pool, or its sender); nothing is queued again. ``owner``: the
        client of ``starebrain mcp --clients`` queueing it (``create_action``'s); ``times``:
        its deadline and schedule as durations (``create_action``'s). No worker looks at it
        before its schedule (``SmsIntent.not_before``).

        Raises:
            InvalidInput: a bad id, pool or intent, or a new action's deadline has passed;
                nothing is written.
            FingerprintConflict: the id exists with another intent; nothing is written.
        """
        when = require_aware("now", now) if now is not None else self.now()
        candidate = new_action(
            action_id,
            intent,
            policy or RetryPolicy(),
            when,
            pool=check_pool(pool),
            owner=owner,
            times=times,
        )
        await check_not_past(self, candidate)
        active = gate if gate is not None else self.gate

        def work(db: sqlite3.Connection) -> Queued:
            if active is not None:
                _pg.lock(db, "policy-gate")
            action, created = insert_action(db, candidate, times)
            if created:
                self._admit_queued(db, action, when)
            verdict = None
            if created and active is not None:
                verdict = gate_refusal(db, active, action, [], when)
            stored = load_action(db, action_id)
            if verdict is not None:
                # the verdict is kept on the action: its next look follows from it
                after = next_look(stored, [], when)
                db.execute(
                    "UPDATE actions SET queue_after = ? WHERE action_id = ?",
                    (format_time(after) if after else None, action_id),
                )
                stored = attrs.evolve(stored, queue_after=after)
            summary = summaries_of(db, [stored], when)[0]
            return Queued(summary=summary, created=created, gate=verdict)

        queued = await self._write(work, inline=True)
        self._actions.pop(action_id, None)  # the gate may have kept a verdict or a pin
        _log.info(
            "action_queued" if queued.created else "action_reused",
            action_id=action_id,
            pool=queued.summary.action.pool,
            verdict=queued.gate.verdict.value if queued.gate is not None else None,
        )
        return queued

    def _admit_queued(self, db: sqlite3.Connection, action: Action, when: datetime) -> None:
        """A last check of a new queued action, run inside ``enqueue``'s write transaction
        (as ``_admit`` is in a receipt's); raising refuses it and writes nothing. Subclasses
        add limits here (``starebrain mcp``'s hourly send cap); this one admits everything."""

    async def claim_next(
        self,
        pool: str,
        device: str,
        worker: str,
        *,
        now: datetime | None = None,
        stale_after: timedelta = STALE_AFTER,
        release: str | None = None,
    ) -> Action | None:
        """Claim for ``worker`` and its phone ``device`` the oldest action of ``pool`` that may
        start an attempt now, in one write transaction (PostgreSQL: ``FOR UPDATE SKIP
        LOCKED``, so that workers take different actions at once); None: none is due. Actions
        looked at that cannot start get their next look (``next_look``). A claim older than
        ``stale_after`` whose worker's heartbeat is stale too is free again; an action with an
        unresolved attempt stays with that attempt's phone. ``release``: an action whose
        claim ``worker`` lets go of first, in the same transaction (as ``release`` would).
        """
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> Action | None:
            if release is not None:
                _release(db, release, worker, when, None)
            skip = " FOR UPDATE SKIP LOCKED" if _pg.dialect(db) == "postgresql" else ""
            rows = db.execute(
                "SELECT * FROM actions WHERE pool = ? AND queue_after IS NOT NULL"
                " AND queue_after <= ?"
                " AND (claimed_by IS NULL OR (claimed_at <= ?"
                " AND claimed_by NOT IN (SELECT worker FROM phone_workers"
                " WHERE heartbeat_at > ?)))"
                " AND NOT EXISTS (SELECT 1 FROM attempts WHERE attempts.action_id ="
                " actions.action_id AND attempts.delivery = 'PENDING')"
                f" ORDER BY queue_after, action_id LIMIT ?{skip}",
                (
                    pool,
                    format_time(when),
                    format_time(when - stale_after),
                    format_time(when - stale_after),
                    CLAIM_BATCH,
                ),
            ).fetchall()
            for row in rows:
                action = cached_action(row_dict(row))
                attempts = load_attempts(db, action.action_id)
                after = next_look(action, attempts, when)
                if after is not None and after <= when:
                    db.execute(
                        "UPDATE actions SET claimed_by = ?, claimed_device = ?,"
                        " claimed_at = ? WHERE action_id = ?",
                        (worker, device, format_time(when), action.action_id),
                    )
                    claim = QueueClaim(worker=worker, device=device, claimed_at=when)
                    return attrs.evolve(action, claim=claim)
                db.execute(
                    "UPDATE actions SET queue_after = ?, claimed_by = NULL,"
                    " claimed_device = NULL, claimed_at = NULL WHERE action_id = ?",
                    (format_time(after) if after else None, action.action_id),
                )
            return None

        claimed = await self._write(work)
        if claimed is not None:
            _log.info("action_claimed", action_id=claimed.action_id, device=device, worker=worker)
        return claimed

    async def release(
        self,
        action_id: str,
        worker: str,
        *,
        now: datetime | None = None,
        not_before: datetime | None = None,
    ) -> datetime | None:
        """Let go of ``worker``'s claim on the action, and set when a worker looks at it
        again (``next_look``, or ``not_before`` if later; returned; None: it left the
        queue). A claim another worker holds now is left alone."""
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> datetime | None:
            return _release(db, action_id, worker, when, not_before)

        return await self._write(work)

    # ------------------------------------------------------------------ phones held

    async def hold_phones(
        self,
        holder: PhoneWorker,
        devices: Sequence[tuple[str, str]],
        *,
        stale_after: timedelta = STALE_AFTER,
        gone: Sequence[str] = (),
    ) -> dict[str, PhoneWorker]:
        """Take for ``holder`` (its ``device`` and ``address`` ignored) each phone of
        ``devices`` (key, address) that no other worker holds with a fresh heartbeat, or that
        a worker named in ``gone`` (known dead) held, whose claims are freed with it; one
        write transaction. Returns, for
        each phone it could not take, the worker that holds it."""
        when = holder.heartbeat_at

        def work(db: sqlite3.Connection) -> dict[str, PhoneWorker]:
            refused: dict[str, PhoneWorker] = {}
            for device, address in devices:
                _pg.lock(db, f"phone-worker:{device}")
                row = db.execute(
                    "SELECT * FROM phone_workers WHERE device = ?", (device,)
                ).fetchone()
                if row is not None:
                    other = _phone_worker(row_dict(row))
                    if (
                        other.worker != holder.worker
                        and other.worker not in gone
                        and not other.stale(when, stale_after)
                    ):
                        refused[device] = other
                        continue
                    db.execute("DELETE FROM phone_workers WHERE device = ?", (device,))
                    if other.worker in gone:
                        # its claims too: a dead process sends nothing, and its claims
                        # would otherwise wait out ``stale_after`` before another took them
                        db.execute(
                            "UPDATE actions SET claimed_by = NULL, claimed_device = NULL,"
                            " claimed_at = NULL WHERE claimed_by = ?",
                            (other.worker,),
                        )
                db.execute(
                    "INSERT INTO phone_workers (device, worker, host, pid, pool, address,"
                    " claimed_at, heartbeat_at, doing) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        device,
                        holder.worker,
                        holder.host,
                        holder.pid,
                        holder.pool,
                        address,
                        format_time(when),
                        format_time(when),
                        holder.doing,
                    ),
                )
            return refused

        return await self._write(work)

    async def heartbeat(
        self, worker: str, doing: Mapping[str, str], *, now: datetime | None = None
    ) -> set[str]:
        """Beat ``worker``'s heart on its phones, noting what it does on each (``doing``, by
        phone key); the phones it still holds (one another worker took over after a stale
        heartbeat is no longer among them)."""
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> set[str]:
            held: set[str] = set()
            for device, what in doing.items():
                if db.execute(
                    "UPDATE phone_workers SET heartbeat_at = ?, doing = ?"
                    " WHERE device = ? AND worker = ?",
                    (format_time(when), what[:200], device, worker),
                ).rowcount:
                    held.add(device)
            return held

        return await self._write(work)

    async def let_go(self, worker: str, devices: Sequence[str] | None = None) -> None:
        """``worker`` lets go of its phones (``devices``; None: all) and of its claims on
        the actions of those phones."""

        def work(db: sqlite3.Connection) -> None:
            names = list(devices) if devices is not None else None
            where, params = "worker = ?", [worker]
            claims, claim_params = "claimed_by = ?", [worker]
            if names is not None:
                if not names:
                    return
                marks = ", ".join("?" for _ in names)
                where += f" AND device IN ({marks})"
                claims += f" AND claimed_device IN ({marks})"
                params += names
                claim_params += names
            db.execute(
                "UPDATE actions SET claimed_by = NULL, claimed_device = NULL, claimed_at = NULL"
                f" WHERE {claims}",
                claim_params,
            )
            db.execute(f"DELETE FROM phone_workers WHERE {where}", params)

        await self._write(work)

    async def phone_workers(self) -> list[PhoneWorker]:
        """Every phone a worker holds or held until it stopped beating, by phone key."""

        def work(db: sqlite3.Connection) -> list[PhoneWorker]:
            rows = db.execute("SELECT * FROM phone_workers ORDER BY device").fetchall()
            return [_phone_worker(row_dict(row)) for row in rows]

        return await self._run(work)

    async def queue_tally(self, *, now: datetime | None = None) -> dict[str, dict[str, int]]:
        """Per pool: how many actions wait in the queue (``waiting``: due now; ``later``: due
        after a backoff or a recheck), how many a worker drives (``claimed``), and how many
        were ever queued there (``total``)."""
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> dict[str, dict[str, int]]:
            rows = db.execute(
                "SELECT pool, count(*),"
                " sum(CASE WHEN queue_after IS NOT NULL AND claimed_by IS NULL"
                " AND queue_after <= ? THEN 1 ELSE 0 END),"
                " sum(CASE WHEN queue_after IS NOT NULL AND claimed_by IS NULL"
                " AND queue_after > ? THEN 1 ELSE 0 END),"
                " sum(CASE WHEN claimed_by IS NOT NULL THEN 1 ELSE 0 END)"
                " FROM actions WHERE pool IS NOT NULL GROUP BY pool ORDER BY pool",
                (format_time(when), format_time(when)),
            ).fetchall()
            return {
                str(row[0]): {
                    "total": int(row[1]),
                    "waiting": int(row[2] or 0),
                    "later": int(row[3] or 0),
                    "claimed": int(row[4] or 0),
                }
                for row in rows
            }

        return await self._run(work)


def _release(
    db: sqlite3.Connection,
    action_id: str,
    worker: str,
    when: datetime,
    not_before: datetime | None,
) -> datetime | None:
    """``release``'s work: the action's next look (``not_before`` at the earliest), and
    ``worker``'s claim let go of."""
    action = load_action(db, action_id)
    after = next_look(action, load_attempts(db, action_id), when)
    if after is not None and not_before is not None:
        after = max(after, not_before)
    db.execute(
        "UPDATE actions SET queue_after = ?, claimed_by = NULL, claimed_device = NULL,"
        " claimed_at = NULL WHERE action_id = ? AND claimed_by = ?",
        (format_time(after) if after else None, action_id, worker),
    )
    return after


def _gate_wait(action: Action, now: datetime) -> datetime | None:
    """When an action that may start is due, after the gate's latest refusal of it: never
    (DENY: never sent, whatever comes later), the end of its quiet hours (WAIT), ``RECHECK``
    after the verdict over a limit (OVER_LIMIT); now when none stands. (A hold for approval
    is a standing verdict: ``next_look`` takes it out of the queue before.)"""
    from starebrain_actions.core.policy import Verdict

    gate = action.gate or {}
    verdict = gate.get("verdict")
    if verdict == Verdict.DENY.value:
        return None
    if verdict == Verdict.WAIT.value and isinstance(gate.get("until"), str):
        return max(now, structure(gate["until"], datetime, "gate until"))
    if verdict == Verdict.OVER_LIMIT.value:
        # counted from the verdict (each receipt refused over the limit keeps its time
        # anew): the action is due again once RECHECK has passed since, not pushed on by
        # every look at the queue
        at = gate.get("at")
        judged = structure(at, datetime, "gate at") if isinstance(at, str) else now
        return max(now, judged + RECHECK)
    return now


def _phone_worker(row: Mapping[str, object]) -> PhoneWorker:
    return structure(row, PhoneWorker, "phone_workers row")
