"""The attempts a reconcile pass watches, and where their rows can lie (pure).

An attempt's rows lie above its floor (its watermark, while that row is still there), are
dated no earlier than its device clock allows and, on the UI path, inside its send window
once that is known, and are claimed by no other attempt (:class:`Taken`). What a pass must
read follows from its watched attempts: above the lowest floor (:func:`read_anchor`), and the
MMS rows of the attempts an MMS may still confirm (:func:`mms_window`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import attrs

from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    DeliveryState,
    ProviderKind,
)
from starebrain_actions.core.ports import OutgoingMessage, PhoneRead

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
#: read again (:func:`keys_may_come`): its keys may be being pressed right now.
SCRIPT_FINISH_WITHIN = timedelta(seconds=60)


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


def row_key(message: OutgoingMessage) -> tuple[ProviderKind, int]:
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


def is_row_of(message: OutgoingMessage, record: ActionRecord) -> bool:
    """Is ``message`` the very row that confirmed ``record`` (its ``_id`` and, when known, its
    date: an ``_id`` reused by another message is not it)?"""
    return (
        record.provider_object_id == message.provider_object_id
        and (record.provider_kind or ProviderKind.SMS) is message.kind
        and (record.provider_row_date_ms is None or record.provider_row_date_ms == message.date_ms)
    )


def written_by(message: OutgoingMessage, item: Watched) -> bool:
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


def dated_outside(message: OutgoingMessage, record: ActionRecord) -> bool:
    """Is the row provably not this UI-path attempt's by its date? The messaging app dates
    its row when the send is pressed, and keeps that date when the radio answers (AOSP
    Messaging: ``MessageData``'s received timestamp, set when the message is created, is what
    ``MmsUtils.updateSmsMessageSendingStatus`` writes to ``date``; packages/apps/Messaging at
    android-14.0.0_r50), so a row dated after the send window closed is someone else's. On
    the framework path the framework dates the row when the radio answers
    (``SMSDispatcher.SmsTracker.persistSentMessageIfRequired`` puts
    ``System.currentTimeMillis()``), which may be long after the window: there ``creator``
    tells the rows apart instead, and the date proves nothing."""
    if _decisions.on_framework_path(record):
        return False
    return _in_window(message, record) is False


def provably_ours(message: OutgoingMessage, record: ActionRecord) -> bool:
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


def awaits_fence(record: ActionRecord, now: datetime) -> bool:
    """A UI-path attempt whose send window is unknown (its round trip never ended: killed,
    cut off, timed out, or still running in another process) while its fence can still say
    what happened: no row is attributed to it until a pass has read that fence (voided: it
    never sent; claimed: its stage markers bound the window), nor while a script found past
    ``go`` may still record its keys (:func:`keys_may_come`). Without this, the owner's
    identical text would be taken for a message the attempt never sent."""
    return keys_may_come(record, now) or (
        not _decisions.on_framework_path(record)
        and isinstance(record.evidence.get("fence_epoch"), str)
        and record.evidence.get("fence") != "lost"
        and send_window(record) is None
    )


def keys_may_come(record: ActionRecord, now: datetime) -> bool:
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


def above_floor(message: OutgoingMessage, item: Watched) -> bool:
    if message.kind is ProviderKind.MMS:
        floor = item.mms_floor_id
        return floor is not None and message.provider_object_id > floor
    return message.provider_object_id > item.floor_id


def read_anchor(watched: Sequence[Watched]) -> tuple[int, int | None]:
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


def mms_window(watched: Sequence[Watched]) -> tuple[int | None, int | None]:
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
