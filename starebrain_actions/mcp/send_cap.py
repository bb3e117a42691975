"""``--max-sends-per-hour``: the attempts the ledger holds for the server's phones over the
last hour, and the actions queued for the server's pools (``--pool``) over it, so the limit
holds across restarts. It is counted inside the write transaction of a new attempt's receipt
or of a new queued action, so concurrent calls cannot overshoot it, not even from several
servers sharing one ledger.

A queued action counts once it is queued, whatever the policy gate says of it then and
whichever phone of its pool a worker sends it through: queueing is the model's send
request, and the worker's phones are not the server's to count (one that is, a phone both
``--device`` of the server and a worker's, counts its attempt of a queued action too: twice,
on the safe side)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from typing import Final

import attrs

from starebrain_actions.core.convert import format_time
from starebrain_actions.core.exceptions import StarebrainError
from starebrain_actions.core.model import Action
from starebrain_actions.ledger.store import Ledger, dispatches_since

__all__ = ["SEND_WINDOW", "CappedLedger", "SendCap", "SendLimitReached"]

#: Sends started on the server's phones that ``--max-sends-per-hour`` counts over.
SEND_WINDOW: Final = timedelta(hours=1)


class SendLimitReached(StarebrainError):
    """The server's ``--max-sends-per-hour`` is used up; no attempt was started (nothing
    was queued)."""


@attrs.define
class SendCap:
    """``--max-sends-per-hour``: attempts the ledger holds for these phones in the window,
    and actions queued for these pools in it."""

    limit: int
    #: the phones' keys in the ledger (their addresses until each one is bound)
    devices: tuple[str, ...]
    #: the pools the server queues for (``--pool``)
    pools: tuple[str, ...] = ()

    def know(self, address: str, key: str) -> None:
        """The phone at ``address`` goes by ``key`` in the ledger: count its sends by it."""
        if key not in self.devices:
            self.devices = tuple(dict.fromkeys(key if d == address else d for d in self.devices))
            if key not in self.devices:
                self.devices = (*self.devices, key)

    async def started(self, ledger: Ledger) -> int:
        since = format_time(ledger.now() - SEND_WINDOW)
        return await ledger._run(lambda db: self._count(db, since))

    def _count(self, db: sqlite3.Connection, since: str, *, besides: str = "") -> int:
        """Attempts started on the phones since ``since`` (stored form), and actions queued
        for the pools since then (but ``besides``, the one being queued)."""
        started = sum(dispatches_since(db, device, since) for device in self.devices)
        if not self.pools:
            return started
        marks = ", ".join("?" for _ in self.pools)
        row = db.execute(
            f"SELECT count(*) FROM actions WHERE pool IN ({marks}) AND created_at >= ?"
            " AND action_id <> ?",
            (*self.pools, since, besides),
        ).fetchone()
        return started + int(row[0])

    async def check(self, ledger: Ledger, action_id: str) -> None:
        """Raises SendLimitReached when the window is full (a check before connecting; the
        one that counts runs in the receipt's transaction, ``CappedLedger._admit``)."""
        self._refuse_over(await self.started(ledger), action_id)

    def check_in_transaction(self, db: sqlite3.Connection, action_id: str, now: datetime) -> None:
        """Raises SendLimitReached when the window is full, counted inside the write
        transaction of the new attempt's receipt: no other process can add one meanwhile
        (SQLite lets one writer at a time; on PostgreSQL the count is taken under an advisory
        lock every capped receipt takes, last, after its action's and device's)."""
        from starebrain_actions.ledger.pg import lock

        lock(db, "mcp-send-cap")
        since = format_time(now - SEND_WINDOW)
        self._refuse_over(self._count(db, since, besides=action_id), action_id)

    def _refuse_over(self, count: int, action_id: str) -> None:
        if count >= self.limit:
            queued = " or queued for its pools" if self.pools else ""
            raise SendLimitReached(
                f"send limit reached: {count} send(s) started on this server's phones"
                f"{queued} in the last hour (--max-sends-per-hour {self.limit}); no send was"
                f" started for action {action_id}"
            )


class CappedLedger(Ledger):
    """The server's ledger: a new attempt's receipt, or a new queued action, is refused
    (``SendLimitReached``) when the hourly send limit is used up, counted in the receipt's
    (or the queued action's) own write transaction, so the limit holds for several servers
    sharing one ledger too."""

    cap: SendCap | None = None

    def _admit(self, db: sqlite3.Connection, action_id: str, device: str, when: datetime) -> None:
        if self.cap is not None:
            self.cap.check_in_transaction(db, action_id, when)

    def _admit_queued(self, db: sqlite3.Connection, action: Action, when: datetime) -> None:
        if self.cap is not None:
            self.cap.check_in_transaction(db, action.action_id, when)
