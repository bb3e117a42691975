"""What the ledger side needs from a phone, as small protocols and frozen records.

The agent and the reconciler see a phone only through :class:`Phone`; the Android adapter
(``starebrain_actions.phone.android``) implements it over ``android_bridge``. Nothing here knows
what ADB is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from starebrain_actions.core.model import ArtifactOutcome, MatchVerdict, ProviderKind, SmsIntent


@attrs.frozen(kw_only=True)
class OutgoingMessage:
    """One outgoing message of the phone's SMS store, or of its MMS store (a text the app
    converted to MMS)."""

    #: the provider row id (``_id``), unique per device and kind
    provider_object_id: int
    #: what the row's type says about delivery
    outcome: ArtifactOutcome
    #: the raw provider type (2 sent, 4 outbox, 5 failed, 6 queued)
    type: int
    #: recipient as stored
    recipient: str | None
    #: body as stored
    body: str | None
    #: when the row was written, device clock, ms since the epoch
    date_ms: int | None
    #: which store holds it: ``content://sms`` or ``content://mms`` (their ids are separate)
    kind: ProviderKind = ProviderKind.SMS
    #: every recipient of an MMS (``recipient`` is set only when there is exactly one)
    recipients: tuple[str, ...] = ()
    #: the package that wrote the row, as the provider recorded it (None when unknown)
    creator: str | None = None


@attrs.frozen(kw_only=True)
class IncomingMessage:
    """One incoming row (``type`` 1, inbox) of the phone's SMS store: a reply, maybe."""

    #: the provider row id (``_id``); with ``date_ms``, which message it is (ids are reused)
    provider_object_id: int
    #: the row's ``date``: when the phone received it, device clock, ms since the epoch
    date_ms: int
    #: the sender, normalised as a recipient is (E.164 read in the phone's region, or a short
    #: code's digits); None when it is neither (an alphanumeric sender, a malformed address)
    number: str | None
    #: the text as stored
    body: str | None


@attrs.frozen(kw_only=True)
class PhoneRead:
    """One windowed read of a phone's outgoing messages."""

    #: rows above the anchor, ascending id
    messages: tuple[OutgoingMessage, ...]
    #: True when the read is proven whole (the anchor row came back)
    complete: bool
    #: True when every outgoing type (sent, outbox, failed, queued) is visible to this reader
    #: (the system uid's view); absence from a read still proves nothing (RCS, MMS)
    full_view: bool
    #: "shell" or "root"
    mode: str
    #: shell round trips spent
    round_trips: int
    #: about the read, JSON-able (window, why incomplete...)
    evidence: Mapping[str, Any] = attrs.field(factory=dict)
    #: SMS ``_id`` ranges (inclusive) above the read's anchor and below its highest visible row
    #: that no row this reader can see holds: rows out of sight (outbox, failed, queued, a
    #: draft) or deleted ones. None: not asked for, or not known.
    unseen_ids: tuple[tuple[int, int], ...] | None = None
    #: ``(_id, date)`` of every SMS row above the anchor this reader can see, of any type
    #: (asked for with the unseen ids; None: not known): which rows exist now
    visible_rows: tuple[tuple[int, int | None], ...] | None = None
    #: the SMS ``_id`` the read is anchored at: every row above it was read (when
    #: ``complete``); it may lie below the anchor asked for, when that row was gone
    after_id: int = 0
    #: the anchor asked for, when that row was gone (or its ``_id`` reused) and the read was
    #: anchored again at a row that exists now (None otherwise)
    reanchored_from: int | None = None
    #: incoming rows (``type`` 1) above the anchor, read in the same round trips as the
    #: outgoing ones (replies, maybe: ``Ledger.record_replies`` keeps those of numbers the
    #: ledger has texted); empty when the reader did not ask for them or could not read them
    incoming: tuple[IncomingMessage, ...] = ()


@attrs.frozen(kw_only=True)
class DispatchReceipt:
    """What a phone showed around one send: what later reads correlate by."""

    #: highest provider id visible just before the send
    watermark_id: int | None
    #: the device clock just before the send, ms since the epoch
    device_clock_ms: int | None
    #: JSON-able extras (watermark date, mode, round trips)
    evidence: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class FenceCheck:
    """What the fence on the phone showed for one attempt (see ``android_bridge._fence``)."""

    dispatch_id: str
    #: "voided" (nothing was or can be sent), "claimed" (the send script started), "lost"
    #: (the fence folder was cleared: no proof either way), or, from a peek only, "open"
    #: (the script has not claimed its keys yet: not started, or on its way)
    state: str
    #: stage markers the script left, ``(stage, phone clock ms)``
    stages: tuple[tuple[str, int], ...] = ()
    #: for "voided": "claim" (the script never started) or "go" (it started but can never
    #: press the keys)
    voided_at: str | None = None


@attrs.frozen(kw_only=True)
class LedgerMarks:
    """Which ledgers the fence on a phone names (``android_bridge._fence.read_ledgers``)."""

    #: the ledger whose send script claimed a fence on the phone last (None: none marked)
    last: str | None = None
    #: ``dispatch_id -> ledger id`` of each attempt whose mark is still on the phone (its
    #: ledger removes the mark once it finds the attempt resolved)
    attempts: Mapping[str, str] = attrs.field(factory=dict)


class MarksLedgers(Protocol):
    """A phone whose send scripts mark their fence with the ledger's own id (the Android
    adapter); the others are never checked for another ledger."""

    #: the id each send's fence claim records (None: none is recorded)
    ledger_id: str | None

    async def ledger_marks(self) -> LedgerMarks:
        """Read which ledgers the fence names (one round trip).

        Raises:
            LookupFailed: the phone could not be asked.
        """
        ...

    async def forget_ledger_marks(self, ledger_id: str, dispatch_ids: Sequence[str]) -> None:
        """Remove the marks of ledger ``ledger_id`` of these resolved attempts (one round
        trip).

        Raises:
            LookupFailed: the phone could not be asked.
        """
        ...


class Phone(Protocol):
    """A phone that can send one SMS and read back what it sent."""

    @property
    def device(self) -> str:
        """The device's name in the ledger (ADB serial or host:port)."""
        ...

    async def dispatch(
        self,
        intent: SmsIntent,
        *,
        fence: tuple[str, str] | None = None,
        path: str | None = None,
    ) -> DispatchReceipt:
        """Send the intent once; with ``fence=(dispatch_id, epoch)`` the send first claims the
        attempt's fence on the phone and sends nothing if it cannot. ``path`` ("ui" or
        "framework"): the send path the attempt's receipt names (None: the phone's own).

        Raises:
            DispatchNotSent: provably nothing was sent.
            DispatchOutcomeUnknown: it may have been sent.
        """
        ...

    async def fence_epoch(self) -> str:
        """The phone's fence epoch (created if there is none), to note on a new attempt.

        Raises:
            LookupFailed: the phone could not be asked.
        """
        ...

    async def void(self, attempts: Sequence[tuple[str, str]]) -> tuple[FenceCheck, ...]:
        """Claim the fence of each ``(dispatch_id, epoch)`` before its send script can, or
        learn that the script did. Never sends.

        Raises:
            LookupFailed: the phone could not be asked; nothing is proven.
        """
        ...

    async def peek(self, attempts: Sequence[tuple[str, str]]) -> tuple[FenceCheck, ...]:
        """Read the fence of each ``(dispatch_id, epoch)`` without claiming anything, for an
        attempt whose sender may still be running. Never sends, never voids.

        Raises:
            LookupFailed: the phone could not be asked; nothing is proven.
        """
        ...

    async def read_outgoing(
        self,
        *,
        after_id: int,
        anchor_date_ms: int | None,
        mms_after_id: int | None = None,
        mms_since_ms: int | None = None,
        find_unseen: bool = False,
        reanchor_before_ms: int | None = None,
    ) -> PhoneRead:
        """Read outgoing rows above ``after_id`` (a row known to exist), the incoming ones
        too where the same round trips can carry them (``PhoneRead.incoming``), and outgoing MMS
        above ``mms_after_id`` dated from ``mms_since_ms`` on when it is given.
        ``find_unseen``: also report which SMS ids above ``after_id`` no visible row holds
        (``PhoneRead.unseen_ids``) and every visible row's ``_id`` and date
        (``PhoneRead.visible_rows``). ``reanchor_before_ms``: when the row at ``after_id``
        is gone (ids are reused), read from the highest row dated before this instead
        (``PhoneRead.after_id``, ``reanchored_from``).

        Raises:
            LookupFailed: the read failed; it proves nothing (``LinkDown``: the phone did
                not answer at all, so its fences cannot be read either).
        """
        ...

    def judge(self, message: OutgoingMessage, intent: SmsIntent) -> MatchVerdict:
        """Does ``message`` carry ``intent``? ``details`` holds ``recipient_ok``/``body_ok``."""
        ...

    async def fence_names(self) -> tuple[str, ...]:
        """Dispatch ids that have fence names on the phone.

        Raises:
            LookupFailed: the phone could not be asked.
        """
        ...

    async def remove_fences(self, dispatch_ids: Sequence[str]) -> None:
        """Remove the fence names of these resolved attempts.

        Raises:
            LookupFailed: the phone could not be asked.
        """
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...
