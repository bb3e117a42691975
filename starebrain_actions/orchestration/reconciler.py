"""Reconcile in-flight attempts against what phones show: reads only, never a send.

A pass reads each device once (one windowed read, paged by ``_id``: one round trip per few
thousand rows above the lowest watermark watched), attributes new outgoing rows to attempts,
and applies every resulting transition of the pass in one transaction. The attribution itself
(:func:`plan_device`) is pure. Settled attempts (watched for later copies of their message)
cost O(1) expected each: rows are looked up by their normalised recipient and body
(:class:`MatchKeys`), never judged against every attempt. An unresolved attempt still looks
at every row above its watermark (its evidence lists the unrelated ones), but only the rows
sharing its recipient or body are judged; the device lease keeps such attempts few.

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

import asyncio
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.exceptions import LedgerError, PassOutdated, PhoneError
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    Artifact,
    ArtifactOutcome,
    DeliveryState,
    DuplicateSighting,
    Event,
    LookupResult,
    MatchVerdict,
    ProviderKind,
    ReviewReason,
    SmsIntent,
    Status,
    Transition,
    require_aware,
)
from starebrain_actions.core.ports import OutgoingMessage, Phone, PhoneRead
from starebrain_actions.ledger.store import Ledger

_log = get_logger("starebrain.reconciler")

#: How old an unresolved attempt must be before a pass voids its fence: longer than a live
#: sender's command can take (the default command timeout, 20 s, and a margin). The fence
#: makes a void safe at any age (the send script and the pass cannot both claim it); waiting
#: only spares a live sender a wasted attempt, and two live senders from voiding each other.
VOID_AFTER = timedelta(seconds=25)


def void_after_for(command_timeout_s: float) -> timedelta:
    """How old another sender's unresolved attempt must be before a pass voids its fence:
    longer than its send command can take (its timeout, plus 5 s), at least ``VOID_AFTER``."""
    return max(VOID_AFTER, timedelta(seconds=command_timeout_s + 5))


#: How far a row's date may precede the device clock read before the send (ms granularity).
CLOCK_SLACK_MS = 1_000
#: How long after the script's last key the app may take to write its row (its send action
#: runs in the background: AOSP Messaging's InsertNewMessageAction).
KEYS_MARGIN_MS = 1_000
#: ``pdu.date`` is in seconds: an MMS may look up to this much older than it is.
MMS_DATE_PRECISION_MS = 999
#: How far before the device clock at dispatch a row may be dated and still be a candidate.
CLOCK_TOLERANCE_MS = 5_000
#: How long after its dispatch a send script that claimed ``go`` has surely recorded its
#: ``keys`` if it still could: it ignores SIGHUP and runs to its end (``android_bridge._fence.
#: run_to_the_end``), pressing two keys and writing one marker after ``go``; only adbd
#: restarting or a reboot stops it there. Until then a fence found claimed without ``keys`` is
#: read again (:func:`_keys_may_come`): its keys may be being pressed right now.
SCRIPT_FINISH_WITHIN = timedelta(seconds=60)
#: How long after confirmation extra copies of a message are watched for as duplicates.
DUPLICATE_WATCH = timedelta(hours=24)

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

    def _scope(self, scope: Hashable) -> dict[tuple[ProviderKind, int], tuple[Any, Any]]:
        known = self._row_keys.get(scope)
        if known is None:
            known = {}
            both: dict[tuple[Any, Any], list[OutgoingMessage]] = {}
            for message in self._messages:
                key = _key(message)
                if message in self._taken:
                    continue
                recipient, body = self._keys.message_keys(message, scope)
                known[key] = (recipient, body)
                if recipient is not None and body is not None:
                    both.setdefault((recipient, body), []).append(message)
            self._row_keys[scope] = known
            self._both[scope] = both
        return known

    def related(self, message: OutgoingMessage, intent_keys: tuple[Hashable, Any, Any]) -> bool:
        """Does the row share the recipient or the body key with the intent (so that the
        judge may find it a match or a half match)?"""
        scope, recipient, body = intent_keys
        row = self._scope(scope).get(_key(message))
        if row is None:  # claimed before the pass: judged the slow way, never skipped
            return True
        return (recipient is not None and row[0] == recipient) or (
            body is not None and row[1] == body
        )

    def matching(self, intent_keys: tuple[Hashable, Any, Any]) -> Sequence[OutgoingMessage]:
        """The unclaimed rows sharing both keys with the intent, in read order: the only
        rows the judge can find to match it."""
        scope, recipient, body = intent_keys
        if recipient is None or body is None:
            return ()
        self._scope(scope)
        return self._both[scope].get((recipient, body), ())


@attrs.frozen(kw_only=True)
class Change:
    """One state change a pass made, for people and reports."""

    action_id: str
    dispatch_id: str
    event: Event
    from_status: Status
    to_status: Status


@attrs.frozen(kw_only=True)
class DeviceReport:
    """What one pass did on one device."""

    device: str
    #: False when the device could not be read this pass (nothing changed but the error)
    reachable: bool
    error: str | None = None
    #: "shell" or "root", when read
    mode: str | None = None
    round_trips: int = 0
    changes: tuple[Change, ...] = ()
    duplicates_recorded: int = 0
    #: attempts on the device still unresolved after the pass
    in_flight: int = 0
    #: fence names of long-resolved attempts removed from the phone this pass
    fences_removed: int = 0


@attrs.frozen(kw_only=True)
class ReconcilePass:
    """The result of one reconcile pass over several devices."""

    started_at: datetime
    finished_at: datetime
    devices: tuple[DeviceReport, ...]

    @property
    def changes(self) -> tuple[Change, ...]:
        """Every change, all devices."""
        return tuple(change for report in self.devices for change in report.changes)

    @property
    def unreachable(self) -> tuple[DeviceReport, ...]:
        """Devices that could not be read."""
        return tuple(report for report in self.devices if not report.reachable)


def _watermark_date(item: Watched) -> int | None:
    """The date the attempt noted for its watermark, when its floor is that watermark."""
    record = item.record
    date = record.evidence.get("watermark_date_ms")
    if record.watermark_id != item.floor_id or not isinstance(date, int) or isinstance(date, bool):
        return None
    return date


@attrs.frozen(kw_only=True)
class Watched:
    """An attempt a pass looks at, with what attribution needs to know about it."""

    record: ActionRecord
    action: Action
    #: rows of this attempt lie above this provider id, as long as that row is still there
    #: (ids are reused once the latest rows are deleted: see :func:`effective_floor`)
    floor_id: int
    #: that row's ``date`` when known (the watermark's, or an earlier artifact's; by default
    #: the watermark's when the floor is the attempt's own watermark)
    floor_date_ms: int | None = attrs.field(
        default=attrs.Factory(lambda self: _watermark_date(self), takes_self=True)
    )

    @property
    def mms_floor_id(self) -> int | None:
        """An MMS of this attempt lies above this ``content://mms`` id (None: the dispatch
        recorded no MMS watermark, so MMS rows are not looked at for it)."""
        value = self.record.evidence.get("mms_watermark_id")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


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
        # (``_send_path``)
        evidence["row_creator"] = message.creator
    return evidence


def _key(message: OutgoingMessage) -> tuple[ProviderKind, int]:
    return (message.kind, message.provider_object_id)


#: A claimed provider row as the ledger gives it: an ``_id`` (any date: an older ledger, or an
#: operator's ruling naming only the ``_id``) or an ``(_id, date)`` pair.
Claim = int | tuple[int, int | None]


class Taken:
    """The provider rows already tied to an attempt or a duplicate. SMS ``_id`` values are reused
    once the latest rows are deleted (``INTEGER PRIMARY KEY`` without AUTOINCREMENT in
    ``MmsSmsDatabaseHelper``, TelephonyProvider android-10.0.0_r30 and android-15.0.0_r1), so
    a claim names a row by its ``_id`` and its ``date``: a row with a claimed ``_id`` and
    another date is another message. A claim without a date holds every row of its ``_id``."""

    def __init__(self) -> None:
        self._dated: set[tuple[ProviderKind, int, int]] = set()
        self._any: set[tuple[ProviderKind, int]] = set()

    @classmethod
    def of(cls, claims: Iterable[Claim], kind: ProviderKind, into: Taken | None = None) -> Taken:
        """The claims of one provider table (added to ``into`` when given)."""
        taken = into if into is not None else cls()
        for claim in claims:
            row_id, date = claim if isinstance(claim, tuple) else (claim, None)
            taken.add(kind, row_id, date)
        return taken

    def add(self, kind: ProviderKind, row_id: int, date_ms: int | None) -> None:
        """Claim a row (``date_ms`` None: every row of that ``_id``)."""
        if date_ms is None:
            self._any.add((kind, row_id))
        else:
            self._dated.add((kind, row_id, date_ms))

    def take(self, message: OutgoingMessage) -> None:
        """Claim the row ``message`` is."""
        self.add(message.kind, message.provider_object_id, message.date_ms)

    def __contains__(self, message: object) -> bool:
        if not isinstance(message, OutgoingMessage):
            return False
        key = (message.kind, message.provider_object_id)
        return key in self._any or (
            message.date_ms is not None and (*key, message.date_ms) in self._dated
        )

    def copy(self) -> Taken:
        """An independent copy."""
        other = Taken()
        other._dated = set(self._dated)
        other._any = set(self._any)
        return other


def _is_row_of(message: OutgoingMessage, record: ActionRecord) -> bool:
    """Is ``message`` the very row that confirmed ``record`` (its ``_id`` and, when known, its
    date: an ``_id`` reused by another message is not it)?"""
    return (
        record.provider_object_id == message.provider_object_id
        and (record.provider_kind or ProviderKind.SMS) is message.kind
        and (record.provider_row_date_ms is None or record.provider_row_date_ms == message.date_ms)
    )


def _artifact(message: OutgoingMessage, verdict: MatchVerdict, read: PhoneRead) -> Artifact:
    return Artifact(
        provider_object_id=message.provider_object_id,
        kind=message.kind,
        row_date_ms=message.date_ms,
        outcome=message.outcome,
        verdict=verdict,
        evidence=_row_evidence(message, read),
    )


def _written_by(message: OutgoingMessage, item: Watched) -> bool:
    """An attempt sent through the framework is written by the shell's package: a row any
    other package wrote (the phone's owner, through the messaging app) is never its own."""
    creator = item.record.evidence.get("creator")
    return not isinstance(creator, str) or message.creator in (None, creator)


def _ms(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def send_window(
    record: ActionRecord, *, margin_ms: int = KEYS_MARGIN_MS
) -> tuple[int, int | None] | None:
    """The phone-clock span (ms) in which a UI-path attempt's app wrote its row: ``(start,
    end)``, ``end`` None when open. From the most exact evidence there is:

    * the script's own clock right before the first key and right after the last
      (``keys_window_ms``; the same clock dates the row), plus ``KEYS_MARGIN_MS`` for the
      app to write its row;
    * else the device clock read before ``am`` to the end of the round trip
      (``send_window_ms``);
    * else, once a pass found the script's fence claimed, its stage markers: ``am`` (after a
      clean launch, before the keys) to ``keys`` (after the last key, plus the margin), or
      open-ended when the script never recorded ``keys``.

    None: nothing bounds it yet (the round trip never ended and no fence was read).
    """
    evidence = record.evidence
    keys = evidence.get("keys_window_ms")
    if isinstance(keys, list | tuple) and len(keys) == 2:
        pressed, done = _ms(keys[0]), _ms(keys[1])
        if pressed is not None and done is not None:
            # one clock (the phone's) on both sides, and the app dates its row after the key
            # that sends it: nothing of ours is dated before the first key
            return pressed, done + margin_ms
    window, start = _ms(evidence.get("send_window_ms")), record.device_clock_ms
    if window is not None and start is not None:
        return start - CLOCK_SLACK_MS, start + window
    if evidence.get("fence") == "claimed":
        stages: dict[str, int] = {}
        for text in evidence.get("fence_stages") or []:
            name, _at, ms = str(text).partition("@")
            if ms.isdigit():
                stages[name] = int(ms)
        if "am" in stages:
            # the stage markers are the phone's own clock, which dates the row: after ``am``
            end = stages["keys"] + margin_ms if "keys" in stages else None
            return stages["am"], end
    return None


def _in_window(
    message: OutgoingMessage, record: ActionRecord, *, margin_ms: int = KEYS_MARGIN_MS
) -> bool | None:
    """Is the row dated inside the attempt's own send window (:func:`send_window`)? None when
    the window is not known or the row has no date."""
    window = send_window(record, margin_ms=margin_ms)
    if window is None or message.date_ms is None:
        return None
    start, end = window
    # an MMS is dated in whole seconds (pdu.date): its ms are lost, never moved later
    precision = MMS_DATE_PRECISION_MS if message.kind is ProviderKind.MMS else 0
    return start - precision <= message.date_ms and (end is None or message.date_ms <= end)


def _dated_outside(message: OutgoingMessage, record: ActionRecord) -> bool:
    """Is the row provably not this UI-path attempt's by its date? The messaging app dates
    its row when the send is pressed, and keeps that date when the radio answers (AOSP
    Messaging: ``MessageData``'s received timestamp, set when the message is created, is what
    ``MmsUtils.updateSmsMessageSendingStatus`` writes to ``date``; packages/apps/Messaging at
    android-14.0.0_r50), so a row dated after the send window closed is someone else's. On
    the framework path the framework dates the row when the radio answers
    (``SMSDispatcher.SmsTracker.persistSentMessageIfRequired`` puts
    ``System.currentTimeMillis()``), which may be long after the window: there ``creator``
    tells the rows apart instead, and the date proves nothing."""
    if _core.on_framework_path(record):
        return False
    return _in_window(message, record) is False


def _provably_ours(message: OutgoingMessage, record: ActionRecord) -> bool:
    """Positive evidence that a row matching the intent only in part is this attempt's (so
    that a MISMATCH, and the resend it leads to, rests on more than a shared recipient or
    body): written by the package the attempt sent through (the framework path's
    ``creator``), or dated inside the attempt's own send window."""
    creator = record.evidence.get("creator")
    if isinstance(creator, str):
        return message.creator == creator
    # the strict window, with no margin after the last key: a half match leads to a resend,
    # so a row of ours the app dated a little late is rather left to review (UNVERIFIED)
    window = send_window(record, margin_ms=0)
    if window is None or window[1] is None:
        return False  # a window the script never closed (cut off before its keys ended)
    return _in_window(message, record, margin_ms=0) is True


def _awaits_fence(record: ActionRecord, now: datetime) -> bool:
    """A UI-path attempt whose send window is unknown (its round trip never ended: killed,
    cut off, timed out, or still running in another process) while its fence can still say
    what happened: no row is attributed to it until a pass has read that fence (voided: it
    never sent; claimed: its stage markers bound the window), nor while a script found past
    ``go`` may still record its keys (:func:`_keys_may_come`). Without this, the owner's
    identical text would be taken for a message the attempt never sent."""
    return _keys_may_come(record, now) or (
        not _core.on_framework_path(record)
        and isinstance(record.evidence.get("fence_epoch"), str)
        and record.evidence.get("fence") != "lost"
        and send_window(record) is None
    )


def _keys_may_come(record: ActionRecord, now: datetime) -> bool:
    """A pass found the attempt's script past ``go`` without its ``keys`` marker, less than
    ``SCRIPT_FINISH_WITHIN`` after the dispatch: the keys may have been being pressed right
    then (the script runs on whatever became of its connection), so the fence is read again
    until the marker is there or the script must be over (then the window stays open: it was
    stopped by adbd restarting or a reboot, somewhere between ``go`` and its marker)."""
    if record.delivery is not DeliveryState.PENDING or record.evidence.get("fence") != "claimed":
        return False
    window = send_window(record)
    return (
        window is not None
        and window[1] is None
        and now - record.dispatched_at < SCRIPT_FINISH_WITHIN
    )


def _origin(record: ActionRecord) -> str:
    """Whose is a second row identical to an attempt's message, inside its window? Provably
    ours on the framework path (``creator`` tells our package's rows from the messaging
    app's); on the UI path the app writes both ours and its owner's: the origin is unknown."""
    return "ours" if _core.on_framework_path(record) else "unknown"


def _above_floor(message: OutgoingMessage, item: Watched) -> bool:
    if message.kind is ProviderKind.MMS:
        floor = item.mms_floor_id
        return floor is not None and message.provider_object_id > floor
    return message.provider_object_id > item.floor_id


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


def _earlier_unseen(item: Watched, watched: Sequence[Watched], row: OutgoingMessage) -> int:
    """How many rows out of sight between this attempt's watermark and ``row`` earlier
    attempts of ours on the device account for: UI-path attempts still unresolved with no row
    seen, whose app cannot send as chat (an RCS_SUSPECTED one may have written no row at
    all), whose watermark is this attempt's or higher (nothing visible came between, so their
    row lies above this one's watermark), and whose app wrote its row (last key plus the
    margin) before this attempt's send key: each wrote at most one row, below any row of this
    attempt's."""
    mine = send_window(item.record, margin_ms=0)
    if mine is None or mine[1] is None:
        return 0
    count = 0
    for other in watched:
        record = other.record
        if (
            other is item
            or record.delivery is not DeliveryState.PENDING
            or record.provider_object_id is not None
            or _core.on_framework_path(record)
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
    by_key = {_key(message): message for message in read.messages}
    index = _RowIndex(read.messages, keys, taken) if keys is not None else None

    for item in sorted(watched, key=lambda w: w.record.dispatched_at):
        record, action = item.record, item.action
        grace = action.policy.grace_window
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
        if _awaits_fence(record, now):
            # its round trip never ended: no row can be told from the owner's until the fence
            # says whether, and when, its keys were pressed (checked after this read)
            transitions.extend(
                _core.reconcile(
                    record,
                    LookupResult(complete=read.complete, evidence={"awaiting_fence": True}),
                    now,
                    grace_window=grace,
                    unverified_after=action.policy.unverified_after,
                )
            )
            continue
        since_ms = record.device_clock_ms - CLOCK_TOLERANCE_MS if record.device_clock_ms else None
        candidates = [
            message
            for message in read.messages
            if _above_floor(message, item)
            and _written_by(message, item)
            and message not in taken
            and (since_ms is None or message.date_ms is None or message.date_ms >= since_ms)
        ]
        # a row dated outside a known send window is not this attempt's, however well it
        # matches: the owner sending the same text later, or a twin's message
        outside = [m.provider_object_id for m in candidates if _dated_outside(m, record)]
        candidates = [m for m in candidates if not _dated_outside(m, record)]
        intent_keys = keys.intent_keys(action.intent) if keys is not None else None
        # (score, row, verdict): a row sharing no key with the intent scores 0 unjudged
        scored: list[tuple[int, OutgoingMessage, MatchVerdict | None]] = []
        for message in candidates:
            if (
                index is not None
                and intent_keys is not None
                and not index.related(message, intent_keys)
            ):
                scored.append((0, message, None))
                continue
            verdict = judge(message, action.intent)
            scored.append((_score(verdict), message, verdict))
        best = max((score for score, _m, _v in scored), default=-1)
        lookup: LookupResult
        extra: list[OutgoingMessage] = []
        ui_path = not _core.on_framework_path(record)
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
        elif best == 2:
            matches = [(m, v) for score, m, v in scored if score == 2 and v is not None]
            matches.sort(
                key=lambda mv: (mv[0].outcome is not ArtifactOutcome.SENT, mv[0].provider_object_id)
            )
            chosen, verdict = matches[0]
            # a row of ours the app altered (its wrong recipient, its changed text), dated
            # between our first and last key, beside a row identical to the intent
            altered = [m for score, m, _v in scored if score == 1 and _provably_ours(m, record)]
            doubt = (
                _doubt(read, item, chosen, [m for m, _v in matches[1:]], now, watched, altered)
                if ui_path
                else None
            )
            if doubt is not None:
                lookup = doubt
            else:
                lookup = LookupResult(
                    complete=read.complete, artifact=_artifact(chosen, verdict, read)
                )
                extra = [m for m, _v in matches[1:] if m.outcome is ArtifactOutcome.SENT]
        elif best == 1:
            half = [(m, v) for score, m, v in scored if score == 1 and v is not None]
            partial = [(m, v) for m, v in half if _provably_ours(m, record)]
            if not partial:
                # rows matching only the recipient or only the body, with nothing to show they
                # are ours (the owner texting the same person, say): noted, never claimed
                lookup = LookupResult(
                    complete=read.complete,
                    evidence={"noted_rows": [m.provider_object_id for m, _v in half]},
                )
            elif len(partial) == 1:
                chosen, verdict = partial[0]
                doubt = _doubt(read, item, chosen, (), now, watched) if ui_path else None
                lookup = doubt or LookupResult(
                    complete=read.complete, artifact=_artifact(chosen, verdict, read)
                )
            else:
                lookup = LookupResult(
                    complete=read.complete,
                    ambiguous=True,
                    evidence={"partial_matches": [m.provider_object_id for m, _v in partial]},
                )
        else:
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
        planned = (
            ()
            if lookup is _WAIT
            else _core.reconcile(
                record,
                lookup,
                now,
                grace_window=grace,
                unverified_after=action.policy.unverified_after,
                settle_after=action.policy.settle_after,
                framework_settle_after=action.policy.framework_settle_after,
            )
        )
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

    # further copies of an already-confirmed message, above its watermark (a copy may have a
    # lower id than the row that confirmed it: the owner's identical text claimed first)
    for record, item in confirmed:
        since_ms = record.device_clock_ms - CLOCK_TOLERANCE_MS if record.device_clock_ms else None
        rows = (
            read.messages
            if index is None or keys is None
            else index.matching(keys.intent_keys(item.action.intent))
        )
        for message in rows:
            if (
                _above_floor(message, item)
                and message not in taken
                and not _is_row_of(message, record)
                and (since_ms is None or message.date_ms is None or message.date_ms >= since_ms)
                and message.outcome is ArtifactOutcome.SENT
                and not _dated_outside(message, record)
                and _written_by(message, item)
                and judge(message, item.action.intent).matched
            ):
                taken.take(message)
                duplicates.append(_sighting(record, message, read))
    return DevicePlan(transitions=tuple(transitions), duplicates=tuple(duplicates))


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
    (``_core.settle``): its row, the same ``_id`` and date, still SENT, turned FAILED, or
    gone. Gone counts only when the read is complete and covers the row's ``_id``."""
    record = item.record
    kind = record.provider_kind or ProviderKind.SMS
    row_id = record.provider_object_id
    if row_id is None:
        return ()
    message = by_key.get((kind, row_id))
    if message is not None and not _is_row_of(message, record):
        message = None  # the _id now holds another message
    if kind is ProviderKind.SMS:
        anchor = read.evidence.get("after_id", read.after_id)
        covered = isinstance(anchor, int) and row_id > anchor
    else:
        covered = item.mms_floor_id is not None and row_id > item.mms_floor_id
    return _core.settle(
        record,
        None if message is None else message.outcome,
        None if message is None else judge(message, item.action.intent),
        now,
        complete=read.complete and covered,
        evidence={
            "read_mode": read.mode,
            **({"row": _row_evidence(message, read)} if message else {}),
        },
    )


def _anchor(watched: Sequence[Watched]) -> tuple[int, int | None]:
    """The lowest row a pass must read above, and its ``date`` when known.

    Every attempt needs the rows above its watermark: its artifact, and, once confirmed,
    further copies, which may lie below the row that confirmed it (the owner's identical text,
    taken first while ours waited in the outbox).
    """
    best: tuple[int, int | None] | None = None
    for item in watched:
        candidate = (item.floor_id, item.floor_date_ms)
        if best is None or candidate[0] < best[0]:
            best = candidate
    if best is None:
        return 0, None
    anchor_id, anchor_date = best
    return anchor_id, anchor_date if isinstance(anchor_date, int) else None


#: How far back a re-anchored read reaches for an attempt whose phone clock was never read
#: (its receipt lost with its reply): the ledger's dispatch time, less this for the phone's
#: clock running behind the ledger's.
REANCHOR_SLACK = timedelta(minutes=10)


def reanchor_before(watched: Sequence[Watched]) -> int | None:
    """Where a read whose anchor row is gone anchors again (``Phone.read_outgoing``'s
    ``reanchor_before_ms``): before the earliest moment any watched attempt's row can be
    dated (its phone clock at the send, less ``CLOCK_TOLERANCE_MS``; without one, its
    dispatch less ``REANCHOR_SLACK``). None: nothing watched."""
    bounds = []
    for item in watched:
        record = item.record
        if record.device_clock_ms is not None:
            bounds.append(record.device_clock_ms - CLOCK_TOLERANCE_MS)
        else:
            at = record.dispatched_at - REANCHOR_SLACK
            bounds.append(int(at.timestamp() * 1000))
    return max(0, min(bounds)) if bounds else None


def _time_bound(record: ActionRecord) -> bool:
    """Is there a time before which no row of this attempt can be dated (its phone clock at
    the send, or the window its fence's stage markers give)?"""
    return record.device_clock_ms is not None or send_window(record) is not None


def effective_floor(item: Watched, read: PhoneRead) -> int:
    """The ``_id`` this attempt's rows lie above, as this read shows the phone now.

    Its floor (the watermark: the highest visible row before its send) holds while that row
    is still there: each insert takes the highest ``_id`` plus one, so a row written after it
    lies above it. Once it is gone, its ``_id`` may be taken again and a later row of ours
    may lie at or below it (a deleted thread; SMS ``_id`` is ``INTEGER PRIMARY KEY`` without
    AUTOINCREMENT, ``MmsSmsDatabaseHelper`` android-10.0.0_r30 and android-15.0.0_r1). So a
    floor the read shows still there (the read's own anchor, or a visible row with that
    ``_id`` and, when known, that date) is kept; one it does not is lowered to the read's
    anchor (a row that exists), for an attempt whose rows the time window bounds: there a
    row confirms it wherever its ``_id`` falls. An attempt with no such bound keeps its
    floor (no row could be told to be its own below it).
    """
    floor = item.floor_id
    anchor = read.after_id
    if floor <= anchor or read.visible_rows is None:
        return floor
    rows = dict(read.visible_rows)
    if floor in rows and (
        rows[floor] == item.floor_date_ms
        # with no date to compare, a row still at that _id is taken for it, unless the read
        # had to anchor again (rows were deleted)
        or (item.floor_date_ms is None and read.reanchored_from is None)
    ):
        return floor
    return anchor if _time_bound(item.record) else floor


async def _fence_transitions(
    phone: Phone,
    watched: Sequence[Watched],
    planned: Sequence[Transition],
    clock: Callable[[], datetime],
    void_after: timedelta,
    void_now: Collection[str],
) -> list[Transition]:
    """Void the fences of the unresolved attempts this read did not settle; what each proves
    (stamped by ``clock`` once the phone answered)."""
    now = clock()
    settled = {transition.before.dispatch_id for transition in planned}
    candidates = [
        item.record
        for item in watched
        if _core.can_void(item.record)
        and item.record.dispatch_id not in settled
        and _voidable(item.record, now, void_after, void_now)
    ]
    return await _check_fences(phone, candidates, clock, claim=True)


async def _check_fences(
    phone: Phone, records: Sequence[ActionRecord], clock: Callable[[], datetime], *, claim: bool
) -> list[Transition]:
    """Void (``claim``) or peek at the fences of ``records`` in one round trip; what each
    proves, stamped by ``clock`` once the phone answered. A peek that finds a script claimed
    but without its keys recorded proves nothing yet: its sender may be pressing the keys
    right now, and recording the fence now would leave the window open for good (a void,
    later, sees it whole)."""
    if not records:
        return []
    pairs = [(record.dispatch_id, str(record.evidence["fence_epoch"])) for record in records]
    try:
        checks = await (phone.void(pairs) if claim else phone.peek(pairs))
    except PhoneError as exc:
        _log.warning("fence_check_failed", device=phone.device, error=str(exc))
        return []
    now = clock()
    by_id = {record.dispatch_id: record for record in records}
    transitions = []
    for check in checks:
        record = by_id.get(check.dispatch_id)
        if record is None:
            continue
        if (
            not claim
            and check.state == "claimed"
            and "keys" not in {name for name, _ms in check.stages}
        ):
            continue
        transition = _core.settle_by_fence(
            record, check.state, check.stages, now=now, voided_at=check.voided_at
        )
        if transition is not None:
            transitions.append(transition)
    return transitions


async def _fence_first(
    phone: Phone,
    watched: Sequence[Watched],
    clock: Callable[[], datetime],
    void_after: timedelta | None,
    void_now: Collection[str],
) -> list[Transition]:
    """The fences of the attempts that await one (:func:`_awaits_fence`), read before the
    pass attributes anything: voided where this pass may void (old enough, or its own sender
    gave up on it), else only peeked at (its sender may be running): a claimed fence whose
    script recorded its keys bounds the window; anything less waits for a later pass, whose
    void sees it whole (a script cut off before recording its keys leaves the window open:
    see :func:`plan_device`)."""
    now = clock()
    awaiting = [
        item.record
        for item in watched
        if item.record.delivery is DeliveryState.PENDING
        and _awaits_fence(item.record, now)
        and _core.can_void(item.record)
    ]
    # a script found past ``go`` without its keys: read again (only the marker can change)
    again = [item.record for item in watched if _keys_may_come(item.record, now)]
    if not awaiting and not again:
        return []
    voidable = [r for r in awaiting if _voidable(r, now, void_after, void_now)]
    peeked = [r for r in awaiting if r not in voidable] + again
    return [
        *await _check_fences(phone, voidable, clock, claim=True),
        *await _check_fences(phone, peeked, clock, claim=False),
    ]


def _voidable(
    record: ActionRecord, now: datetime, void_after: timedelta | None, void_now: Collection[str]
) -> bool:
    """May this pass void the attempt's fence: old enough, or its own sender gave up on it."""
    return void_after is not None and (
        record.dispatch_id in void_now or now - record.dispatched_at >= void_after
    )


def _mms_window(watched: Sequence[Watched]) -> tuple[int | None, int | None]:
    """The MMS id to read above, and the earliest date to read from, for the attempts that
    may still be confirmed by an MMS (None: none of them recorded an MMS watermark)."""
    floors = []
    dates = []
    for item in watched:
        record = item.record
        open_ = record.delivery is DeliveryState.PENDING or (
            record.acceptance is AcceptanceState.PENDING
            and record.provider_kind is ProviderKind.MMS
        )
        if not open_ or item.mms_floor_id is None:
            continue
        floors.append(item.mms_floor_id)
        if record.device_clock_ms is not None:
            dates.append(max(0, record.device_clock_ms - CLOCK_TOLERANCE_MS))
    if not floors:
        return None, None
    return min(floors), (min(dates) if len(dates) == len(floors) else None)


def _status(record: ActionRecord, action: Action, now: datetime) -> Status:
    return _core.derive_status(record, now, action.policy.grace_window)


async def _watched(
    ledger: Ledger, device: str, now: datetime, duplicate_watch: timedelta = DUPLICATE_WATCH
) -> list[Watched]:
    records = await ledger.recent_attempts(device, now - duplicate_watch)
    actions = await ledger.actions(record.action_id for record in records)
    watched = []
    for record in records:
        action = actions[record.action_id]
        if record.watermark_id is not None:
            watched.append(Watched(record=record, action=action, floor_id=record.watermark_id))
            continue
        floor, floor_date = await ledger.device_floor_row(device, record.dispatched_at)
        watched.append(
            Watched(record=record, action=action, floor_id=floor, floor_date_ms=floor_date)
        )
    return watched


async def reconcile_device(
    ledger: Ledger,
    phone: Phone,
    *,
    now: datetime | None = None,
    duplicate_watch: timedelta = DUPLICATE_WATCH,
    void_after: timedelta | None = VOID_AFTER,
    void_now: Collection[str] = (),
) -> DeviceReport:
    """One pass on one connected phone: one windowed read, one transaction.

    Unresolved attempts the read does not settle, dispatched at least ``void_after`` ago
    and created with a fence, are voided on the phone (one more round trip for all of
    them): an attempt whose send script never ran becomes FAILED, safe to retry; one whose
    script ran keeps its stages as evidence. ``None``: no fence is touched. ``void_now``:
    dispatch ids whose sender knows its command is over (it timed out), voided at any age.

    The read covers the unresolved attempts and the attempts confirmed within
    ``duplicate_watch`` (to catch copies the phone sent later); a sender polling its own
    attempt passes ``timedelta(0)`` so that its reads stay as small as its own window.
    """
    reason = ""
    for _ in range(_PASS_TRIES):
        try:
            # one pass per device at a time across hosts (PostgreSQL: an advisory lock; on
            # SQLite the snapshot check of apply_pass, under its one writer, does the work)
            async with ledger.exclusive(f"reconcile:{phone.device}"):
                return await _reconcile_device_once(
                    ledger, phone, now, duplicate_watch, void_after, void_now
                )
        except PassOutdated as exc:
            reason = str(exc)
            _log.info("reconcile_pass_redone", device=phone.device, reason=reason)
    # attempts kept starting on the phone: nothing was written; the next pass settles it
    still = len(await ledger.in_flight(phone.device))
    return DeviceReport(
        device=phone.device, reachable=True, error=f"pass not applied: {reason}", in_flight=still
    )


#: How many times a pass is tried when attempts keep starting on the device meanwhile.
_PASS_TRIES = 3


async def _reconcile_device_once(
    ledger: Ledger,
    phone: Phone,
    now: datetime | None,
    duplicate_watch: timedelta,
    void_after: timedelta | None,
    void_now: Collection[str],
) -> DeviceReport:
    # Every transition is stamped when it is decided, after the read that justifies it (never
    # before its evidence: a confirmation dated before the row it cites). A caller's ``now``
    # fixes every stamp (tests, a replayed pass).
    clock: Callable[[], datetime] = (
        (lambda: require_aware("now", now)) if now is not None else ledger.now
    )
    started = clock()
    listed_at = ledger.now()
    watched = await _watched(ledger, phone.device, started, duplicate_watch)
    if not watched:
        return DeviceReport(device=phone.device, reachable=True, in_flight=0)
    anchor_id, anchor_date = _anchor(watched)
    mms_after_id, mms_since_ms = _mms_window(watched)
    try:
        read = await phone.read_outgoing(
            after_id=anchor_id,
            anchor_date_ms=anchor_date,
            mms_after_id=mms_after_id,
            mms_since_ms=mms_since_ms,
            # the rows there are now (ids and dates) matter to an attempt not yet judged: rows
            # out of sight (see _doubt), a floor whose row is gone (see effective_floor)
            find_unseen=any(
                item.record.acceptance is AcceptanceState.PENDING
                and item.record.delivery is not DeliveryState.FAILED
                for item in watched
            ),
            reanchor_before_ms=reanchor_before(watched),
        )
    except PhoneError as exc:
        return await _unreachable(ledger, phone.device, watched, str(exc), clock())
    claimed = await ledger.claimed_provider_ids(phone.device, min(anchor_id, read.after_id))
    claimed_mms = (
        await ledger.claimed_mms_ids(phone.device, mms_after_id) if mms_after_id is not None else ()
    )
    # attempts whose round trip never ended: their fence first, so that this very pass can
    # attribute their rows inside the window its stage markers give (or fail them if voided)
    fenced = await _fence_first(phone, watched, clock, void_after, void_now)
    # the plan is decided now, after the read and the fences it rests on
    when = clock()
    after_fence = {t.after.dispatch_id: t.after for t in fenced}
    watched = [
        attrs.evolve(item, record=after_fence.get(item.record.dispatch_id, item.record))
        for item in watched
    ]
    plan = plan_device(
        watched,
        read,
        claimed,
        phone.judge,
        when,
        claimed_mms=claimed_mms,
        keys=phone if isinstance(phone, MatchKeys) else None,
    )
    transitions = [*fenced, *plan.transitions]
    if void_after is not None:
        transitions += await _fence_transitions(
            phone, watched, transitions, clock, void_after, void_now
        )
    known = {item.record.dispatch_id for item in watched}
    results, added = await ledger.apply_pass(
        transitions, plan.duplicates, now=when, snapshot=(phone.device, listed_at, known)
    )
    actions = {w.record.action_id: w.action for w in watched}
    changes = []
    for transition, result in zip(transitions, results, strict=True):
        if isinstance(result, LedgerError):
            continue
        action = actions[transition.before.action_id]
        before, after = _status(transition.before, action, when), _status(result, action, when)
        changes.append(
            Change(
                action_id=result.action_id,
                dispatch_id=result.dispatch_id,
                event=transition.event,
                from_status=before,
                to_status=after,
            )
        )
    still = len(await ledger.in_flight(phone.device))
    _log.info(
        "device_reconciled",
        device=phone.device,
        changes=len(changes),
        duplicates=added,
        complete=read.complete,
        mode=read.mode,
    )
    return DeviceReport(
        device=phone.device,
        reachable=True,
        mode=read.mode,
        round_trips=read.round_trips,
        changes=tuple(changes),
        duplicates_recorded=added,
        in_flight=still,
    )


async def _unreachable(
    ledger: Ledger, device: str, watched: Sequence[Watched], error: str, now: datetime
) -> DeviceReport:
    """A device that cannot be read changes nothing but the error recorded on its attempts."""
    notes = [
        _core.note_error(w.record, f"reconcile read failed: {error}", now=now)
        for w in watched
        if w.record.delivery is DeliveryState.PENDING
        and w.record.last_error != f"reconcile read failed: {error}"
    ]
    if notes:
        await ledger.apply_pass(notes, now=now)
    _log.warning("device_unreadable", device=device, error=error)
    in_flight = sum(1 for w in watched if w.record.delivery is DeliveryState.PENDING)
    return DeviceReport(device=device, reachable=False, error=error, in_flight=in_flight)


#: How long the fence names of a resolved attempt stay on the phone before a pass removes them.
FENCE_RETENTION = timedelta(days=7)


async def clean_fences(
    ledger: Ledger, phone: Phone, *, now: datetime, retention: timedelta = FENCE_RETENTION
) -> int:
    """Remove from the phone the fence names of attempts resolved before ``now - retention``
    (two round trips at most); names the ledger does not know are left alone. Returns how
    many attempts' names were removed; a phone that cannot be asked removes nothing."""
    try:
        names = await phone.fence_names()
    except PhoneError:
        return 0
    done: list[str] = []
    for record in (await ledger.attempts_by_id(names)).values():
        if record.device != phone.device or not record.is_final:
            continue
        ended = record.accepted_at or record.rejected_at or record.failed_at
        if ended is not None and ended <= now - retention:
            done.append(record.dispatch_id)
    if done:
        try:
            await phone.remove_fences(done)
        except PhoneError:
            return 0
    return len(done)


PhoneOpener = Callable[[str], Any]


async def bind_or_refuse(ledger: Ledger, phone: Any, key: str) -> None:
    """Bind ``phone`` (an ``AndroidPhone`` just connected at the last address of ``key``) to
    the ledger's phone ``key``, or refuse it: another phone answering there now is never read
    for ``key``'s attempts (their rows are on the phone they were sent from).

    Raises:
        PhoneUnavailable: the address now answers as another phone.
    """
    from starebrain_actions.phone.android import PhoneUnavailable

    binding = await phone.bind_in(ledger)
    if binding.key != key:
        _known, identity = await ledger.phone_identity(key)
        if identity is not None:
            raise PhoneUnavailable(
                f"{phone.address} now answers as another phone ({binding.identity}, known as"
                f" {binding.key}), not as {key} ({identity}): {key}'s attempts stay as they"
                " are until that phone answers again"
            )
        # a legacy key (named by an address before phones had identities) whose phone is
        # already known by another key: read as before, by its address
    phone.bind(key)


async def reconcile_pending(
    ledger: Ledger,
    devices: Sequence[str] | None = None,
    *,
    open_phone: PhoneOpener | None = None,
    key_path: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    now: datetime | None = None,
    read_as_system: bool | None = None,
    fence_retention: timedelta | None = None,
) -> ReconcilePass:
    """One reconcile pass over ``devices`` (default: every device with in-flight attempts).

    Each device is connected, read once and closed; devices are read concurrently. A device
    that cannot be reached is reported (``reachable=False``) and changes nothing but the
    error recorded on its attempts. ``open_phone(serial)`` returns a connected ``Phone``
    (default: the Android bridge over ADB, with ``key_path`` and ``read_as_system``).
    ``fence_retention``: also remove the fence names of attempts resolved longer ago than
    this (the nightly job passes ``FENCE_RETENTION``).
    """
    started = require_aware("now", now) if now is not None else ledger.now()
    given = devices if devices is not None else await ledger.devices_in_flight()
    # a device may be named by one of its addresses: the phone's key is what its attempts hold
    names = list(dict.fromkeys([await ledger.phone_key_for(name) for name in given]))
    if open_phone is None:
        from starebrain_actions.phone.android import AndroidPhone, PhoneUnavailable

        async def default_open(key: str) -> Phone:
            address = await ledger.phone_address(key)
            phone = await AndroidPhone.connect(
                address, key_path=key_path, read_as_system=read_as_system
            )
            try:
                await bind_or_refuse(ledger, phone, key)
            except PhoneUnavailable:
                await phone.close()
                raise
            return phone

        open_phone = default_open
    done = 0

    async def one(serial: str) -> DeviceReport:
        nonlocal done
        try:
            try:
                phone: Phone = await open_phone(serial)
            except PhoneError as exc:
                watched = await _watched(ledger, serial, started)
                return await _unreachable(ledger, serial, watched, str(exc), started)
            try:
                report = await reconcile_device(ledger, phone, now=now)
                if fence_retention is not None and report.reachable:
                    removed = await clean_fences(
                        ledger, phone, now=now or ledger.now(), retention=fence_retention
                    )
                    report = attrs.evolve(report, fences_removed=removed)
                return report
            finally:
                await phone.close()
        finally:
            done += 1
            if progress is not None:
                progress(serial, done, len(names))

    reports = await asyncio.gather(*(one(serial) for serial in names))
    finished = ledger.now() if now is None else started
    return ReconcilePass(started_at=started, finished_at=finished, devices=tuple(reports))
