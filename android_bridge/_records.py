"""Frozen records the bridge returns: messages, reads, dispatch evidence."""

from __future__ import annotations

import enum
from typing import Literal

import attrs

Mode = Literal["shell", "root"]


class MessageType(enum.IntEnum):
    """``content://sms`` ``type`` values."""

    INBOX = 1
    SENT = 2
    DRAFT = 3
    OUTBOX = 4
    FAILED = 5
    QUEUED = 6


#: Outgoing types: the candidates for a message we sent.
OUTGOING_TYPES: tuple[int, ...] = (
    MessageType.SENT,
    MessageType.OUTBOX,
    MessageType.FAILED,
    MessageType.QUEUED,
)


@attrs.frozen(kw_only=True)
class SmsMessage:
    """One row of the phone's SMS provider, as read over ADB."""

    #: Provider row id (``_id``), unique per device and never reused.
    id: int
    #: Conversation thread id.
    thread_id: int | None
    #: Recipient (outgoing) or sender (incoming), exactly as stored.
    address: str | None
    #: Full message text (a multipart SMS is one row).
    body: str | None
    #: ``type``: 1 inbox, 2 sent, 3 draft, 4 outbox, 5 failed, 6 queued.
    type: int
    #: ``status``: -1 none, 0 complete, 32 pending, 64 failed.
    status: int | None
    #: ``date``: when the row was written, device clock, ms since the epoch.
    date_ms: int | None
    #: ``date_sent``: when it was sent (0 or NULL if unknown), ms since the epoch.
    date_sent_ms: int | None
    #: Subscription (SIM) id.
    sub_id: int | None
    #: Radio error code (0 when none).
    error_code: int | None
    #: Package that wrote the row.
    creator: str | None


@attrs.frozen(kw_only=True)
class MmsMessage:
    """One outgoing MMS of ``content://mms``, with its recipients and text (see ``_mms``)."""

    #: ``pdu`` row id (``_id``): its own id space, apart from SMS ``_id``\ s.
    id: int
    #: Conversation thread id.
    thread_id: int | None
    #: ``msg_box``: 1 inbox, 2 sent, 3 drafts, 4 outbox, 5 failed.
    msg_box: int
    #: Recipients (``addr`` rows of type TO, CC, BCC), as stored.
    addresses: tuple[str, ...]
    #: The text/plain parts joined in ``seq`` order, or None when there is none.
    body: str | None
    #: ``date`` in ms (the provider stores seconds).
    date_ms: int | None
    #: ``date_sent`` in ms, None when unset.
    date_sent_ms: int | None
    #: Subscription (SIM) id.
    sub_id: int | None
    #: Package that wrote the row (the raw printed value).
    creator: str | None


@attrs.frozen(kw_only=True)
class ProviderRead:
    """The result of one windowed read of ``content://sms``."""

    #: Rows in the window (the anchor row excluded), ascending ``_id``.
    rows: tuple[SmsMessage, ...]
    #: True only when the read *proves* the window is whole: the anchor row came back.
    complete: bool
    #: "shell" or "root": who the shell ran as (both read the restricted view: types 1, 2).
    mode: Mode
    #: Types the provider could show to this reader: 1 and 2 in the restricted view, every
    #: type when read as the system uid. Absence of a row is never a proof on its own.
    visible_types: tuple[int, ...]
    #: The anchor ``_id`` (the watermark) this read was windowed on.
    after_id: int
    #: Lower bound on ``date`` applied, if any (ms).
    since_ms: int | None
    #: Highest ``_id`` seen in this read (the anchor if nothing newer), for the next window.
    max_seen_id: int
    #: Shell round trips this read took.
    round_trips: int
    #: Why the read is not complete, when it is not.
    incomplete_reason: str | None = None
    #: Outgoing MMS above the MMS watermark, when the read was asked for them.
    mms_rows: tuple[MmsMessage, ...] = ()
    #: ``_id`` ranges (inclusive) above the anchor and below the highest visible row that no
    #: row this reader can see holds, when the read was asked for them (None: not asked).
    #: ``_id`` is ``INTEGER PRIMARY KEY`` in ``mmssms.db``, so ids grow with each insert: a
    #: gap is a row out of this reader's sight (outbox, failed, queued, draft in the
    #: restricted view) or a deleted one. It says nothing of rows above the highest visible.
    unseen_ids: tuple[tuple[int, int], ...] | None = None
    #: ``(_id, date)`` of every row above the anchor this reader can see, of any type, when
    #: the read was asked for the unseen ids (None: not asked): which rows exist now, so that
    #: a watermark can be told from a later row that took its reused ``_id``.
    visible_rows: tuple[tuple[int, int | None], ...] | None = None
    #: True when the anchor row came back with its date (it exists, unchanged)
    anchor_present: bool = False
    #: The anchor the read was asked for, when that row was gone (or its ``_id`` held
    #: another row) and the read was anchored again at a row that exists now (see
    #: ``SmsReader.read_since``'s ``reanchor_before_ms``); None otherwise.
    reanchored_from: int | None = None


@attrs.frozen(kw_only=True)
class DispatchEvidence:
    """What the phone showed around one send: everything needed to find the artifact later."""

    #: Device serial or host:port.
    device: str
    #: Highest visible ``content://sms`` ``_id`` just before the send (0: none visible).
    watermark_id: int
    #: True when the watermark is proven (a known row came back in the same query).
    watermark_proven: bool
    #: ``date`` of the watermark row, to tell it from a later row reusing its ``_id``.
    watermark_date_ms: int | None
    #: Device clock just before the send, ms since the epoch (None if it printed garbage).
    device_clock_ms: int | None
    #: What ``am start`` printed.
    am_output: str
    #: What the key events printed (normally nothing).
    input_output: str
    #: Mode the device shell ran in.
    mode: Mode
    #: Shell round trips the dispatch took.
    round_trips: int
    #: Highest visible ``content://mms`` ``_id`` just before the send (0: none visible).
    mms_watermark_id: int = 0
    #: True when the send script claimed the attempt's fence on the phone before ``am``.
    fence_claimed: bool = False
    #: The phone's clock (ms) right before the first key and right after the last (the UI
    #: path): the app wrote the attempt's row in between. None: not printed.
    keys_window_ms: tuple[int, int] | None = None
