"""When the phone's record proves the framework path on one build, as a pure decision
(``starebrain_actions.phone.send_path.framework_proven``): each kind of attempt, and the order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from starebrain_actions import AcceptanceState, ActionRecord, DeliveryState, ReviewReason
from starebrain_actions.core.convert import format_time
from starebrain_actions.ledger.phones import FrameworkCodes
from starebrain_actions.phone.send_path import framework_proven, framework_standing

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BUILD = "starebrain/sim/sim:15/AP4A.250205.002/11269751:user/release-keys"
SHELL = "com.android.shell"
FRAMEWORK = {"send_path": "framework", "creator": SHELL, "build": BUILD}


def attempt(number: int, evidence: dict[str, Any], **fields: Any) -> ActionRecord:
    """Attempt ``d-<number>`` (a later number: a later send) with this evidence."""
    return ActionRecord(
        action_id=f"A-{number}",
        dispatch_id=f"d-{number}",
        attempt=1,
        device="dev",
        dispatched_at=NOW + timedelta(seconds=number),
        evidence=evidence,
        **fields,
    )


def proven(number: int, **extra: Any) -> ActionRecord:
    """A framework attempt confirmed by a row the shell wrote."""
    return attempt(
        number,
        {**FRAMEWORK, "row_creator": SHELL, **extra},
        delivery=DeliveryState.CONFIRMED,
        acceptance=AcceptanceState.ACCEPTED,
        provider_object_id=number,
        confirmed_at=NOW,
        accepted_at=NOW,
    )


def test_a_confirmed_row_of_the_shell_on_this_build_is_proof() -> None:
    ok, why = framework_proven([proven(1)], BUILD)
    assert ok and "d-1" in why


@pytest.mark.parametrize(
    "evidence",
    [
        {},  # the app's path
        {**FRAMEWORK, "build": "another/build:14/x:user/release-keys"},
        {"send_path": "framework", "creator": SHELL},  # sent before builds were noted
    ],
    ids=["ui-path", "another-build", "no-build"],
)
def test_other_paths_and_builds_prove_nothing(evidence: dict[str, Any]) -> None:
    """A confirmation through the app, or on another build, says nothing of this build's
    transaction code."""
    record = attempt(
        1,
        {**evidence, "row_creator": SHELL},
        delivery=DeliveryState.CONFIRMED,
        provider_object_id=1,
        confirmed_at=NOW,
    )
    assert (False, True) == (
        framework_proven([record], BUILD)[0],
        "no framework send" in framework_proven([record], BUILD)[1],
    )


def test_a_row_another_package_wrote_is_no_proof() -> None:
    """A confirmation whose row names no creator, or another one, proves nothing."""
    records = [
        proven(2, row_creator="com.google.android.apps.messaging"),
        attempt(1, FRAMEWORK, delivery=DeliveryState.CONFIRMED, provider_object_id=1),
    ]
    assert framework_proven(records, BUILD)[0] is False


@pytest.mark.parametrize("reason", list(ReviewReason))
def test_a_later_attempt_in_review_takes_the_proof_back(reason: ReviewReason) -> None:
    """The latest framework attempt that came to an end went to review (UNVERIFIED: the
    framework said yes and no row came; MISMATCH; DUPLICATE; ...; UNSETTLED with no row of
    ours read back): back to the app."""
    later = attempt(2, FRAMEWORK, review_reason=reason)
    ok, why = framework_proven([later, proven(1)], BUILD)
    assert (False, True) == (ok, reason.value in why)


def ruled(number: int, *, sent: bool, **extra: Any) -> ActionRecord:
    """A framework attempt a person ruled on, with no row of ours read back: sent
    (CONFIRMED and ACCEPTED by their word) or not sent (FAILED)."""
    evidence = {**FRAMEWORK, "operator": "ops", "reason": "checked", **extra}
    if sent:
        return attempt(
            number,
            evidence,
            delivery=DeliveryState.CONFIRMED,
            acceptance=AcceptanceState.ACCEPTED,
            confirmed_at=NOW + timedelta(hours=1),
            accepted_at=NOW + timedelta(hours=1),
            resolved_by="ops",
        )
    return attempt(
        number,
        evidence,
        delivery=DeliveryState.FAILED,
        failed_at=NOW + timedelta(hours=1),
        resolved_by="ops",
    )


def test_an_operators_ruling_not_sent_takes_the_proof_back() -> None:
    """The framework said yes and a person says nothing went out: the path lost an SMS."""
    standing = framework_standing([ruled(2, sent=False), proven(1)], BUILD)
    assert (False, "doubted", True) == (standing.proven, standing.state, "operator" in standing.why)
    assert ("d-2", NOW + timedelta(hours=1)) == (standing.doubt.dispatch_id, standing.doubt_at)


def test_a_ruling_that_the_doubted_sms_went_out_restores_the_path() -> None:
    """A person rules the attempt that went to review sent (the recipient got it): the
    framework took it and sent it, which is what the proof is about; the standing names the
    ruling and the doubt it answered."""
    lost = attempt(2, FRAMEWORK, review_reason=ReviewReason.UNVERIFIED)
    assert framework_standing([lost, proven(1)], BUILD).state == "doubted"
    standing = framework_standing([ruled(2, sent=True), proven(1)], BUILD)
    assert (True, "proven") == (standing.proven, standing.state)
    assert "ruled sent by ops" in standing.why
    # the ruled attempt had gone to review itself (the ledger's history says when): the
    # ruling answers its own doubt
    went = NOW + timedelta(minutes=10)
    standing = framework_standing([ruled(2, sent=True), proven(1)], BUILD, flagged_at={"d-2": went})
    assert (True, "restored", "d-2", went) == (
        standing.proven,
        standing.state,
        standing.doubt.dispatch_id,
        standing.doubt_at,
    )
    # a doubt before it (another attempt's review) makes it a restoration
    earlier = attempt(1, FRAMEWORK, review_reason=ReviewReason.UNVERIFIED)
    standing = framework_standing([ruled(2, sent=True), earlier], BUILD)
    assert (True, "restored", "d-2", "d-1") == (
        standing.proven,
        standing.state,
        standing.decided_by.dispatch_id,
        standing.doubt.dispatch_id,
    )


def test_a_framework_send_that_comes_back_after_a_doubt_restores_the_path() -> None:
    """Doubted by a review, then a person's framework send (``doctor --send-test
    --send-path framework``) comes back written by the shell: restored, with when each came
    to decide (the ledger's history times, by dispatch id)."""
    lost = attempt(2, FRAMEWORK, review_reason=ReviewReason.UNVERIFIED)
    doubted_at, proven_at = NOW + timedelta(minutes=10), NOW + timedelta(hours=2)
    times = {"d-2": doubted_at, "d-3": proven_at}
    doubted = framework_standing([lost, proven(1)], BUILD, decided_at=times)
    assert ("doubted", doubted_at) == (doubted.state, doubted.decided_at)
    assert f"since {format_time(doubted_at)}" in doubted.why
    assert "--send-path framework" in doubted.why and "--as sent" in doubted.why
    restored = framework_standing([proven(3), lost, proven(1)], BUILD, decided_at=times)
    assert (True, "restored") == (restored.proven, restored.state)
    assert (proven_at, doubted_at) == (restored.decided_at, restored.doubt_at)
    assert "d-3" in restored.why and "d-2" in restored.why
    # a proof after a proof is no restoration
    assert "proven" == framework_standing([proven(3), proven(1)], BUILD).state


def test_nothing_but_a_proof_restores_the_path() -> None:
    """After a doubt, attempts that prove nothing (in flight, failed before the framework
    was reached: a read that does not see a row is one of these), a row another package
    wrote, or a confirmation on another build never restore it."""
    lost = attempt(2, FRAMEWORK, review_reason=ReviewReason.UNVERIFIED)
    guesses = [
        attempt(6, FRAMEWORK),
        attempt(5, {**FRAMEWORK, "fence": "voided"}, delivery=DeliveryState.FAILED),
        proven(4, row_creator="com.google.android.apps.messaging"),
        proven(3, build="another/build:14/x:user/release-keys"),
    ]
    standing = framework_standing([*guesses, lost, proven(1)], BUILD)
    assert (False, "doubted", "d-2") == (
        standing.proven,
        standing.state,
        standing.decided_by.dispatch_id,
    )


@pytest.mark.parametrize(
    "reason",
    [ReviewReason.UNVERIFIED, ReviewReason.RCS_SUSPECTED, ReviewReason.STUCK],
)
def test_the_doubted_attempts_own_row_read_back_late_restores_the_path(
    reason: ReviewReason,
) -> None:
    """A stuck outbox that went out after all: the attempt in review is confirmed later by a
    row the shell wrote: the path reached the framework (the attempt still waits for a
    person); a row that does not match (MISMATCH), or a second one (DUPLICATE), doubts what
    the path sent, and a row does not answer that."""
    went = NOW + timedelta(minutes=10)
    late = attrs.evolve(proven(2), review_reason=reason, confirmed_at=went + timedelta(hours=1))
    standing = framework_standing([late, proven(1)], BUILD, flagged_at={"d-2": went})
    assert (True, "restored", "d-2", went) == (
        standing.proven,
        standing.state,
        standing.doubt.dispatch_id,
        standing.doubt_at,
    )
    # a review after the row was read (UNSETTLED: it left the view) doubts the settling, not
    # the path: proven, no restoration
    left = attrs.evolve(proven(2), review_reason=ReviewReason.UNSETTLED)
    assert "proven" == framework_standing([left], BUILD, flagged_at={"d-2": went}).state
    for doubt in (ReviewReason.MISMATCH, ReviewReason.DUPLICATE, ReviewReason.AMBIGUOUS):
        assert (
            framework_proven([attrs.evolve(proven(2), review_reason=doubt), proven(1)], BUILD)[0]
            is False
        )


def test_attempts_that_say_nothing_are_passed_over() -> None:
    """In flight (PENDING, not in review) and FAILED before the framework was reached (a
    voided fence, a refused check): the proof behind them still holds."""
    in_flight = attempt(3, FRAMEWORK)
    voided = attempt(2, {**FRAMEWORK, "fence": "voided"}, delivery=DeliveryState.FAILED)
    ok, why = framework_proven([in_flight, voided, proven(1)], BUILD)
    assert ok and "d-1" in why


def test_the_newest_decisive_attempt_wins() -> None:
    """Proven, lost, proven again: the newest decides (records come newest first)."""
    lost = attempt(2, FRAMEWORK, review_reason=ReviewReason.UNVERIFIED)
    assert framework_proven([proven(3), lost, proven(1)], BUILD)[0] is True
    assert framework_proven([lost, proven(1)], BUILD)[0] is False


def test_an_unknown_build_is_never_proven() -> None:
    """A phone that does not tell its build cannot be matched to any proof."""
    ok, why = framework_proven([proven(1, build="")], "")
    assert (False, True) == (ok, "ro.build.fingerprint" in why)


def test_an_unsettled_attempt_whose_row_the_shell_wrote_still_proves() -> None:
    """Its row was read back as the shell's, then left the view (the owner deleted the
    thread): the call reached the framework, so the path stays open; an UNSETTLED attempt
    with no row of ours read back proves nothing."""
    unsettled = attempt(
        2,
        {**FRAMEWORK, "row_creator": SHELL},
        delivery=DeliveryState.CONFIRMED,
        provider_object_id=2,
        confirmed_at=NOW,
        review_reason=ReviewReason.UNSETTLED,
    )
    ok, why = framework_proven([unsettled], BUILD)
    assert (True, True) == (ok, "UNSETTLED" in why)
    rowless = attempt(2, FRAMEWORK, review_reason=ReviewReason.UNSETTLED)
    assert framework_proven([rowless, proven(1)], BUILD)[0] is False


def codes(send_text: int | None, build: str = BUILD) -> FrameworkCodes:
    """What a build's framework jar proved (None: nothing, with a reason)."""
    return FrameworkCodes(
        build=build,
        sdk=35,
        send_text=send_text,
        reason=None if send_text is not None else "no DEX defines ISms$Stub",
        read_at=NOW,
    )


def test_a_jar_that_proves_the_bridges_code_opens_the_path_with_no_send_yet() -> None:
    """Where the phone shows subscription 1, the framework path's, is its own."""
    ok, why = framework_proven([], BUILD, codes(5), 5, (True, "the phone's SIMs: 1"))
    assert (True, True) == (ok, "framework.jar proves sendTextForSubscriber code 5" in why)


@pytest.mark.parametrize(
    ("subscription", "said"),
    [
        ((False, "the phone's SIMs (dumpsys isub): 2"), "SIMs (dumpsys isub): 2"),
        ((None, "no recent row names a subscription"), "no recent row"),
        (None, "it was not read"),
    ],
    ids=["another-sim", "nothing-tells", "not-read"],
)
def test_the_jar_alone_does_not_open_the_path_without_subscription_1(
    subscription: tuple[bool | None, str] | None, said: str
) -> None:
    """A send on a subscription the phone lacks sends nothing while reporting success: the
    code alone proves nothing of it, so the app; a confirmed framework send still proves it
    all at once."""
    ok, why = framework_proven([], BUILD, codes(5), 5, subscription)
    assert (False, True, True) == (ok, said in why, "subscription 1" in why)
    assert framework_proven([proven(1)], BUILD, codes(5), 5, subscription)[0] is True


def test_a_jar_that_proves_another_code_shuts_the_path_whatever_the_record() -> None:
    """An OEM's ISms moved the code: even a confirmed framework send does not reopen it."""
    ok, why = framework_proven([proven(1)], BUILD, codes(6), expected=5)
    assert (False, True) == (ok, "code 6, not the bridge's 5" in why)


def test_the_record_has_the_last_word_over_a_jar_that_proves_the_code() -> None:
    """A framework send that went to review on this build turns auto back to the app even
    where the jar proves the code (a SIM swap: the code is right, the subscription gone)."""
    lost = attempt(2, FRAMEWORK, review_reason=ReviewReason.UNVERIFIED)
    mine = (True, "the phone's SIMs: 1")
    assert framework_proven([lost], BUILD, codes(5), 5, mine)[0] is False
    assert framework_proven([proven(3), lost], BUILD, codes(5), 5, mine)[0] is True


def test_codes_of_another_build_or_unproven_leave_the_old_rule() -> None:
    """Codes kept for another build, or a jar that proved nothing, say nothing here: no
    framework send came back, so the app; the reason is said."""
    other = framework_proven([], BUILD, codes(5, build="x/y:14/z:user/k"), expected=5)
    assert (False, True) == (other[0], "not read yet" in other[1])
    unproven = framework_proven([], BUILD, codes(None), expected=5)
    assert (False, True) == (unproven[0], "no DEX defines ISms$Stub" in unproven[1])
    assert framework_proven([proven(1)], BUILD, codes(None), expected=5)[0] is True


def test_a_doubt_on_an_earlier_build_keeps_the_jar_from_opening_the_path() -> None:
    """An update is no proof: a framework send doubted on the build before, that nothing
    answered, keeps the path shut on the new build even where its jar proves the code; a
    proof on the earlier build after the doubt lets the jar decide again."""
    old = "starebrain/sim/sim:14/AP1A/1:user/release-keys"
    lost = attempt(2, {**FRAMEWORK, "build": old}, review_reason=ReviewReason.UNVERIFIED)
    mine = (True, "the phone's SIMs: 1")
    standing = framework_standing([lost], BUILD, codes(5), 5, mine)
    assert (False, "doubted", True) == (standing.proven, standing.state, old in standing.why)
    answered = proven(3, build=old)
    assert framework_proven([answered, lost], BUILD, codes(5), 5, mine)[0] is True
    # a send on this build still decides over the earlier one
    assert framework_proven([proven(4), lost], BUILD)[0] is True
