"""Which way ``auto`` sends on one phone: the framework only where the phone has proven it.

The framework path (``service call isms``, :mod:`android_bridge._framework`) calls a binder
transaction by number. The number comes from a table of releases (frameworks/base
``ISms.aidl``), and nothing the shell can call tells a right number from a wrong one: a wrong
one reaches another method, which may do nothing or send something else. The ``SEND_SMS``
app-op set to ignore, or a subscription the phone does not have, also make a send vanish
with the same success reply. So ``auto`` does not trust the table on its own:

* the probe must pass (``isms`` is there, the release is in the table, the shell is uid 2000
  or 0: :func:`android_bridge.probe_framework_send`), and
* the ledger must hold proof from this phone's own store, on this very build
  (``ro.build.fingerprint``, which an update changes): the latest framework attempt on it that
  says anything was confirmed by a row that ``com.android.shell`` wrote. That row proves the
  code, the permission, the app-op and the subscription on that build at once.

Otherwise ``auto`` sends through the messaging app. The first framework send on a build is
therefore always a person's choice (``--send-path framework``); after it, ``auto`` keeps to the
framework as long as its sends keep coming back. One that goes to review (UNVERIFIED:
the framework said yes and no row came; or a mismatch, a duplicate) or that an operator
rules without a row of ours turns ``auto`` back to the app until a framework send is confirmed
again. Attempts still in flight, and those that failed before the phone's framework was
reached (a voided fence, a refused check), prove nothing either way and are passed over.

**One SMS only.** ``sendTextForSubscriber`` sends a text that fits one PDU: for a longer one
``SMSDispatcher.sendText`` (frameworks/opt/telephony, android-10.0.0_r30 to 15.0.0_r1) gets
no PDU, sends nothing, writes no row, and the call still returns success. The multipart
method's transaction code could not be read at a release tag, so the framework path never
sends a body of more than one segment (:func:`framework_refusal`): ``auto`` takes the app for
it, saying so in the attempt's ``path_choice``, and a path named ``framework`` refuses it
before anything is recorded (:func:`check_send_path`, which ``starebrain send``, ``SmsAgent``
and the MCP server each call before their first write).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from starebrain_actions._logging import get_logger
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import ActionRecord, DeliveryState, ReviewReason
from starebrain_actions.core.segments import GSM7_SINGLE, UCS2_SINGLE, count_segments
from starebrain_actions.ledger.phones import FrameworkCodes

if TYPE_CHECKING:
    from android_bridge import Device
    from starebrain_actions.ledger.store import Ledger

_log = get_logger("starebrain.phone")

#: How many of a phone's latest attempts are searched for the proof (newest first). A proof
#: older than that is not used: ``auto`` then sends through the app, the safe side.
PROOF_WINDOW: Final = 200


def framework_refusal(body: str) -> str | None:
    """Why the framework path cannot send ``body`` (more than one SMS segment, as Android
    counts them: ``core.segments``), or None when it can."""
    count = count_segments(body)
    if count.segments <= 1:
        return None
    single = GSM7_SINGLE if count.encoding == "GSM-7" else UCS2_SINGLE
    return (
        f"the body is {count.segments} SMS segments ({count.encoding}: {count.units}"
        f" {count.unit_name}, one SMS holds {single}) and the framework path sends one SMS"
        " only (Android's SMSDispatcher.sendText sends nothing for a longer text, and the call"
        " still reports success)"
    )


def check_send_path(send_path: str, body: str) -> None:
    """Refuse ``body`` on a send path named by the caller that cannot send it: a body of more
    than one SMS segment on ``framework``. ``auto`` and ``ui`` take any body (``auto`` takes
    the app for a long one).

    Raises:
        InvalidInput: the refusal, naming the segment count and what to do instead.
    """
    if send_path != "framework":
        return
    why = framework_refusal(body)
    if why is not None:
        raise InvalidInput(
            f"send path framework cannot send this body: {why}. Send it through the messaging"
            " app (send path ui, or auto, which takes the app for it: --send-path ui or"
            " --send-path auto), or shorten it to one SMS; nothing was recorded or sent"
        )


def framework_proven(
    records: Sequence[ActionRecord],
    build: str,
    codes: FrameworkCodes | None = None,
    expected: int | None = None,
    subscription: tuple[bool | None, str] | None = None,
) -> tuple[bool, str]:
    """Does the phone's record prove the framework path on ``build``? ``records``: one phone's
    attempts, newest first; ``codes``: what the build's own framework jar proves (None: not
    read); ``expected``: the ``sendTextForSubscriber`` code the bridge sends with on the
    phone's release; ``subscription``: whether subscription 1, the one the framework path
    sends on, is the phone's (``android_bridge._doctor_provider.framework_subscription``;
    None: not read). Returns the answer and, in words, why (for logs and the CLI).

    The rule, first match wins: a jar that proves another code than ``expected`` keeps the
    framework path shut (the bridge's code reaches another method there); else the last
    framework send that came to an end on this build decides (confirmed by a row of ours:
    yes; in review or ruled by an operator: no); else a jar that proves ``expected``
    opens it from the first send, where the phone shows subscription 1 is its own (a send
    on a subscription the phone lacks sends nothing while reporting success: the code alone
    does not prove that); else no."""
    if not build:
        return False, "the phone did not tell its build (ro.build.fingerprint)"
    proven_code = codes.send_text if codes is not None and codes.build == build else None
    if proven_code is not None and proven_code != expected:
        return False, (
            f"this build's own framework.jar gives sendTextForSubscriber code {proven_code},"
            f" not the bridge's {'none' if expected is None else expected}: the framework"
            " path would reach another method here"
        )
    for record in records:
        evidence = record.evidence
        if evidence.get("send_path") != "framework" or evidence.get("build") != build:
            continue
        # the attempt's evidence names the package the framework writes as (the shell's)
        creator = evidence.get("creator")
        shell_row = (
            record.delivery is DeliveryState.CONFIRMED
            and isinstance(creator, str)
            and evidence.get("row_creator") == creator
        )
        name = f"attempt {record.dispatch_id} of action {record.action_id}"
        if shell_row and record.review_reason is ReviewReason.UNSETTLED:
            # its row was read back as the shell's before it left the view (the owner deleted
            # the thread, the radio failed it): the call reached sendTextForSubscriber with
            # the permission and the subscription, which is what the proof is about
            return True, (
                f"{name} came back as a row written by {creator} on this build (it left the"
                " view later, UNSETTLED: the path still reached the framework)"
            )
        if record.review_reason is not None:
            return False, (
                f"the last framework send that came to an end on this build, {name}, went to"
                f" review ({record.review_reason.value})"
            )
        if shell_row:
            return True, f"{name} came back as a row written by {creator} on this build"
        if record.resolved_by is not None:
            return False, (
                f"the last framework send that came to an end on this build, {name}, was"
                " ruled by an operator, with no row of ours read back"
            )
    if proven_code is not None:
        jar = (
            f"this build's own framework.jar proves sendTextForSubscriber code {proven_code},"
            " the code the framework path sends with"
        )
        if subscription is None or subscription[0] is not True:
            said = "it was not read" if subscription is None else subscription[1]
            return False, (
                f"{jar}, but nothing shows subscription 1, the one it sends on, is this"
                f" phone's ({said}): a send on a subscription the phone lacks sends nothing"
            )
        return True, f"{jar}; subscription 1 is this phone's ({subscription[1]})"
    unread = (
        "its framework.jar was not read yet"
        if codes is None or codes.build != build
        else f"its framework.jar does not prove the codes: {codes.reason}"
    )
    return False, (
        f"no framework send on this phone's build has come back yet and {unread}"
        " (send one with --send-path framework to prove it)"
    )


#: ``framework_proof(name, device)``: does the ledger, or the phone's own framework jar,
#: prove the framework path on the phone's build? ``name``: the ledger's name for the phone.
#: The answer and why, in words.
FrameworkProof = Callable[[str, "Device"], Awaitable[tuple[bool, str]]]

#: A reading of the jar that a transport failure cut short is tried again after this long.
RETRY_CODES_AFTER: Final = timedelta(hours=1)


async def proven_on(
    device: Device,
    records: Sequence[ActionRecord],
    codes: FrameworkCodes | None,
    subscription: Callable[[Device], Awaitable[tuple[bool | None, str]]],
) -> tuple[bool, str]:
    """:func:`framework_proven` for ``device``'s build and release, ``subscription`` asked
    only where the jar's codes would open the path (one round trip, or a kept answer)."""
    from android_bridge import SEND_TEXT_CODES

    facts = await device.facts()
    expected = SEND_TEXT_CODES.get(facts.sdk) if facts.sdk is not None else None
    sub = None
    if codes is not None and codes.send_text is not None and codes.send_text == expected:
        sub = await subscription(device)
    return framework_proven(records, facts.build, codes, expected, sub)


def ledger_proof(ledger: Ledger) -> FrameworkProof:
    """``framework_proof`` for ``AndroidPhone.connect``, from ``ledger``: the phone's latest
    attempts, and its build's codes as the ledger keeps them. A build the ledger has no
    codes for has its jar read once (``android_bridge._isms_codes``: one round trip) and the
    finding kept, so that later sends, and other processes, read the ledger instead; this
    proof keeps a finished reading in memory too (one cut short is looked up again, to be
    read again once its time has passed). Whether subscription 1 is the phone's is read
    once per connection: a SIM swap restarts the phone's radio, and the connection with it."""
    known: dict[str, FrameworkCodes] = {}
    asked: list[tuple[Device, tuple[bool | None, str]]] = []

    async def subscription(device: Device) -> tuple[bool | None, str]:
        if not asked or asked[-1][0] is not device:
            asked[:] = [(device, await read_subscription(device))]
        return asked[-1][1]

    async def proof(name: str, device: Device) -> tuple[bool, str]:
        build = (await device.facts()).build
        codes = known.get(build) if build else None
        if codes is None and build:
            codes = await build_codes(ledger, device)
            if codes.retry_after is None:
                known[build] = codes
        records = await ledger.latest_attempts(name, PROOF_WINDOW)
        return await proven_on(device, records, codes, subscription)

    return proof


async def read_subscription(device: Device) -> tuple[bool | None, str]:
    """Whether subscription 1 is ``device``'s own (``framework_subscription``); a transport
    failure answers None, with why."""
    from android_bridge import BridgeError
    from android_bridge._doctor_provider import framework_subscription

    try:
        return await framework_subscription(device)
    except BridgeError as exc:
        return None, f"the phone's subscriptions could not be read ({exc})"


async def build_codes(ledger: Ledger, device: Device) -> FrameworkCodes:
    """The codes of ``device``'s build (it must have one): kept in the ledger, or read from
    the phone's jar now and kept (a reading cut short is kept with a time to retry after,
    and read again once that has passed)."""
    from android_bridge import BridgeError
    from android_bridge._isms_codes import CodesUnproven, read_isms_codes

    facts = await device.facts()
    kept = await ledger.framework_codes(facts.build)
    now = ledger.now()
    if kept is not None and (kept.retry_after is None or kept.retry_after > now):
        return kept
    retry_after = None
    try:
        found = await read_isms_codes(device)
    except BridgeError as exc:
        found = CodesUnproven(reason=f"the framework jar could not be pulled ({exc})")
        retry_after = now + RETRY_CODES_AFTER
    if isinstance(found, CodesUnproven):
        text, multipart, reason = None, None, found.reason
    else:
        text, multipart, reason = found.send_text, found.send_multipart, None
    codes = FrameworkCodes(
        build=facts.build,
        sdk=facts.sdk,
        send_text=text,
        send_multipart=multipart,
        reason=reason,
        read_at=now,
        retry_after=retry_after,
    )
    await ledger.keep_framework_codes(codes)
    _log.info(
        "framework_codes_read",
        device=device.serial,
        build=facts.build,
        send_text=codes.send_text,
        reason=codes.reason,
    )
    return codes
