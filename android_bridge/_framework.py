"""Sending one SMS through the framework (``service call isms``): no UI, no RCS.

The shell user holds ``SEND_SMS`` (frameworks/base ``packages/Shell/AndroidManifest.xml``),
so it may call ``ISms.sendTextForSubscriber`` itself. The framework then sends a plain SMS
and, because the shell is not the default SMS app, writes the row itself once the radio
answers: type 2 in ``content://sms/sent``, or that row turned to type 5 if the send failed,
with ``creator`` = ``com.android.shell`` (frameworks/opt/telephony
``SMSDispatcher.SmsTracker.persistSentMessageIfRequired``; ``ProviderUtil.shouldSetCreator``,
TelephonyProvider android-14.0.0_r1). So the ``creator`` column tells the product's rows
from the owner's. No row exists while the radio sends (never OUTBOX or QUEUED here).

The transaction code is ``FIRST_CALL_TRANSACTION + index`` of ``sendTextForSubscriber`` in
frameworks/base ``ISms.aidl`` and differs by release (:data:`SEND_TEXT_CODES`): 6 on
Android 10 (after the two ``…WithSelfPermissions`` methods), 5 on 11 to 15, which also add
``callingAttributionTag`` and ``messageId``. A wrong code reaches *another* method, which may
silently do nothing, or send: the script therefore checks ``ro.build.version.sdk`` on the
phone, in the same round trip, before the call.

One round trip runs the watermark read, the clock, the MMS watermark, then::

    [fence claim &&] getprop ro.build.version.sdk | grep -qx <sdk>
      [&& ln -s <ms>/. <fence>.am && ln -s script/. <fence>.go] && echo SBGO<nonce>
      && service call isms <code> i32 <subId> s16 com.android.shell [i32 -1] s16 <dest>
         i32 -1 s16 <text> i32 0 i32 0 i32 1 [i64 0] [&& ln -s <ms>/. <fence>.keys]

wrapped to run to its end even if the connection drops (``trap '' HUP``, its output in a
file printed back at its end: :func:`android_bridge._fence.run_to_the_end`).

(``i32 -1`` is a null ``String``: ``service``'s ``null`` writes a binder object, not a null
string; ``i32 0`` a null ``PendingIntent``; the last ``i32 1`` is
``persistMessageForNonDefaultSmsApp``, without which the framework writes no row at all.)
The fence's stage names are those of :mod:`android_bridge._fence`: ``.am`` here means "the
checks passed", ``.keys`` "the call returned".

How the outcome is judged (``service`` exits 0 whatever the call did; frameworks/native
``cmds/service/service.cpp`` discards the status of ``transact``):

* no ``SBGO<nonce>``: the fence claim or the release check failed, nothing was called:
  :class:`CommandRejected`;
* ``Result: Parcel(00000000    '....')``: the method returned without an exception. That is
  *all* it proves: a send that ``SmsUsageMonitor`` holds for the user's confirmation (more
  than 30 sends by the package in 60 s), an unknown subscription, or a radio failure look
  the same. The evidence is returned and the ledger keeps delivery PENDING until a row is
  read;
* ``Result: Parcel(Error: …)``: the transaction reached no method (``UNKNOWN_TRANSACTION``):
  :class:`CommandRejected`;
* an exception reply with ``EX_SECURITY`` (``ffffffff``): the permission or app-op check,
  which ``SmsController`` runs before anything is dispatched, refused:
  :class:`CommandRejected`;
* any other output, or a link that failed after the command was written:
  :class:`OutcomeUnknown`.
"""

from __future__ import annotations

import re
import secrets
import time
from collections import deque
from typing import Final, Literal

from android_bridge._device import Device, DeviceFacts
from android_bridge._dispatcher import (
    CLAIM_MARKER,
    GO_MARKER,
    run_send_round_trip,
    shell_recipient,
)
from android_bridge._fence import (
    claim_prefix,
    go_command,
    refused_claim,
    run_to_the_end,
    stage_command,
)
from android_bridge._log import get_logger
from android_bridge._records import DispatchEvidence
from android_bridge._shell import posix_quote
from android_bridge.exceptions import CommandRejected, OutcomeUnknown

_log = get_logger("android_bridge.framework")

#: The adb shell user's package: the only ``callingPkg`` the ``SEND_SMS`` app-op accepts
#: from uid 2000 (``AppOpsManager.noteOp`` checks that the package belongs to the uid).
SHELL_PACKAGE: Final = "com.android.shell"
#: ``ro.build.version.sdk`` -> the ``sendTextForSubscriber`` transaction code (frameworks/base
#: ``ISms.aidl``: the Android 10 layout, with ``sendDataForSubscriberWithSelfPermissions``
#: before it, and the 11+ layout, with ``callingAttributionTag``, as read in copies of the
#: file at untagged commits, agreeing with vendor builds' generated stubs; not read at each
#: release tag, which is why the product's ``auto`` path also wants a confirmed send on the
#: phone's own build before it trusts a code; ``starebrain doctor`` compares it with the
#: constant in the phone's own ``ISms$Stub``: :mod:`android_bridge._isms_codes`).
SEND_TEXT_CODES: Final = {29: 6, 30: 5, 31: 5, 32: 5, 33: 5, 34: 5, 35: 5}
#: ``SmsUsageMonitor.DEFAULT_SMS_MAX_COUNT`` sends per ``DEFAULT_SMS_CHECK_PERIOD`` (60 s).
SMS_MAX_COUNT: Final = 30
SMS_CHECK_PERIOD_S: Final = 60.0
#: The reply of a void method that threw nothing (``Parcel::print``).
_OK_REPLY = re.compile(r"\AResult: Parcel\(00000000    '\.\.\.\.'\)\n?\Z")
_ERROR_REPLY = re.compile(r"\AResult: Parcel\(Error: ")
_SECURITY_REPLY = re.compile(r"\AResult: Parcel\(\s*(?:0x00000000: )?ffffffff ")


def service_call_command(sdk: int, sub_id: int, recipient: str, body: str) -> str:
    """``service call isms …`` for ``sendTextForSubscriber`` on a phone of API level ``sdk``.

    Raises:
        CommandRejected: a release without a known code, a bad recipient or a bad subId.
    """
    code = SEND_TEXT_CODES.get(sdk)
    if code is None:
        raise CommandRejected(f"no known sendTextForSubscriber code for API level {sdk}")
    if not 0 <= sub_id < 2**31:
        raise CommandRejected(f"not a subscription id: {sub_id}")
    args = [f"i32 {sub_id}", f"s16 {SHELL_PACKAGE}"]
    if sdk >= 30:
        args.append("i32 -1")  # callingAttributionTag: null
    args.append(f"s16 {posix_quote(shell_recipient(recipient))}")
    args.append("i32 -1")  # scAddr: null, the default SMSC
    args.append(f"s16 {posix_quote(body)}")
    args.extend(["i32 0", "i32 0", "i32 1"])  # sentIntent, deliveryIntent, persist
    if sdk >= 30:
        args.append("i64 0")  # messageId
    return f"service call isms {code} " + " ".join(args)


def framework_send_command(
    sdk: int,
    sub_id: int,
    recipient: str,
    body: str,
    nonce: str,
    *,
    fence: tuple[str, str] | None = None,
    ledger_id: str | None = None,
) -> str:
    """The send step (see the module docstring): nothing runs past a failed check, and once
    it started it runs to its end even if the connection drops meanwhile
    (:func:`android_bridge._fence.run_to_the_end`). ``ledger_id``: the fence claim records
    which ledger made it."""
    call = service_call_command(sdk, sub_id, recipient, body)
    chain = [f"getprop ro.build.version.sdk | grep -qx {sdk}"]
    if fence is not None:
        chain.insert(0, claim_prefix(fence[0], fence[1], CLAIM_MARKER + nonce, ledger_id))
        chain.append(stage_command(fence[0], "am"))
        chain.append(go_command(fence[0]))
    chain.append(f"echo {GO_MARKER}{nonce}")
    chain.append(call)
    if fence is not None:
        chain.append(stage_command(fence[0], "keys"))
    return run_to_the_end(" && ".join(chain), fence[0] if fence is not None else nonce)


async def probe_framework_send(device: Device) -> Literal[True] | str:
    """True when this phone may take the framework path, else the reason it may not.

    It sends nothing, calls nothing and costs no round trip of its own: it reads the facts the
    handle took when it connected (``service check isms``, ``ro.build.version.sdk`` and
    ``id``). Every ``ISms`` method the shell could call harmlessly (an invalid destination,
    say) answers the same ``Parcel(00000000 …)`` as a real send, so no call can tell the right
    code from a wrong one; only the release table can, and only a send whose row comes back
    written by ``com.android.shell`` proves it on one build (the product's ``auto`` path asks
    for that proof too). What the probe cannot see: the ``SEND_SMS`` app-op set to ignore
    (then the send is dropped silently), a subscription the phone does not have, or a vendor
    build that reorders ``ISms``.

    Raises:
        BridgeError: transport failures.
    """
    return framework_probe(await device.facts())


def framework_probe(facts: DeviceFacts) -> Literal[True] | str:
    """:func:`probe_framework_send`'s verdict on what a handle read when it connected."""
    if not facts.isms:
        return "the isms service is not there (service check isms)"
    if facts.sdk not in SEND_TEXT_CODES:
        return f"no known sendTextForSubscriber code for API level {facts.sdk}"
    if facts.uid not in (0, 2000):
        return "the shell is neither the shell user nor root"
    return True


class FrameworkDispatcher:
    """Sends SMS through ``service call isms`` on one device, one at a time.

    ``sub_id`` is the subscription to send on (the framework sends nothing, silently, for one
    the phone does not have). ``usage_limit`` is ``(sends, seconds)``: a send that would go
    past it is refused before anything reaches the phone, since ``SmsUsageMonitor`` would hold
    it behind a dialog while the shell sees success (None: no local limit).
    """

    def __init__(
        self,
        device: Device,
        *,
        sub_id: int = 1,
        usage_limit: tuple[int, float] | None = (SMS_MAX_COUNT, SMS_CHECK_PERIOD_S),
    ) -> None:
        self._device = device
        self._sub_id = sub_id
        self._usage_limit = usage_limit
        self._sent_at: deque[float] = deque()

    async def sdk(self) -> int:
        """The phone's ``ro.build.version.sdk``, as the handle read it when it connected.

        Raises:
            CommandRejected: a release without a known code. BridgeError: transport failures.
        """
        sdk = (await self._device.facts()).sdk  # read once per handle, kept there
        if sdk is None or sdk not in SEND_TEXT_CODES:
            raise CommandRejected(f"no known sendTextForSubscriber code for API level {sdk}")
        return sdk

    async def send(
        self,
        recipient: str,
        body: str,
        *,
        fence: tuple[str, str] | None = None,
        ledger_id: str | None = None,
    ) -> DispatchEvidence:
        """Send ``body`` to ``recipient``; return watermark, clock and what ``service`` printed.
        ``ledger_id``: the fence claim records which ledger made it.

        Raises:
            CommandRejected: bad recipient, blank body, the local usage limit, a fence or
                release check that failed, or a call the framework refused (nothing sent);
                ``FenceLost``: the attempt's fence epoch is gone from the phone.
            DeviceUnreachable / NotSent: the command was not written (nothing sent);
                ``DeviceUnusable``: a failed claim found another phone at the address.
            OutcomeUnknown: the command was written and then the outcome was not observed.
        """
        if not body.strip():
            raise CommandRejected("an empty or blank body would not be sent")
        sdk = await self.sdk()
        nonce = secrets.token_hex(8)
        command = framework_send_command(
            sdk, self._sub_id, recipient, body, nonce, fence=fence, ledger_id=ledger_id
        )
        self._check_usage()
        trip = await run_send_round_trip(self._device, command)
        self._sent_at.append(time.monotonic())
        output = trip.output
        claim_line = f"{CLAIM_MARKER}{nonce}\n"
        go_line = f"{GO_MARKER}{nonce}\n"
        if output.count(go_line) > 1 or output.count(claim_line) > 1:
            raise OutcomeUnknown("the send output is garbled")
        if fence is not None:
            if not output.startswith(claim_line):
                if go_line in output:
                    raise OutcomeUnknown("the call was reached without a fence claim")
                _log.warning("sms_dispatch_rejected", device=self._device.serial, reason="fence")
                await refused_claim(self._device, fence, "nothing was called")
            output = output[len(claim_line) :]
        if not output.startswith(go_line):
            if go_line in output:
                raise OutcomeUnknown("the send output is garbled")
            _log.warning("sms_dispatch_rejected", device=self._device.serial, reason="release")
            raise CommandRejected(
                f"the phone is no longer API level {sdk} (or its checks failed); nothing was"
                f" called: {output.strip()[:200]}"
            )
        reply = output[len(go_line) :]
        self._judge(reply)
        _log.info("sms_dispatched", device=self._device.serial, path="framework")
        return trip.evidence(am_output=reply, input_output="", fence_claimed=fence is not None)

    def _check_usage(self) -> None:
        if self._usage_limit is None:
            return
        count, period = self._usage_limit
        now = time.monotonic()
        while self._sent_at and self._sent_at[0] <= now - period:
            self._sent_at.popleft()
        if len(self._sent_at) >= count:
            raise CommandRejected(
                f"{count} framework sends in {period:g} s: SmsUsageMonitor would hold the next"
                " one for the user's confirmation; nothing was sent"
            )

    def _judge(self, reply: str) -> None:
        """Raise unless ``reply`` is the void success parcel (see the module docstring)."""
        if _OK_REPLY.match(reply):
            return
        if _ERROR_REPLY.match(reply) or _SECURITY_REPLY.match(reply):
            _log.warning("sms_dispatch_rejected", device=self._device.serial, reason="framework")
            raise CommandRejected(f"the framework refused the call: {reply.strip()[:300]}")
        raise OutcomeUnknown(f"the framework answered something unexpected: {reply.strip()[:300]}")
