"""The ``Phone`` port over ``android_bridge``: the only place the two packages meet.

Bridge errors are translated by what they prove: ``NotSent`` (and ``CommandRejected``) means
nothing was sent; ``DeviceUnreachable`` too, and also that nothing was learnt about the
message (``DispatchUnreachable``: the attempt keeps the budget), as ``FenceLost`` does (the
fence folder was cleared: ``DispatchFenceLost``, and the epoch is asked again); every other
failure of a send means the outcome is unknown; every failure of a read proves nothing.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from android_bridge import (
    OUTGOING_TYPES,
    BridgeError,
    Device,
    DeviceUnreachable,
    DeviceUnusable,
    FenceLost,
    FrameworkDispatcher,
    MessageType,
    MessagingApp,
    NotSent,
    OutcomeUnknown,
    PhoneNotReady,
    ProviderRead,
    SmsDispatcher,
    SmsMessage,
    SmsReader,
    ensure_epoch,
    forget_ledger_marks,
    list_fences,
    message_matches_intent,
    normalize_body,
    normalize_recipient,
    peek_fences,
    probe_framework_send,
    read_ledgers,
    remove_fences,
    void_fences,
)
from android_bridge._device import handshake_failure, handshake_lasting
from android_bridge._fence import LISTING_STEP, parse_listing
from android_bridge._framework import SHELL_PACKAGE
from android_bridge.exceptions import KeyPermissionError, UnparseableOutput
from starebrain_actions._logging import get_logger
from starebrain_actions.core.exceptions import (
    DispatchFenceLost,
    DispatchNotReady,
    DispatchNotSent,
    DispatchOutcomeUnknown,
    DispatchUnreachable,
    LinkDown,
    LookupFailed,
    PhoneError,
)
from starebrain_actions.core.model import ArtifactOutcome, MatchVerdict, ProviderKind, SmsIntent
from starebrain_actions.core.ports import (
    DispatchReceipt,
    FenceCheck,
    IncomingMessage,
    LedgerMarks,
    OutgoingMessage,
    PhoneRead,
)
from starebrain_actions.phone.send_path import (
    FrameworkProof,
    check_send_path,
    framework_refusal,
)

if TYPE_CHECKING:
    from android_bridge._check import Check
    from starebrain_actions.ledger.phones import PhoneBinding
    from starebrain_actions.ledger.store import Ledger

_log = get_logger("starebrain.phone")

#: ``1``: every phone opened without an explicit choice reads through ``su 1000``.
READ_AS_SYSTEM_ENV = "STAREBRAIN_READ_AS_SYSTEM"

_CODE_POINTS = re.compile(r"expected U\+[0-9A-F]+, found U\+[0-9A-F]+")

#: The ``type`` values each read asks for: the outgoing ones and the inbox (replies), in the
#: same queries (the window's ``type IN (...)`` filter), so replies cost no round trip.
READ_TYPES: tuple[int, ...] = (1, *OUTGOING_TYPES)

_OUTCOMES = {
    2: ArtifactOutcome.SENT,
    4: ArtifactOutcome.QUEUED,
    5: ArtifactOutcome.FAILED,
    6: ArtifactOutcome.QUEUED,
}


#: Slack added to a send's round trip for the window its row must be dated in (clock reads).
SEND_WINDOW_MARGIN_MS = 500

#: ``msg_box`` of an outgoing MMS: 2 sent, 4 outbox, 5 failed.
_MMS_OUTCOMES = {
    2: ArtifactOutcome.SENT,
    4: ArtifactOutcome.QUEUED,
    5: ArtifactOutcome.FAILED,
}


#: Messaging apps that send to reachable recipients as RCS chat, which never reaches the SMS
#: provider (Google Messages' and Samsung Messages' chat features).
RCS_CAPABLE_APPS = frozenset({"com.google.android.apps.messaging", "com.samsung.android.messaging"})
_ACTIVITY_LINE = re.compile(r"^Activity: ([A-Za-z0-9_.]+)/", re.MULTILINE)


#: The lines of ``am start -W`` kept as the attempt's ``launch`` evidence (ActivityManager
#: ShellCommand's ``WaitResult`` lines, android-10.0.0_r30 to 15.0.0_r1: ``LaunchState`` from
#: 12): what ``starebrain doctor --send-test`` reports as the app's launch path.
_LAUNCH_LINE = re.compile(
    r"^(Activity|LaunchState|ThisTime|TotalTime|WaitTime): (.+)$", re.MULTILINE
)


def _app_evidence(am_output: str) -> dict[str, object]:
    """Which app ``am start -W`` launched, whether it can send as RCS chat, and how the
    launch went (``launch``: its ``WaitResult`` lines, by name)."""
    match = _ACTIVITY_LINE.search(am_output)
    if match is None:
        return {}
    package = match.group(1)
    launch = {name: value.strip() for name, value in _LAUNCH_LINE.findall(am_output)}
    return {"messaging_app": package, "rcs_possible": package in RCS_CAPABLE_APPS, "launch": launch}


async def choose_send_path(
    device: Device,
    proof: FrameworkProof | None,
    name: str | None = None,
    body: str | None = None,
) -> tuple[str, str]:
    """``auto``'s choice on ``device`` ("ui" or "framework"), and why (see ``phone.send_path``);
    ``starebrain devices`` shows it too. ``name``: the phone's key in the ledger (default:
    the address it was reached at). ``body``: the text about to be sent (the framework path
    sends one SMS only); None: any text that fits one."""
    probe = await probe_framework_send(device)
    if probe is not True:
        return "ui", f"the framework path is not open: {probe}"
    refusal = framework_refusal(body) if body is not None else None
    if refusal is not None:
        return "ui", refusal
    if proof is None:
        return "ui", "no ledger to prove the framework path by"
    proven, why = await proof(name if name is not None else device.serial, device)
    return ("framework" if proven else "ui"), why


class PhoneUnavailable(PhoneError):
    """The phone could not be connected to at all (nothing was sent or read). ``retryable``:
    it did not answer, or refused us for now (not authorised yet, its link is down), so a
    later try may succeed; False for what no waiting mends (another phone answers at the
    address, a malformed address, an unknown send path)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def connect_lasting(error: BaseException) -> bool:
    """Did a connection a caller's deadline cut short reach a port that is not an ADB device
    (waiting does not mend it)? Pass the ``TimeoutError``, as to ``connect_failure``."""
    return handshake_lasting(error)


def connect_failure(error: BaseException) -> str | None:
    """Why a connection that a caller's deadline cut short could not have succeeded anyway
    ("…: the phone has not authorised this key…", "…: not an ADB device…"), or None: for a
    caller turning its ``asyncio.timeout`` around ``AndroidPhone.connect`` into
    ``PhoneUnavailable``, pass it the ``TimeoutError``."""
    return handshake_failure(error)


class AndroidPhone:
    """A phone reached over ADB through ``android_bridge``."""

    def __init__(
        self,
        device: Device,
        *,
        region: str,
        app: MessagingApp | None = None,
        loose_whitespace: bool = False,
        send_path: str = "ui",
        path_choice: str = "",
        framework_proof: FrameworkProof | None = None,
    ) -> None:
        if send_path not in ("ui", "framework"):
            raise ValueError("send_path must be 'ui' or 'framework'")
        self._device = device
        self._region = region
        #: "ui" (the messaging app, through am and key events) or "framework" (``service
        #: call isms`` as the shell user: no UI, no RCS, rows marked com.android.shell)
        self.send_path = send_path
        #: why ``auto`` chose ``send_path`` ("" when the caller named the path)
        self.path_choice = path_choice
        #: set with ``auto``: :meth:`choose_path` asks it again before each send
        self._framework_proof = framework_proof
        self._app = app
        #: one dispatcher per path, kept (the framework's counts its sends for the usage limit)
        self._dispatchers: dict[str, SmsDispatcher | FrameworkDispatcher] = {}
        self._reader = SmsReader(device)
        self._loose_whitespace = loose_whitespace
        #: the fence epoch, asked once per connection (the first round trip's listing
        #: gives it when the phone has one)
        self._epoch: str | None = None
        #: the ledgers' marks the first round trip read, given once by ``ledger_marks``
        self._marks: LedgerMarks | None = None
        #: the ledger's own id, recorded by each send's fence claim (``bind_in`` sets it;
        #: None: no mark is made)
        self.ledger_id: str | None = None
        #: the phone's name in the ledger (``bind``); its address until bound
        self._key = device.serial

    @classmethod
    async def connect(
        cls,
        serial: str,
        *,
        key_path: str | Path | None = None,
        connect_timeout_s: float = 5.0,
        command_timeout_s: float = 20.0,
        default_region: str = "US",
        app: MessagingApp | None = None,
        read_as_system: bool | None = None,
        send_path: str = "ui",
        framework_proof: FrameworkProof | None = None,
    ) -> AndroidPhone:
        """Connect and authenticate to ``serial`` (``host:port``).

        ``read_as_system``: read through ``su 1000`` (userdebug/eng builds), which also sees
        outbox, failed and queued rows (default: ``$STAREBRAIN_READ_AS_SYSTEM`` is ``1``).
        ``send_path``: "ui" (the messaging app), "framework" (``service call isms``, no UI and
        no RCS), or "auto": the framework when the probe passes and
        ``framework_proof(name, device)`` says the phone's own framework jar, or its record,
        proves it on this build (``ro.build.fingerprint``), else the app (without
        ``framework_proof``, always the app); see ``phone.send_path``.

        Raises:
            PhoneUnavailable: the device cannot be reached, is not an ADB device, or has not
                authorised the key (the message says which).
            KeyPermissionError: the ADB private key is readable by others, or (its subclass
                ``KeyFileError``) unreadable or not a key: "bad key file PATH".
        """
        if read_as_system is None:
            read_as_system = os.environ.get(READ_AS_SYSTEM_ENV, "") == "1"
        try:
            device = await Device.connect(
                serial,
                key_path=key_path,
                connect_timeout_s=connect_timeout_s,
                command_timeout_s=command_timeout_s,
                default_region=default_region,
                read_as_system=read_as_system,
                # the fence's listing rides in the facts' round trip: the ledgers' marks and
                # the epoch cost none of their own (``_fence.LISTING_STEP``)
                also=(LISTING_STEP,),
            )
            region = await device.region()
            choice = ""
            if send_path == "auto":
                send_path, choice = await choose_send_path(device, framework_proof)
            if send_path not in ("ui", "framework"):
                await device.close()
                raise PhoneUnavailable(f"{serial}: unknown send path {send_path!r}")
        except KeyPermissionError:
            raise
        except DeviceUnusable as exc:
            raise PhoneUnavailable(str(exc)) from exc
        except DeviceUnreachable as exc:
            raise PhoneUnavailable(str(exc), retryable=True) from exc
        except BridgeError as exc:
            raise PhoneUnavailable(str(exc)) from exc
        except ValueError as exc:  # a malformed serial: the message quotes it (repr)
            raise PhoneUnavailable(str(exc)) from exc
        phone = cls(
            device,
            region=region,
            app=app,
            send_path=send_path,
            path_choice=choice,
            framework_proof=framework_proof if choice else None,
        )
        if device.first_outputs:
            found, phone._epoch = parse_listing(device.first_outputs[0].output)
            phone._marks = LedgerMarks(last=found.last, attempts=dict(found.attempts))
        return phone

    def _dispatcher_for(self, path: str) -> SmsDispatcher | FrameworkDispatcher:
        """The dispatcher of send path ``path``."""
        known = self._dispatchers.get(path)
        if known is None:
            known = (
                FrameworkDispatcher(self._device)
                if path == "framework"
                else SmsDispatcher(self._device, app=self._app)
            )
            self._dispatchers[path] = known
        return known

    def check_body(self, body: str) -> None:
        """Refuse ``body`` when the send path the caller named cannot send it (more than one
        SMS segment on ``framework``: ``phone.send_path.check_send_path``); with ``auto``, nothing
        (it takes the app for such a body). Call it before anything is recorded.

        Raises:
            InvalidInput: the path cannot send ``body``.
        """
        if self._framework_proof is None:
            check_send_path(self.send_path, body)

    async def choose_path(self, body: str | None = None) -> None:
        """With ``auto``, choose the path again from the ledger's proof as it is now (a
        framework send that went to review since turns the next one back to the app) and for
        ``body`` (one of more than one SMS goes through the app); call it before an attempt's
        receipt, so that the receipt's path evidence and the send agree. No round trip: the
        probe reads the connection's facts. Without ``auto``: nothing."""
        if self._framework_proof is None:
            return
        path, why = await choose_send_path(
            self._device, self._framework_proof, self._key, body=body
        )
        if (path, why) != (self.send_path, self.path_choice):
            if path != self.send_path:
                _log.info("send_path_changed", device=self.device, send_path=path, why=why)
            self.send_path, self.path_choice = path, why

    @property
    def device(self) -> str:
        """The ledger's name for the phone: its key once bound (``bind``: one name whatever
        address reaches it), its address before."""
        return self._key

    @property
    def address(self) -> str:
        """The address this connection reached the phone at (``host:port``, ``usb:SERIAL``)."""
        return self._device.serial

    @property
    def replaced(self) -> str | None:
        """Why this connection no longer uses the phone it bound (another phone answers at
        its address now: wiped, reset or replaced); None while it does. For good: connect
        again (the phone behind the address is then bound afresh)."""
        return self._device.replaced

    @property
    def identity(self) -> str | None:
        """The phone's own identity as read in the connection's first round trip
        (``android_id:<hex>``, else a serial that names one phone; None: neither)."""
        facts = self._device.cached_facts
        return facts.identity if facts is not None else None

    @property
    def serialno(self) -> str | None:
        """``ro.serialno`` as read when it connected (None when empty or unknown)."""
        facts = self._device.cached_facts
        return facts.serialno or None if facts is not None else None

    def bind(self, key: str) -> None:
        """Name the phone by ``key`` in the ledger (``Ledger.bind_phone``'s answer)."""
        if not key:
            raise ValueError("a phone key must not be empty")
        self._key = key

    async def bind_in(self, ledger: Ledger) -> PhoneBinding:
        """Name the phone as ``ledger`` knows it (``Ledger.bind_phone``: one key whatever
        address reaches it; another phone at a known address gets a key of its own) and
        return the binding; the connection is closed when that fails."""
        try:
            binding = await ledger.bind_phone(self.address, self.identity, serialno=self.serialno)
            ledger_id = await ledger.ledger_id()
        except BaseException:
            await self.close()
            raise
        self.bind(binding.key)
        self.ledger_id = ledger_id  # each send's fence claim records it
        return binding

    @property
    def region(self) -> str:
        """The device's region, used for national numbers."""
        return self._region

    @property
    def round_trips(self) -> int:
        """Shell round trips made so far on this connection."""
        return self._device.round_trips

    async def dispatch(
        self,
        intent: SmsIntent,
        *,
        fence: tuple[str, str] | None = None,
        path: str | None = None,
    ) -> DispatchReceipt:
        """Send once; see ``Phone.dispatch``. ``path``: the path the attempt's receipt names
        (None: the phone's current one); with ``auto`` the current one may have changed since
        the receipt was written, and the send must go the way the receipt says."""
        path = self.send_path if path is None else path
        if path not in ("ui", "framework"):
            raise ValueError("path must be 'ui' or 'framework'")
        started = time.monotonic()
        try:
            evidence = await self._dispatcher_for(path).send(
                intent.recipient, intent.body, fence=fence, ledger_id=self.ledger_id
            )
        except DeviceUnreachable as exc:
            raise DispatchUnreachable(str(exc)) from exc
        except PhoneNotReady as exc:
            raise DispatchNotReady(str(exc), reason=exc.reason, remedy=exc.remedy) from exc
        except FenceLost as exc:
            self._epoch = None  # the next attempt is noted with the phone's new epoch
            raise DispatchFenceLost(str(exc)) from exc
        except NotSent as exc:
            raise DispatchNotSent(str(exc)) from exc
        except BridgeError as exc:
            raise DispatchOutcomeUnknown(str(exc)) from exc
        return DispatchReceipt(
            watermark_id=evidence.watermark_id if evidence.watermark_proven else None,
            device_clock_ms=evidence.device_clock_ms,
            evidence={
                "watermark_id": evidence.watermark_id,
                "watermark_proven": evidence.watermark_proven,
                "watermark_date_ms": evidence.watermark_date_ms,
                "mode": evidence.mode,
                "round_trips": evidence.round_trips,
                "mms_watermark_id": evidence.mms_watermark_id,
                **({"fence": "claimed"} if evidence.fence_claimed else {}),
                **(
                    {"keys_window_ms": list(evidence.keys_window_ms)}
                    if evidence.keys_window_ms is not None
                    else {}
                ),
                # the keys were pressed, and the app wrote its row, between the device clock
                # read before the send and the end of this round trip
                "send_window_ms": int((time.monotonic() - started) * 1000) + SEND_WINDOW_MARGIN_MS,
                **(
                    _app_evidence(evidence.am_output)
                    if path == "ui"
                    else self._framework_evidence()
                ),
            },
        )

    def path_evidence(self) -> dict[str, str]:
        """What an attempt must know of the send path before it is sent: on the framework
        path, the package the framework will name as the row's ``creator`` (so that an attempt
        whose round trip never ended is still attributed by creator, not by date) and the
        phone's build; with ``auto``, why it took the path."""
        # why ``auto`` took this path, for whoever reads the attempt later
        why = {"path_choice": self.path_choice} if self.path_choice else {}
        if self.send_path == "framework":
            return {**self._framework_evidence(), **why}
        return why

    def _framework_evidence(self) -> dict[str, str]:
        # the build the send went out on: what a confirmed row proves (``phone.send_path``)
        return {"send_path": "framework", "creator": SHELL_PACKAGE, "build": self.build}

    @property
    def build(self) -> str:
        """The phone's ``ro.build.fingerprint`` as read when it connected ("" if unknown)."""
        facts = self._device.cached_facts
        return facts.build if facts is not None else ""

    def _failed(self, step: str, exc: BaseException) -> str:
        """``<device>: <step><what the bridge said>``, the device named once (the bridge's
        messages already start with it)."""
        text = str(exc)
        prefix = f"{self.address}: "
        return prefix + step + (text[len(prefix) :] if text.startswith(prefix) else text)

    async def fence_epoch(self) -> str:
        """The phone's fence epoch, asked once per connection (the first round trip's
        listing names it when the phone has one; else it is made here, one round trip); see
        ``Phone.fence_epoch``."""
        if self._epoch is None:
            try:
                self._epoch = (await ensure_epoch(self._device)).epoch
            except (DeviceUnreachable, OutcomeUnknown) as exc:
                raise LinkDown(self._failed("fence epoch: ", exc)) from exc
            except BridgeError as exc:
                raise LookupFailed(self._failed("fence epoch: ", exc)) from exc
        return self._epoch

    async def void(self, attempts: Sequence[tuple[str, str]]) -> tuple[FenceCheck, ...]:
        """Void the fences of these attempts, or learn their scripts ran; see ``Phone.void``."""
        return await self._fences(attempts, claim=True)

    async def peek(self, attempts: Sequence[tuple[str, str]]) -> tuple[FenceCheck, ...]:
        """Read the fences of these attempts, claiming nothing; see ``Phone.peek``."""
        return await self._fences(attempts, claim=False)

    async def _fences(
        self, attempts: Sequence[tuple[str, str]], *, claim: bool
    ) -> tuple[FenceCheck, ...]:
        try:
            reports = await (void_fences if claim else peek_fences)(self._device, attempts)
        except BridgeError as exc:
            raise LookupFailed(self._failed("fence: ", exc)) from exc
        return tuple(
            FenceCheck(
                dispatch_id=report.dispatch_id,
                state=report.state.value,
                stages=report.stages,
                voided_at=report.voided_at,
            )
            for report in reports
        )

    async def ledger_marks(self) -> LedgerMarks:
        """Which ledgers the fence names; see ``MarksLedgers.ledger_marks``. The first call
        on a connection answers with what its first round trip read (no round trip); later
        calls read the phone again."""
        if self._marks is not None:
            marks, self._marks = self._marks, None
            return marks
        try:
            found = await read_ledgers(self._device)
        except BridgeError as exc:
            raise LookupFailed(self._failed("fence: ", exc)) from exc
        return LedgerMarks(last=found.last, attempts=dict(found.attempts))

    async def forget_ledger_marks(self, ledger_id: str, dispatch_ids: Sequence[str]) -> None:
        """Remove resolved attempts' ledger marks; see ``MarksLedgers.forget_ledger_marks``."""
        try:
            await forget_ledger_marks(self._device, ledger_id, dispatch_ids)
        except BridgeError as exc:
            raise LookupFailed(self._failed("fence: ", exc)) from exc

    async def fence_names(self) -> tuple[str, ...]:
        """Dispatch ids with fence names on the phone; see ``Phone.fence_names``."""
        try:
            return await list_fences(self._device)
        except BridgeError as exc:
            raise LookupFailed(self._failed("fence: ", exc)) from exc

    async def remove_fences(self, dispatch_ids: Sequence[str]) -> None:
        """Remove resolved attempts' fence names; see ``Phone.remove_fences``."""
        try:
            await remove_fences(self._device, dispatch_ids, self.ledger_id)
        except BridgeError as exc:
            raise LookupFailed(self._failed("fence: ", exc)) from exc

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
        """One windowed read of outgoing rows, and of the incoming ones in the same round
        trips (``READ_TYPES``: the window's ``type`` filter widened, no query added); see
        ``Phone.read_outgoing``.

        An incoming text is a stranger's: one that quotes a row header the parser must find
        (``android_bridge._parser``) makes the window's text ambiguous, and the read refuses.
        Then the window is read again without the incoming rows (one more round trip, only
        then), so that no reply can keep a send from being confirmed; those replies are not
        recorded by this read (``incoming_unreadable`` is logged)."""

        async def read_types(types: Sequence[int]) -> ProviderRead:
            return await self._reader.read_since(
                after_id,
                types=types,
                anchor_date_ms=anchor_date_ms,
                mms_after_id=mms_after_id,
                mms_since_ms=mms_since_ms,
                find_unseen=find_unseen,
                reanchor_before_ms=reanchor_before_ms,
            )

        try:
            try:
                read = await read_types(READ_TYPES)
            except UnparseableOutput as exc:
                _log.warning("incoming_unreadable", device=self.device, error=str(exc))
                read = await read_types(OUTGOING_TYPES)
        except (DeviceUnreachable, OutcomeUnknown) as exc:
            raise LinkDown(self._failed("", exc)) from exc
        except BridgeError as exc:
            raise LookupFailed(self._failed("", exc)) from exc
        visible = set(read.visible_types)
        messages = tuple(
            OutgoingMessage(
                provider_object_id=row.id,
                outcome=_OUTCOMES[row.type],
                type=row.type,
                recipient=row.address,
                body=row.body,
                date_ms=row.date_ms,
                creator=row.creator,
            )
            for row in read.rows
            if row.type in _OUTCOMES
        ) + tuple(
            OutgoingMessage(
                provider_object_id=mms.id,
                outcome=_MMS_OUTCOMES[mms.msg_box],
                type=mms.msg_box,
                recipient=mms.addresses[0] if len(mms.addresses) == 1 else None,
                recipients=mms.addresses,
                body=mms.body,
                date_ms=mms.date_ms,
                kind=ProviderKind.MMS,
            )
            for mms in read.mms_rows
            if mms.msg_box in _MMS_OUTCOMES
        )
        return PhoneRead(
            messages=messages,
            complete=read.complete,
            full_view=set(OUTGOING_TYPES) <= visible,
            mode=read.mode,
            round_trips=read.round_trips,
            evidence={
                "after_id": read.after_id,
                "max_seen_id": read.max_seen_id,
                "incomplete_reason": read.incomplete_reason,
                **(
                    {"reanchored_from": read.reanchored_from}
                    if read.reanchored_from is not None
                    else {}
                ),
            },
            unseen_ids=read.unseen_ids,
            visible_rows=read.visible_rows,
            after_id=read.after_id,
            reanchored_from=read.reanchored_from,
            incoming=tuple(
                IncomingMessage(
                    provider_object_id=row.id,
                    date_ms=row.date_ms,
                    number=self._sender(row.address),
                    body=row.body,
                )
                for row in read.rows
                if row.type == MessageType.INBOX and row.date_ms is not None and row.date_ms >= 0
            ),
        )

    def _sender(self, address: str | None) -> str | None:
        """An incoming row's sender as the product normalises a recipient (E.164 read in the
        phone's region, a short code's digits), or None (an alphanumeric sender...)."""
        if not address:
            return None
        sender = normalize_recipient(address, self._region)
        return sender.value if sender.valid else None

    def judge(self, message: OutgoingMessage, intent: SmsIntent) -> MatchVerdict:
        """``message_matches_intent`` in the ledger's vocabulary (an MMS to several
        recipients never matches a one-recipient intent)."""
        if message.kind is ProviderKind.MMS and len(message.recipients) != 1:
            body_only = message_matches_intent(
                _as_sms(message, intent.recipient),
                intent.recipient,
                intent.body,
                region=intent.region or self._region,
                loose_whitespace=self._loose_whitespace,
            )
            return MatchVerdict(
                matched=False,
                reason="recipient_mismatch",
                details={
                    "recipient_ok": False,
                    "body_ok": body_only.body_ok,
                    "why": [f"the MMS went to {len(message.recipients)} recipients"],
                },
            )
        result = message_matches_intent(
            _as_sms(message, message.recipient),
            intent.recipient,
            intent.body,
            region=intent.region or self._region,
            loose_whitespace=self._loose_whitespace,
        )
        return MatchVerdict(
            matched=result.matched,
            reason=None if result.matched else result.reason,
            details={
                "recipient_ok": result.recipient_ok,
                "body_ok": result.body_ok,
                # the bridge names the differing code points; history must not quote the body
                "why": [_CODE_POINTS.sub("characters differ", item) for item in result.details],
            },
        )

    def intent_keys(self, intent: SmsIntent) -> tuple[str | None, tuple[str, str] | None, str]:
        """What :meth:`judge` compares on the intent's side: ``(region, recipient, body)``
        (the reconciler's ``MatchKeys``; an invalid recipient has no key: it never matches)."""
        region = intent.region or self._region
        recipient = normalize_recipient(intent.recipient, region)
        body = normalize_body(intent.body, loose_whitespace=self._loose_whitespace)
        return region, (recipient.kind, recipient.value) if recipient.valid else None, body

    def message_keys(
        self, message: OutgoingMessage, scope: object
    ) -> tuple[tuple[str, str] | None, str | None]:
        """What :meth:`judge` compares on the row's side, read in ``scope`` (the region
        :meth:`intent_keys` gave): an MMS to several recipients has no recipient key."""
        region = scope if isinstance(scope, str) else None
        recipient_key: tuple[str, str] | None = None
        if message.kind is not ProviderKind.MMS or len(message.recipients) == 1:
            recipient = normalize_recipient(message.recipient or "", region)
            recipient_key = (recipient.kind, recipient.value) if recipient.valid else None
        body = (
            None
            if message.body is None
            else normalize_body(message.body, loose_whitespace=self._loose_whitespace)
        )
        return recipient_key, body

    async def checks(self) -> tuple[Check, ...]:
        """``starebrain doctor``'s checks of this phone, in one more round trip
        (``android_bridge._doctor.examine``).

        Raises:
            PhoneUnavailable: the phone could not be asked (retryable: nothing was sent).
        """
        from android_bridge._doctor import examine

        try:
            return await examine(self._device)
        except BridgeError as exc:
            raise PhoneUnavailable(
                f"{self.device}: doctor's checks could not run: {exc}", retryable=True
            ) from exc

    async def close(self) -> None:
        """Close the ADB connection."""
        await self._device.close()


def _as_sms(message: OutgoingMessage, recipient: str | None) -> SmsMessage:
    """``message`` as the bridge's matcher takes it, addressed to ``recipient``."""
    return SmsMessage(
        id=message.provider_object_id,
        thread_id=None,
        address=recipient,
        body=message.body,
        type=message.type,
        status=None,
        date_ms=message.date_ms,
        date_sent_ms=None,
        sub_id=None,
        error_code=None,
        creator=None,
    )
