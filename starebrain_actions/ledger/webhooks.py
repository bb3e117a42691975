"""Webhook endpoints in the ledger (``schema/migrations/0014_webhooks.sql``): each with its
signing secret, the event types it receives, its cursor into the events, the tries of its head
event and the claim of the deliverer sending to it now.

The deliverer (``orchestration.webhooks``) sends; this part keeps what it must never lose or
do twice at once, each step one conditional UPDATE:

* ``claim_webhook``: take an endpoint for a lease, only if no live claim holds it (two
  deliverers never send to one endpoint at once, so never out of order);
* ``webhook_delivered``: a 2xx moves the cursor past the head event, only if the claim is
  still the caller's and the cursor is where the caller read it (never past an event not
  delivered);
* ``webhook_failed``: a failed try of the head, the next one planned, or the endpoint turned
  off, whose trigger writes ``webhook.disabled`` in the same statement.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, Final

import attrs

from starebrain_actions.core.convert import format_time, parse_time
from starebrain_actions.core.events import check_types
from starebrain_actions.core.exceptions import InvalidInput, NotFound
from starebrain_actions.core.webhooks import check_url, new_endpoint_id, new_secret
from starebrain_actions.ledger.events import EventReads, type_filter
from starebrain_actions.ledger.read import row_dict

#: An endpoint's states.
ENABLED: Final = "ENABLED"
DISABLED: Final = "DISABLED"
#: Endpoints a ledger keeps at most (each is tried on every pass).
MAX_ENDPOINTS: Final = 100


@attrs.frozen(kw_only=True)
class WebhookEndpoint:
    """One endpoint as the ledger keeps it (``secret`` is never shown but at ``add``)."""

    endpoint_id: str
    url: str
    #: the signing secret (``whsec_…``); not in repr
    secret: str = attrs.field(repr=False)
    #: the event types it receives (types, or families ``action.*``; empty: all)
    types: tuple[str, ...]
    #: may its host be or resolve to a private address
    allow_private: bool
    #: are numbers and bodies sent in clear
    show_private: bool
    created_at: datetime
    #: the position of the last event delivered or passed over
    cursor: int
    #: ``ENABLED`` or ``DISABLED``
    state: str
    disabled_at: datetime | None
    disabled_reason: str | None
    #: the event being tried (None: none failed yet), its failed tries, its next try
    head_position: int | None
    failures: int
    next_try_at: datetime | None
    #: the latest try's HTTP status (None: no answer) and error, when it was
    last_status: int | None
    last_error: str | None
    last_try_at: datetime | None
    last_success_at: datetime | None
    #: events delivered so far
    delivered: int
    #: the deliverer holding it, and until when
    claimed_by: str | None
    claimed_until: datetime | None

    @property
    def enabled(self) -> bool:
        return self.state == ENABLED

    def public(self) -> dict[str, Any]:
        """JSON-able, without the secret."""
        return {
            "endpoint_id": self.endpoint_id,
            "url": self.url,
            "types": list(self.types),
            "allow_private": self.allow_private,
            "show_private": self.show_private,
            "created_at": format_time(self.created_at),
            "cursor": self.cursor,
            "state": self.state,
            "disabled_at": _time_text(self.disabled_at),
            "disabled_reason": self.disabled_reason,
            "head_position": self.head_position,
            "failures": self.failures,
            "next_try_at": _time_text(self.next_try_at),
            "last_status": self.last_status,
            "last_error": self.last_error,
            "last_try_at": _time_text(self.last_try_at),
            "last_success_at": _time_text(self.last_success_at),
            "delivered": self.delivered,
            "claimed_by": self.claimed_by,
            "claimed_until": _time_text(self.claimed_until),
        }


def _time_text(value: datetime | None) -> str | None:
    return format_time(value) if value is not None else None


def _time(value: Any) -> datetime | None:
    return parse_time(value) if value is not None else None


def endpoint_from_row(row: Mapping[str, Any]) -> WebhookEndpoint:
    """An endpoint from its row."""
    types = json.loads(row["types_json"])
    return WebhookEndpoint(
        endpoint_id=str(row["endpoint_id"]),
        url=str(row["url"]),
        secret=str(row["secret"]),
        types=tuple(str(kind) for kind in types),
        allow_private=bool(row["allow_private"]),
        show_private=bool(row["show_private"]),
        created_at=parse_time(row["created_at"]),
        cursor=int(row["cursor_position"]),
        state=str(row["state"]),
        disabled_at=_time(row["disabled_at"]),
        disabled_reason=row["disabled_reason"],
        head_position=int(row["head_position"]) if row["head_position"] is not None else None,
        failures=int(row["failures"]),
        next_try_at=_time(row["next_try_at"]),
        last_status=int(row["last_status"]) if row["last_status"] is not None else None,
        last_error=row["last_error"],
        last_try_at=_time(row["last_try_at"]),
        last_success_at=_time(row["last_success_at"]),
        delivered=int(row["delivered"]),
        claimed_by=row["claimed_by"],
        claimed_until=_time(row["claimed_until"]),
    )


def _one(db: sqlite3.Connection, endpoint_id: str) -> WebhookEndpoint:
    row = db.execute("SELECT * FROM webhooks WHERE endpoint_id = ?", (endpoint_id,)).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id!r} (see `starebrain webhook list`)")
    return endpoint_from_row(row_dict(row))


def _pending(db: sqlite3.Connection, endpoint: WebhookEndpoint) -> int:
    where, args = type_filter(endpoint.types)
    row = db.execute(
        f"SELECT count(*) FROM events WHERE position > ? AND {where}",
        (endpoint.cursor, *args),
    ).fetchone()
    return int(row[0])


class WebhookStore(EventReads):
    """The ``Ledger``'s webhook endpoints (see the module docstring)."""

    # ------------------------------------------------------------------ a person's changes

    async def add_webhook(
        self,
        url: str,
        *,
        types: Collection[str] = (),
        allow_private: bool = False,
        show_private: bool = False,
        after: int | None = None,
    ) -> WebhookEndpoint:
        """A new endpoint at ``url`` receiving ``types`` (all when empty), from the event
        after position ``after`` (default: the newest now, so events from now on; 0: every
        event the ledger holds). Its ``secret`` is the one to give the receiver.

        The URL's form is checked here; whether its host is private (``allow_private``) is
        the caller's check (it resolves names), made again at every delivery.

        Raises:
            InvalidInput: a bad URL, an unknown type, a negative ``after``, too many endpoints.
        """
        check_url(url)
        wanted = check_types(types)
        if after is not None and after < 0:
            raise InvalidInput(f"a position is 0 or more, got {after}")
        start = after if after is not None else await self.last_event_position()
        endpoint_id = new_endpoint_id()
        now = format_time(self.now())

        def work(db: sqlite3.Connection) -> WebhookEndpoint:
            count = int(db.execute("SELECT count(*) FROM webhooks").fetchone()[0])
            if count >= MAX_ENDPOINTS:
                raise InvalidInput(
                    f"this ledger has {count} webhook endpoints, the most it keeps; remove one"
                    " first (`starebrain webhook remove ID`)"
                )
            db.execute(
                "INSERT INTO webhooks (endpoint_id, url, secret, types_json, allow_private,"
                " show_private, created_at, cursor_position)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    endpoint_id,
                    url,
                    new_secret(),
                    json.dumps(list(wanted)),
                    int(allow_private),
                    int(show_private),
                    now,
                    start,
                ),
            )
            return _one(db, endpoint_id)

        return await self._write(work)

    async def remove_webhook(self, endpoint_id: str) -> WebhookEndpoint:
        """Remove an endpoint (nothing more is sent to it; a request already under way
        ends as it ends); the endpoint as it was.

        Raises:
            NotFound: no such endpoint.
        """

        def work(db: sqlite3.Connection) -> WebhookEndpoint:
            endpoint = _one(db, endpoint_id)
            db.execute("DELETE FROM webhooks WHERE endpoint_id = ?", (endpoint_id,))
            return endpoint

        return await self._write(work)

    async def enable_webhook(self, endpoint_id: str, *, from_now: bool = False) -> WebhookEndpoint:
        """Turn an endpoint back on: its head event is tried again at once, with a fresh
        schedule, and every event after it follows (nothing was lost while it was off);
        ``from_now``: skip them, start after the newest event now. An endpoint already on is
        left as it is (``from_now`` still skips).

        Raises:
            NotFound: no such endpoint.
        """
        top = await self.last_event_position() if from_now else None

        def work(db: sqlite3.Connection) -> WebhookEndpoint:
            _one(db, endpoint_id)
            db.execute(
                "UPDATE webhooks SET state = 'ENABLED', disabled_at = NULL,"
                " disabled_reason = NULL, failures = 0, next_try_at = NULL"
                " WHERE endpoint_id = ? AND state = 'DISABLED'",
                (endpoint_id,),
            )
            if top is not None:
                db.execute(
                    "UPDATE webhooks SET head_position = NULL, failures = 0, next_try_at = NULL,"
                    " cursor_position = CASE WHEN ? > cursor_position THEN ?"
                    " ELSE cursor_position END WHERE endpoint_id = ?",
                    (top, top, endpoint_id),
                )
            return _one(db, endpoint_id)

        return await self._write(work)

    # ------------------------------------------------------------------ reads

    async def webhook(self, endpoint_id: str) -> WebhookEndpoint:
        """One endpoint (with its secret: for the deliverer).

        Raises:
            NotFound: no such endpoint.
        """
        return await self._run(lambda db: _one(db, endpoint_id))

    async def webhooks(self) -> list[WebhookEndpoint]:
        """Every endpoint, oldest first."""

        def work(db: sqlite3.Connection) -> list[WebhookEndpoint]:
            rows = db.execute("SELECT * FROM webhooks ORDER BY created_at, endpoint_id")
            return [endpoint_from_row(row_dict(row)) for row in rows.fetchall()]

        return await self._run(work)

    async def webhook_pending(self, endpoint: WebhookEndpoint) -> int:
        """How many events of its types wait after its cursor (on a read-only PostgreSQL
        ledger, of the events numbered so far)."""
        if not (self._pg is not None and self._pg._read_only):
            await self._place_events()
        return await self._run(lambda db: _pending(db, endpoint))

    async def due_webhooks(self, now: datetime, *, below: int) -> list[str]:
        """The endpoints a pass may send to now: on, their next try due, no live claim, and
        their cursor below ``below`` (the newest event's position: others have nothing)."""
        at = format_time(now)

        def work(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(
                "SELECT endpoint_id FROM webhooks WHERE state = 'ENABLED'"
                " AND (next_try_at IS NULL OR next_try_at <= ?)"
                " AND (claimed_until IS NULL OR claimed_until <= ?)"
                " AND cursor_position < ? ORDER BY endpoint_id",
                (at, at, below),
            ).fetchall()
            return [str(row[0]) for row in rows]

        return await self._run(work)

    async def next_webhook_try(self) -> datetime | None:
        """The earliest planned retry of an endpoint that is on (None: none planned)."""
        row = await self._run(
            lambda db: db.execute(
                "SELECT min(next_try_at) FROM webhooks WHERE state = 'ENABLED'"
            ).fetchone()
        )
        return _time(row[0])

    # ------------------------------------------------------------------ the deliverer's steps

    async def claim_webhook(
        self, endpoint_id: str, deliverer: str, *, until: datetime, now: datetime
    ) -> WebhookEndpoint | None:
        """Take (or renew) the endpoint for ``deliverer`` until ``until``, only if it is on and
        no other live claim holds it; the endpoint, or None when it is not ours to send to."""
        args = (deliverer, format_time(until), endpoint_id, deliverer, format_time(now))

        def work(db: sqlite3.Connection) -> WebhookEndpoint | None:
            taken = db.execute(
                "UPDATE webhooks SET claimed_by = ?, claimed_until = ?"
                " WHERE endpoint_id = ? AND state = 'ENABLED'"
                " AND (claimed_by IS NULL OR claimed_by = ? OR claimed_until <= ?)",
                args,
            ).rowcount
            return _one(db, endpoint_id) if taken == 1 else None

        return await self._write(work)

    async def release_webhook(self, endpoint_id: str, deliverer: str) -> None:
        """Let go of the claim (if it is still ``deliverer``'s)."""
        await self._write(
            lambda db: db.execute(
                "UPDATE webhooks SET claimed_by = NULL, claimed_until = NULL"
                " WHERE endpoint_id = ? AND claimed_by = ?",
                (endpoint_id, deliverer),
            ),
            pg_mode="one",
        )

    async def webhook_passed(
        self, endpoint_id: str, deliverer: str, *, cursor: int, to: int
    ) -> bool:
        """Move the cursor from ``cursor`` to ``to`` over events none of its types (nothing to
        send); False when the claim or the cursor moved meanwhile."""
        return await self._write(
            lambda db: (
                db.execute(
                    "UPDATE webhooks SET cursor_position = ?"
                    " WHERE endpoint_id = ? AND claimed_by = ? AND cursor_position = ?"
                    " AND head_position IS NULL AND ? > cursor_position",
                    (to, endpoint_id, deliverer, cursor, to),
                ).rowcount
                == 1
            ),
            pg_mode="one",
        )

    async def webhook_delivered(
        self,
        endpoint_id: str,
        deliverer: str,
        *,
        cursor: int,
        position: int,
        status: int,
        now: datetime,
    ) -> bool:
        """The receiver answered ``status`` (2xx) for the event at ``position``: the cursor
        moves past it, only if the claim is still ``deliverer``'s and the cursor still at
        ``cursor``; False otherwise (nothing written)."""
        at = format_time(now)
        return await self._write(
            lambda db: (
                db.execute(
                    "UPDATE webhooks SET cursor_position = ?, head_position = NULL, failures = 0,"
                    " next_try_at = NULL, last_status = ?, last_error = NULL, last_try_at = ?,"
                    " last_success_at = ?, delivered = delivered + 1"
                    " WHERE endpoint_id = ? AND claimed_by = ? AND cursor_position = ?"
                    " AND state = 'ENABLED'",
                    (position, status, at, at, endpoint_id, deliverer, cursor),
                ).rowcount
                == 1
            ),
            pg_mode="one",
        )

    async def webhook_failed(
        self,
        endpoint_id: str,
        deliverer: str,
        *,
        cursor: int,
        position: int,
        failures: int,
        status: int | None,
        error: str,
        now: datetime,
        next_try_at: datetime | None,
    ) -> bool:
        """A failed try of the event at ``position``, its ``failures``-th: the next try at
        ``next_try_at``, or (None) the endpoint turned off, which writes its
        ``webhook.disabled`` event in the same statement; the claim is let go of. False when
        the claim or the cursor moved meanwhile (nothing written)."""
        at = format_time(now)
        error = error[:500]
        if next_try_at is None:
            reason = (
                f"{failures} tries of event {position} failed over its whole retry schedule;"
                f" the last: {error}"
            )
            sql = (
                "UPDATE webhooks SET head_position = ?, failures = ?, next_try_at = NULL,"
                " last_status = ?, last_error = ?, last_try_at = ?, state = 'DISABLED',"
                " disabled_at = ?, disabled_reason = ?, claimed_by = NULL, claimed_until = NULL"
                " WHERE endpoint_id = ? AND claimed_by = ? AND cursor_position = ?"
                " AND state = 'ENABLED'"
            )
            args: tuple[Any, ...] = (
                position,
                failures,
                status,
                error,
                at,
                at,
                reason,
                endpoint_id,
                deliverer,
                cursor,
            )
        else:
            sql = (
                "UPDATE webhooks SET head_position = ?, failures = ?, next_try_at = ?,"
                " last_status = ?, last_error = ?, last_try_at = ?, claimed_by = NULL,"
                " claimed_until = NULL"
                " WHERE endpoint_id = ? AND claimed_by = ? AND cursor_position = ?"
                " AND state = 'ENABLED'"
            )
            args = (
                position,
                failures,
                format_time(next_try_at),
                status,
                error,
                at,
                endpoint_id,
                deliverer,
                cursor,
            )
        return await self._write(
            lambda db: db.execute(sql, args).rowcount == 1,
            pg_mode="one",
        )


__all__ = [
    "DISABLED",
    "ENABLED",
    "MAX_ENDPOINTS",
    "WebhookEndpoint",
    "WebhookStore",
    "endpoint_from_row",
    "type_filter",
]
