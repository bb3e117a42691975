"""The fence on the phone settles what no read can: a send cut off before its keys.

A dropped connection no longer cuts a send script (it ignores SIGHUP and runs to its end:
``android_bridge._fence.run_to_the_end``); adbd restarting does (``adb root``/``usb``/``tcpip``,
a crash: init kills everything it started). Each case cuts a send at one point of its script
on the phone that way (``phone.drop_after_command(…, adbd_restarts=True)``), then reruns the
same send. The ground truth is what left the phone (``phone.transmissions``), never the
ledger.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from android_bridge import FENCE_ROOT, Device
from starebrain_actions import DeliveryState, RetryPolicy, ReviewReason, SmsIntent, Status
from starebrain_actions.core.transitions import flag_for_review
from starebrain_actions.orchestration.reconciler import clean_fences, reconcile_device
from starebrain_actions.orchestration.watched import SCRIPT_FINISH_WITHIN

TO, BODY = "+1 202 555 0100", "Your code is 4821"
OTHER_TO, OTHER_BODY = "+1 202 555 0199", "Table for two at 8"
POLICY = RetryPolicy(
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
    maximum_attempts=3,
)


async def sent(phone: Any, expected: int, body: str = BODY) -> int:
    """How many messages carrying ``body`` left the phone, on any channel, counted once the
    ``expected`` ones have (the radio sends after the app's row) and nothing more can."""
    if expected:
        await phone.wait_transmissions(lambda t: t.body == body, count=expected)
    await phone.radio_idle()
    return sum(1 for t in phone.transmissions if t.body == body)


@pytest.mark.parametrize(
    ("command", "nth", "where"),
    [
        ("ls", 1, "before the claim (the epoch check ran, the claim did not)"),
        ("ln", 1, "right after the claim"),
        ("am", 1, "after am opened the compose window"),
        ("ln", 2, "after the am stage marker"),
    ],
)
async def test_a_send_cut_before_its_keys_ends_with_exactly_one_sms(
    sms_phone: Any, agent_for: Any, command: str, nth: int, where: str
) -> None:
    """Cut anywhere before the right to press the keys was claimed: the rerun voids the fence
    (claim or go), the attempt is FAILED with the fence as proof, and one SMS goes out."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY) as agent:
        await agent.phone.fence_epoch()  # asked once per connection, before the cut is armed
        phone.drop_after_command(command, nth=nth, adbd_restarts=True)
        await agent.send("A-17", TO, BODY, wait=0.5)
        rerun = await agent.send("A-17", TO, BODY, wait=5)
    first = rerun.summary.attempts[0]
    assert (1, Status.SUCCEEDED) == (await sent(phone, 1), rerun.status), where
    assert (DeliveryState.FAILED, "voided") == (first.delivery, first.evidence.get("fence"))


async def test_a_send_cut_after_its_keys_is_never_resent(sms_phone: Any, agent_for: Any) -> None:
    """adbd restarts right after the send key, before the script recorded its keys: the
    message went out; the fence cannot be voided (the script holds go). While its keys
    marker may still come (SCRIPT_FINISH_WITHIN) no row is attributed; after that the
    matching row cannot be told from an identical text of the owner's (the window never
    closed): review as AMBIGUOUS, one SMS, nothing resent."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY) as agent:
        await agent.phone.fence_epoch()
        phone.drop_after_command("input", nth=2, adbd_restarts=True)
        await agent.send("A-17", TO, BODY, wait=0.5)
        rerun = await agent.send("A-17", TO, BODY, wait=2)
        later = agent.ledger.now() + SCRIPT_FINISH_WITHIN
        await reconcile_device(agent.ledger, agent.phone, now=later)
        summary = await agent.ledger.summary("A-17")
    await phone.wait_idle()  # the radio's send, after the key (send_delay_ms)
    assert (1, 1, ()) == (
        await sent(phone, 1),
        len(rerun.summary.attempts),
        rerun.summary.review_reasons,
    )
    assert (1, (ReviewReason.AMBIGUOUS,)) == (len(summary.attempts), summary.review_reasons)


@pytest.mark.parametrize(("command", "nth"), [("am", 1), ("ln", 3), ("input", 2)])
async def test_a_dropped_connection_no_longer_cuts_a_send(
    sms_phone: Any, agent_for: Any, command: str, nth: int
) -> None:
    """The connection drops after ``am``, after the script claimed go, or right after the send
    key: the script ignores the hang-up and runs to its end, keys and stage markers included,
    so the first send is confirmed by its own row: one SMS, SUCCEEDED, one attempt."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY) as agent:
        await agent.phone.fence_epoch()
        phone.drop_after_command(command, nth=nth)
        outcome = await agent.send("A-17", TO, BODY, wait=10)
    assert (1, Status.SUCCEEDED, 1) == (
        await sent(phone, 1),
        outcome.status,
        len(outcome.summary.attempts),
    )


async def test_a_send_whose_keys_were_recorded_is_confirmed_after_a_cut(
    sms_phone: Any, agent_for: Any
) -> None:
    """Cut once the script recorded its keys (the drop comes after the last ``ln``): the
    stage markers close the window, and a read confirms the one SMS."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY) as agent:
        await agent.phone.fence_epoch()
        phone.drop_after_command("ln", nth=4)  # claim, am, go, keys
        await agent.send("A-17", TO, BODY, wait=0.5)
        rerun = await agent.send("A-17", TO, BODY, wait=5)
    assert (1, Status.SUCCEEDED, 1) == (
        await sent(phone, 1),
        rerun.status,
        len(rerun.summary.attempts),
    )


async def test_a_send_cut_between_go_and_the_keys_is_unknown_then_frees_the_phone(
    sms_phone: Any, agent_for: Any
) -> None:
    """Cut (adbd restarts) right after the script claimed go, before the send key: no proof
    either way, so the attempt stays unresolved and its action is never resent; past
    unverified_after it goes to review (UNVERIFIED) and another action can use the phone."""
    phone = await sms_phone()
    policy = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=3,
        unverified_after=timedelta(0),
    )
    async with agent_for(phone, policy=policy) as agent:
        await agent.phone.fence_epoch()
        phone.drop_after_command("ln", nth=3, adbd_restarts=True)
        await agent.send("A-17", TO, BODY, wait=0.5)
        again = await agent.send("A-17", TO, BODY, wait=1)
        other = await agent.send("B-1", OTHER_TO, OTHER_BODY, wait=5)
    record = again.record
    assert record is not None
    assert (DeliveryState.PENDING, ReviewReason.UNVERIFIED) == (
        record.delivery,
        record.review_reason,
    )
    assert (0, 1, Status.SUCCEEDED) == (
        await sent(phone, 0),
        len(again.summary.attempts),
        other.status,
    )
    assert "claimed" == record.evidence.get("fence")


async def test_a_hung_command_that_never_ran_is_voided_and_sent_once(
    sms_phone: Any, agent_for: Any
) -> None:
    """The phone takes the command and never runs it (a hang): the sender's poll voids the
    fence at once, the attempt is FAILED, and the retry sends exactly one SMS; the hung copy
    could never claim it later."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY, command_timeout_s=3.0) as agent:
        await agent.phone.fence_epoch()
        phone.inject_fault("hang")
        outcome = await agent.send("A-17", TO, BODY, wait=20)
    first = outcome.summary.attempts[0]
    assert (1, Status.SUCCEEDED) == (await sent(phone, 1), outcome.status)
    assert (DeliveryState.FAILED, "claim") == (first.delivery, first.evidence["fence_voided_at"])


async def test_a_voided_attempt_cannot_be_sent_by_a_late_copy_of_its_script(
    sms_phone: Any, agent_for: Any, adb_key_path: Any
) -> None:
    """Replay the very send command of a voided attempt: its claim fails and nothing is sent."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY, command_timeout_s=3.0) as agent:
        await agent.phone.fence_epoch()
        phone.inject_fault("hang")
        await agent.send("A-17", TO, BODY, wait=20)
    hung = next(c for c in phone.commands_run if "am start" in c and "ln -s script/." in c)
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        await device.shell(hung)
    assert 1 == await sent(phone, 1)


async def test_the_fence_folder_cleared_proves_nothing(sms_phone: Any, agent_for: Any) -> None:
    """A receipt was committed and its sender died; then /data/local/tmp was cleared. The
    missing claim proves nothing now (the epoch is gone too), so the attempt is not voided,
    stays unresolved, and nothing is sent for it."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY, void_after=timedelta(0)) as agent:
        epoch = await agent.phone.fence_epoch()
        await agent.ledger.create_action("A-17", SmsIntent(recipient=TO, body=BODY), POLICY)
        await agent.ledger.begin_attempt("A-17", phone.serial, evidence={"fence_epoch": epoch})
        phone.clear_tmp()
        again = await agent.send("A-17", TO, BODY, wait=1)
    record = again.record
    assert record is not None
    assert (0, 1, DeliveryState.PENDING) == (
        await sent(phone, 0),
        len(again.summary.attempts),
        record.delivery,
    )
    assert "lost" == record.evidence.get("fence")


async def test_a_live_sender_is_not_voided_by_another(sms_phone: Any, agent_for: Any) -> None:
    """An attempt younger than void_after may belong to a sender whose command is on its way:
    another sender of the same action waits for it instead of voiding it, and one SMS goes
    out."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY) as agent:
        epoch = await agent.phone.fence_epoch()
        await agent.ledger.create_action("A-17", SmsIntent(recipient=TO, body=BODY), POLICY)
        await agent.ledger.begin_attempt("A-17", phone.serial, evidence={"fence_epoch": epoch})
        waited = await agent.send("A-17", TO, BODY, wait=0.5)
    record = waited.record
    assert record is not None
    assert (DeliveryState.PENDING, None, 0) == (
        record.delivery,
        record.evidence.get("fence"),
        await sent(phone, 0),
    )
    assert phone.files.exists(f"/data/local/tmp/starebrain/{record.dispatch_id}") is False


async def test_fence_names_of_long_resolved_attempts_are_removed(
    sms_phone: Any, agent_for: Any, adb_key_path: Any
) -> None:
    """A pass removes the fence names of attempts resolved longer ago than the retention (and
    the output file a script stopped midway left), and leaves recent ones and names the
    ledger does not know."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
        record = outcome.record
        assert record is not None
        leftover = f"/data/local/tmp/starebrain/.out-{record.dispatch_id}"
        async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
            await device.run(["ln -s script /data/local/tmp/starebrain/someone-else"])
            # what a script stopped before its end (adbd restarting) leaves
            await device.run([f"echo SBCLAIM > {leftover}"])
        now = agent.ledger.now()
        kept = await clean_fences(agent.ledger, agent.phone, now=now)
        removed = await clean_fences(agent.ledger, agent.phone, now=now + timedelta(days=8))
        left = await agent.phone.fence_names()
    assert (0, 1, ("someone-else",)) == (kept, removed, left)
    assert not phone.files.exists(leftover)


async def test_a_script_found_past_go_before_its_keys_is_read_again_until_they_are_recorded(
    sms_phone: Any, agent_for: Any, adb_key_path: Any
) -> None:
    """A pass voids while the script, past ``go``, is still pressing its keys: it records the
    claim, but attributes no row while the ``keys`` marker may still come (the script runs
    on: SCRIPT_FINISH_WITHIN); the next pass reads the fence again, finds the marker, and
    the window it closes tells our row from the owner's identical text sent a moment later
    (an open window would hold both: AMBIGUOUS)."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY, void_after=timedelta(0)) as agent:
        epoch = await agent.phone.fence_epoch()
        await agent.ledger.create_action("A-17", SmsIntent(recipient=TO, body=BODY), POLICY)
        record = await agent.ledger.begin_attempt(
            "A-17", agent.phone.device, evidence={"fence_epoch": epoch}
        )
        fence = f"/data/local/tmp/starebrain/{record.dispatch_id}"
        am = phone.now_ms()
        async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
            await device.run([f"ln -s script/. {fence} && ln -s {am}/. {fence}.am"])
            await device.run([f"ln -s script/. {fence}.go"])
        ours = phone.store.insert_outgoing("+12025550100", BODY, date_ms=am + 100, message_type=2)
        phone.store.insert_outgoing("+12025550100", BODY, date_ms=am + 5_000, message_type=2)
        first = await agent.reconcile()
        during = await agent.ledger.get_attempt(record.dispatch_id)
        async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
            await device.run([f"ln -s {am + 300}/. {fence}.keys"])
        await agent.reconcile()
        after = await agent.ledger.get_attempt(record.dispatch_id)
    assert (DeliveryState.PENDING, "claimed", ["am@" + str(am)]) == (
        during.delivery,
        during.evidence.get("fence"),
        during.evidence.get("fence_stages"),
    )
    assert [] == [c for c in first.changes if c.event == "confirm"]
    assert (DeliveryState.CONFIRMED, ours, None) == (
        after.delivery,
        after.provider_object_id,
        after.review_reason,
    )
    assert [f"am@{am}", f"keys@{am + 300}"] == after.evidence.get("fence_stages")


@pytest.mark.parametrize(
    ("command", "nth", "where"),
    [
        ("ln", 1, "right after the claim"),
        ("am", 1, "after am opened the compose window"),
        ("ln", 2, "after the am stage marker"),
    ],
)
async def test_a_send_stopped_before_its_keys_is_settled_while_the_phone_is_still_locked(
    sms_phone: Any, agent_for: Any, command: str, nth: int, where: str
) -> None:
    """The phone loses power in the middle of a send, before its script claimed the right to
    press the keys, and comes back locked: its SMS provider refuses every read until the
    owner unlocks it. The fence lives in ``/data/local/tmp``, which answers before that: the
    next pass voids it there and the attempt is FAILED (nothing was or can still be sent)
    without waiting for a read it cannot make, nor for a person (it used to stay unresolved,
    holding the phone, until the owner unlocked it). Once unlocked, the text goes out once.
    (A 5 s command timeout: at 1 s the pass's void, a script run by mksh on a phone the suite
    loaded, timed out in a `.ci/run`, and the attempt rightly stayed unresolved; no step here
    waits on a command that hangs: the reboot resets the link, the locked provider errs.)"""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY, command_timeout_s=5.0) as agent:
        await agent.phone.fence_epoch()
        phone.drop_after_command(command, nth=nth, reboot=True)
        await agent.send("A-17", TO, BODY, wait=0.5)
        await phone.enable_tcpip()  # adb over TCP again; the user is still locked
        assert not phone.user_unlocked
        report = await agent.reconcile()
        stopped = (await agent.ledger.summary("A-17")).latest
        phone.unlock_user()
        again = await agent.send("A-17", TO, BODY, wait=5)
    assert stopped is not None and not report.reachable  # its messages could not be read
    assert (DeliveryState.FAILED, "voided") == (stopped.delivery, stopped.evidence.get("fence"))
    assert (1, Status.SUCCEEDED, 2) == (
        await sent(phone, 1),
        again.status,
        len(again.summary.attempts),
    )


async def test_a_send_stopped_after_go_stays_in_review_once_the_phone_answers(
    sms_phone: Any, agent_for: Any
) -> None:
    """The phone loses power right after the script claimed go, before its send key: the
    fence shows the keys may have been pressed (no marker can be made in one step with a key
    press), so once the phone answers and is unlocked the attempt goes to review
    (UNVERIFIED), never FAILED and never resent; nothing went out."""
    phone = await sms_phone()
    policy = attrs.evolve(POLICY, unverified_after=timedelta(0))
    async with agent_for(phone, policy=policy, command_timeout_s=3.0) as agent:
        await agent.phone.fence_epoch()
        phone.drop_after_command("ln", nth=3, reboot=True)
        await agent.send("A-17", TO, BODY, wait=0.5)
        await phone.enable_tcpip()
        await agent.reconcile()  # locked: the fence is read, nothing is settled
        phone.unlock_user()
        again = await agent.send("A-17", TO, BODY, wait=1)
    record = again.record
    assert record is not None
    assert (DeliveryState.PENDING, ReviewReason.UNVERIFIED, "claimed") == (
        record.delivery,
        record.review_reason,
        record.evidence.get("fence"),
    )
    assert (0, 1) == (await sent(phone, 0), len(again.summary.attempts))


@pytest.mark.parametrize("stopped", ["before the claim", "after the claim"])
async def test_an_unverified_attempt_whose_script_never_reached_go_is_voided_by_a_pass(
    sms_phone: Any, agent_for: Any, stopped: str
) -> None:
    """An attempt already in review as UNVERIFIED (a ledger that flagged it before its fence
    was read, or a person who flagged it) whose script never claimed go: its script stopped
    with the phone before the claim, or right after it. A pass that can read the phone voids
    its fence there and settles it as not sent (FAILED), with no person; the action is sent
    once afterwards."""
    phone = await sms_phone()
    async with agent_for(phone, policy=POLICY, void_after=timedelta(0)) as agent:
        epoch = await agent.phone.fence_epoch()
        await agent.ledger.create_action("A-17", SmsIntent(recipient=TO, body=BODY), POLICY)
        record = await agent.ledger.begin_attempt(
            "A-17", phone.serial, evidence={"fence_epoch": epoch}
        )
        if stopped == "after the claim":
            (step,) = await agent.phone._device.run(  # what the script's first step leaves
                [f"ln -s script/. {FENCE_ROOT}/{record.dispatch_id}"]
            )
            assert 0 == step.exit_status
        flagged = await agent.ledger.apply(
            flag_for_review(
                record, ReviewReason.UNVERIFIED, now=agent.ledger.now(), actor="operator"
            )
        )
        assert ReviewReason.UNVERIFIED == flagged.review_reason
        await agent.reconcile()
        settled = (await agent.ledger.summary("A-17")).latest
        again = await agent.send("A-17", TO, BODY, wait=5)
    assert settled is not None
    assert (DeliveryState.FAILED, "voided") == (settled.delivery, settled.evidence.get("fence"))
    assert (1, Status.SUCCEEDED) == (await sent(phone, 1), again.status)
