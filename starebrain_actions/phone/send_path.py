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
rules not sent, or without a row of ours, *doubts* the path: ``auto`` turns back to the app.

**The way back** is a proof, never a guess (:func:`framework_standing`): a later framework
send whose row comes back written by the shell (``starebrain doctor --send-test NUMBER
--send-path framework``, or any send a person puts on that path), the doubted attempt's own
row read back after all (the radio answered late: a stuck outbox that went out), or a
person's ruling that the doubted SMS went out (``starebrain resolve ACTION --as sent``:
the framework took it and sent it). Nothing else restores it: not a read that fails to see
a row (DESIGN.md "Who sees what"), not time, not the sends through the app that follow
(only framework attempts are searched: ``Ledger.framework_attempts``), and not an update of
the phone (a doubt on an earlier build that nothing answered keeps the jar from opening the
path on the new one). Attempts still in flight, and those that failed before the phone's
framework was reached (a voided fence, a refused check), prove nothing either way and are
passed over. ``starebrain devices`` shows the standing: proven, doubted since when by which
attempt, restored by what and when.

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

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core.convert import format_time
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import (
    AcceptanceState,
    ActionRecord,
    DeliveryState,
    ReviewReason,
)
from starebrain_actions.core.segments import GSM7_SINGLE, UCS2_SINGLE, count_segments
from starebrain_actions.ledger.phones import FrameworkAttempts, FrameworkCodes

if TYPE_CHECKING:
    from android_bridge import Device
    from android_bridge._isms_codes import CodesUnproven, IsmsCodes
    from starebrain_actions.ledger.store import Ledger

_log = get_logger("starebrain.phone")

#: How many of a phone's latest framework attempts that came to an end (confirmed, in review
#: or ruled: ``Ledger.framework_attempts``) are searched for the proof, newest first; sends
#: through the app never push them out. A proof older than that is not used: ``auto`` then
#: sends through the app, the safe side.
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


#: Reviews after which an attempt's own row, written by the shell and read back later (the
#: radio answered late, the owner deleted the thread), still proves the path reached the
#: framework: they doubt only whether a row came or stayed. MISMATCH, DUPLICATE and
#: AMBIGUOUS doubt what the path sent, and a row does not answer that.
_ROW_ANSWERS: Final = frozenset(
    {
        ReviewReason.UNSETTLED,
        ReviewReason.UNVERIFIED,
        ReviewReason.RCS_SUSPECTED,
        ReviewReason.STUCK,
    }
)

#: What a person does to prove the framework path again (in a doubt's words).
WAY_BACK: Final = (
    "auto sends through the messaging app until the framework path is proven again: a"
    " framework send whose row comes back (`starebrain doctor --send-test NUMBER --send-path"
    " framework`), or a person's ruling that the doubted SMS went out (`starebrain resolve"
    " ACTION --as sent`); no time, read or update brings it back on its own"
)


@attrs.frozen(kw_only=True)
class FrameworkStanding:
    """Where the framework path stands for ``auto`` on one phone's build, and why
    (:func:`framework_standing`)."""

    #: ``auto`` may send through the framework
    proven: bool
    #: why, in words (for logs, the attempt's ``path_choice`` and ``starebrain devices``)
    why: str
    #: ``proven`` (a framework send of ours came back, a person ruled one sent, or the jar
    #: proves the code), ``restored`` (proven again after a doubt), ``doubted`` (the last
    #: framework send that came to an end went to review, or was ruled without a row of
    #: ours), ``unproven`` (nothing proves it yet) or ``shut`` (no build to prove it on, or
    #: the jar proves another code)
    state: str
    #: the attempt that decides (None: none does)
    decided_by: ActionRecord | None = None
    #: when it came to decide (its confirmation, its review, the ruling), where known
    decided_at: datetime | None = None
    #: with ``restored``: the doubt the proof answered; with ``doubted``: the doubt itself
    doubt: ActionRecord | None = None
    #: when that doubt arose, where known
    doubt_at: datetime | None = None


def _decided_time(record: ActionRecord, decided_at: Mapping[str, datetime]) -> datetime | None:
    """When ``record`` came to decide: the ledger's history (``decided_at``), else what the
    record itself keeps (a confirmation, a ruling's failure or acceptance)."""
    kept = decided_at.get(record.dispatch_id)
    if kept is not None:
        return kept
    if record.delivery is DeliveryState.FAILED:
        return record.failed_at
    return record.accepted_at or record.confirmed_at


def _verdict(record: ActionRecord) -> tuple[bool, str] | None:
    """What one framework attempt says of the path: (True, how it proves it), (False, why it
    doubts it), or None when it says nothing (in flight; failed before the phone's framework
    was reached)."""
    evidence = record.evidence
    # the attempt's evidence names the package the framework writes as (the shell's)
    creator = evidence.get("creator")
    shell_row = (
        record.delivery is DeliveryState.CONFIRMED
        and isinstance(creator, str)
        and evidence.get("row_creator") == creator
    )
    reason = record.review_reason
    if shell_row and reason in _ROW_ANSWERS and record.acceptance is not AcceptanceState.REJECTED:
        assert reason is not None
        # its row was read back as the shell's: the call reached sendTextForSubscriber with
        # the permission and the subscription, which is what the proof is about
        return True, (
            f"came back as a row written by {creator} (in review, {reason.value}: the path"
            " still reached the framework)"
        )
    if reason is not None:
        return False, f"went to review ({reason.value})"
    if shell_row:
        return True, f"came back as a row written by {creator}"
    if record.resolved_by is not None:
        if record.delivery is DeliveryState.CONFIRMED and (
            record.acceptance is AcceptanceState.ACCEPTED
        ):
            return True, f"was ruled sent by {record.resolved_by}, a person"
        return False, (
            f"was ruled by an operator ({record.resolved_by}), with no row of ours read back"
        )
    return None


def framework_standing(
    records: Sequence[ActionRecord],
    build: str,
    codes: FrameworkCodes | None = None,
    expected: int | None = None,
    subscription: tuple[bool | None, str] | None = None,
    decided_at: Mapping[str, datetime] | None = None,
    flagged_at: Mapping[str, datetime] | None = None,
) -> FrameworkStanding:
    """Does the phone's record prove the framework path on ``build``? ``records``: one
    phone's framework attempts (others are passed over), newest first; ``codes``: what the
    build's own framework jar proves (None: not read); ``expected``: the
    ``sendTextForSubscriber`` code the bridge sends with on the phone's release;
    ``subscription``: whether subscription 1, the one the framework path sends on, is the
    phone's (``android_bridge._doctor_provider.framework_subscription``; None: not read);
    ``decided_at``: when each attempt came to decide, by dispatch id, and ``flagged_at``:
    when each last went to review (``Ledger.framework_attempts``; missing: the record's own
    times, and no review known).

    The rule, first match wins: a jar that proves another code than ``expected`` keeps the
    framework path shut (the bridge's code reaches another method there); else the last
    framework send that came to an end on this build decides: its row read back as the
    shell's, or a person's ruling that it went out, proves the path (``restored`` where it
    answers a doubt: its own review, or the attempt before it); a review, or a ruling not
    sent or without a row of ours, doubts it; else
    a doubt on an earlier build that nothing answered keeps it shut (an update proves
    nothing); else a jar that proves ``expected`` opens it from the first send, where the
    phone shows subscription 1 is its own (a send on a subscription the phone lacks sends
    nothing while reporting success: the code alone does not prove that); else no.

    Never a guess: a read that does not see a row, time passing and an update of the phone
    each leave a doubt standing."""
    times = decided_at or {}
    flags = flagged_at or {}
    if not build:
        return FrameworkStanding(
            proven=False,
            why="the phone did not tell its build (ro.build.fingerprint)",
            state="shut",
        )
    proven_code = codes.send_text if codes is not None and codes.build == build else None
    if proven_code is not None and proven_code != expected:
        return FrameworkStanding(
            proven=False,
            why=(
                f"this build's own framework.jar gives sendTextForSubscriber code {proven_code},"
                f" not the bridge's {'none' if expected is None else expected}: the framework"
                " path would reach another method here"
            ),
            state="shut",
        )
    here: list[tuple[ActionRecord, tuple[bool, str]]] = []
    for record in records:
        verdict = _verdict(record) if record.evidence.get("send_path") == "framework" else None
        if verdict is not None:
            here.append((record, verdict))
    decisive = [(record, said) for record, said in here if record.evidence.get("build") == build]
    if decisive:
        return _standing_of(decisive, times, flags)
    for record, (proves, words) in here:
        if proves:
            break  # a proof on an earlier build answered the doubts before it
        at = _decided_time(record, times)
        return FrameworkStanding(
            proven=False,
            why=(
                f"doubted{_since(at)}: the last framework send that came to an end on this"
                f" phone, {_name(record)}, {words} on an earlier build"
                f" ({record.evidence.get('build') or 'not noted'}), and an update proves"
                f" nothing; {WAY_BACK}"
            ),
            state="doubted",
            decided_by=record,
            decided_at=at,
            doubt=record,
            doubt_at=at,
        )
    if proven_code is not None:
        jar = (
            f"this build's own framework.jar proves sendTextForSubscriber code {proven_code},"
            " the code the framework path sends with"
        )
        if subscription is None or subscription[0] is not True:
            said = "it was not read" if subscription is None else subscription[1]
            return FrameworkStanding(
                proven=False,
                why=(
                    f"{jar}, but nothing shows subscription 1, the one it sends on, is this"
                    f" phone's ({said}): a send on a subscription the phone lacks sends"
                    " nothing"
                ),
                state="unproven",
            )
        return FrameworkStanding(
            proven=True,
            why=f"{jar}; subscription 1 is this phone's ({subscription[1]})",
            state="proven",
        )
    unread = (
        "its framework.jar was not read yet"
        if codes is None or codes.build != build
        else f"its framework.jar does not prove the codes: {codes.reason}"
    )
    return FrameworkStanding(
        proven=False,
        why=(
            f"no framework send on this phone's build has come back yet and {unread}"
            " (send one with --send-path framework to prove it)"
        ),
        state="unproven",
    )


def _name(record: ActionRecord) -> str:
    return f"attempt {record.dispatch_id} of action {record.action_id}"


def _since(at: datetime | None) -> str:
    return f" since {format_time(at)}" if at is not None else ""


def _standing_of(
    decisive: Sequence[tuple[ActionRecord, tuple[bool, str]]],
    times: Mapping[str, datetime],
    flags: Mapping[str, datetime],
) -> FrameworkStanding:
    """The standing on this build from its framework attempts that say something, newest
    first: the first decides; a proof that answers a doubt restores the path (the proof's
    own review: its row came back late, or a person ruled it sent; else the doubt of the
    attempt before it)."""
    record, (proves, said) = decisive[0]
    at = _decided_time(record, times)
    if not proves:
        return FrameworkStanding(
            proven=False,
            why=(
                f"doubted{_since(at)}: the last framework send that came to an end on this"
                f" build, {_name(record)}, {said}; {WAY_BACK}"
            ),
            state="doubted",
            decided_by=record,
            decided_at=at,
            doubt=record,
            doubt_at=at,
        )
    proof = f"{_name(record)} {said} on this build" + (
        f" at {format_time(at)}" if at is not None else ""
    )
    flagged = flags.get(record.dispatch_id)
    # when it proved the path: its row read back, or the person's ruling
    proved = record.confirmed_at if record.resolved_by is None else at
    if flagged is not None and proved is not None and flagged < proved:
        # it answers its own doubt: the row of an attempt in review came back late, or a
        # person ruled sent an attempt that had gone to review (a review after the proof,
        # UNSETTLED say, doubts the settling, not the path)
        return FrameworkStanding(
            proven=True,
            why=f"restored: {proof}, after it went to review at {format_time(flagged)}",
            state="restored",
            decided_by=record,
            decided_at=at,
            doubt=record,
            doubt_at=flagged,
        )
    before = decisive[1] if len(decisive) > 1 else None
    if before is None or before[1][0]:
        return FrameworkStanding(
            proven=True, why=proof, state="proven", decided_by=record, decided_at=at
        )
    doubt, (_, doubted) = before
    doubt_at = _decided_time(doubt, times)
    return FrameworkStanding(
        proven=True,
        why=(
            f"restored: {proof}, after {_name(doubt)} {doubted}"
            f"{' at ' + format_time(doubt_at) if doubt_at is not None else ''}"
        ),
        state="restored",
        decided_by=record,
        decided_at=at,
        doubt=doubt,
        doubt_at=doubt_at,
    )


def framework_proven(
    records: Sequence[ActionRecord],
    build: str,
    codes: FrameworkCodes | None = None,
    expected: int | None = None,
    subscription: tuple[bool | None, str] | None = None,
) -> tuple[bool, str]:
    """:func:`framework_standing`'s answer and why, in words."""
    standing = framework_standing(records, build, codes, expected, subscription)
    return standing.proven, standing.why


#: ``framework_proof(name, device)``: does the ledger, or the phone's own framework jar,
#: prove the framework path on the phone's build? ``name``: the ledger's name for the phone.
#: The answer and why, in words.
FrameworkProof = Callable[[str, "Device"], Awaitable[tuple[bool, str]]]

#: A reading of the jar that a transport failure cut short is tried again after this long.
RETRY_CODES_AFTER: Final = timedelta(hours=1)


async def standing_on(
    device: Device,
    attempts: FrameworkAttempts | Sequence[ActionRecord],
    codes: FrameworkCodes | None,
    subscription: Callable[[Device], Awaitable[tuple[bool | None, str]]],
) -> FrameworkStanding:
    """:func:`framework_standing` for ``device``'s build and release, from its framework
    attempts (``Ledger.framework_attempts``; or bare records, newest first, with no times),
    ``subscription`` asked only where the jar's codes would open the path (one round trip,
    or a kept answer)."""
    from android_bridge import SEND_TEXT_CODES

    facts = await device.facts()
    expected = SEND_TEXT_CODES.get(facts.sdk) if facts.sdk is not None else None
    sub = None
    if codes is not None and codes.send_text is not None and codes.send_text == expected:
        sub = await subscription(device)
    if not isinstance(attempts, FrameworkAttempts):
        attempts = FrameworkAttempts(records=tuple(attempts))
    return framework_standing(
        attempts.records,
        facts.build,
        codes,
        expected,
        sub,
        attempts.decided_at,
        attempts.flagged_at,
    )


async def proven_on(
    device: Device,
    attempts: FrameworkAttempts | Sequence[ActionRecord],
    codes: FrameworkCodes | None,
    subscription: Callable[[Device], Awaitable[tuple[bool | None, str]]],
) -> tuple[bool, str]:
    """:func:`standing_on`'s answer and why."""
    standing = await standing_on(device, attempts, codes, subscription)
    return standing.proven, standing.why


def standing_in(attempts: FrameworkAttempts, build: str) -> FrameworkStanding:
    """The standing the ledger's record alone gives on ``build`` (no jar, no phone): for a
    command that just changed that record (``doctor --send-test``, ``resolve``)."""
    return framework_standing(
        attempts.records,
        build,
        decided_at=attempts.decided_at,
        flagged_at=attempts.flagged_at,
    )


def ledger_proof(ledger: Ledger) -> FrameworkProof:
    """``framework_proof`` for ``AndroidPhone.connect``, from ``ledger``: the phone's latest
    framework attempts that came to an end (``Ledger.framework_attempts``), and its build's
    codes as the ledger keeps them. A build the ledger has no codes for has its jar read once
    (``android_bridge._isms_codes``: one round trip) and the finding kept, so that later
    sends, and other processes, read the ledger instead; this
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
        attempts = await ledger.framework_attempts(name, PROOF_WINDOW)
        return await proven_on(device, attempts, codes, subscription)

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


def codes_current(kept: FrameworkCodes | None, now: datetime) -> bool:
    """Does a send use ``kept``, the codes the ledger keeps for a build, as they are (True),
    or read the phone's jar again (False: none kept, or a reading cut short whose time to
    retry has passed)?"""
    return kept is not None and (kept.retry_after is None or kept.retry_after > now)


def codes_of(
    found: IsmsCodes | CodesUnproven,
    build: str,
    sdk: int | None,
    now: datetime,
    retry_after: datetime | None = None,
) -> FrameworkCodes:
    """What a reading of a build's jar (``android_bridge._isms_codes.read_isms_codes``) proves,
    as the ledger keeps it."""
    from android_bridge._isms_codes import CodesUnproven

    if isinstance(found, CodesUnproven):
        text, multipart, reason = None, None, found.reason
    else:
        text, multipart, reason = found.send_text, found.send_multipart, None
    return FrameworkCodes(
        build=build,
        sdk=sdk,
        send_text=text,
        send_multipart=multipart,
        reason=reason,
        read_at=now,
        retry_after=retry_after,
    )


def kept_proof(
    attempts: Mapping[str, FrameworkAttempts],
    codes: Mapping[str, FrameworkCodes],
    stood: list[FrameworkStanding],
) -> FrameworkProof:
    """``framework_proof`` for a command that predicts ``auto``'s choice and writes nothing
    (``starebrain devices``, ``starebrain doctor``): ``attempts``, each phone's framework
    attempts by its key in the ledger, read before (``Ledger.framework_attempts``), and
    ``codes``, the codes known by build (as :func:`ledger_proof` would use them); each
    standing it finds is appended to ``stood``. The same rule as a send's
    (:func:`standing_on`), so the prediction cannot drift from the choice."""

    async def proof(name: str, device: Device) -> tuple[bool, str]:
        kept = codes.get((await device.facts()).build)
        history = attempts.get(name, FrameworkAttempts())
        standing = await standing_on(device, history, kept, read_subscription)
        stood.append(standing)
        return standing.proven, standing.why

    return proof


async def build_codes(ledger: Ledger, device: Device) -> FrameworkCodes:
    """The codes of ``device``'s build (it must have one): kept in the ledger, or read from
    the phone's jar now and kept (a reading cut short is kept with a time to retry after,
    and read again once that has passed)."""
    from android_bridge import BridgeError
    from android_bridge._isms_codes import CodesUnproven, read_isms_codes

    facts = await device.facts()
    kept = await ledger.framework_codes(facts.build)
    now = ledger.now()
    if codes_current(kept, now):
        assert kept is not None
        return kept
    retry_after = None
    try:
        found: IsmsCodes | CodesUnproven = await read_isms_codes(device)
    except BridgeError as exc:
        found = CodesUnproven(reason=f"the framework jar could not be pulled ({exc})")
        retry_after = now + RETRY_CODES_AFTER
    codes = codes_of(found, facts.build, facts.sdk, now, retry_after)
    await ledger.keep_framework_codes(codes)
    _log.info(
        "framework_codes_read",
        device=device.serial,
        build=facts.build,
        send_text=codes.send_text,
        reason=codes.reason,
    )
    return codes
