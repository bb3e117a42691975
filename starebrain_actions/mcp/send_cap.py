"""``--max-sends-per-hour``: the attempts the ledger holds for the server's phones over the
last hour, so the limit holds across restarts. It is counted inside the write transaction of
a new attempt's receipt, so concurrent calls cannot overshoot it, not even from several
servers sharing one ledger."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from typing import Final

import attrs

from starebrain_actions.core.convert import format_time
from starebrain_actions.core.exceptions import StarebrainError
from starebrain_actions.ledger.store import Ledger, dispatches_since

__all__ = ["SEND_WINDOW", "CappedLedger", "SendCap", "SendLimitReached"]

#: Sends started on the server's phones that ``--max-sends-per-hour`` counts over.
SEND_WINDOW: Final = timedelta(hours=1)


class SendLimitReached(StarebrainError):
    """The server's ``--max-sends-per-hour`` is used up; no attempt was started."""


@attrs.define
class SendCap:
    """``--max-sends-per-hour``: attempts the ledger holds for these phones in the window."""

    limit: int
    #: the phones' keys in the ledger (their addresses until each one is bound)
    devices: tuple[str, ...]

    def know(self, address: str, key: str) -> None:
        """The phone at ``address`` goes by ``key`` in the ledger: count its sends by it."""
        if key not in self.devices:
            self.devices = tuple(dict.fromkeys(key if d == address else d for d in self.devices))
            if key not in self.devices:
                self.devices = (*self.devices, key)

    async def started(self, ledger: Ledger) -> int:
        since = ledger.now() - SEND_WINDOW
        return sum([await ledger.dispatches_since(device, since) for device in self.devices])

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
        self._refuse_over(
            sum(dispatches_since(db, device, since) for device in self.devices), action_id
        )

    def _refuse_over(self, count: int, action_id: str) -> None:
        if count >= self.limit:
            raise SendLimitReached(
                f"send limit reached: {count} send(s) started on this server's phones in the"
                f" last hour (--max-sends-per-hour {self.limit}); no send was started for"
                f" action {action_id}"
            )


class CappedLedger(Ledger):
    """The server's ledger: a new attempt's receipt is refused (``SendLimitReached``) when
    the hourly send limit is used up, counted in the receipt's own write transaction, so the
    limit holds for several servers sharing one ledger too."""

    cap: SendCap | None = None

    def _admit(self, db: sqlite3.Connection, action_id: str, device: str, when: datetime) -> None:
        if self.cap is not None:
            self.cap.check_in_transaction(db, action_id, when)
