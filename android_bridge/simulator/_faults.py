"""Faults the simulated phone can inject on demand, and their remaining counts."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final


class Fault(enum.StrEnum):
    """One kind of misbehaviour; the value is the ``--fault`` name."""

    #: The message is sent, then the ADB connection drops before the command's reply: the
    #: script is hung up right after the key or the ``service call`` (it runs on if it ignores
    #: SIGHUP). Like every fault of the link, it meets both send paths.
    DROP_AFTER_SEND = "drop-after-send"
    #: The connection drops as the send key is being injected (or the ``service call``
    #: starts): a script that does not ignore SIGHUP dies before the key reaches the app
    #: (nothing is sent); one that does (the product's send script) delivers it, and the
    #: message is sent.
    DROP_BEFORE_SEND = "drop-before-send"
    #: The radio fails: the row ends as type 5 FAILED. A text of several SMS sent through the
    #: messaging app fails on its last part: the parts before it go out (``Transmission``'s
    #: ``parts_out``), and the row still ends FAILED, since the app keeps the worst result
    #: across the parts (``SmsSender.SendResult.setPartResult``, packages/apps/Messaging
    #: android-10.0.0_r30 to android-15.0.0_r1, read as LineageOS 17.1 to 22.0 mirror it).
    SEND_FAILS = "send-fails"
    #: The next text of several SMS that the messaging app sends fails on its last part: the
    #: parts before it go out, and the row ends FAILED (as ``send-fails`` does to a long
    #: text). It waits for such a text: shorter ones and the framework's sends (one SMS
    #: each) do not use it up.
    PART_FAILS = "part-fails"
    #: The messaging app's own send timeout passes before the radio answers: the app rewrites
    #: its row FAILED (after ``app_send_timeout_ms``: ``SMS_SEND_TIMEOUT_IN_MILLIS_DEFAULT``, 5
    #: minutes, ``BugleGservicesKeys``), and the radio's success that follows is ignored
    #: (``SmsSender.setResult``: "ignoring sent result"): the SMS went out, its row says
    #: FAILED (packages/apps/Messaging android-10.0.0_r30 to android-15.0.0_r1).
    APP_TIMEOUT = "app-timeout"
    #: The next send goes as MMS, and MmsService never gets its network: the app's box-2 row
    #: stays sent until ``mms_fail_after_ms`` (its 20-minute resend window, then
    #: ``MmsNetworkManager``'s 30-minute wait: about 50 minutes), then turns FAILED; nothing
    #: goes out (packages/services/Mms, LineageOS 17.1 to 21.0: Android 10 to 14).
    MMS_NETWORK_TIMEOUT = "mms-network-timeout"
    #: The radio never sends it: the row stays as the app wrote it, SENT for an app writing
    #: it optimistically (every profile; its own database says failed once it gives up),
    #: OUTBOX (4) for one that writes OUTBOX first.
    STUCK_OUTBOX = "stuck-outbox"
    #: The app sends the message twice (two rows).
    DUPLICATE_SEND = "duplicate-send"
    #: The app alters the text before sending, as autocorrect would.
    MANGLE_BODY = "mangle-body"
    #: The app sends to a different number than the one asked for.
    WRONG_RECIPIENT = "wrong-recipient"
    #: The next ``content query`` fails with a permission error (counts queries, not sends).
    PROVIDER_ERROR = "provider-error"
    #: The link stalls as the next shell command line arrives: it never runs and never
    #: answers, and the connection carries nothing more either way (``Connection.stall``;
    #: counts command lines, not sends).
    HANG = "hang"
    #: The message is sent, then the link stalls: the script runs on to its end on the phone,
    #: but the command never answers (a timeout after a real send), and the connection
    #: carries nothing more either way (``Connection.stall``).
    HANG_AFTER_SEND = "hang-after-send"
    #: At the next send the phone reboots: every connection is reset, the user is locked
    #: until unlocked, and ``adb tcpip`` mode is lost (see ``SimulatedPhone.reboot``).
    REBOOT = "reboot"
    #: The next send goes out as RCS chat: nothing is written to ``content://sms``.
    RCS_SEND = "rcs-send"
    #: The next send is converted to MMS: it lands in ``content://mms``, not ``content://sms``.
    MMS_CONVERT = "mms-convert"
    #: The app strips accents from the next send ("Use simple characters").
    SIMPLE_CHARACTERS = "simple-characters"
    #: The screen turns off just before the next ``am start``: the activity starts behind the
    #: keyguard and key events go to the keyguard (counts ``am start`` runs).
    SCREEN_OFF = "screen-off"
    #: The next implicit ``SENDTO`` brings up the app chooser, as when a second SMS app is
    #: installed with no default set (counts ``am start`` runs).
    CHOOSER = "chooser"
    #: The next ``SENDTO`` finds the app's compose window for that recipient already open in
    #: the background with an earlier, unsent draft: the task is brought to the front and the
    #: new extras are dropped (apps whose SENDTO reuses the task; counts ``am start`` runs).
    STALE_DRAFT = "stale-draft"
    #: The next launched window takes ten times the focus delay to take focus (counts
    #: ``am start`` runs).
    SLOW_LAUNCH = "slow-launch"


#: Faults consumed by a send (the send key reaching the messaging app, or a ``service call
#: isms`` that sends: the framework path meets the link's and the radio's, not the app's).
SEND_FAULTS: Final = frozenset(
    {
        Fault.DROP_AFTER_SEND,
        Fault.DROP_BEFORE_SEND,
        Fault.SEND_FAILS,
        Fault.APP_TIMEOUT,
        Fault.MMS_NETWORK_TIMEOUT,
        Fault.STUCK_OUTBOX,
        Fault.DUPLICATE_SEND,
        Fault.MANGLE_BODY,
        Fault.WRONG_RECIPIENT,
        Fault.HANG_AFTER_SEND,
        Fault.REBOOT,
        Fault.RCS_SEND,
        Fault.MMS_CONVERT,
        Fault.SIMPLE_CHARACTERS,
    }
)

#: Faults consumed only by a send of the messaging app whose text needs several SMS.
LONG_TEXT_FAULTS: Final = frozenset({Fault.PART_FAILS})

#: Faults consumed by an ``am start`` run.
AM_FAULTS: Final = frozenset(
    {Fault.SCREEN_OFF, Fault.CHOOSER, Fault.STALE_DRAFT, Fault.SLOW_LAUNCH}
)


def parse_fault(spec: str) -> tuple[Fault, int]:
    """Parse ``NAME[:COUNT]``.

    Raises:
        ValueError: unknown name (the message lists the valid ones) or a bad count.
    """
    name, _, count_text = spec.partition(":")
    try:
        fault = Fault(name.strip())
    except ValueError:
        valid = ", ".join(fault.value for fault in Fault)
        raise ValueError(f"unknown fault {name!r}; valid faults: {valid}") from None
    count = 1
    if count_text:
        try:
            count = int(count_text)
        except ValueError:
            raise ValueError(f"fault count must be a whole number, got {count_text!r}") from None
        if count < 1:
            raise ValueError(f"fault count must be at least 1, got {count}")
    return fault, count


class FaultPlan:
    """Remaining counts per fault; each use consumes one."""

    def __init__(self) -> None:
        self._remaining: dict[Fault, int] = {}

    def add(self, fault: Fault | str, count: int = 1) -> None:
        """Arm ``fault`` for ``count`` more uses (counts add up).

        Raises:
            ValueError: unknown fault name or a count below 1.
        """
        if count < 1:
            raise ValueError(f"fault count must be at least 1, got {count}")
        resolved = fault if isinstance(fault, Fault) else parse_fault(fault)[0]
        self._remaining[resolved] = self._remaining.get(resolved, 0) + count

    def take(self, fault: Fault) -> bool:
        """Consume one use of ``fault``; return whether it was armed."""
        remaining = self._remaining.get(fault, 0)
        if remaining <= 0:
            return False
        self._remaining[fault] = remaining - 1
        return True

    def take_send_faults(self) -> frozenset[Fault]:
        """Consume one use of every armed send fault; return those that apply to this send."""
        return frozenset(fault for fault in SEND_FAULTS if self.take(fault))

    def take_am_faults(self) -> frozenset[Fault]:
        """Consume one use of every armed ``am start`` fault; return those that apply."""
        return frozenset(fault for fault in AM_FAULTS if self.take(fault))

    def remaining(self) -> dict[Fault, int]:
        """Counts still armed (faults at zero omitted)."""
        return {fault: count for fault, count in self._remaining.items() if count > 0}

    def extend(self, specs: Iterable[Fault | str | tuple[Fault | str, int]]) -> None:
        """Arm several faults given as ``Fault``, ``"name[:count]"`` or ``(fault, count)``.

        Raises:
            ValueError: an unknown name or a bad count.
        """
        for spec in specs:
            if isinstance(spec, tuple):
                self.add(spec[0], spec[1])
            elif isinstance(spec, Fault):
                self.add(spec)
            else:
                fault, count = parse_fault(spec)
                self.add(fault, count)
