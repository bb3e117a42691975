"""``service check isms`` and ``service call isms …``: the framework's SMS send path, no UI.

What is modelled, and where it comes from:

* **``service``** (frameworks/native ``cmds/service/service.cpp``): ``check NAME`` prints
  ``Service NAME: found`` (or ``not found``); ``call NAME CODE ARGS…`` writes the interface
  token, then each argument: ``i32 N`` (``writeInt32(atoi)``), ``i64 N`` (``writeInt64``),
  ``s16 STR`` (``writeString16``: UTF-8 to UTF-16, so an emoji is a surrogate pair), ``null``
  (``writeStrongBinder(NULL)``: a binder object, *not* a null string; a null ``String`` is
  written as ``i32 -1``, the length ``writeString16`` gives null). It then prints
  ``Result: `` and the reply parcel, and exits 0 whatever the transaction did: the status of
  ``transact`` is discarded. An unknown service prints ``service: Service NAME does not
  exist`` and exits 10; an unknown argument type prints ``service: unknown option`` and the
  usage, exit 10.
* **The reply parcel** (libbinder ``Parcel::print`` with ``HexDump``): a parcel that failed
  prints ``Parcel(Error: 0x… "…")`` (an unknown transaction code: ``UNKNOWN_TRANSACTION``,
  ``-EBADMSG``); otherwise its words in hex: up to 32 bytes on one line
  (``Parcel(00000000    '....')`` for a void method that threw nothing), longer ones on
  ``0x<offset>:`` lines. An exception reply starts with the exception code
  (``EX_SECURITY`` -1, ``ffffffff``), then the message as a String16.
* **``ISms.sendTextForSubscriber``** (frameworks/base
  ``telephony/java/com/android/internal/telephony/ISms.aidl``): transaction
  ``FIRST_CALL_TRANSACTION + index``. Android 10 (android-10.0.0_r1) declares before it
  ``getAllMessagesFromIccEfForSubscriber``, ``updateMessageOnIccEfForSubscriber``,
  ``copyMessageToIccEfForSubscriber``, ``sendDataForSubscriber``,
  ``sendDataForSubscriberWithSelfPermissions``: code **6**, arguments ``(int subId, String
  callingPkg, String destAddr, String scAddr, String text, PendingIntent sentIntent,
  PendingIntent deliveryIntent, boolean persistMessageForNonDefaultSmsApp)``. Android 11 to
  15 drop the ``…WithSelfPermissions`` methods: code **5**, arguments ``(int subId, String
  callingPkg, String callingAttributionTag, String destAddr, String scAddr, String text,
  PendingIntent sentIntent, PendingIntent deliveryIntent, boolean persist…, long
  messageId)``. A null ``PendingIntent`` is ``i32 0``; a boolean is an ``i32``. The next
  method, ``sendTextForSubscriberWithOptions`` (code 8 on 10, 6 on 11+), takes the same
  leading arguments and sends too: it is modelled the same way.
* **Who may send** (frameworks/opt/telephony ``SmsController``, ``SmsPermissions``):
  ``SEND_SMS`` (the shell package holds it, frameworks/base ``packages/Shell/
  AndroidManifest.xml``; so does root) and the ``SEND_SMS`` app-op noted for the calling
  package, which must belong to the calling uid: ``com.android.shell`` for uid 2000 and,
  as adb root is granted every check, for uid 0. Any other package: ``SecurityException``
  (``EX_SECURITY``), nothing sent. ``persistMessageForNonDefaultSmsApp`` false is allowed
  to holders of ``MODIFY_PHONE_STATE``, which the shell holds: the message is then sent with
  **no row at all** (the worse case, modelled).
* **The row** (``SMSDispatcher.SmsTracker.persistSentMessageIfRequired``): nothing is written
  while the radio sends; on the result the framework inserts into ``content://sms/sent``
  (type 2, ``creator`` the calling package: ``ProviderUtil.shouldSetCreator`` keeps the
  phone process's value, TelephonyProvider android-14.0.0_r1), with an ``error_code`` only
  when the send failed (else the provider's default: 0 on 10, -1 from 11), and on failure
  then updates that row's type to 5 (android-10.0.0_r30 to 15.0.0_r1). Never OUTBOX or
  QUEUED on this path.
* **Silent refusals**: a null or empty destination or text, or a subscription the phone does
  not have, make the send fail inside the framework with the error going to the null
  ``sentIntent``: the shell sees the same ``Parcel(00000000    '....')`` as for a send, and
  nothing is sent. (For an unknown ``subId`` some releases fall back to the default phone;
  not sending is the worse case for the product and is what is modelled.)
* **One PDU only** (frameworks/opt/telephony ``SMSDispatcher.sendText``, the same at
  android-10.0.0_r30, 11.0.0_r1, 12.0.0_r1, 13.0.0_r1, 14.0.0_r1 and 15.0.0_r1; both send
  methods reach it): the text is encoded into *one* PDU, and ``getSubmitPdu`` returns null
  when it needs more than one: over 160 GSM-7 septets, or over 70 UCS-2 code units
  (frameworks/base ``gsm/SmsMessage.getSubmitPdu``, "Message too long", read in an untagged
  copy only; the count is ``SmsMessage.calculateLength``'s: ``_apps.sms_segments`` here).
  ``sendText`` then logs ``getSubmitPdu() returned null`` and sends the failure to the
  ``sentIntent``, which is null from ``service call``: **the shell sees the same success
  parcel**, nothing is sent, no row is written, and (no tracker was made) ``SmsUsageMonitor``
  counts nothing. A longer text takes ``sendMultipartTextForSubscriber``, which is not
  modelled: its code (not known per release) is one of the "other codes" below.
* **``SmsUsageMonitor``** (frameworks/opt/telephony): ``DEFAULT_SMS_CHECK_PERIOD`` 60000 ms,
  ``DEFAULT_SMS_MAX_COUNT`` 30 per package. A send that would exceed it raises
  ``EVENT_SEND_LIMIT_REACHED_CONFIRMATION``: a dialog asks the person holding the phone, and
  the send waits. The binder call has already returned: **the shell sees the same success
  parcel**; nothing is sent and no row is written (``held_sends`` records it).
* **Other codes**: a code within the interface that is not one of the two send methods is
  answered with the void success parcel and does nothing here (what it really does depends on
  the method; the product must never call one). A code outside the interface (below 1, or
  above :data:`LAST_CODE`) is ``UNKNOWN_TRANSACTION``. ``ISms`` has about 40 methods at
  every tag; :data:`LAST_CODE` is an upper bound, not a count (not verified per tag).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

import attrs

from android_bridge.simulator._apps import sms_segments
from android_bridge.simulator._faults import Fault
from android_bridge.simulator._shell import Output
from android_bridge.simulator._store import MESSAGE_TYPE_FAILED, MESSAGE_TYPE_SENT

if TYPE_CHECKING:
    from android_bridge.simulator._apps import Transmission

#: The package of the adb shell user (frameworks/base ``packages/Shell``).
SHELL_PACKAGE: Final = "com.android.shell"
#: ``ISms``'s interface token.
ISMS_DESCRIPTOR: Final = "com.android.internal.telephony.ISms"
#: A code above this is outside ``ISms`` at every tag (an upper bound; see the module doc).
LAST_CODE: Final = 60
#: ``SmsUsageMonitor.DEFAULT_SMS_MAX_COUNT`` / ``DEFAULT_SMS_CHECK_PERIOD`` (ms).
SMS_MAX_COUNT: Final = 30
SMS_CHECK_PERIOD_MS: Final = 60_000
#: ``UNKNOWN_TRANSACTION`` (``-EBADMSG``) as ``Parcel::print`` shows it on a 64-bit phone.
UNKNOWN_TRANSACTION_TEXT: Final = 'Error: 0xffffffffffffffb6 "Not a data message"'
#: ``Parcel.EX_SECURITY``.
EX_SECURITY: Final = -1
#: ``SmsManager.RESULT_ERROR_GENERIC_FAILURE``, the ``error_code`` of a failed send here.
_GENERIC_FAILURE: Final = 1
#: ``SmsProvider.NO_ERROR_CODE`` (from android-11.0.0_r1; 0 stands for it on 10).
_NO_ERROR_CODE: Final = -1
_ZERO: Final = b"\0"
_USAGE: Final = (
    "Usage: service [-h|-?]\n"
    "       service list\n"
    "       service check SERVICE\n"
    "       service call SERVICE CODE [i32 N | i64 N | f N | d N | s16 STR | null"
    " | fd f | nfd n | afd f ] ...\n"
)


@attrs.frozen(kw_only=True)
class SendTextLayout:
    """Where ``sendTextForSubscriber`` is, and what it reads, in one release's ``ISms``."""

    #: ``FIRST_CALL_TRANSACTION + index`` of ``sendTextForSubscriber``.
    code: int
    #: ... and of ``sendTextForSubscriberWithOptions`` (same leading arguments).
    options_code: int
    #: True from Android 11: ``String callingAttributionTag`` after ``callingPkg`` and
    #: ``long messageId`` at the end.
    attribution_tag: bool


def send_text_layout(version: int) -> SendTextLayout:
    """``ISms``'s send methods on Android ``version`` (frameworks/base ``ISms.aidl``:
    android-10.0.0_r1 has the two ``…WithSelfPermissions`` methods, 11 to 15 do not).

    Raises:
        ValueError: a release outside 10..15.
    """
    if version == 10:
        return SendTextLayout(code=6, options_code=8, attribution_tag=False)
    if 11 <= version <= 15:
        return SendTextLayout(code=5, options_code=6, attribution_tag=True)
    raise ValueError(f"Android {version} is not modelled")


# -- parcels --------------------------------------------------------------------------------


class _ParcelWriter:
    """The bytes a native ``Parcel`` holds, 4-byte aligned, little-endian (arm64)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def int32(self, value: int) -> None:
        self.data += struct.pack("<i", _wrap32(value))

    def int64(self, value: int) -> None:
        self.data += struct.pack("<q", _wrap64(value))

    def string16(self, value: str | None) -> None:
        if value is None:
            self.int32(-1)
            return
        encoded = value.encode("utf-16-le")
        self.int32(len(encoded) // 2)
        self.data += encoded + b"\0\0"
        self._pad()

    def binder_null(self) -> None:
        # flat_binder_object {type BINDER_TYPE_BINDER, flags, binder 0, cookie 0}
        self.data += struct.pack("<IIQQ", 0x73622A85, 0x17F, 0, 0)

    def raw(self, data: bytes) -> None:
        self.data += data
        self._pad()

    def _pad(self) -> None:
        self.data += b"\0" * (-len(self.data) % 4)


class _ParcelReader:
    """Reads a parcel as Java's ``Parcel`` does: past the end an int is 0, a string null."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def int32(self) -> int:
        if self._pos + 4 > len(self._data):
            self._pos = len(self._data)
            return 0
        (value,) = struct.unpack_from("<i", self._data, self._pos)
        self._pos += 4
        return int(value)

    def int64(self) -> int:
        if self._pos + 8 > len(self._data):
            self._pos = len(self._data)
            return 0
        (value,) = struct.unpack_from("<q", self._data, self._pos)
        self._pos += 8
        return int(value)

    def string16(self) -> str | None:
        length = self.int32()
        if length < 0:
            return None
        size = (length + 1) * 2
        if self._pos + size > len(self._data):
            self._pos = len(self._data)
            return None
        raw = self._data[self._pos : self._pos + length * 2]
        self._pos += size + (-size % 4)
        return raw.decode("utf-16-le", errors="replace")


def _wrap32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def _wrap64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


def format_parcel(data: bytes) -> str:
    """``Parcel::print`` of a healthy parcel: ``Parcel(`` + ``HexDump`` + ``)``."""
    if not data:
        return "Parcel(NULL)"
    words = [data[i : i + 4] for i in range(0, len(data), 4)]

    def hex_words(chunk: Sequence[bytes]) -> str:
        return " ".join(f"{int.from_bytes(word.ljust(4, _ZERO), 'little'):08x}" for word in chunk)

    def chars(chunk: bytes) -> str:
        return "".join(chr(byte) if 32 <= byte < 127 else "." for byte in chunk)

    if len(data) <= 32:
        gap = " " * max(1, 5 - len(words))
        return f"Parcel({hex_words(words)}{gap}'{chars(data)}')"
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        line_words = [chunk[i : i + 4] for i in range(0, len(chunk), 4)]
        hexes = hex_words(line_words).ljust(35)
        lines.append(f"  0x{offset:08x}: {hexes} '{chars(chunk)}'")
    return "Parcel(\n" + "\n".join(lines) + ")"


def _no_exception() -> bytes:
    reply = _ParcelWriter()
    reply.int32(0)
    return bytes(reply.data)


def _exception(code: int, message: str) -> bytes:
    reply = _ParcelWriter()
    reply.int32(code)
    reply.string16(message)
    reply.int32(0)  # no remote stack trace header
    return bytes(reply.data)


# -- the service ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class HeldSend:
    """A framework send held by ``SmsUsageMonitor``'s confirmation dialog (nothing sent)."""

    package: str
    address: str
    body: str
    time_ms: int


@attrs.frozen(kw_only=True)
class _Text:
    sub_id: int
    package: str | None
    address: str | None
    body: str | None
    persist: bool


class IsmsHost:
    """What the ``isms`` service needs from the phone (kept small to avoid a cycle)."""

    def __init__(
        self,
        *,
        version: Callable[[], int],
        uid: Callable[[], int],
        now_ms: Callable[[], int],
        sim_sub_ids: Callable[[], Sequence[int]],
        insert_row: Callable[..., int],
        update_row: Callable[[int, dict[str, object]], None],
        record: Callable[[Transmission], None],
        take_send_faults: Callable[[], frozenset[Fault]],
        send_delay_ms: Callable[[], int],
        track: Callable[[Awaitable[None]], None],
        make_transmission: Callable[[str, str, int | None, int], Transmission],
        code_shift: Callable[[], int] = lambda: 0,
        link_faults_before: Callable[[frozenset[Fault]], bool],
        link_faults_after: Callable[[frozenset[Fault]], Awaitable[None]],
        radio_free: asyncio.Event | None = None,
    ) -> None:
        self.version = version
        #: Methods an OEM's ``ISms`` declares before AOSP's (``_framework_jar``'s
        #: ``vendor-reordered``): every code moves by this much.
        self.code_shift = code_shift
        #: The link's faults around a send, as on the app's path (``SimulatedPhone``): a
        #: connection reset as the call starts, then a reboot, a reset or a stalled link
        #: once the message went out. They are the ADB link's, not the app's, so the
        #: framework path meets them too.
        self.link_faults_before = link_faults_before
        self.link_faults_after = link_faults_after
        self.uid = uid
        self.now_ms = now_ms
        self.sim_sub_ids = sim_sub_ids
        self.insert_row = insert_row
        self.update_row = update_row
        self.record = record
        self.take_send_faults = take_send_faults
        self.send_delay_ms = send_delay_ms
        self.track = track
        self.make_transmission = make_transmission
        #: Test harness (``SimulatedPhone.hold_radio``): while it is clear, the radio's answer,
        #: and so the row the framework writes only then, waits (a radio that answers late)
        self.radio_free = radio_free


class IsmsService:
    """The ``service`` command with the ``isms`` binder service behind it (see module doc)."""

    def __init__(self, host: IsmsHost) -> None:
        self._host = host
        #: Send times (device ms) per package, for ``SmsUsageMonitor`` (kept in memory only,
        #: as ``SmsUsageMonitor.mSmsStamp`` is: a reboot clears it).
        self._stamps: dict[str, list[int]] = {}
        #: Sends waiting on the confirmation dialog; nobody answers it here.
        self.held_sends: list[HeldSend] = []

    def reset(self) -> None:
        """Forget the usage window and drop held sends (a reboot dismisses the dialog)."""
        self._stamps.clear()
        self.held_sends.clear()

    async def __call__(self, argv: list[str], stdin: str) -> Output:
        args = argv[1:]
        if not args or args[0] in ("-h", "-?"):
            return Output.out(_USAGE)
        if args[0] == "list":
            return Output.out("Found 1 services:\n0\tisms: [com.android.internal.telephony.ISms]\n")
        if args[0] == "check":
            if len(args) < 2:
                return Output(((2, "service: No service specified for check\n"), (1, _USAGE)), 10)
            found = "found" if args[1] == "isms" else "not found"
            return Output.out(f"Service {args[1]}: {found}\n")
        if args[0] != "call":
            return Output(((2, f"service: Unknown command {args[0]}\n"), (1, _USAGE)), 10)
        if len(args) < 2:
            return Output(((2, "service: No service specified for call\n"), (1, _USAGE)), 10)
        if args[1] != "isms":
            return Output.err(f"service: Service {args[1]} does not exist\n", 10)
        if len(args) < 3:
            return Output(((2, "service: No code specified for call\n"), (1, _USAGE)), 10)
        code = _atoi(args[2])
        data = _ParcelWriter()
        rest = args[3:]
        while rest:
            kind = rest.pop(0)
            if kind == "null":
                data.binder_null()
                continue
            if kind not in ("i32", "i64", "s16", "f", "d") or not rest:
                return Output(((2, f"service: unknown option {kind}\n"), (1, _USAGE)), 10)
            value = rest.pop(0)
            if kind == "i32":
                data.int32(_atoi(value))
            elif kind == "i64":
                data.int64(_atoi(value))
            elif kind == "s16":
                data.string16(value)
            else:
                data.raw(struct.pack("<f" if kind == "f" else "<d", _atof(value)))
        reply = await self._transact(code, bytes(data.data))
        shown = f"Parcel({reply})" if isinstance(reply, str) else format_parcel(reply)
        return Output.out(f"Result: {shown}\n")

    async def _transact(self, code: int, data: bytes) -> bytes | str:
        """``ISms.Stub.onTransact``: the reply parcel, or the text of a failed transaction."""
        if code < 1 or code > LAST_CODE:
            return UNKNOWN_TRANSACTION_TEXT
        layout = send_text_layout(self._host.version())
        code -= self._host.code_shift()
        if code not in (layout.code, layout.options_code):
            return _no_exception()
        reader = _ParcelReader(data)
        sub_id = reader.int32()
        package = reader.string16()
        if layout.attribution_tag:
            reader.string16()
        address = reader.string16()
        reader.string16()  # scAddr
        body = reader.string16()
        sent_intent, delivery_intent = reader.int32(), reader.int32()
        persist = reader.int32() != 0
        if sent_intent or delivery_intent:
            # A PendingIntent would follow; `service call` cannot write one.
            return _exception(-2, "Bad PendingIntent in parcel")  # EX_BAD_PARCELABLE
        text = _Text(sub_id=sub_id, package=package, address=address, body=body, persist=persist)
        return await self._send_text(text)

    async def _send_text(self, text: _Text) -> bytes:
        host = self._host
        uid = host.uid()
        package = text.package if text.package is not None else SHELL_PACKAGE
        if package != SHELL_PACKAGE or uid not in (0, 2000):
            return _exception(EX_SECURITY, f"Package {package} does not belong to {uid}")
        if not text.address or not text.body or text.sub_id not in host.sim_sub_ids():
            return _no_exception()
        if sms_segments(text.body) > 1:
            # SMSDispatcher.sendText: getSubmitPdu returned null; the failure goes to the
            # null sentIntent, before any tracker or usage count (see the module doc)
            return _no_exception()
        now = host.now_ms()
        stamps = [t for t in self._stamps.get(package, []) if t > now - SMS_CHECK_PERIOD_MS]
        if len(stamps) + 1 > SMS_MAX_COUNT:
            self._stamps[package] = stamps
            self.held_sends.append(
                HeldSend(package=package, address=text.address, body=text.body, time_ms=now)
            )
            return _no_exception()
        stamps.append(now)
        self._stamps[package] = stamps
        faults = host.take_send_faults()
        if not host.link_faults_before(faults):
            return _no_exception()  # killed as the call started: nothing was sent
        failed = Fault.SEND_FAILS in faults
        if Fault.STUCK_OUTBOX in faults:
            await host.link_faults_after(faults)
            return _no_exception()  # the radio never answers: no row is ever written
        address, body, sub_id, persist = text.address, text.body, text.sub_id, text.persist

        async def result() -> None:
            delay = host.send_delay_ms()
            if delay:
                await asyncio.sleep(delay / 1000)
            if host.radio_free is not None:
                await host.radio_free.wait()  # test harness: ``hold_radio``
            row_id: int | None = None
            if persist:
                # ``error_code`` is put only when it is not the "no error" value (0 on 10,
                # NO_ERROR_CODE -1 from 11), so a sent row keeps the provider's default for a
                # database made on that release: 0 on 10, -1 from 11 (``MmsSmsDatabaseHelper``)
                no_error = 0 if host.version() == 10 else _NO_ERROR_CODE
                row_id = host.insert_row(
                    address=address,
                    body=body,
                    date=host.now_ms(),
                    date_sent=0,
                    read=1,
                    seen=1,
                    status=-1,
                    type=MESSAGE_TYPE_SENT,
                    sub_id=sub_id,
                    error_code=_GENERIC_FAILURE if failed else no_error,
                    creator=package,
                )
                if failed:
                    # inserted SENT (its error code already in it), then updated to FAILED,
                    # the type alone, by a second provider call
                    # (SMSDispatcher.SmsTracker.persistSentMessageIfRequired,
                    # android-10.0.0_r30 to 15.0.0_r1): a read may come between the two
                    await asyncio.sleep(FAIL_UPDATE_GAP_MS / 1000)
                    host.update_row(row_id, {"type": MESSAGE_TYPE_FAILED})
            if not failed:
                host.record(host.make_transmission(address, body, row_id, host.now_ms()))

        held = host.radio_free is not None and not host.radio_free.is_set()
        if host.send_delay_ms() or held:
            host.track(result())
        else:
            await result()
        await host.link_faults_after(faults)
        return _no_exception()


#: Between the framework's insert of a failed send's row (SENT) and its update to FAILED:
#: two provider calls in a row on the phone's binder thread, a few milliseconds, modelled at
#: the long end so that a read in between is seen in tests.
FAIL_UPDATE_GAP_MS: Final = 50


def _atoi(text: str) -> int:
    """C ``atoi``/``atoll``: leading blanks, a sign, digits; anything else stops it (0)."""
    stripped = text.lstrip(" \t\n")
    digits = ""
    for index, char in enumerate(stripped):
        if (char.isdigit() and char.isascii()) or (index == 0 and char in "+-"):
            digits += char
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return 0


def _atof(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0
