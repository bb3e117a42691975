"""Replies and opt-outs in the ledger (``schema/migrations/0015_replies.sql``).

``record_replies`` keeps the incoming rows a read of a phone saw (``PhoneRead.incoming``): a
row from a number the ledger has texted through that phone, once (by the phone, its ``_id``
and its ``date``), linked to the action it answers (``core.replies.link_reply``), and, when
its whole text is an opt-out or opt-in keyword, the change of the number's opt-out it asks
for. The tables' triggers write ``reply.received`` and ``recipient.opted_out`` /
``recipient.opted_in`` in the same statement (DESIGN.md invariant 10).

A reply's keyword changes a number's opt-out only when it is newer than the change in force
(a STOP read late, after a person's ``optouts remove`` or a later START, changes nothing),
and only when it changes something (a YES from a number not opted out writes nothing but
the reply). The gate reads the change in force in the transaction that writes each receipt
(``opted_out_refusal``, from ``ledger.gate``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from starebrain_actions._logging import get_logger
from starebrain_actions.core.convert import format_time, parse_time
from starebrain_actions.core.exceptions import CorruptRecord, InvalidInput
from starebrain_actions.core.model import canonical_recipient, require_aware, storable
from starebrain_actions.core.ports import IncomingMessage
from starebrain_actions.core.replies import (
    DEFAULT_KEYWORDS,
    OptOut,
    OptOutChange,
    Reply,
    ReplyKeywords,
    SentBefore,
    link_reply,
)
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.connection import LedgerConnection
from starebrain_actions.ledger.events import action_filter
from starebrain_actions.ledger.read import row_dict

_log = get_logger("starebrain.ledger")

#: An action's recipient in SQL, per dialect (the actions table named ``actions``).
_RECIPIENT: Final = _pg.json_field("actions.intent_json", "recipient")
#: The largest page of replies or opt-outs one read returns.
PAGE_LIMIT: Final = 1000

_REPLY_COLUMNS: Final = (
    "reply_id, device, provider_object_id, row_date_ms, number, body, received_at,"
    " recorded_at, action_id, keyword"
)
_CHANGE_COLUMNS: Final = "change_id, number, change, at, actor, reason, reply_id"


def reply_from_row(row: Mapping[str, Any]) -> Reply:
    return Reply(
        reply_id=int(row["reply_id"]),
        device=str(row["device"]),
        provider_object_id=int(row["provider_object_id"]),
        row_date_ms=int(row["row_date_ms"]),
        number=str(row["number"]),
        body=str(row["body"]),
        received_at=parse_time(str(row["received_at"])),
        recorded_at=parse_time(str(row["recorded_at"])),
        action_id=row["action_id"],
        keyword=row["keyword"],
    )


def change_from_row(row: Mapping[str, Any]) -> OptOut:
    return OptOut(
        change_id=int(row["change_id"]),
        number=str(row["number"]),
        change=str(row["change"]),
        at=parse_time(str(row["at"])),
        actor=str(row["actor"]),
        reason=str(row["reason"]),
        reply_id=int(row["reply_id"]) if row["reply_id"] is not None else None,
    )


def latest_change(db: sqlite3.Connection, number: str) -> OptOut | None:
    """The change of ``number``'s opt-out in force (its latest), or None: never changed."""
    row = db.execute(
        f"SELECT {_CHANGE_COLUMNS} FROM opt_out_changes WHERE number = ?"
        " ORDER BY change_id DESC LIMIT 1",
        (number,),
    ).fetchone()
    return change_from_row(row_dict(row)) if row is not None else None


def _insert_change(
    db: sqlite3.Connection,
    number: str,
    change: OptOutChange,
    when: datetime,
    *,
    actor: str,
    reason: str,
    reply_id: int | None,
) -> OptOut:
    db.execute(
        "INSERT INTO opt_out_changes (number, change, at, actor, reason, reply_id)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (number, change.value, format_time(when), actor, reason, reply_id),
    )
    made = latest_change(db, number)  # this transaction's own row (a write lock is held)
    if made is None:
        raise CorruptRecord(f"internal: the opt-out change of {number} was not written")
    return made


def _sent_to(db: sqlite3.Connection, device: str, number: str) -> list[tuple[SentBefore, bool]]:
    """Every attempt of an action to ``number`` on ``device``, as :func:`link_reply` weighs
    it, with whether it may have sent (not FAILED)."""
    recipient = _RECIPIENT[_pg.dialect(db)]
    rows = db.execute(
        "SELECT attempts.action_id, attempts.attempt, attempts.delivery,"
        " attempts.provider_row_date_ms, attempts.device_clock_ms, attempts.dispatched_at,"
        " actions.created_at"
        " FROM attempts JOIN actions ON actions.action_id = attempts.action_id"
        f" WHERE attempts.device = ? AND {recipient} = ?",
        (device, number),
    ).fetchall()
    found = []
    for raw in rows:
        row = row_dict(raw)
        sent_ms = row["provider_row_date_ms"] or row["device_clock_ms"]
        if sent_ms is None:
            sent_ms = int(parse_time(str(row["dispatched_at"])).timestamp() * 1000)
        found.append(
            (
                SentBefore(
                    action_id=str(row["action_id"]),
                    sent_ms=int(sent_ms),
                    created_at=parse_time(str(row["created_at"])),
                    attempt=int(row["attempt"]),
                ),
                row["delivery"] != "FAILED",
            )
        )
    return found


def _known_keys(
    db: sqlite3.Connection, device: str, incoming: Sequence[IncomingMessage]
) -> set[tuple[int, int]]:
    """The ``(_id, date)`` of the rows of ``incoming`` already recorded for ``device``."""
    ids = sorted({message.provider_object_id for message in incoming})
    marks = ", ".join("?" for _ in ids)
    rows = db.execute(
        "SELECT provider_object_id, row_date_ms FROM replies"
        f" WHERE device = ? AND provider_object_id IN ({marks})",
        (device, *ids),
    ).fetchall()
    return {(int(row[0]), int(row[1])) for row in rows}


def record_incoming(
    db: sqlite3.Connection,
    device: str,
    incoming: Sequence[IncomingMessage],
    keywords: ReplyKeywords,
    when: datetime,
) -> list[Reply]:
    """``ReplyWrites.record_replies``'s work, in its transaction: the replies recorded now
    (the rows already recorded, and those from numbers never texted through ``device``, are
    left out)."""
    known = _known_keys(db, device, incoming)
    recorded = []
    for message in sorted(incoming, key=lambda m: (m.date_ms, m.provider_object_id)):
        if message.number is None or (message.provider_object_id, message.date_ms) in known:
            continue
        sent = _sent_to(db, device, message.number)
        if not sent:
            continue  # a number the ledger never texted through this phone: not kept
        action_id = link_reply(message.date_ms, [item for item, may_have in sent if may_have])
        keyword = keywords.classify(message.body)
        received = datetime.fromtimestamp(message.date_ms / 1000, tz=UTC)
        written = db.execute(
            "INSERT INTO replies (device, provider_object_id, row_date_ms, number, body,"
            " received_at, recorded_at, action_id, keyword)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (device, provider_object_id, row_date_ms) DO NOTHING",
            (
                device,
                message.provider_object_id,
                message.date_ms,
                message.number,
                storable(message.body or ""),
                format_time(received),
                format_time(when),
                action_id,
                keyword.value if keyword is not None else None,
            ),
        )
        if written.rowcount != 1:
            continue  # recorded meanwhile by another reader
        row = db.execute(
            f"SELECT {_REPLY_COLUMNS} FROM replies"
            " WHERE device = ? AND provider_object_id = ? AND row_date_ms = ?",
            (device, message.provider_object_id, message.date_ms),
        ).fetchone()
        reply = reply_from_row(row_dict(row))
        known.add((message.provider_object_id, message.date_ms))
        recorded.append(reply)
        if keyword is not None:
            _keyword_change(db, reply, keyword)
    return recorded


def _keyword_change(db: sqlite3.Connection, reply: Reply, keyword: OptOutChange) -> None:
    """The change a keyword reply asks for, when it changes something and is newer than the
    change in force."""
    current = latest_change(db, reply.number)
    opted_out = current is not None and current.opted_out
    if (keyword is OptOutChange.OPT_OUT) == opted_out:
        return  # already so
    if current is not None and reply.received_at < current.at:
        return  # older than the change in force: read late, it changes nothing
    _insert_change(
        db,
        reply.number,
        keyword,
        reply.received_at,
        actor="reply",
        reason=(
            "the number replied with an opt-out keyword"
            if keyword is OptOutChange.OPT_OUT
            else "the number replied with an opt-in keyword"
        ),
        reply_id=reply.reply_id,
    )


def read_replies(
    db: sqlite3.Connection,
    *,
    action_id: str | None,
    owner: str | None,
    after: int,
    limit: int,
) -> list[Reply]:
    where = ["reply_id > ?"]
    args: list[Any] = [after]
    owned, more = action_filter(action_id, owner)
    where += owned
    args += more
    rows = db.execute(
        f"SELECT {_REPLY_COLUMNS} FROM replies WHERE {' AND '.join(where)}"
        " ORDER BY reply_id LIMIT ?",
        (*args, limit),
    ).fetchall()
    return [reply_from_row(row_dict(row)) for row in rows]


def keywords_of(policy: Any) -> ReplyKeywords:
    """The keywords of a policy (``Policy.reply_keywords``), CTIA's when there is none."""
    found = getattr(policy, "reply_keywords", None)
    return found if isinstance(found, ReplyKeywords) else DEFAULT_KEYWORDS


class ReplyWrites(LedgerConnection):
    """The ledger's replies and opt-outs (a part of ``Ledger``)."""

    async def record_replies(
        self,
        device: str,
        incoming: Sequence[IncomingMessage],
        *,
        keywords: ReplyKeywords | None = None,
        now: datetime | None = None,
    ) -> list[Reply]:
        """Keep the incoming rows a read of ``device`` saw (see the module docstring): the
        replies recorded now. ``keywords``: None, those of the ledger's gate
        (``Ledger.gate``), else CTIA's. One write transaction, only when a row is new."""
        if not incoming:
            return []
        when = require_aware("now", now) if now is not None else self.now()
        chosen = keywords if keywords is not None else keywords_of(self.gate)
        rows = [message for message in incoming if message.number is not None]
        if not rows:
            return []
        known = await self._run(lambda db: _known_keys(db, device, rows))
        new = [m for m in rows if (m.provider_object_id, m.date_ms) not in known]
        if not new:
            return []
        recorded = await self._write(lambda db: record_incoming(db, device, new, chosen, when))
        for reply in recorded:
            _log.info(
                "reply_recorded",
                device=device,
                reply_id=reply.reply_id,
                action_id=reply.action_id,
                keyword=reply.keyword,
            )
        return recorded

    async def replies(
        self,
        action_id: str | None = None,
        *,
        owner: str | None = None,
        after: int = 0,
        limit: int = 500,
    ) -> list[Reply]:
        """The replies recorded (oldest first), of one action, of one owner's actions
        (``owner``: a scoped client sees only replies linked to its own actions), after
        ``reply_id`` ``after``, at most ``limit`` (1..``PAGE_LIMIT``).

        Raises:
            InvalidInput: a limit out of range or a negative cursor.
        """
        if after < 0:
            raise InvalidInput(f"a reply id is 0 or more, got {after}")
        if not 1 <= limit <= PAGE_LIMIT:
            raise InvalidInput(f"limit must be 1..{PAGE_LIMIT}, got {limit}")
        return await self._run(
            lambda db: read_replies(db, action_id=action_id, owner=owner, after=after, limit=limit)
        )

    async def opt_outs(self) -> list[OptOut]:
        """The numbers opted out now: each one's change in force, oldest first."""

        def work(db: sqlite3.Connection) -> list[OptOut]:
            rows = db.execute(
                f"SELECT {_CHANGE_COLUMNS} FROM opt_out_changes AS c"
                " WHERE change = 'opt_out' AND change_id = ("
                "SELECT max(change_id) FROM opt_out_changes AS l WHERE l.number = c.number)"
                " ORDER BY change_id"
            ).fetchall()
            return [change_from_row(row_dict(row)) for row in rows]

        return await self._run(work)

    async def opt_out_changes(self, number: str | None = None) -> list[OptOut]:
        """Every change of the opt-outs (of ``number``, canonical form), oldest first."""

        def work(db: sqlite3.Connection) -> list[OptOut]:
            where, args = ("WHERE number = ?", (number,)) if number is not None else ("", ())
            rows = db.execute(
                f"SELECT {_CHANGE_COLUMNS} FROM opt_out_changes {where} ORDER BY change_id",
                args,
            ).fetchall()
            return [change_from_row(row_dict(row)) for row in rows]

        return await self._run(work)

    async def opt_out_in_force(self, number: str) -> OptOut | None:
        """The change of ``number``'s opt-out in force (None: never changed)."""
        return await self._run(lambda db: latest_change(db, number))

    async def change_opt_out(
        self,
        number: str,
        change: OptOutChange | str,
        *,
        actor: str,
        reason: str,
        region: str | None = None,
        now: datetime | None = None,
    ) -> tuple[OptOut, bool]:
        """A person's change of ``number``'s opt-out (read as a recipient is, in ``region``),
        kept with who and why: the change in force afterwards, and whether this call changed
        anything (opting out a number already opted out changes nothing).

        Raises:
            InvalidInput: not a phone number or short code, an empty reason or actor.
        """
        kind = OptOutChange(change)
        canonical = canonical_recipient(number, region)
        if not reason.strip():
            raise InvalidInput("a reason is required (--reason TEXT): it is kept with the change")
        if not actor.strip() or actor == "reply":
            raise InvalidInput(f"actor must name a person or client, got {actor!r}")
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> tuple[OptOut, bool]:
            current = latest_change(db, canonical)
            if (current is not None and current.opted_out) == (kind is OptOutChange.OPT_OUT):
                if current is not None:
                    return current, False
                if kind is OptOutChange.OPT_IN:
                    raise InvalidInput(f"{canonical} is not opted out: there is nothing to remove")
            made = _insert_change(
                db, canonical, kind, when, actor=actor, reason=storable(reason), reply_id=None
            )
            return made, True

        result = await self._write(work)
        _log.info("opt_out_changed", change=kind.value, actor=actor, changed=result[1])
        return result


__all__ = [
    "ReplyWrites",
    "change_from_row",
    "keywords_of",
    "latest_change",
    "read_replies",
    "record_incoming",
    "reply_from_row",
]
