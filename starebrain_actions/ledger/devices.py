"""What the ledger knows of each phone: its attempts as a reconcile pass and a sender read them
(the unresolved ones, who holds its lease, the rows already claimed, the floor of its
``_id``s, its send rate and how soon sends were confirmed), and the phones themselves (keys,
identities and the addresses that reached them, ``phones``).

Each query reads an index range of one device's attempts, whatever the size of the ledger;
the comments say which index, and why some columns carry SQLite's unary ``+`` (a planner
hint ``pg.translate`` drops on PostgreSQL).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from starebrain_actions._logging import get_logger
from starebrain_actions.core.convert import (
    ATTEMPT_COLUMNS,
    format_time,
    parse_time,
    record_from_row,
)
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import (
    LEASE_RELEASING_REVIEWS,
    Action,
    ActionRecord,
    ProviderKind,
    require_aware,
)
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger import phones as _phones
from starebrain_actions.ledger.connection import LedgerConnection
from starebrain_actions.ledger.phones import (
    FrameworkAttempts,
    FrameworkCodes,
    PhoneBinding,
    PhoneInfo,
)
from starebrain_actions.ledger.queries import load_actions
from starebrain_actions.ledger.read import row_dict

_log = get_logger("starebrain.ledger")

#: The reviews that release a device's lease, as SQL (``LEASE_RELEASING_REVIEWS``): an
#: attempt in one of them no longer holds its phone.
LEASE_RELEASING_SQL: Final = ", ".join(
    f"'{reason.value}'" for reason in sorted(LEASE_RELEASING_REVIEWS)
)

#: Attempts per page of ``iter_in_flight``.
IN_FLIGHT_PAGE: Final = 500


class DeviceReads(LedgerConnection):
    """The ``Ledger``'s reads by phone, and its register of phones (see the module
    docstring)."""

    # ------------------------------------------------------------------ attempts by phone

    async def in_flight(self, device: str | None = None) -> list[ActionRecord]:
        """Attempts whose delivery is unresolved, on one device or all; oldest first."""
        return await self._pending(device, holding=False)

    async def holders(self, device: str | None = None) -> list[ActionRecord]:
        """The unresolved attempts that hold their phone's lease (delivery PENDING, not in a
        review that releases it), on one device or all; oldest first."""
        return await self._pending(device, holding=True)

    async def _pending(self, device: str | None, *, holding: bool) -> list[ActionRecord]:
        def work(db: sqlite3.Connection) -> list[ActionRecord]:
            sql = f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE delivery = 'PENDING'"
            if holding:
                sql += f" AND coalesce(review_reason, '') NOT IN ({LEASE_RELEASING_SQL})"
            params: tuple[str, ...] = ()
            if device is not None:
                sql += " AND device = ?"
                params = (device,)
            # +: sorted after the lookup (attempts_by_device_state), not by walking every
            # attempt of the device in dispatch order
            sql += " ORDER BY +dispatched_at, dispatch_id"
            return [record_from_row(row_dict(row)) for row in db.execute(sql, params)]

        return await self._run(work)

    async def iter_in_flight(
        self, device: str, *, page_size: int = IN_FLIGHT_PAGE
    ) -> AsyncIterator[list[ActionRecord]]:
        """The unresolved attempts of ``device`` (as ``in_flight(device)``: oldest first), a
        page of at most ``page_size`` at a time: what is held stays bounded however large a
        phone's backlog. Pages are keyset ranges (after the last page's ``(dispatched_at,
        dispatch_id)``), so attempts settled or started meanwhile shift nothing: each one
        still unresolved when its page is read comes once.

        Raises:
            InvalidInput: ``page_size`` below 1.
        """
        if page_size < 1:
            raise InvalidInput(f"page_size must be >= 1; got {page_size}")
        after: tuple[str, str] | None = None
        while True:
            page = await self._run(
                functools.partial(_in_flight_page, device=device, after=after, size=page_size)
            )
            if page:
                yield page
            if len(page) < page_size:
                return
            last = page[-1]
            after = (format_time(last.dispatched_at), last.dispatch_id)

    async def count_in_flight(self, device: str) -> int:
        """How many attempts of ``device`` are unresolved (``len(in_flight(device))``, counted
        in the index ``attempts_by_device_state``, nothing loaded)."""

        def work(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT count(*) FROM attempts WHERE device = ? AND delivery = 'PENDING'",
                (device,),
            ).fetchone()
            return int(row[0])

        return await self._run(work)

    async def in_flight_counts(self) -> dict[str, int]:
        """Unresolved attempts per device, for every device that has one (counted, nothing
        loaded)."""

        def work(db: sqlite3.Connection) -> dict[str, int]:
            rows = db.execute(
                "SELECT device, count(*) FROM attempts WHERE delivery = 'PENDING'"
                " GROUP BY device ORDER BY device"
            )
            return {str(row[0]): int(row[1]) for row in rows}

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

    async def devices(self) -> list[str]:
        """Every device any attempt was made on, sorted (an index scan)."""

        def work(db: sqlite3.Connection) -> list[str]:
            rows = db.execute("SELECT DISTINCT device FROM attempts ORDER BY device")
            return [str(row[0]) for row in rows]

        return await self._run(work)

    async def recent_attempts(self, device: str, since: datetime) -> list[ActionRecord]:
        """Attempts on ``device`` still unresolved, unverified, or confirmed since ``since``:
        what a reconcile pass of that device looks at (oldest first)."""
        when = format_time(require_aware("since", since))
        return await self._run(lambda db: _recent_attempts(db, device, when))

    async def watched_attempts(
        self, device: str, since: datetime
    ) -> tuple[list[ActionRecord], dict[str, Action]]:
        """:meth:`recent_attempts` and their actions (``actions``), in one call: a reconcile
        pass's first look at the ledger is one hop to its connection."""
        when = format_time(require_aware("since", since))

        def work(db: sqlite3.Connection) -> tuple[list[ActionRecord], dict[str, Action]]:
            records = _recent_attempts(db, device, when)
            return records, load_actions(self, db, (r.action_id for r in records))

        return await self._run(work)

    async def pass_claims(
        self,
        device: str,
        sms_above: int,
        sms_up_to: int | None,
        mms_above: int | None,
        ruled_since: datetime | None,
    ) -> tuple[set[tuple[int, int | None]], set[tuple[int, int | None]], list[ActionRecord]]:
        """What a reconcile pass reads after the phone, in one call: the rows above
        ``sms_above`` and at most ``sms_up_to`` (``claimed_provider_ids``; none when None:
        the read saw no SMS row) and above ``mms_above`` (``claimed_mms_ids``; none when
        None) already claimed, and the attempts ruled not sent since ``ruled_since``
        (``ruled_not_sent``; none when None)."""
        ruled_when = (
            format_time(require_aware("ruled_since", ruled_since))
            if ruled_since is not None
            else None
        )

        def work(
            db: sqlite3.Connection,
        ) -> tuple[set[tuple[int, int | None]], set[tuple[int, int | None]], list[ActionRecord]]:
            claimed = (
                _claimed_ids(db, device, ProviderKind.SMS, sms_above, sms_up_to)
                if sms_up_to is not None
                else set()
            )
            claimed_mms = (
                _claimed_ids(db, device, ProviderKind.MMS, mms_above)
                if mms_above is not None
                else set()
            )
            ruled = (
                _ruled_not_sent(db, device, ruled_when, RULED_LIMIT)
                if ruled_when is not None
                else []
            )
            return claimed, claimed_mms, ruled

        return await self._run(work)

    async def ruled_not_sent(
        self, device: str, since: datetime, limit: int = 50
    ) -> list[ActionRecord]:
        """Attempts on ``device`` dispatched since ``since`` that a person ruled not sent
        (FAILED by an operator's ruling, no row of theirs known), the ``limit`` latest, oldest
        first: each may have left one row out of the shell's sight (the app's FAILED row),
        which attribution counts them for (``attribution._earlier_unseen``)."""
        when = format_time(require_aware("since", since))
        return await self._run(lambda db: _ruled_not_sent(db, device, when, limit))

    async def latest_attempts(self, device: str, limit: int) -> list[ActionRecord]:
        """The ``limit`` attempts started last on ``device``, newest first (an index range of
        ``attempts_by_device_time``)."""

        def work(db: sqlite3.Connection) -> list[ActionRecord]:
            rows = db.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE device = ?"
                " ORDER BY dispatched_at DESC, dispatch_id DESC LIMIT ?",
                (device, limit),
            ).fetchall()
            return [record_from_row(row_dict(row)) for row in rows]

        return await self._run(work)

    async def framework_attempts(self, device: str, limit: int) -> FrameworkAttempts:
        """The ``limit`` framework attempts on ``device`` started last that came to an end
        in a way that can prove or doubt the framework path (confirmed, in review, or ruled
        by a person), newest first, with when each came to it and when each last went to
        review (the history): what ``phone.send_path`` judges the path by. Sends through the
        app never push them out (the index ``attempts_framework``, schema version 16, holds
        only framework attempts)."""

        def latest(*events: str) -> str:
            named = ", ".join(f"'{event}'" for event in events)
            return (
                "(SELECT h.at FROM history AS h WHERE h.dispatch_id = attempts.dispatch_id"
                f" AND h.event IN ({named}) ORDER BY h.sequence DESC LIMIT 1)"
            )

        decided = latest("confirm", "flag_review", "resolve_sent", "resolve_not_sent")
        flagged = latest("flag_review")

        def work(db: sqlite3.Connection) -> FrameworkAttempts:
            # spelled as the index's WHERE is, so that the planner uses it
            send_path = _pg.json_field("evidence_json", "send_path")[_pg.dialect(db)]
            rows = db.execute(
                f"SELECT {ATTEMPT_COLUMNS}, {decided} AS decided_at, {flagged} AS flagged_at"
                f" FROM attempts WHERE device = ? AND {send_path} = 'framework'"
                " AND (delivery = 'CONFIRMED' OR review_reason IS NOT NULL"
                " OR resolved_by IS NOT NULL)"
                " ORDER BY dispatched_at DESC, dispatch_id DESC LIMIT ?",
                (device, limit),
            )
            records: list[ActionRecord] = []
            decided_at: dict[str, datetime] = {}
            flagged_at: dict[str, datetime] = {}
            for row in rows.fetchall():
                data = row_dict(row)
                times = data.pop("decided_at"), data.pop("flagged_at")
                record = record_from_row(data)
                records.append(record)
                for kept, at in zip((decided_at, flagged_at), times, strict=True):
                    if at is not None:
                        kept[record.dispatch_id] = parse_time(at)
            return FrameworkAttempts(
                records=tuple(records), decided_at=decided_at, flagged_at=flagged_at
            )

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

    # ------------------------------------------------------------------ rows on the phone

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

    async def claimed_provider_ids(
        self, device: str, above_id: int, up_to: int | None = None
    ) -> set[tuple[int, int | None]]:
        """``content://sms`` rows above ``_id`` ``above_id`` (and at most ``up_to``: the
        highest row a read saw, when only its rows matter) on ``device`` already tied to an
        attempt (as its artifact or as a duplicate), as ``(_id, date)``: an ``_id`` is reused
        once the latest rows are deleted, so the date says which message (None: not known,
        the claim holds every row of that ``_id``)."""
        return await self._claimed_ids(device, ProviderKind.SMS, above_id, up_to)

    async def claimed_mms_ids(self, device: str, above_id: int) -> set[tuple[int, int | None]]:
        """``content://mms`` rows above ``_id`` ``above_id`` on ``device`` already tied to an
        attempt (as its artifact or as a duplicate), as ``(_id, date)``."""
        return await self._claimed_ids(device, ProviderKind.MMS, above_id)

    async def _claimed_ids(
        self, device: str, kind: ProviderKind, above_id: int, up_to: int | None = None
    ) -> set[tuple[int, int | None]]:
        return await self._run(lambda db: _claimed_ids(db, device, kind, above_id, up_to))

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
            lambda db: _phones.bind_phone(db, address, identity, serialno, when),
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
        return await self._run(lambda db: _phones.phone_identity(db, key))

    async def phone_address(self, key: str) -> str:
        """The address the phone ``key`` was reached at last (``key`` itself if none)."""
        return await self._run(lambda db: _phones.phone_address(db, key))

    async def phone_key_for(self, name: str) -> str:
        """The key of the phone ``name`` names: a key, or an address it was reached at
        (``name`` itself when the ledger knows neither)."""
        return await self._run(lambda db: _phones.phone_key_for(db, name))

    async def phones(self) -> list[PhoneInfo]:
        """Every phone the ledger knows, with its identity and addresses."""
        return await self._run(_phones.phones)

    async def ledger_id(self) -> str:
        """The ledger's own id (32 hex digits), created once with the ledger and never
        changed; ``starebrain migrate`` carries it. A send writes it on the phone beside the
        attempt's fence, so that another ledger driving the phone finds it there
        (``orchestration.phone_ledger``)."""
        known = self._ledger_id
        if known is None:
            known = await self._run(_phones.ledger_id)
            self._ledger_id = known
        return known

    # ------------------------------------------------------------------ builds

    async def framework_codes(self, build: str) -> FrameworkCodes | None:
        """The ``ISms`` codes kept for the build ``build`` (``ro.build.fingerprint``), or
        None when none were read on it yet."""
        found = await self._run(lambda db: _phones.framework_codes(db, build))
        return found[0] if found else None

    async def all_framework_codes(self) -> dict[str, FrameworkCodes]:
        """Every build's kept codes, by build."""
        found = await self._run(lambda db: _phones.framework_codes(db, None))
        return {codes.build: codes for codes in found}

    async def keep_framework_codes(self, codes: FrameworkCodes) -> None:
        """Keep what a reading of a build's framework jar found, in place of an earlier one
        (``phone.send_path``: read once per build, not before every send)."""
        await self._write(lambda db: _phones.keep_framework_codes(db, codes))


def _in_flight_page(
    db: sqlite3.Connection, device: str, after: tuple[str, str] | None, size: int
) -> list[ActionRecord]:
    """One page of ``DeviceReads.iter_in_flight``: the unresolved attempts of ``device`` after
    ``(dispatched_at, dispatch_id)`` ``after`` (stored form), oldest first."""
    # the lookup is the device's unresolved attempts in attempts_by_device_state, sorted
    # after it (+: not by walking every attempt of the device in dispatch order), as in
    # DeviceReads._pending; the keyset bound narrows that range to what is left
    sql = f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE device = ? AND delivery = 'PENDING'"
    params: tuple[Any, ...] = (device,)
    if after is not None:
        sql += " AND (+dispatched_at > ? OR (+dispatched_at = ? AND dispatch_id > ?))"
        params += (after[0], after[0], after[1])
    sql += " ORDER BY +dispatched_at, dispatch_id LIMIT ?"
    return [record_from_row(row_dict(row)) for row in db.execute(sql, (*params, size))]


def lease_holder(db: sqlite3.Connection, device: str) -> Any:
    """The unresolved attempt holding ``device``'s lease, as a row ``(dispatch_id,
    action_id, dispatched_at)``, or None when the phone is free (its attempts all resolved,
    or in a review that releases it)."""
    return db.execute(
        "SELECT dispatch_id, action_id, dispatched_at FROM attempts"
        " WHERE device = ? AND delivery = 'PENDING'"
        f" AND coalesce(review_reason, '') NOT IN ({LEASE_RELEASING_SQL})",
        (device,),
    ).fetchone()


def dispatches_since(db: sqlite3.Connection, device: str, since: str) -> int:
    """How many attempts were started on ``device`` at or after ``since`` (stored form): a
    send rate, also counted inside a receipt's transaction (``starebrain mcp``'s send cap)."""
    row = db.execute(
        "SELECT count(*) FROM attempts WHERE device = ? AND dispatched_at >= ?", (device, since)
    ).fetchone()
    return int(row[0])


#: The FAILED rows a device's failed attempts keep in their evidence, above ``:above``, spelled
#: as the index ``attempts_failed_rows`` is (SQLite: migration 0006; PostgreSQL: the jsonb
#: number compares as a number, and a value that is not one never passes ``>``).
_FAILED_ROWS: Final[Mapping[str, str]] = {
    "sqlite": "SELECT json_extract(evidence_json, '$.provider_object_id'),"
    " json_extract(evidence_json, '$.date_ms') FROM attempts"
    " WHERE device = :device AND delivery = 'FAILED'"
    " AND coalesce(json_extract(evidence_json, '$.provider_kind'), 'sms') = :kind"
    " AND json_extract(evidence_json, '$.provider_object_id') > :above"
    " AND json_extract(evidence_json, '$.provider_object_id') <= :up_to",
    "postgresql": "SELECT (evidence_json::jsonb ->> 'provider_object_id')::bigint,"
    " CASE WHEN jsonb_typeof(evidence_json::jsonb -> 'date_ms') = 'number'"
    " THEN (evidence_json::jsonb ->> 'date_ms')::bigint END FROM attempts"
    " WHERE device = :device AND delivery = 'FAILED'"
    " AND coalesce(evidence_json::jsonb ->> 'provider_kind', 'sms') = :kind"
    " AND jsonb_typeof(evidence_json::jsonb -> 'provider_object_id') = 'number'"
    " AND (evidence_json::jsonb -> 'provider_object_id') > to_jsonb(:above::bigint)"
    " AND (evidence_json::jsonb -> 'provider_object_id') <= to_jsonb(:up_to::bigint)",
}


#: How many attempts ruled not sent a reconcile pass looks at (``DeviceReads.ruled_not_sent``).
RULED_LIMIT: Final = 50


def _recent_attempts(db: sqlite3.Connection, device: str, when: str) -> list[ActionRecord]:
    """``DeviceReads.recent_attempts`` on the connection's thread."""
    # three disjoint index ranges (an OR over them would scan every attempt of the
    # device): unresolved and unverified (attempts_by_device_state), and accepted or
    # rejected since ``since`` (attempts_by_device_confirmed: the unary + keeps the
    # planner from scanning every settled attempt of the device in the other index)
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
    records = [record_from_row(row_dict(row)) for row in rows]
    # sorted here: an ORDER BY would lead the planner to walk every attempt of the
    # device in dispatch order instead
    return sorted(records, key=lambda record: (record.dispatched_at, record.dispatch_id))


def _ruled_not_sent(
    db: sqlite3.Connection, device: str, when: str, limit: int
) -> list[ActionRecord]:
    """``DeviceReads.ruled_not_sent`` on the connection's thread."""
    rows = db.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE device = :device"
        " AND delivery = 'FAILED' AND resolved_by IS NOT NULL"
        " AND provider_object_id IS NULL AND dispatched_at >= :since"
        " ORDER BY dispatched_at DESC LIMIT :limit",
        {"device": device, "since": when, "limit": limit},
    ).fetchall()
    records = [record_from_row(row_dict(row)) for row in rows]
    return sorted(records, key=lambda record: (record.dispatched_at, record.dispatch_id))


def _claimed_ids(
    db: sqlite3.Connection, device: str, kind: ProviderKind, above_id: int, up_to: int | None = None
) -> set[tuple[int, int | None]]:
    """``DeviceReads.claimed_provider_ids`` / ``claimed_mms_ids`` on the connection's thread
    (``up_to``: the highest ``_id`` wanted, None for no bound)."""
    # a FAILED attempt keeps the phone's FAILED row only in its evidence (delivery FAILED
    # names no artifact); that row is still its own, never another attempt's proof. Each
    # SELECT is an index range (the third: attempts_failed_rows, migration 0006, whose
    # expressions it must spell exactly as the index does)
    rows = db.execute(
        "SELECT provider_object_id, provider_row_date_ms FROM attempts"
        " WHERE device = :device AND provider_kind = :kind AND provider_object_id > :above"
        " AND provider_object_id <= :up_to"
        " UNION SELECT provider_object_id, provider_row_date_ms FROM duplicates"
        " WHERE device = :device AND provider_kind = :kind AND provider_object_id > :above"
        " AND provider_object_id <= :up_to"
        f" UNION {_FAILED_ROWS[_pg.dialect(db)]}",
        {
            "device": device,
            "kind": kind.value,
            "above": above_id,
            "up_to": _MAX_ROW_ID if up_to is None else up_to,
        },
    )
    return {
        (int(row[0]), row[1] if isinstance(row[1], int) else None)
        for row in rows
        if isinstance(row[0], int)
    }


#: No upper bound on a claimed row's ``_id`` (SQLite's and PostgreSQL's largest integer).
_MAX_ROW_ID: Final = 2**63 - 1
