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
from typing import TYPE_CHECKING, Final

from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import ActionRecord, DeliveryState
from starebrain_actions.core.segments import GSM7_SINGLE, UCS2_SINGLE, count_segments

if TYPE_CHECKING:
    from starebrain_actions.ledger.store import Ledger

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


def framework_proven(records: Sequence[ActionRecord], build: str) -> tuple[bool, str]:
    """Does the phone's record prove the framework path on ``build``? ``records``: one phone's
    attempts, newest first. Returns the answer and, in words, why (for logs and the CLI)."""
    if not build:
        return False, "the phone did not tell its build (ro.build.fingerprint)"
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
    return False, (
        "no framework send on this phone's build has come back yet"
        " (send one with --send-path framework to prove it)"
    )


def ledger_proof(ledger: Ledger) -> Callable[[str, str], Awaitable[tuple[bool, str]]]:
    """``framework_proof(device, build)`` for ``AndroidPhone.connect``, from ``ledger``."""

    async def proof(device: str, build: str) -> tuple[bool, str]:
        return framework_proven(await ledger.latest_attempts(device, PROOF_WINDOW), build)

    return proof
