"""An action's deadline in the ledger (``schema/migrations/0016_deadlines.sql``): recording
that it passed with nothing sent (``record_expiry``, by the receipt it refused, and
``Ledger.expire_due``, by a pass), which writes the ``action.expired`` event.

The EXPIRED status is derived (``core.decisions.expired``) from the intent's deadline and the
attempts, at once, whoever reads; what is recorded here is when a writer first met it, so
that the event log and the webhooks tell the world, and a queued action leaves the queue.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Final

from starebrain_actions._logging import get_logger
from starebrain_actions.core.convert import format_time
from starebrain_actions.core.model import require_aware
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.connection import LedgerConnection
from starebrain_actions.ledger.queries import DENIED_SQL

_log = get_logger("starebrain.ledger")

#: An action ``core.decisions.expired`` says is EXPIRED, in SQL (given its deadline passed):
#: not denied (``queries.DENIED_SQL``, NULL read as not), and every attempt provably not sent
#: with no review open.
_NOTHING_SENT: Final = {
    dialect: (
        f"NOT coalesce({denied}, FALSE)"
        " AND NOT EXISTS (SELECT 1 FROM attempts WHERE attempts.action_id = actions.action_id"
        " AND (delivery <> 'FAILED' OR review_reason IS NOT NULL))"
    )
    for dialect, denied in DENIED_SQL.items()
}


def record_expiry(db: sqlite3.Connection, action_id: str, when: datetime) -> bool:
    """Record, inside the caller's write (which holds the action's lock), that
    ``action_id``'s deadline passed with nothing of it sent or under way; once: a later call
    changes nothing. The action leaves the queue. True when recorded now."""
    stamp = format_time(when)
    changed = db.execute(
        "UPDATE actions SET expired_at = ?, queue_after = NULL"
        " WHERE action_id = ? AND expired_at IS NULL AND not_after <= ?"
        f" AND {_NOTHING_SENT[_pg.dialect(db)]}",
        (stamp, action_id, stamp),
    )
    return changed.rowcount == 1


class Deadlines(LedgerConnection):
    """The ``Ledger``'s expiry pass (see the module docstring)."""

    async def expire(self, action_id: str, *, now: datetime | None = None) -> bool:
        """Record ``action_id``'s expiry if it is EXPIRED and not recorded yet (its deadline
        passed with nothing of it sent or under way); True when recorded now."""
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> bool:
            _pg.lock(db, f"action:{action_id}")
            return record_expiry(db, action_id, when)

        recorded = await self._write(work)
        self._actions.pop(action_id, None)
        if recorded:
            _log.info("action_expired", action_id=action_id)
        return recorded

    async def expire_due(self, *, now: datetime | None = None) -> list[str]:
        """Record every action whose deadline passed with nothing of it sent or under way
        (EXPIRED, not recorded yet): each gets ``expired_at`` and its ``action.expired``
        event, and leaves the queue. Run by the worker, ``nightly``, ``reconcile`` and
        ``resume``; a send refused at the deadline records its own action. Returns the ids
        recorded now, oldest deadline first."""
        when = require_aware("now", now) if now is not None else self.now()
        stamp = format_time(when)

        def work(db: sqlite3.Connection) -> list[str]:
            nothing_sent = _NOTHING_SENT[_pg.dialect(db)]
            due = [
                str(row[0])
                for row in db.execute(
                    "SELECT action_id FROM actions"
                    " WHERE not_after IS NOT NULL AND expired_at IS NULL AND not_after <= ?"
                    f" AND {nothing_sent} ORDER BY not_after, action_id",
                    (stamp,),
                ).fetchall()
            ]
            recorded = []
            for action_id in due:
                _pg.lock(db, f"action:{action_id}")
                if record_expiry(db, action_id, when):
                    recorded.append(action_id)
            return recorded

        if not await self._run(lambda db: _any_due(db, stamp)):
            return []
        recorded = await self._write(work)
        for action_id in recorded:
            self._actions.pop(action_id, None)
            _log.info("action_expired", action_id=action_id)
        return recorded


def _any_due(db: sqlite3.Connection, stamp: str) -> bool:
    """Has any deadline passed without its expiry recorded (a cheap look by the index first,
    so that a pass with nothing to record never takes the write lock)?"""
    return (
        db.execute(
            "SELECT 1 FROM actions WHERE not_after IS NOT NULL AND expired_at IS NULL"
            " AND not_after <= ? LIMIT 1",
            (stamp,),
        ).fetchone()
        is not None
    )
