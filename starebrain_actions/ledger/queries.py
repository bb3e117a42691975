"""Reading actions: one action's summary, attempts, history and duplicates; pages of summaries
filtered by status, phone or review (``Ledger.iter_summaries``), what a ``resume`` may send,
what waits for a person (review, approval), counts over the whole ledger, and the generations
of a derived id.

Every summary is derived by the one pure ``summarize`` (``read``) from rows read a page at a
time: three queries per page whatever it holds, memory flat however large the ledger.
``summary_page`` is also how ``starebrain migrate`` compares a copied ledger with its source.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core import derived_ids
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.convert import (
    ATTEMPT_COLUMNS,
    action_from_row,
    format_time,
    parse_time,
    record_from_row,
    stored_binding,
    stored_gate,
    stored_grant,
    stored_intent,
    stored_planned_device,
    stored_queue,
    structure,
)
from starebrain_actions.core.exceptions import CorruptRecord, InvalidInput
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    ActionSummary,
    DeliveryState,
    HistoryEntry,
    QuietSuccess,
    RetryPolicy,
    Status,
    check_action_id,
    require_aware,
)
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.connection import LedgerConnection
from starebrain_actions.ledger.phones import phone_key_for
from starebrain_actions.ledger.read import (
    load_action,
    load_attempt,
    load_attempts,
    read_duplicates,
    read_history,
    read_summary,
    row_dict,
    summarize,
)

#: Actions per page of ``Ledger.iter_summaries``.
SUMMARY_PAGE: Final = 1000

#: The first batch of derived id generations ``derived_generations`` looks up, and the
#: largest (each batch doubles): most intents have one generation, a daily reminder a few
#: hundred after a year.
_GENERATIONS_FIRST_BATCH: Final = 8
_GENERATIONS_LAST_BATCH: Final = 256

#: The policy gate's latest verdict on an action, in SQL, per dialect.
_GATE_VERDICT: Final = _pg.json_field("actions.gate_json", "verdict")
#: How ids are compared byte by byte (as Python compares them), per dialect.
_BYTE_ORDER: Final = {"sqlite": "COLLATE BINARY", "postgresql": 'COLLATE "C"'}
#: A denied action (``Action.denied``), in SQL, per dialect: written exactly as the WHERE of
#: the partial index ``actions_denied`` (migration 12), so that the planner can use it.
#: A denied action (a person's denial or a DENY verdict), in SQL, per dialect.
DENIED_SQL: Final = {
    "sqlite": "(approval = 'DENIED' OR json_extract(gate_json, '$.verdict') = 'DENY')",
    "postgresql": "(approval = 'DENIED' OR (gate_json::jsonb ->> 'verdict') = 'DENY')",
}


@attrs.frozen(kw_only=True)
class LedgerTally:
    """Counts over a whole ledger (``Ledger.ledger_tally``)."""

    #: every action
    actions: int
    #: actions with no attempt yet, not denied, not expired (status PLANNED; an action
    #: PLANNED because its attempts found the phone not ready has an attempt, and is among
    #: the notable ones)
    planned: int
    #: actions whose every attempt is CONFIRMED, ACCEPTED and unflagged: SUCCEEDED, nothing
    #: to review, no superseded reason
    quietly_succeeded: int
    #: provider rows ever recorded as duplicates
    duplicates: int
    #: actions with no attempt that a DENY stopped for good (status DENIED)
    denied_unattempted: int = 0
    #: actions with no attempt whose deadline passed (status EXPIRED; not denied)
    expired_unattempted: int = 0


class ActionReads(LedgerConnection):
    """The ``Ledger``'s reads by action (see the module docstring)."""

    # ------------------------------------------------------------------ one action

    async def summary(self, action_id: str, *, now: datetime | None = None) -> ActionSummary:
        """The action, its attempts and what is derived from them.

        Raises:
            NotFound: no such action.
        """
        when = require_aware("now", now) if now is not None else self.now()
        return await self._run(lambda db: read_summary(db, action_id, when))

    async def attempts(self, action_id: str) -> list[ActionRecord]:
        """Every attempt of the action, oldest first (empty if it has none).

        Raises:
            NotFound: no such action.
        """

        def work(db: sqlite3.Connection) -> list[ActionRecord]:
            load_action(db, action_id)
            return load_attempts(db, action_id)

        return await self._run(work)

    async def history(self, action_id: str) -> list[HistoryEntry]:
        """Every recorded change of every attempt of the action, in order.

        Raises:
            NotFound: no such action.
        """
        return await self._run(lambda db: read_history(db, action_id))

    async def duplicates(self, action_id: str) -> list[dict[str, Any]]:
        """Provider rows recorded as duplicates of the action's attempts: ``device``,
        ``provider_kind`` (``"sms"`` or ``"mms"``), ``provider_object_id``, ``dispatch_id``,
        ``seen_at`` and ``evidence``, oldest first."""
        return await self._run(lambda db: read_duplicates(db, action_id))

    # ------------------------------------------------------------------ by id

    async def get_attempt(self, dispatch_id: str) -> ActionRecord:
        """The attempt with this dispatch id.

        Raises:
            NotFound: there is none.
        """
        return await self._run(lambda db: load_attempt(db, dispatch_id))

    async def attempts_by_id(self, dispatch_ids: Iterable[str]) -> dict[str, ActionRecord]:
        """The attempts with these dispatch ids, by id (ids the ledger does not know are
        absent), in one query."""
        wanted = list(dict.fromkeys(dispatch_ids))

        def work(db: sqlite3.Connection) -> dict[str, ActionRecord]:
            found: dict[str, ActionRecord] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                rows = db.execute(
                    f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE dispatch_id IN"
                    f" ({', '.join('?' for _ in chunk)})",
                    chunk,
                ).fetchall()
                for row in rows:
                    record = record_from_row(row_dict(row))
                    found[record.dispatch_id] = record
            return found

        return await self._run(work)

    async def actions(self, action_ids: Iterable[str]) -> dict[str, Action]:
        """The actions with these ids (unknown ids are left out)."""
        wanted = sorted(set(action_ids))

        def work(db: sqlite3.Connection) -> dict[str, Action]:
            return load_actions(self, db, wanted)

        return await self._run(work)

    # ------------------------------------------------------------------ pages of summaries

    async def summaries(
        self,
        *,
        status: Status | None = None,
        device: str | None = None,
        needs_review: bool | None = None,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> list[ActionSummary]:
        """Actions (newest first) with their derived status, optionally filtered (a list of
        what ``iter_summaries`` yields)."""
        return [
            summary
            async for summary in self.iter_summaries(
                status=status, device=device, needs_review=needs_review, limit=limit, now=now
            )
        ]

    async def iter_summaries(
        self,
        *,
        status: Status | None = None,
        device: str | None = None,
        needs_review: bool | None = None,
        notable_only: bool = False,
        limit: int | None = None,
        now: datetime | None = None,
        page_size: int = SUMMARY_PAGE,
    ) -> AsyncIterator[ActionSummary]:
        """Actions newest first (``created_at`` descending, then ``action_id``) with their
        derived status, optionally filtered, read a page at a time: memory stays flat
        however large the ledger.

        Each page is one query for its actions (a keyset range of ``actions_by_created``),
        one for their attempts and one for their duplicate counts. Filters are narrowed in
        SQL only to a superset of what they keep (``_prefilter``); every summary is then
        derived by ``summarize`` and checked in Python, so the result is exactly the filter
        applied to every action. ``notable_only``: only actions with an attempt that is not
        a clean success (see ``ledger_tally``: the others are SUCCEEDED, nothing to review).
        """
        when = require_aware("now", now) if now is not None else self.now()
        if page_size < 1:
            raise InvalidInput(f"page_size must be >= 1; got {page_size}")
        where, params = _prefilter(
            status,
            device,
            needs_review,
            notable_only=notable_only,
            dialect="sqlite" if self._pg is None else "postgresql",
        )
        after: tuple[str, str] | None = None
        left = limit
        while left is None or left > 0:
            # a small limit reads a small page (the SQL filter may keep a few too many)
            size = page_size if left is None else min(page_size, max(left, 16))
            page, after = await self._run(
                functools.partial(
                    summary_page, where=where, params=params, after=after, size=size, now=when
                )
            )
            for summary in page:
                if status is not None and summary.status is not status:
                    continue
                if needs_review is not None and summary.needs_review is not needs_review:
                    continue
                yield summary
                if left is not None:
                    left -= 1
                    if left == 0:
                        return
            if after is None:
                return

    async def iter_listed(
        self,
        *,
        limit: int | None = None,
        now: datetime | None = None,
        page_size: int = SUMMARY_PAGE,
    ) -> AsyncIterator[ActionSummary | QuietSuccess]:
        """What ``iter_summaries()`` yields (every action, newest first, a page at a time),
        for ``starebrain list``: an action whose every attempt is CONFIRMED, ACCEPTED and
        unflagged as a ``QuietSuccess`` (what its row shows, counted in SQL, its recipient
        vouched for by its fingerprint: ``list_page``), any other as its summary."""
        async for page in self.iter_listed_pages(limit=limit, now=now, page_size=page_size):
            for item in page:
                yield item

    async def iter_listed_pages(
        self,
        *,
        limit: int | None = None,
        now: datetime | None = None,
        page_size: int = SUMMARY_PAGE,
    ) -> AsyncIterator[list[ActionSummary | QuietSuccess]]:
        """What ``iter_listed`` yields, a page (a non-empty list) at a time: a listing lays
        out a page's rows at once."""
        when = require_aware("now", now) if now is not None else self.now()
        if page_size < 1:
            raise InvalidInput(f"page_size must be >= 1; got {page_size}")
        proven: dict[tuple[Any, Any], bool] = {}
        after: tuple[str, str] | None = None
        left = limit
        while left is None or left > 0:
            size = page_size if left is None else min(page_size, left)
            page, after = await self._run(
                functools.partial(list_page, after=after, size=size, now=when, proven=proven)
            )
            if left is not None:
                page = page[:left]
                left -= len(page)
            if page:
                yield page
            if after is None:
                return

    async def resumable(
        self, device: str | None = None, *, now: datetime | None = None
    ) -> list[ActionSummary]:
        """The actions a ``resume`` may send now or after their backoff, oldest first: PLANNED
        ones (planned for ``device`` or for no phone in particular), and those whose latest
        attempt FAILED or was REJECTED (on ``device``, if given) while ``should_redispatch``
        allows another attempt; never one waiting for a person's approval, nor a denied one
        (DENIED)."""
        when = require_aware("now", now) if now is not None else self.now()
        found: list[ActionSummary] = []
        for status in (Status.PLANNED, Status.FAILED, Status.MISMATCH):
            async for summary in self.iter_summaries(status=status, now=when):
                latest = summary.latest
                # an action goes on the phone of its latest attempt, or (none yet) the one
                # its sender named, if any
                where = latest.device if latest is not None else summary.action.planned_device
                if device is not None and where is not None and where != device:
                    continue
                if summary.action.awaiting_approval:
                    continue  # a person's approval first (``review`` lists it)
                decision = _decisions.should_redispatch(summary.action, summary.attempts, when)
                if decision.redispatch or decision.waits:
                    found.append(summary)
        found.sort(key=lambda summary: (summary.action.created_at, summary.action.action_id))
        return found

    async def deal_places(self, action_ids: Iterable[str]) -> dict[str, int]:
        """Each action's place (from 0) among every action recorded with no phone named and
        no pool, oldest first (``created_at``, then ``action_id`` as bytes): a place no send
        changes, so phones resuming together deal such actions alike however far the others
        have got (``SmsAgent.resume``'s ``share``). Actions that name a phone or a pool, and
        ids the ledger does not know, are absent."""
        wanted = set(action_ids)
        if not wanted:
            return {}

        def work(db: sqlite3.Connection) -> dict[str, int]:
            # byte order, as Python's: a PostgreSQL collation may order ids otherwise
            by_id = _BYTE_ORDER[_pg.dialect(db)]
            unnamed = "planned_device IS NULL AND pool IS NULL"
            ids = sorted(wanted)
            keys: list[tuple[str, str]] = []
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                keys.extend(
                    (str(row[0]), str(row[1]))
                    for row in db.execute(
                        f"SELECT created_at, action_id FROM actions WHERE {unnamed}"
                        f" AND action_id IN ({', '.join('?' for _ in chunk)})",
                        chunk,
                    ).fetchall()
                )
            if not keys:
                return {}
            first, last = min(keys), max(keys)
            (before,) = db.execute(
                f"SELECT count(*) FROM actions WHERE {unnamed} AND (created_at < ?"
                f" OR (created_at = ? AND action_id {by_id} < ?))",
                (first[0], first[0], first[1]),
            ).fetchone()
            span = db.execute(
                f"SELECT action_id FROM actions WHERE {unnamed}"
                f" AND (created_at > ? OR (created_at = ? AND action_id {by_id} >= ?))"
                f" AND (created_at < ? OR (created_at = ? AND action_id {by_id} <= ?))"
                f" ORDER BY created_at, action_id {by_id}",
                (first[0], first[0], first[1], last[0], last[0], last[1]),
            ).fetchall()
            return {
                str(row[0]): int(before) + offset
                for offset, row in enumerate(span)
                if str(row[0]) in wanted
            }

        return await self._run(work)

    async def approved_elsewhere(
        self, device: str, *, now: datetime | None = None
    ) -> list[ActionSummary]:
        """The actions a person approved that no attempt has started yet and whose sender
        named another phone than ``device`` (a key): a ``resume`` on ``device`` leaves them
        to their own phone and says so."""
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(
                "SELECT action_id, planned_device FROM actions WHERE approval = 'APPROVED'"
                " AND planned_device IS NOT NULL AND planned_device <> ? AND NOT EXISTS"
                " (SELECT 1 FROM attempts WHERE attempts.action_id = actions.action_id)"
                " ORDER BY created_at, action_id",
                (device,),
            ).fetchall()
            return [str(row[0]) for row in rows if phone_key_for(db, str(row[1])) != device]

        ids = await self._run(work)
        return [await self.summary(action_id, now=when) for action_id in ids]

    async def needing_review(self, *, now: datetime | None = None) -> list[ActionSummary]:
        """Actions a person must look at: ambiguous, stuck, mismatched, duplicated, or out of
        budget."""
        return await self.summaries(needs_review=True, now=now)

    async def awaiting_approval(self, *, now: datetime | None = None) -> list[ActionSummary]:
        """The actions the policy gate holds for a person's approval (its latest verdict
        HOLD, no approval or denial yet), oldest first."""
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> list[str]:
            verdict = _GATE_VERDICT[_pg.dialect(db)]
            rows = db.execute(
                "SELECT action_id FROM actions WHERE approval IS NULL AND gate_json IS NOT NULL"
                f" AND {verdict} = 'HOLD' ORDER BY created_at, action_id"
            ).fetchall()
            return [str(row[0]) for row in rows]

        ids = await self._run(work)
        return [await self.summary(action_id, now=when) for action_id in ids]

    async def ledger_tally(self, *, now: datetime | None = None) -> LedgerTally:
        """Counts over every action, in a few index scans: the actions with no attempt
        (PLANNED; DENIED; EXPIRED, their deadline passed by ``now``), those whose attempts are
        all clean successes (SUCCEEDED with nothing to review, which
        ``iter_summaries(notable_only=True)`` leaves out), and the provider rows ever
        recorded as duplicates."""

        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> LedgerTally:
            actions = int(db.execute("SELECT count(*) FROM actions").fetchone()[0])
            attempted = int(
                db.execute("SELECT count(DISTINCT action_id) FROM attempts").fetchone()[0]
            )
            notable = int(
                db.execute(
                    f"SELECT count(DISTINCT action_id) FROM attempts WHERE {_NOTABLE}"
                ).fetchone()[0]
            )
            duplicates = int(
                db.execute(
                    "SELECT count(*) FROM duplicates JOIN attempts USING (dispatch_id)"
                ).fetchone()[0]
            )
            denied = int(
                db.execute(
                    f"SELECT count(*) FROM actions WHERE {DENIED_SQL[_pg.dialect(db)]}"
                    " AND NOT EXISTS (SELECT 1 FROM attempts"
                    " WHERE attempts.action_id = actions.action_id)"
                ).fetchone()[0]
            )
            expired = int(
                db.execute(
                    "SELECT count(*) FROM actions WHERE not_after IS NOT NULL"
                    f" AND not_after <= ? AND NOT coalesce({DENIED_SQL[_pg.dialect(db)]}, FALSE)"
                    " AND NOT EXISTS (SELECT 1 FROM attempts"
                    " WHERE attempts.action_id = actions.action_id)",
                    (format_time(when),),
                ).fetchone()[0]
            )
            return LedgerTally(
                actions=actions,
                planned=actions - attempted - denied - expired,
                denied_unattempted=denied,
                expired_unattempted=expired,
                quietly_succeeded=attempted - notable,
                duplicates=duplicates,
            )

        return await self._run(work)

    async def derived_generations(
        self, base_id: str, *, now: datetime | None = None
    ) -> list[ActionSummary]:
        """The actions holding the generations of a derived id, in order: ``base_id``
        (generation 1), ``base_id-2``, ``base_id-3``… (``derived_ids.derived_generation_id``), up
        to the first generation no action holds, which is ``len(result) + 1``. Each with its
        attempts, whatever intent it holds (``derived_ids.choose_derived_generation`` skips those
        holding another).

        Lookups by exact id on the primary key, in batches of 8, 16, 32… ids (``IN (…)``,
        with one query for the attempts and one for the duplicate counts of what a batch
        found): never a scan of the actions table, however many generations there are.

        Raises:
            InvalidInput: ``base_id`` is not a valid action id.
        """
        check_action_id(base_id)
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> list[ActionSummary]:
            found: list[ActionSummary] = []
            size = _GENERATIONS_FIRST_BATCH
            while True:
                first = len(found) + 1
                wanted = [
                    derived_ids.derived_generation_id(base_id, generation)
                    for generation in range(first, first + size)
                ]
                marks = ", ".join("?" for _ in wanted)
                rows = db.execute(
                    f"SELECT * FROM actions WHERE action_id IN ({marks})", wanted
                ).fetchall()
                stored = {str(row["action_id"]): row for row in rows}
                present: list[Action] = []
                for action_id in wanted:
                    if action_id not in stored:
                        break
                    present.append(cached_action(row_dict(stored[action_id])))
                found += summaries_of(db, present, when)
                if len(present) < size:
                    return found
                size = min(size * 2, _GENERATIONS_LAST_BATCH)

        return await self._run(work)


# ---------------------------------------------------------------------- pages (worker thread)


def summary_page(
    db: sqlite3.Connection,
    *,
    after: tuple[str, str] | None,
    size: int,
    now: datetime,
    where: str = "",
    params: Sequence[Any] = (),
) -> tuple[list[ActionSummary], tuple[str, str] | None]:
    """One page of action summaries, newest first, as ``Ledger.iter_summaries`` reads them:
    the ``size`` actions after the keyset ``after`` (``created_at``, ``action_id`` of the last
    action of the page before; None: from the newest) that pass the SQL condition ``where``
    (with ``params``; empty: every action), each derived at ``now``; and the keyset of this
    page's last action (None: it was the last page). Three queries, whatever the page holds.

    Part of the ledger package's interface: ``starebrain migrate`` (``copy``) derives every
    action's summary through it on both sides of a copy, on either backend's connection.
    """
    conditions = [where] if where else []
    bound: list[Any] = list(params)
    if after is not None:
        conditions.append("created_at <= ? AND NOT (created_at = ? AND action_id <= ?)")
        bound += [after[0], after[0], after[1]]
    sql = "SELECT * FROM actions"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    sql += " ORDER BY created_at DESC, action_id LIMIT ?"
    rows = db.execute(sql, [*bound, size]).fetchall()
    if not rows:
        return [], None
    page = summaries_of(db, [cached_action(row_dict(row)) for row in rows], now)
    last = rows[-1]
    return page, (None if len(rows) < size else (str(last["created_at"]), str(last["action_id"])))


#: How many recipients ``list_page`` remembers as vouched for, per listing.
_PROVEN_RECIPIENTS: Final = 65_536


def list_page(
    db: sqlite3.Connection,
    *,
    after: tuple[str, str] | None,
    size: int,
    now: datetime,
    proven: dict[tuple[Any, Any], bool],
) -> tuple[list[ActionSummary | QuietSuccess], tuple[str, str] | None]:
    """One page of ``Ledger.iter_listed``: the page ``summary_page`` reads (same keyset, same
    order), with each action's attempts counted in the same query. An action with attempts,
    none of them notable, is a ``QuietSuccess``: ``summarize`` derives SUCCEEDED for it with
    no reason, and every attempt spent the budget (all are CONFIRMED). Its recipient is the
    one ``stored_intent`` gives (the stored one, which its fingerprint vouches for; a
    recipient vouched for once is remembered in ``proven``, keyed with its region). Any
    other action, or one whose stored intent is not vouched for as it stands, is summarized
    as ``summary_page`` does it, in the same snapshot."""
    sql = f"SELECT action_id, created_at, fingerprint, intent_json, {_LISTED} FROM actions"
    bound: list[Any] = []
    if after is not None:
        sql += " WHERE created_at <= ? AND NOT (created_at = ? AND action_id <= ?)"
        bound += [after[0], after[0], after[1]]
    sql += " ORDER BY created_at DESC, action_id LIMIT ?"
    rows = db.execute(sql, [*bound, size]).fetchall()
    if not rows:
        return [], None
    page: list[ActionSummary | QuietSuccess | None] = []
    others: dict[str, int] = {}
    for row in rows:
        quiet = None
        if row[4] and not row[5]:  # listed_attempts, listed_notable
            # ``_quiet_success``, its common case written out: a recipient vouched for
            # already, a time as the ledger writes it
            action_id, created, _, intent_text, attempts, _, device = row
            try:
                data, end = _RAW_DECODE(intent_text)
                recipient = data["recipient"]
                if (
                    end == len(intent_text)
                    and (recipient, data.get("region")) in proven
                    and type(created) is str
                ):
                    created_at = _FROM_ISO(created)
                    if created_at.tzinfo is UTC:
                        quiet = QuietSuccess(
                            action_id, created_at, recipient, int(attempts), str(device)
                        )
            except (ValueError, TypeError, KeyError, AttributeError):
                pass  # ``_quiet_success`` below says
            if quiet is None:
                quiet = _quiet_success(row, proven)
        if quiet is None:
            others[row[0]] = len(page)
        page.append(quiet)
    if others:
        ids = list(others)
        found = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            for action_row in db.execute(
                f"SELECT * FROM actions WHERE action_id IN ({marks})", chunk
            ):
                action = cached_action(row_dict(action_row))
                found[action.action_id] = action
        actions = [found[action_id] for action_id in ids]
        for action_id, summary in zip(ids, summaries_of(db, actions, now), strict=True):
            page[others[action_id]] = summary
    last = rows[-1]
    after = None if len(rows) < size else (str(last["created_at"]), str(last["action_id"]))
    return [item for item in page if item is not None], after


#: ``json.loads``'s decoder, called without its wrapper's two regular expressions.
_RAW_DECODE: Final = json.JSONDecoder().raw_decode
#: ``parse_time``'s reading (a time in UTC is its own ``astimezone(UTC)``).
_FROM_ISO: Final = datetime.fromisoformat


def _json_object(text: str) -> Any:
    """``json.loads(text)``, sooner for text with nothing around its value (as the ledger
    writes it)."""
    try:
        value, end = _RAW_DECODE(text)
    except ValueError:
        return json.loads(text)  # blanks first: loads reads them, or names the error
    return value if end == len(text) else json.loads(text)


def _quiet_success(row: Any, proven: dict[tuple[Any, Any], bool]) -> QuietSuccess | None:
    """The ``QuietSuccess`` of an action row of ``list_page`` (its attempts all quiet), or
    None when its stored intent is not vouched for as it stands (``summarize`` then)."""
    action_id, created, fingerprint, intent_text, attempts, _, device = row
    try:
        data = _json_object(intent_text)
        recipient = data["recipient"]
        key = (recipient, data.get("region"))
        if key not in proven:
            intent = stored_intent(data, f"action {action_id!r} intent", fingerprint=fingerprint)
            if intent.recipient != recipient:
                return None
            if len(proven) >= _PROVEN_RECIPIENTS:
                proven.clear()
            proven[key] = True
        created_at = (
            parse_time(created)
            if type(created) is str
            else structure(created, datetime, f"action {action_id!r} created_at")
        )
    except (CorruptRecord, InvalidInput, ValueError, TypeError, KeyError):
        return None  # the summary names what is wrong
    return QuietSuccess(action_id, created_at, recipient, int(attempts), str(device))


def summaries_of(
    db: sqlite3.Connection, actions: Sequence[Action], now: datetime
) -> list[ActionSummary]:
    """The summaries of these actions at ``now``, in their order (``_load_page``'s two
    queries)."""
    attempts, duplicates = _load_page(db, [action.action_id for action in actions])
    return [
        summarize(
            action,
            attempts.get(action.action_id, ()),
            now,
            duplicates=duplicates.get(action.action_id, 0),
        )
        for action in actions
    ]


def _load_page(
    db: sqlite3.Connection, action_ids: Sequence[str]
) -> tuple[dict[str, list[ActionRecord]], dict[str, int]]:
    """The attempts (oldest first) and duplicate counts of these actions: one query each per
    500 ids, through the ``(action_id, attempt)`` key and ``duplicates_by_dispatch``."""
    attempts: dict[str, list[ActionRecord]] = {}
    duplicates: dict[str, int] = {}
    for start in range(0, len(action_ids), 500):
        chunk = action_ids[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for row in db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE action_id IN ({marks})"
            " ORDER BY action_id, attempt",
            chunk,
        ):
            record = record_from_row(row_dict(row))
            attempts.setdefault(record.action_id, []).append(record)
        for action_id, count in db.execute(
            "SELECT attempts.action_id, count(*) FROM attempts JOIN duplicates"
            " ON duplicates.dispatch_id = attempts.dispatch_id"
            f" WHERE attempts.action_id IN ({marks}) GROUP BY attempts.action_id",
            chunk,
        ):
            duplicates[str(action_id)] = int(count)
    return attempts, duplicates


def load_actions(
    ledger: LedgerConnection, db: sqlite3.Connection, action_ids: Iterable[str]
) -> dict[str, Action]:
    """The actions with these ids (unknown ids are left out), on the connection's thread: the
    ones ``ledger`` keeps, the rest in one query per 500 ids (a pass over 10,000 watched
    attempts would otherwise run 10,000 queries), read as summaries read them."""
    found: dict[str, Action] = {}
    missing: list[str] = []
    for action_id in sorted(set(action_ids)):
        cached = ledger._actions.get(action_id)
        if cached is None:
            missing.append(action_id)
        else:
            found[action_id] = cached
    for start in range(0, len(missing), 500):
        chunk = missing[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for row in db.execute(f"SELECT * FROM actions WHERE action_id IN ({marks})", chunk):
            action = cached_action(row_dict(row))
            found[action.action_id] = ledger._remember(action)
    return found


def cached_action(row: Mapping[str, Any]) -> Action:
    """``action_from_row``, with the policy read once per distinct stored text (policies are
    frozen records; a ledger holds few distinct ones). Anything unreadable is left to
    ``action_from_row``, which names what is wrong."""
    try:
        policy = _stored_policy(row["policy_json"])
        intent = json.loads(row["intent_json"])
    except (CorruptRecord, ValueError, TypeError):
        return action_from_row(row)
    what = f"action {row['action_id']!r}"
    return Action(
        action_id=row["action_id"],
        fingerprint=row["fingerprint"],
        intent=stored_intent(intent, what + " intent", fingerprint=row["fingerprint"]),
        policy=policy,
        created_at=structure(row["created_at"], datetime, what + " created_at"),
        grant=stored_grant(row),
        planned_device=stored_planned_device(row),
        approval=row["approval"] if "approval" in row.keys() else None,  # noqa: SIM118
        gate=stored_gate(row),
        **stored_queue(row),
        **stored_binding(row),
    )


@functools.lru_cache(maxsize=64)
def _stored_policy(text: str) -> RetryPolicy:
    """The policy stored as ``text`` (a frozen record, shared by every action storing it).

    Raises:
        CorruptRecord: it cannot be read.
    """
    try:
        return structure(json.loads(text), RetryPolicy, "policy")
    except ValueError as exc:
        raise CorruptRecord("policy is not JSON") from exc


# ---------------------------------------------------------------------- filters in SQL

#: An attempt that is not a clean success: unsettled, failed, rejected, or flagged for review.
#: Written exactly as the WHERE of the partial index ``attempts_notable`` (migration 0004), so
#: that SQLite can use it. ``summarize`` derives SUCCEEDED with no review and no superseded
#: reason for an action whose attempts include none of these (the status of a CONFIRMED and
#: ACCEPTED latest attempt; reasons come only from ``review_reason``, REJECTED attempts, and a
#: spent budget, which is looked at only when the status is not SUCCEEDED).
_NOTABLE: Final = (
    "NOT (delivery = 'CONFIRMED' AND acceptance = 'ACCEPTED' AND review_reason IS NULL)"
)

#: The columns ``list_page`` reads with each action: its attempts, those of them that are
#: notable (``_NOTABLE``), and the phone of its latest attempt.
_LISTED: Final = (
    "(SELECT count(*) FROM attempts WHERE attempts.action_id = actions.action_id)"
    " AS listed_attempts,"
    " (SELECT count(*) FROM attempts WHERE attempts.action_id = actions.action_id"
    f" AND {_NOTABLE}) AS listed_notable,"
    " (SELECT device FROM attempts WHERE attempts.action_id = actions.action_id"
    " ORDER BY attempt DESC LIMIT 1) AS listed_device"
)

#: The (delivery, acceptance) pair of the latest attempt for each status that has one.
_STATUS_PAIRS: Final[Mapping[Status, tuple[str, str]]] = {
    **{
        status: (delivery.value, acceptance.value)
        for (delivery, acceptance), status in _core.STATUS_TABLE.items()
    },
    Status.UNKNOWN: (DeliveryState.PENDING.value, AcceptanceState.PENDING.value),
}

#: An attempt that sent nothing because of the phone and spent no attempt of the budget
#: (``decisions.unsent_why``: not ready, unreachable, its fence lost), in SQL, per dialect:
#: a superset (any value under those keys; ``summarize`` decides).
_UNSENT: Final = {
    dialect: "delivery = 'FAILED' AND ("
    + " OR ".join(
        f"{_pg.json_field('attempts.evidence_json', key)[dialect]} IS NOT NULL"
        for key in ("not_ready", "unreachable", "fence_lost")
    )
    + ")"
    for dialect in ("sqlite", "postgresql")
}

#: An action's policy fields in SQL, per dialect.
_POLICY_DEADLINE: Final = _pg.json_field("actions.policy_json", "schedule_to_close")
_POLICY_MAXIMUM: Final = _pg.json_field("actions.policy_json", "maximum_attempts", "::bigint")


def _prefilter(
    status: Status | None,
    device: str | None,
    needs_review: bool | None,
    *,
    notable_only: bool,
    dialect: str = "sqlite",
) -> tuple[str, list[Any]]:
    """SQL conditions on ``actions`` keeping a superset of the actions the filters keep.

    An action is PLANNED with no attempt, or with a latest attempt that sent nothing because
    of the phone (``_UNSENT``). ``summarize`` gives an action review reasons only from its
    attempts' ``review_reason`` (such an attempt is notable, ``_NOTABLE``), and
    BUDGET_EXHAUSTED when its latest attempt is FAILED or REJECTED and ``should_redispatch``
    finds the budget spent (at least ``maximum_attempts`` attempts) or the deadline passed
    (the policy has one). An action of a status other than SUCCEEDED and PLANNED has a
    latest attempt with that status's pair of states, which is never CONFIRMED and
    ACCEPTED, so notable.

    Each condition is a correlated ``EXISTS`` probing one action's attempts by key: a page
    walks ``actions_by_created`` from where the last one stopped, so reading every page costs
    one walk of the actions whatever the filter (an ``IN (subquery)`` would sort the whole
    candidate set again for every page).
    """
    conditions: list[str] = []
    params: list[Any] = []
    own = "SELECT 1 FROM attempts WHERE attempts.action_id = actions.action_id"
    if device is not None:
        conditions.append(f"EXISTS ({own} AND device = ?)")
        params.append(device)
    if status is Status.PLANNED:
        # no attempt, or a latest one that sent nothing because of the phone (it waits for
        # the phone: ``decisions.waiting_for_phone``)
        later = (
            "SELECT 1 FROM attempts AS later WHERE later.action_id = actions.action_id"
            " AND later.attempt > attempts.attempt"
        )
        conditions.append(
            f"(NOT EXISTS ({own}) OR EXISTS ({own} AND {_UNSENT[dialect]}"
            f" AND NOT EXISTS ({later})))"
        )
    elif status is Status.DENIED:
        conditions.append(DENIED_SQL[dialect])
    elif status is Status.EXPIRED:
        conditions.append("actions.not_after IS NOT NULL")
    elif status is not None and status is not Status.SUCCEEDED:
        conditions.append(f"EXISTS ({own} AND {_NOTABLE} AND delivery = ? AND acceptance = ?)")
        params.extend(_STATUS_PAIRS[status])
    elif notable_only:
        conditions.append(f"EXISTS ({own} AND {_NOTABLE})")
    if needs_review:
        # reasons come from a review_reason, or from a spent budget (BUDGET_EXHAUSTED or
        # DEADLINE_PASSED in should_redispatch), which needs a FAILED or REJECTED attempt and
        # as many attempts as the policy allows, or a policy with a deadline
        # (one probe of the action's notable attempts, which most actions do not have)
        conditions.append(
            f"EXISTS ({own} AND {_NOTABLE} AND (review_reason IS NOT NULL"
            " OR ((delivery = 'FAILED' OR acceptance = 'REJECTED')"
            " AND (actions.grant_json IS NOT NULL"
            f" OR {_POLICY_DEADLINE[dialect]} IS NOT NULL"
            f" OR coalesce({_POLICY_MAXIMUM[dialect]}, 0)"
            " <= (SELECT count(*) FROM attempts AS every"
            " WHERE every.action_id = actions.action_id)))))"
        )
    return " AND ".join(conditions), params
