"""Attribute the rows of one read to the attempts of one device (pure): :func:`plan_device`.

Settled attempts (watched for later copies of their message) cost O(1) expected each: rows are
looked up by their normalised recipient and body (:class:`MatchKeys`), never judged against
every attempt. An unresolved attempt still looks at every row above its watermark (its
evidence lists the unrelated ones), but only the rows sharing its recipient or body are
judged; the device lease keeps such attempts few.

Attribution on one device (the device lease means at most one attempt is in flight there):

* candidates for an attempt are outgoing rows above its watermark (or, if the watermark was
  never recorded, above everything the ledger saw on the device before it), dated no earlier
  than its device clock minus a tolerance, and claimed by no other attempt;
* on the UI path, a row dated outside the attempt's send window (when the round trip ended
  and the window is known) is never its own, however well it matches: the app dates its row
  when the send is pressed (on the framework path the framework dates it when the radio
  answers, and ``creator`` decides instead);
* a row matching the intent (recipient and body) is the artifact; on the framework path a
  SENT row wins over a FAILED one (on the UI path the pair goes to review: see below). A
  further matching row inside the window is recorded against the attempt: a
  DUPLICATE when it is provably ours (the framework path's ``creator``), otherwise AMBIGUOUS
  (the messaging app wrote it: a second copy it sent, or its owner's identical text cannot
  be told apart). Either goes to review; neither leads to a resend;
* a matching row is not claimed when a row of this attempt may be elsewhere (``_doubt``):
  an ``_id`` between the watermark and it that no visible row holds (a row out of the
  restricted view's sight, or deleted), which earlier attempts of ours do not account for;
  a failed or queued identical twin (read as system); or a row of ours the app altered,
  dated between our keys. It waits while a hidden row may still show up, then goes to review
  (AMBIGUOUS): the owner's identical text is never taken for a message that failed;
* otherwise a row that matches only the recipient or only the body is the artifact (judged
  a MISMATCH: the app changed it) only on positive evidence that it is this attempt's: its
  ``creator`` is the package the attempt sent through (the framework path), or it is dated
  inside the attempt's own send window (the device clock read before the keys, plus that
  round trip). One such row is the artifact; several are ambiguous (manual review); rows
  without that evidence are noted, never claimed (the owner texting the same person);
* rows that match neither the recipient nor the body are someone else's (a person using the
  phone, an old message): they are left out, and recorded as evidence;
* no candidate: nothing changes. A read that does not show a message proves nothing: the
  restricted view (every caller but the system and phone uids, root included) hides queued
  and failed rows, and a message the app sent as RCS chat never lands in the SMS provider. The
  attempt stays UNKNOWN past the grace window.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core import proof as _proof
from starebrain_actions.core.model import (
    AcceptanceState,
    ActionRecord,
    Artifact,
    ArtifactOutcome,
    DeliveryState,
    DuplicateSighting,
    LookupResult,
    MatchVerdict,
    ProviderKind,
    ReviewReason,
    SmsIntent,
    Transition,
    require_aware,
)
from starebrain_actions.core.ports import OutgoingMessage, PhoneRead
from starebrain_actions.core.segments import body_segments
from starebrain_actions.orchestration.watched import (
    CLOCK_TOLERANCE_MS,
    Claim,
    Taken,
    Watched,
    above_floor,
    awaits_fence,
    dated_outside,
    effective_floor,
    is_row_of,
    provably_ours,
    row_key,
    send_window,
    written_by,
)

Judge = Callable[[OutgoingMessage, SmsIntent], MatchVerdict]


@runtime_checkable
class MatchKeys(Protocol):
    """The keys a judge compares, so that a pass finds the rows an intent may match by
    lookup instead of judging every row against every attempt.

    The contract (what :func:`plan_device` relies on, and
    ``tests/core/test_core_attribution_index.py`` checks against the adapter's judge): with
    ``scope, recipient, body = intent_keys(intent)`` and ``row_recipient, row_body =
    message_keys(message, scope)``, whenever ``judge(message, intent)`` says
    ``recipient_ok``, ``recipient`` is not None and equals ``row_recipient``; whenever it
    says ``body_ok``, ``body`` is not None and equals ``row_body``. A row sharing neither key
    is one the judge would find unrelated; the planner judges every other row itself.
    """

    def intent_keys(self, intent: SmsIntent) -> tuple[Hashable, Hashable | None, Hashable | None]:
        """``(scope, recipient key, body key)``: None keys never match."""
        ...

    def message_keys(
        self, message: OutgoingMessage, scope: Hashable
    ) -> tuple[Hashable | None, Hashable | None]:
        """``(recipient key, body key)`` of a row, read in ``scope`` (the intent's region)."""
        ...


class _RowIndex:
    """The rows of one read by the keys of :class:`MatchKeys`, built once per scope (the
    intent's region): each row is normalised once per pass, not once per attempt."""

    def __init__(
        self,
        messages: Sequence[OutgoingMessage],
        keys: MatchKeys,
        taken: Taken,
    ) -> None:
        self._messages = messages
        self._keys = keys
        #: rows already claimed when the pass began: never a candidate for anything
        self._taken = taken.copy()
        self._row_keys: dict[Hashable, dict[tuple[ProviderKind, int], tuple[Any, Any]]] = {}
        self._both: dict[Hashable, dict[tuple[Any, Any], list[OutgoingMessage]]] = {}
        #: per scope: the rows by recipient key, and by body key (read order)
        self._by_recipient: dict[Hashable, dict[Any, list[OutgoingMessage]]] = {}
        self._by_body: dict[Hashable, dict[Any, list[OutgoingMessage]]] = {}
        #: each row's place in the read
        self._place = {row_key(message): place for place, message in enumerate(messages)}

    def _scope(self, scope: Hashable) -> dict[tuple[ProviderKind, int], tuple[Any, Any]]:
        known = self._row_keys.get(scope)
        if known is None:
            known = {}
            both: dict[tuple[Any, Any], list[OutgoingMessage]] = {}
            by_recipient: dict[Any, list[OutgoingMessage]] = {}
            by_body: dict[Any, list[OutgoingMessage]] = {}
            for message in self._messages:
                key = row_key(message)
                if message in self._taken:
                    continue
                recipient, body = self._keys.message_keys(message, scope)
                known[key] = (recipient, body)
                if recipient is not None:
                    by_recipient.setdefault(recipient, []).append(message)
                if body is not None:
                    by_body.setdefault(body, []).append(message)
                if recipient is not None and body is not None:
                    both.setdefault((recipient, body), []).append(message)
            self._row_keys[scope] = known
            self._both[scope] = both
            self._by_recipient[scope] = by_recipient
            self._by_body[scope] = by_body
        return known

    def related(self, message: OutgoingMessage, intent_keys: tuple[Hashable, Any, Any]) -> bool:
        """Does the row share the recipient or the body key with the intent (so that the
        judge may find it a match or a half match)?"""
        scope, recipient, body = intent_keys
        row = self._scope(scope).get(row_key(message))
        if row is None:  # claimed before the pass: judged the slow way, never skipped
            return True
        return (recipient is not None and row[0] == recipient) or (
            body is not None and row[1] == body
        )

    def related_rows(self, intent_keys: tuple[Hashable, Any, Any]) -> list[OutgoingMessage]:
        """The rows unclaimed when the pass began that share the recipient or the body key
        with the intent, in read order: every row :meth:`related` says yes to but the
        claimed ones (never a candidate)."""
        scope, recipient, body = intent_keys
        self._scope(scope)
        found = {
            row_key(message): message
            for keyed, key in ((self._by_recipient, recipient), (self._by_body, body))
            if key is not None
            for message in keyed[scope].get(key, ())
        }
        return sorted(found.values(), key=lambda message: self._place[row_key(message)])

    def matching(self, intent_keys: tuple[Hashable, Any, Any]) -> Sequence[OutgoingMessage]:
        """The unclaimed rows sharing both keys with the intent, in read order: the only
        rows the judge can find to match it."""
        scope, recipient, body = intent_keys
        if recipient is None or body is None:
            return ()
        self._scope(scope)
        return self._both[scope].get((recipient, body), ())


@attrs.frozen(kw_only=True)
class DevicePlan:
    """What a read proves on one device: transitions and duplicates to record."""

    transitions: tuple[Transition, ...] = ()
    duplicates: tuple[DuplicateSighting, ...] = ()


def _score(verdict: MatchVerdict) -> int:
    if verdict.matched:
        return 2
    details = verdict.details
    return 1 if details.get("recipient_ok") or details.get("body_ok") else 0


def _row_evidence(message: OutgoingMessage, read: PhoneRead) -> dict[str, Any]:
    evidence: dict[str, Any] = {
        "provider_type": message.type,
        "date_ms": message.date_ms,
        "read_mode": read.mode,
    }
    if message.kind is ProviderKind.MMS:
        evidence["provider_kind"] = message.kind.value
    if message.creator is not None:
        # the package that wrote the row: on the framework path, proof of that path
        # (``phone.send_path``)
        evidence["row_creator"] = message.creator
    return evidence


def _artifact(message: OutgoingMessage, verdict: MatchVerdict, read: PhoneRead) -> Artifact:
    return Artifact(
        provider_object_id=message.provider_object_id,
        kind=message.kind,
        row_date_ms=message.date_ms,
        outcome=message.outcome,
        verdict=verdict,
        evidence=_row_evidence(message, read),
    )


def _origin(record: ActionRecord) -> str:
    """Whose is a second row identical to an attempt's message, inside its window? Provably
    ours on the framework path (``creator`` tells our package's rows from the messaging
    app's); on the UI path the app writes both ours and its owner's: the origin is unknown."""
    return "ours" if _decisions.on_framework_path(record) else "unknown"


#: What :func:`_doubt` returns while a row out of sight may still come into view: nothing is
#: planned for the attempt this pass.
_WAIT = LookupResult(complete=False, evidence={"waiting_for": "rows out of sight"})
#: How many ids out of sight an attempt's evidence lists.
_UNSEEN_LISTED = 10


def _unseen_below(
    read: PhoneRead, floor_id: int, message: OutgoingMessage
) -> tuple[int, list[int]]:
    """How many SMS ids above ``floor_id`` and below the row the read shows no row for (rows
    out of the reader's sight, or deleted ones), and the first few of them."""
    if read.unseen_ids is None or message.kind is not ProviderKind.SMS:
        return 0, []
    count = 0
    found: list[int] = []
    for low, high in read.unseen_ids:
        low, high = max(low, floor_id + 1), min(high, message.provider_object_id - 1)
        if low > high:
            continue
        count += high - low + 1
        found.extend(range(low, min(high, low + _UNSEEN_LISTED - 1) + 1))
    return count, found[:_UNSEEN_LISTED]


def _out_of_sight(record: ActionRecord) -> bool:
    """May ``record``'s own row be one the read cannot see? Still unresolved, or ruled not
    sent by a person (FAILED by a ruling: the app's row, if it wrote one, ended FAILED, which
    the restricted view hides), with no row of it seen."""
    if record.provider_object_id is not None:
        return False
    if record.delivery is DeliveryState.PENDING:
        return True
    return record.delivery is DeliveryState.FAILED and record.resolved_by is not None


def _earlier_unseen(item: Watched, watched: Sequence[Watched], row: OutgoingMessage) -> int:
    """How many rows out of sight between this attempt's watermark and ``row`` earlier
    attempts of ours on the device account for: UI-path attempts still unresolved, or ruled
    not sent by a person (issue 36: a radio failure on a ``user`` build, its FAILED row
    hidden, then a retry), with no row seen, whose app cannot send as chat (an RCS_SUSPECTED
    one may have written no row at all), whose watermark is this attempt's or higher (nothing
    visible came between, so their row lies above this one's watermark), and whose app wrote
    its row (last key plus the margin) before this attempt's send key: each wrote at most one
    row, below any row of this attempt's."""
    mine = send_window(item.record, margin_ms=0)
    if mine is None or mine[1] is None:
        return 0
    count = 0
    for other in watched:
        record = other.record
        if (
            other is item
            or not _out_of_sight(record)
            or _decisions.on_framework_path(record)
            or record.review_reason is ReviewReason.RCS_SUSPECTED
            or other.floor_id < item.floor_id
        ):
            continue
        window = send_window(record)
        if window is not None and window[1] is not None and window[1] <= mine[1]:
            count += 1
    return count


def _doubt(
    read: PhoneRead,
    item: Watched,
    chosen: OutgoingMessage,
    others: Sequence[OutgoingMessage],
    now: datetime,
    watched: Sequence[Watched] = (),
    altered: Sequence[OutgoingMessage] = (),
) -> LookupResult | None:
    """On the UI path, may ``chosen`` (a row dated inside the send window, matching the intent
    in whole or, provably ours by its date, in part) be the owner's while this attempt's own
    row failed or waits out of sight? The messaging app writes both alike, so their dates
    and their text cannot tell them apart; what can:

    * an ``_id`` above the watermark and below ``chosen`` that no visible row holds: a row
      inserted after the watermark's and before ``chosen`` (``_id`` is ``INTEGER PRIMARY KEY``
      in ``MmsSmsDatabaseHelper``, TelephonyProvider android-10.0.0_r30 and
      android-15.0.0_r17: each insert takes the next id), which the restricted view hides
      (outbox, failed, queued, draft) or someone deleted. It may be this attempt's, failed or
      queued;
    * another row identical to the intent in the window that was not sent (failed, or still
      queued), when the reader sees every type;
    * ``altered``: a row matching the intent in part and dated between this attempt's first
      and last key, the evidence that makes such a row this attempt's MISMATCH: the app sent
      ours altered (to a wrong number, or with its text changed), and the identical row is
      then the owner's.

    Rows out of sight that earlier attempts of ours on the device account for
    (:func:`_earlier_unseen`: sent before this one, their own rows never seen) cast no doubt:
    the usual case after a send stuck in the outbox. What is left is three things at once: an
    earlier attempt whose app wrote no row at all, this attempt's own row failing out of
    sight, and the owner's identical text inside this attempt's window.

    None: no doubt, ``chosen`` is the artifact. Otherwise, while a row out of sight or still
    queued may yet show what it is and the grace window lasts: :data:`_WAIT` (nothing is
    planned); then, or for a failed twin, review (AMBIGUOUS) with the rows as evidence:
    never a claim (a message that failed would read SUCCEEDED), never a resend (a queued one
    would go twice).
    """
    count, unseen = _unseen_below(read, item.floor_id, chosen)
    if count and count <= _earlier_unseen(item, watched, chosen):
        count, unseen = 0, []
    unsent = [m for m in others if m.outcome is not ArtifactOutcome.SENT]
    if not unseen and not unsent and not altered:
        return None
    may_change = bool(unseen) or any(m.outcome is ArtifactOutcome.QUEUED for m in unsent)
    if (
        may_change
        and not altered
        and now < item.record.dispatched_at + item.action.policy.grace_window
    ):
        return _WAIT
    evidence: dict[str, Any] = {
        "identical_rows": [chosen.provider_object_id, *(m.provider_object_id for m in others)],
        "doubt": (
            "a row of this attempt, altered by the app, is dated between its keys: the"
            " matching row may be another's"
            if altered
            else "a row of this attempt may be out of sight (failed or queued): the matching"
            " row may be another's"
        ),
    }
    if unseen:
        evidence["unseen_ids"] = unseen
    if unsent:
        evidence["unsent_identical_rows"] = [m.provider_object_id for m in unsent]
    if altered:
        evidence["altered_rows_in_keys_window"] = [m.provider_object_id for m in altered]
    return LookupResult(complete=read.complete, ambiguous=True, evidence=evidence)


#: A candidate row as :func:`_score_rows` scores it: ``(score, row, verdict)``.
_Scored = tuple[int, OutgoingMessage, MatchVerdict | None]


def plan_device(
    watched: Sequence[Watched],
    read: PhoneRead,
    claimed: Iterable[Claim],
    judge: Judge,
    now: datetime,
    *,
    claimed_mms: Iterable[Claim] = (),
    keys: MatchKeys | None = None,
) -> DevicePlan:
    """Attribute the rows of one read to the watched attempts of one device (pure).

    ``claimed`` are SMS provider ids, ``claimed_mms`` MMS ids, already tied to an attempt or
    a duplicate in the ledger. ``keys`` (the judge's :class:`MatchKeys`, when it has them)
    lets each row cost O(1) expected instead of one judgement per watched attempt: the rows
    sharing no key with an intent are the ones the judge finds unrelated, so only the others
    are judged. The decisions are the same with or without them.
    """
    now = require_aware("now", now)
    # a floor whose row is gone is lowered to a row the read shows there (ids are reused)
    watched = [
        item
        if (floor := effective_floor(item, read)) == item.floor_id
        else attrs.evolve(item, floor_id=floor)
        for item in watched
    ]
    taken = Taken.of(claimed, ProviderKind.SMS)
    Taken.of(claimed_mms, ProviderKind.MMS, into=taken)
    transitions: list[Transition] = []
    duplicates: list[DuplicateSighting] = []
    confirmed: list[tuple[ActionRecord, Watched]] = []
    by_key = {row_key(message): message for message in read.messages}
    index = _RowIndex(read.messages, keys, taken) if keys is not None else None

    for item in sorted(watched, key=lambda w: w.record.dispatched_at):
        record = item.record
        if record.delivery is DeliveryState.CONFIRMED:
            provider_id = record.provider_object_id
            if provider_id is None:  # resolved as sent by an operator: no row to watch
                continue
            if record.acceptance is AcceptanceState.PENDING:
                transitions.extend(_settle(item, read, by_key, judge, now))
            confirmed.append((record, item))
            continue
        if record.delivery is not DeliveryState.PENDING:
            continue
        if awaits_fence(record, now):
            # its round trip never ended: no row can be told from the owner's until the fence
            # says whether, and when, its keys were pressed (checked after this read)
            transitions.extend(_await_fence(item, read, now))
            continue
        lookup, extra = _lookup(item, watched, read, taken, judge, now, index, keys)
        planned = () if lookup is _WAIT else _reconcile(item, lookup, now)
        transitions.extend(planned)
        final = planned[-1].after if planned else record
        if final.delivery is DeliveryState.CONFIRMED and final.provider_object_id is not None:
            taken.add(
                final.provider_kind or ProviderKind.SMS,
                final.provider_object_id,
                final.provider_row_date_ms,
            )
            confirmed.append((final, item))
            for message in extra:
                taken.take(message)
                duplicates.append(_sighting(final, message, read))

    duplicates.extend(_further_copies(confirmed, read, taken, judge, index, keys))
    return DevicePlan(transitions=tuple(transitions), duplicates=tuple(duplicates))


def _await_fence(item: Watched, read: PhoneRead, now: datetime) -> tuple[Transition, ...]:
    """What this read proves about an attempt awaiting its fence (:func:`awaits_fence`):
    no row is judged for it, as for a read that found nothing."""
    record, action = item.record, item.action
    return _proof.reconcile(
        record,
        LookupResult(complete=read.complete, evidence={"awaiting_fence": True}),
        now,
        grace_window=action.policy.grace_window,
        unverified_after=action.policy.unverified_after,
    )


def _reconcile(item: Watched, lookup: LookupResult, now: datetime) -> tuple[Transition, ...]:
    """What ``lookup`` proves about an unresolved attempt, under its action's policy."""
    record, action = item.record, item.action
    return _proof.reconcile(
        record,
        lookup,
        now,
        grace_window=action.policy.grace_window,
        unverified_after=action.policy.unverified_after,
        settle_after=action.policy.settle_after,
        framework_settle_after=action.policy.framework_settle_after,
        segments=body_segments(action.intent.body),
        app_send_timeout=action.policy.app_send_timeout,
    )


def _lookup(
    item: Watched,
    watched: Sequence[Watched],
    read: PhoneRead,
    taken: Taken,
    judge: Judge,
    now: datetime,
    index: _RowIndex | None,
    keys: MatchKeys | None,
) -> tuple[LookupResult, list[OutgoingMessage]]:
    """What this read shows of an unresolved attempt's row: its candidates
    (:func:`_candidates`) judged against its intent, then decided by the best score (a
    match, a half match, or neither); and, beside a matching artifact, the further SENT
    copies to record once it is confirmed."""
    record, action = item.record, item.action
    intent_keys = keys.intent_keys(action.intent) if keys is not None else None
    scored: list[_Scored] = []
    outside: list[int] = []
    if index is not None and intent_keys is not None:
        # the rows that share a key with the intent first (the index's own lookup, not a
        # walk of the read): a match or a half match can only be among them, and then the
        # decision rests on them alone; a backlog of many attempts above one floor costs
        # each attempt its own rows, not every row of the read
        related, _outside = _candidates(item, read, taken, index.related_rows(intent_keys))
        scored = _score_rows(related, action.intent, judge, index, intent_keys)
    if max((score for score, _m, _v in scored), default=-1) < 1:
        # nothing matches even in part: every candidate, for the evidence of what was seen
        candidates, outside = _candidates(item, read, taken)
        scored = _score_rows(candidates, action.intent, judge, index, intent_keys)
    best = max((score for score, _m, _v in scored), default=-1)
    ui_path = not _decisions.on_framework_path(record)
    window = send_window(record) if ui_path else None
    if best == 2 and window is not None and window[1] is None:
        # the script was cut off after its go and before it recorded its keys: whether
        # its send key was pressed is unknown, so a matching row after its launch may be
        # the owner's as well as ours: review, never a claim (nor a resend)
        lookup = LookupResult(
            complete=read.complete,
            ambiguous=True,
            evidence={
                "identical_rows": [m.provider_object_id for s, m, _v in scored if s == 2],
                "window": "open: the script never recorded its keys",
            },
        )
        return lookup, []
    if best == 2:
        return _whole_match(item, watched, read, scored, now, ui_path=ui_path)
    if best == 1:
        return _half_match(item, watched, read, scored, now, ui_path=ui_path), []
    unrelated = [m.provider_object_id for _s, m, _v in scored]
    lookup = LookupResult(
        complete=read.complete,
        evidence={
            "read_mode": read.mode,
            **dict(read.evidence),
            **({"unrelated_rows": unrelated} if unrelated else {}),
            **({"outside_window_rows": outside} if outside else {}),
        },
    )
    return lookup, []


def _candidates(
    item: Watched,
    read: PhoneRead,
    taken: Taken,
    rows: Sequence[OutgoingMessage] | None = None,
) -> tuple[list[OutgoingMessage], list[int]]:
    """The rows (of ``rows``, by default the read's) that may be an unresolved attempt's:
    above its floor, written by its path, claimed by nothing, dated no earlier than its
    device clock allows and not outside its send window; and the ids of the rows left out
    for their date outside that window."""
    record = item.record
    since_ms = record.device_clock_ms - CLOCK_TOLERANCE_MS if record.device_clock_ms else None
    candidates = [
        message
        for message in (read.messages if rows is None else rows)
        if above_floor(message, item)
        and written_by(message, item)
        and message not in taken
        and (since_ms is None or message.date_ms is None or message.date_ms >= since_ms)
    ]
    # a row dated outside a known send window is not this attempt's, however well it
    # matches: the owner sending the same text later, or a twin's message
    outside = [m.provider_object_id for m in candidates if dated_outside(m, record)]
    candidates = [m for m in candidates if not dated_outside(m, record)]
    return candidates, outside


def _score_rows(
    candidates: Sequence[OutgoingMessage],
    intent: SmsIntent,
    judge: Judge,
    index: _RowIndex | None,
    intent_keys: tuple[Hashable, Any, Any] | None,
) -> list[_Scored]:
    """Each candidate judged against the intent and scored (:func:`_score`: 2 a match, 1 the
    recipient or the body only, 0 neither)."""
    # (score, row, verdict): a row sharing no key with the intent scores 0 unjudged
    scored: list[_Scored] = []
    for message in candidates:
        if (
            index is not None
            and intent_keys is not None
            and not index.related(message, intent_keys)
        ):
            scored.append((0, message, None))
            continue
        verdict = judge(message, intent)
        scored.append((_score(verdict), message, verdict))
    return scored


def _whole_match(
    item: Watched,
    watched: Sequence[Watched],
    read: PhoneRead,
    scored: Sequence[_Scored],
    now: datetime,
    *,
    ui_path: bool,
) -> tuple[LookupResult, list[OutgoingMessage]]:
    """Rows matching the intent: the first (a SENT row before a FAILED one, then by ``_id``)
    is the artifact unless, on the UI path, :func:`_doubt` finds that it may be another's;
    the further SENT matches are then copies of its message."""
    record = item.record
    matches = [(m, v) for score, m, v in scored if score == 2 and v is not None]
    matches.sort(
        key=lambda mv: (mv[0].outcome is not ArtifactOutcome.SENT, mv[0].provider_object_id)
    )
    chosen, verdict = matches[0]
    # a row of ours the app altered (its wrong recipient, its changed text), dated
    # between our first and last key, beside a row identical to the intent
    altered = [m for score, m, _v in scored if score == 1 and provably_ours(m, record)]
    doubt = (
        _doubt(read, item, chosen, [m for m, _v in matches[1:]], now, watched, altered)
        if ui_path
        else None
    )
    if doubt is not None:
        return doubt, []
    lookup = LookupResult(complete=read.complete, artifact=_artifact(chosen, verdict, read))
    return lookup, [m for m, _v in matches[1:] if m.outcome is ArtifactOutcome.SENT]


def _half_match(
    item: Watched,
    watched: Sequence[Watched],
    read: PhoneRead,
    scored: Sequence[_Scored],
    now: datetime,
    *,
    ui_path: bool,
) -> LookupResult:
    """Rows matching only the recipient or only the body: one provably ours
    (:func:`provably_ours`) is the artifact (a MISMATCH) unless, on the UI path,
    :func:`_doubt` finds that it may be another's; several are ambiguous; the others are
    noted, never claimed."""
    record = item.record
    half = [(m, v) for score, m, v in scored if score == 1 and v is not None]
    partial = [(m, v) for m, v in half if provably_ours(m, record)]
    if not partial:
        # rows matching only the recipient or only the body, with nothing to show they
        # are ours (the owner texting the same person, say): noted, never claimed
        return LookupResult(
            complete=read.complete,
            evidence={"noted_rows": [m.provider_object_id for m, _v in half]},
        )
    if len(partial) == 1:
        chosen, verdict = partial[0]
        doubt = _doubt(read, item, chosen, (), now, watched) if ui_path else None
        return doubt or LookupResult(
            complete=read.complete, artifact=_artifact(chosen, verdict, read)
        )
    return LookupResult(
        complete=read.complete,
        ambiguous=True,
        evidence={"partial_matches": [m.provider_object_id for m, _v in partial]},
    )


def _further_copies(
    confirmed: Sequence[tuple[ActionRecord, Watched]],
    read: PhoneRead,
    taken: Taken,
    judge: Judge,
    index: _RowIndex | None,
    keys: MatchKeys | None,
) -> list[DuplicateSighting]:
    """Further copies of an already-confirmed message, above its watermark (a copy may have a
    lower id than the row that confirmed it: the owner's identical text claimed first), each
    claimed in ``taken`` as it is found."""
    duplicates: list[DuplicateSighting] = []
    for record, item in confirmed:
        since_ms = record.device_clock_ms - CLOCK_TOLERANCE_MS if record.device_clock_ms else None
        rows = (
            read.messages
            if index is None or keys is None
            else index.matching(keys.intent_keys(item.action.intent))
        )
        for message in rows:
            if (
                above_floor(message, item)
                and message not in taken
                and not is_row_of(message, record)
                and (since_ms is None or message.date_ms is None or message.date_ms >= since_ms)
                and message.outcome is ArtifactOutcome.SENT
                and (not dated_outside(message, record) or resent_by_hand(message, record))
                and written_by(message, item)
                and judge(message, item.action.intent).matched
            ):
                taken.take(message)
                duplicates.append(_sighting(record, message, read))
    return duplicates


def resent_by_hand(message: OutgoingMessage, record: ActionRecord) -> bool:
    """Is ``message`` the attempt's own confirmed row, sent again from the app by the phone's
    owner? A manual resend keeps the row's ``_id`` and rewrites its ``date`` to the moment of
    the tap (``MessageData.markMessageManualResend``, written by ``SendMessageAction
    .updateMessageAndStatus``; packages/apps/Messaging android-10.0.0_r30 to
    android-15.0.0_r1), so the row is dated after the attempt's send window, yet its text
    went out again: a further copy. (An owner's own identical text could take that ``_id``
    only once the row and every later one were deleted: it goes to a person as well.)"""
    return (
        message.provider_object_id == record.provider_object_id
        and message.kind is (record.provider_kind or ProviderKind.SMS)
        and record.provider_row_date_ms is not None
        and message.date_ms is not None
        and message.date_ms > record.provider_row_date_ms
    )


def _sighting(record: ActionRecord, message: OutgoingMessage, read: PhoneRead) -> DuplicateSighting:
    """``message`` recorded as a further copy of ``record``'s message."""
    return DuplicateSighting(
        dispatch_id=record.dispatch_id,
        provider_object_id=message.provider_object_id,
        kind=message.kind,
        row_date_ms=message.date_ms,
        evidence={**_row_evidence(message, read), "origin": _origin(record)},
    )


def _settle(
    item: Watched,
    read: PhoneRead,
    by_key: Mapping[tuple[ProviderKind, int], OutgoingMessage],
    judge: Judge,
    now: datetime,
) -> tuple[Transition, ...]:
    """What this read proves about a confirmed attempt whose row has not settled
    (``_proof.settle``): its row, the same ``_id`` and date, still SENT, turned FAILED, or
    gone. Gone counts only when the read is complete and covers the row's ``_id``."""
    record = item.record
    kind = record.provider_kind or ProviderKind.SMS
    row_id = record.provider_object_id
    if row_id is None:
        return ()
    message = by_key.get((kind, row_id))
    if message is not None and not is_row_of(message, record):
        message = None  # the _id now holds another message
    if kind is ProviderKind.SMS:
        anchor = read.evidence.get("after_id", read.after_id)
        covered = isinstance(anchor, int) and row_id > anchor
    else:
        covered = item.mms_floor_id is not None and row_id > item.mms_floor_id
    return _proof.settle(
        record,
        None if message is None else message.outcome,
        None if message is None else judge(message, item.action.intent),
        now,
        complete=read.complete and covered,
        segments=body_segments(item.action.intent.body),
        app_send_timeout=item.action.policy.app_send_timeout,
        evidence={
            "read_mode": read.mode,
            **({"row": _row_evidence(message, read)} if message else {}),
        },
    )
