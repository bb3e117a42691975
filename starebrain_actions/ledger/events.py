"""The ledger's events: what changed, in the order it was committed (DESIGN.md invariant 10).

The ledger's own triggers write them, in the statement that writes the change they report
(``schema/migrations/0013_events.sql``): every history row writes its event, a new action
writes ``action.created``, and a reply or an opt-out writes its own. So no change is ever
without its event and no event without its change, on every path and on both backends.

A reader asks for the events after a ``position``. On SQLite positions are commit order;
on PostgreSQL an event is numbered once its transaction has committed
(``starebrain_place_events``, which every read calls first), so a cursor never passes an
event it has not seen. Events are never changed or deleted: they are kept as long as the
history they report, which the ledger keeps for ever. ``core/events.py`` holds the types
and ``LedgerEvent``; ``render/values.event_data`` shows one, redacted.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any, Final

from starebrain_actions.core.convert import parse_time
from starebrain_actions.core.events import EVENT_TYPES, LedgerEvent, check_types
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.ledger.connection import LedgerConnection
from starebrain_actions.ledger.read import row_dict

#: The largest page one read returns.
PAGE_LIMIT: Final = 1000


def event_from_row(row: Mapping[str, Any]) -> LedgerEvent:
    """An event from its row."""
    data = json.loads(row["data_json"])
    return LedgerEvent(
        position=int(row["position"]),
        event_id=str(row["event_id"]),
        type=str(row["type"]),
        action_id=row["action_id"],
        dispatch_id=row["dispatch_id"],
        device=row["device"],
        at=parse_time(row["at"]),
        history_sequence=(
            int(row["history_sequence"]) if row["history_sequence"] is not None else None
        ),
        data=data if isinstance(data, dict) else {"value": data},
    )


_COLUMNS: Final = (
    "position, event_id, type, action_id, dispatch_id, device, history_sequence, at, data_json"
)


def type_filter(types: Collection[str]) -> tuple[str, list[Any]]:
    """``(clause, args)`` keeping events of ``types`` (exact, or ``family.*``; empty: all):
    every value a parameter, never text of the query."""
    if not types:
        return "1 = 1", []
    exact = [kind for kind in types if not kind.endswith(".*")]
    families = [kind[:-1] for kind in types if kind.endswith(".*")]
    parts: list[str] = []
    args: list[Any] = []
    if exact:
        parts.append(f"type IN ({', '.join('?' for _ in exact)})")
        args += exact
    for family in families:
        parts.append("substr(type, 1, ?) = ?")
        args += [len(family), family]
    return "(" + " OR ".join(parts) + ")", args


def action_filter(action_id: str | None, owner: str | None) -> tuple[list[str], list[Any]]:
    """``(clauses, args)`` keeping rows of one action and of one owner's actions (a client of
    ``--clients``), for a table with an ``action_id`` column."""
    clauses: list[str] = []
    args: list[Any] = []
    if action_id is not None:
        clauses.append("action_id = ?")
        args.append(action_id)
    if owner is not None:
        clauses.append("action_id IN (SELECT action_id FROM actions WHERE owner = ?)")
        args.append(owner)
    return clauses, args


def read_events(
    db: sqlite3.Connection,
    *,
    after: int,
    limit: int,
    types: Collection[str] = (),
    action_id: str | None = None,
    owner: str | None = None,
) -> list[LedgerEvent]:
    """Events after ``after``, in order, at most ``limit``, of these ``types`` (all when
    empty; ``family.*`` for a family), of one action, of one owner's actions."""
    where = ["position > ?"]
    args: list[Any] = [after]
    clause, more = type_filter(types)
    where.append(clause)
    args += more
    owned, more = action_filter(action_id, owner)
    where += owned
    args += more
    rows = db.execute(
        f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY position LIMIT ?",
        (*args, limit),
    ).fetchall()
    return [event_from_row(row_dict(row)) for row in rows]


def last_position(db: sqlite3.Connection) -> int:
    """The position of the newest event (0: none)."""
    row = db.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()
    return int(row[0])


class EventReads(LedgerConnection):
    """The ledger's reads of its events (a part of ``Ledger``)."""

    async def _place_events(self) -> None:
        """Number the committed events not numbered yet (PostgreSQL only: on SQLite an
        event's position is given as it is written). A PostgreSQL ledger opened read-only,
        or a read inside a snapshot, numbers nothing: it sees the events others numbered."""
        if self._pg is not None and self._pg.writable:
            await self._write(lambda db: db.execute("SELECT starebrain_place_events()"))

    async def events(
        self,
        *,
        after: int = 0,
        limit: int = 500,
        types: Collection[str] = (),
        action_id: str | None = None,
        owner: str | None = None,
    ) -> list[LedgerEvent]:
        """The events after position ``after``, oldest first, at most ``limit``
        (1..``PAGE_LIMIT``), filtered by ``types`` (``family.*`` allowed), ``action_id``,
        and ``owner`` (only that client's actions).

        Raises:
            InvalidInput: a negative cursor, a limit out of range, an unknown type.
        """
        if after < 0:
            raise InvalidInput(f"a position is 0 or more, got {after}")
        if not 1 <= limit <= PAGE_LIMIT:
            raise InvalidInput(f"limit must be 1..{PAGE_LIMIT}, got {limit}")
        wanted = check_types(types)
        await self._place_events()
        return await self._run(
            lambda db: read_events(
                db, after=after, limit=limit, types=wanted, action_id=action_id, owner=owner
            )
        )

    async def last_event_position(self) -> int:
        """The position of the newest event (0: the ledger has none)."""
        await self._place_events()
        return await self._run(last_position)

    async def follow_events(
        self,
        *,
        after: int = 0,
        types: Collection[str] = (),
        action_id: str | None = None,
        owner: str | None = None,
        poll_s: float = 0.5,
        follow: bool = True,
    ) -> AsyncIterator[LedgerEvent]:
        """Every event after ``after``, in order, as an async iterator; with ``follow``
        (the default) it never ends: it waits ``poll_s`` between reads that find nothing
        new. Resume from the last ``position`` seen."""
        if poll_s <= 0:
            raise InvalidInput(f"poll_s must be positive, got {poll_s}")
        cursor = after
        while True:
            page = await self.events(
                after=cursor,
                limit=PAGE_LIMIT,
                types=types,
                action_id=action_id,
                owner=owner,
            )
            for event in page:
                cursor = event.position
                yield event
            if len(page) == PAGE_LIMIT:
                continue
            if not follow:
                return
            await asyncio.sleep(poll_s)


__all__ = [
    "EVENT_TYPES",
    "PAGE_LIMIT",
    "EventReads",
    "LedgerEvent",
    "action_filter",
    "check_types",
    "read_events",
    "type_filter",
]
