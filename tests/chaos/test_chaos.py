"""Chaos: agents killed and restarted, concurrent reconcile passes, outages, every fault of the
simulator, twins and the phone's owner texting the same people. The phones' own stores must
show no tracker-caused duplicate, no lost receipt, no broken invariant and no lie."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import structlog

from android_bridge import Device, FrameworkDispatcher, SmsDispatcher
from android_bridge._fence import ensure_epoch
from android_bridge.exceptions import DeviceUnreachable, OutcomeUnknown
from android_bridge.simulator import Fault
from android_bridge.simulator._faults import SEND_FAULTS

from .harness import (
    ANY_PHONE,
    ActionSpec,
    ChaosConfig,
    PhoneRig,
    iter_details,
    run_chaos,
    send_outcomes,
    tally_sends,
    tracker_duplicates_of,
)

#: Small enough for CI on two cores (about a minute), big enough to meet every send fault.
#: One sender slot of three is `starebrain send`, which sends each action once and leaves what
#: is still open to `starebrain resume` (issue 22: resume finishes what was started).
CONFIG = ChaosConfig(
    seed=7,
    actions=22,
    twins=2,
    phones=2,
    workers=3,
    chaos_s=22.0,
    send_fault_kinds=8,
    settle_s=25.0,
    cli_senders=1 / 3,
)
#: Issue 26, worker mode: the actions queued for one pool (half up front, half by a queueing
#: child) and sent by three `starebrain worker` processes: one holds phone 0, one phone 1, one
#: both (a standby that takes over a phone whose worker was killed), two of them by the
#: phones' other address; killed and restarted like the senders of the ledger mode. Phone 0 is
#: wiped at its address as in the ledger mode (issue 33): a worker's handle that finds another
#: phone there ends the send in hand after one attempt that spends no budget, lets go of the
#: old phone and connects again; a fence claim that fails is asked about on the phone first.
WORKER_CONFIG = ChaosConfig(
    seed=7,
    actions=20,
    twins=2,
    phones=2,
    workers=3,
    agent="worker",
    chaos_s=22.0,
    settle_s=25.0,
    # one send per queued action: issue 33's first faults on both phones took two of each
    # phone's few faulted sends, and a run met 4 kinds of send fault (`assert 4 >= 5`)
    deal_first_faults=True,
    # the chaos goes on (60 s at most) until the 5 kinds asserted below are met: a loaded
    # machine's workers made 12 sends in 22 s and met 2 (`assert 2 >= 5`, a `.ci/run`)
    send_fault_kinds=5,
)
TO, BODY = "+12025550100", "Your code is 4821"
#: The faults whose row may hide a send: the action they meet goes to a person, never
#: SUCCEEDED (issue 33).
ISSUE_33_FAULTS = ("part-fails", "app-timeout", "mms-network-timeout")


@pytest.mark.long(50)
@pytest.mark.slow
async def test_a_chaos_run_shows_no_duplicate_no_lost_receipt_no_broken_invariant_no_lie(
    tmp_path: Path,
) -> None:
    """A fixed-seed run: whatever was killed, cut off, faulted or typed by the owner, the
    phones show no SMS sent twice by the tracker, every send has its receipt, the ledger's
    invariants hold, and no action claims SUCCEEDED or FAILED against what the phone shows.
    Issue 21's faults are in it: the owner deleting the latest conversation (ids reused), a
    wipe of phone 0 at the same address, the app's optimistic SENT row failing (send-fails,
    and stuck sends the radio fails later), and senders reaching the phones by a second
    address. Issue 22's: a CLI sender that sends each action once, and `starebrain resume`
    (killed like the rest) finishing what it left."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    report = await run_chaos(CONFIG, tmp_path / "chaos")
    explain = "\n".join(
        [
            f"seed {CONFIG.seed}; work folder {report.workdir}",
            f"counts: {dict(report.counts)}",
            f"statuses: {dict(report.statuses)}",
            *iter_details(report),
        ]
    )
    assert (0, 0, 0, 0) == (
        report.tracker_duplicates,
        report.lost_receipts,
        report.invariant_violations,
        report.lies,
    ), explain
    counts = report.counts
    # the workload really ran: kills and restarts, owners typing, outages, faults, twins
    assert counts.get("kills", 0) >= 3, explain
    assert counts.get("restarts_agent", 0) >= 1, explain
    # `starebrain resume` re-drove what the one-shot CLI sender left, during and after the chaos
    assert counts.get("resume_runs", 0) >= 2 * CONFIG.phones, explain
    assert counts.get("human_same_text", 0) >= 3, explain
    assert counts.get("human_other_text", 0) >= 3, explain
    assert counts.get("outages", 0) >= 1, explain
    assert counts.get("reconcile_passes", 0) >= 10, explain
    assert counts.get("app_sends", 0) >= CONFIG.actions // 2, explain
    # both send paths: the framework's (auto, where phone 0's jar proves the isms code) and
    # the messaging app's (auto on phone 1, whose jar proves nothing)
    assert counts.get("framework_sends", 0) >= 2, explain
    assert counts.get("framework_sends_out", 0) >= 1, explain
    assert counts.get("ui_sends", 0) >= 3, explain
    assert counts.get("twin_actions_attempted", 0) >= 1, explain
    # issue 21: a phone's ordinary life
    assert counts.get("threads_deleted", 0) >= 2, explain
    assert 1 == counts.get("wipes", 0), explain
    assert counts.get("alias_senders", 0) >= 1, explain
    assert report.faults_consumed.get("send-fails", 0) >= 1, explain
    # issue 33: rows of the app that may hide a send (a long text whose last part failed, its
    # first delivered; the app's own timeout while the SMS went out; an MMS that never got
    # its network): none resent, none read SUCCEEDED
    assert counts.get("partial_sends", 0) >= 1, explain
    assert report.faults_consumed.get("app-timeout", 0) >= 1, explain
    assert report.faults_consumed.get("mms-network-timeout", 0) >= 1, explain
    consumed = {name for name, count in report.faults_consumed.items() if count}
    assert len(consumed & {fault.value for fault in SEND_FAULTS}) >= 8, explain
    assert len(consumed) >= 12, explain
    # a third SUCCEEDED, less the actions issue 33's faults send to a person by design
    # (each use of one meets one action: a long text's part, the app's timeout, an MMS)
    to_a_person = sum(report.faults_consumed.get(name, 0) for name in ISSUE_33_FAULTS)
    assert report.statuses.get("SUCCEEDED", 0) >= CONFIG.actions // 3 - to_a_person, explain


@pytest.mark.long(25)
@pytest.mark.slow
async def test_a_worker_chaos_run_sends_each_queued_action_once_on_any_phone(
    tmp_path: Path,
) -> None:
    """Worker mode: the same chaos (kills, outages, every fault, owners texting, deletions, a
    wipe) against `starebrain worker` processes serving one pool over both phones. An action
    may leave either phone, so the phones' stores are counted per action across phones, each
    send mapped to its action by its fence claim: no action's text left the phones twice by
    its attempts, every send has its receipt on the phone it left, the invariants hold and no
    status lies."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    report = await run_chaos(WORKER_CONFIG, tmp_path / "chaos")
    explain = "\n".join(
        [
            f"seed {WORKER_CONFIG.seed}; work folder {report.workdir}",
            f"counts: {dict(report.counts)}",
            f"statuses: {dict(report.statuses)}",
            *iter_details(report),
        ]
    )
    assert (0, 0, 0, 0) == (
        report.tracker_duplicates,
        report.lost_receipts,
        report.invariant_violations,
        report.lies,
    ), explain
    counts = report.counts
    # the workers were killed and restarted, and the queueing child queued the rest
    assert counts.get("kills_worker", 0) >= 2, explain
    assert counts.get("restarts_worker", 0) >= 2, explain
    assert counts.get("queued", 0) == WORKER_CONFIG.actions, explain
    assert counts.get("worker_claimed", 0) >= WORKER_CONFIG.actions // 2, explain
    # the chaos of the ledger mode went on: outages, faults, owners, deletions, the wipe
    # (issue 33: the workers let go of the wiped phone and serve the new one there)
    assert counts.get("outages", 0) >= 1, explain
    assert 1 == counts.get("wipes", 0), explain
    assert counts.get("human_same_text", 0) >= 3, explain
    assert counts.get("threads_deleted", 0) >= 1, explain
    assert counts.get("alias_senders", 0) >= 1, explain
    consumed = {name for name, count in report.faults_consumed.items() if count}
    assert len(consumed & {fault.value for fault in SEND_FAULTS}) >= 5, explain
    # the pool's phones sent, on both paths. Which phones: a premise of the load, not a
    # guarantee (a full run at -n 8 saw phone 1's worker, killed and restarted, come up each
    # time to a queue phone 0 had drained); that every phone of a pool takes its share is
    # test_multihost_workers' to show, which waits for the added phone's readiness
    assert counts.get("phones_sent_on", 0) >= 1, explain
    assert counts.get("framework_sends", 0) >= 1 and counts.get("ui_sends", 0) >= 1, explain
    # and a good share of the actions ended SUCCEEDED: the rest end in a person's hands for
    # what the chaos did to them (an owner deleting the thread before the row settled:
    # UNSETTLED; the owner's same text: AMBIGUOUS; chat or a killed script: UNVERIFIED), a
    # share that varies with the timing of kills and owners. "More than half" failed by
    # chance (9 and 10 of 20 in 2 runs of 3, on this code and on the code before it): the
    # same floor as the ledger mode's, a third, is what the run shows every time
    to_a_person = sum(report.faults_consumed.get(name, 0) for name in ISSUE_33_FAULTS)
    assert report.statuses.get("SUCCEEDED", 0) >= WORKER_CONFIG.actions // 3 - to_a_person, explain


async def test_the_tally_counts_an_action_per_action_across_phones(
    phone_factory: Any, adb_key_path: Path
) -> None:
    """Worker mode's measure: an intent of any phone (``ANY_PHONE``) is counted per action
    over both phones through the fence claims: one send of A-1 on each phone is a duplicate;
    A-2 on phone 1 only is not; the owner's identical text on phone 0 is no send."""
    phones = [await phone_factory(send_delay_ms=0), await phone_factory(send_delay_ms=0)]
    rigs = [PhoneRig(index, phone, read_as_system=False) for index, phone in enumerate(phones)]
    for rig in rigs:
        rig.attach()
    spec = ActionSpec(action_id="A-1", recipient=TO, body=BODY, phone=ANY_PHONE)
    other = ActionSpec(action_id="A-2", recipient=TO, body="Your code is 1945", phone=ANY_PHONE)
    groups = {spec.intent_key: [spec], other.intent_key: [other]}
    for phone, sends in zip(
        phones, ([("d-1", BODY)], [("d-2", BODY), ("d-3", other.body)]), strict=True
    ):
        device = await Device.connect(phone.serial, key_path=adb_key_path)
        try:
            epoch = (await ensure_epoch(device)).epoch
            for dispatch_id, body in sends:
                await SmsDispatcher(device).send(TO, body, fence=(dispatch_id, epoch))
        finally:
            await device.close()
    date = phones[0].now_ms()
    owner = phones[0].store.insert_outgoing(TO, other.body, date_ms=date, message_type=2)
    rigs[0].human[(owner, date)] = "same"
    outcomes = [o for rig in rigs for o in send_outcomes(rig, groups)]
    assert [spec.intent_key] * 2 + [other.intent_key] == [o.intent for o in outcomes]
    owners = {"d-1": "A-1", "d-2": "A-1", "d-3": "A-2"}
    intents = {"A-1": spec.intent_key, "A-2": other.intent_key}
    tally = tally_sends(outcomes, owners, intents)
    assert (2, 1) == (tally.out_of["A-1"], tally.out_of["A-2"])
    duplicates, explained = tracker_duplicates_of(groups, tally)
    assert 1 == duplicates and "A-1 (any phone)" in explained[0], explained
    # a phone-bound intent is not matched by a send on the other phone
    bound = ActionSpec(action_id="A-3", recipient=TO, body=BODY, phone=0)
    assert [None, None] == [o.intent for o in send_outcomes(rigs[1], {bound.intent_key: [bound]})]


async def test_an_outage_refuses_connections_until_adb_tcpip(
    phone: Any, adb_key_path: Path
) -> None:
    """``disable_tcpip`` (``adb usb``) resets the open connection and refuses new ones;
    ``enable_tcpip`` (``adb tcpip``) takes them again on the same serial (adbd's ``usb:`` and
    ``tcpip:`` services, ``restart_usb_service``/``restart_tcp_service``, system/core
    ``adb/services.cpp`` android-10.0.0_r1)."""
    device = await Device.connect(phone.serial, key_path=adb_key_path, connect_timeout_s=1.0)
    try:
        assert b"ok" in await device.shell("echo ok")
        phone.disable_tcpip()
        with pytest.raises((DeviceUnreachable, OutcomeUnknown)):
            await device.shell("echo ok")
        with pytest.raises(DeviceUnreachable):
            await Device.connect(phone.serial, key_path=adb_key_path, connect_timeout_s=1.0)
        assert not phone.tcpip_enabled
        await phone.enable_tcpip()
        assert b"ok" in await device.shell("echo ok")
    finally:
        await device.close()


async def test_the_tally_counts_a_resent_message_not_the_owners_nor_the_apps_copy(
    phone_factory: Any, adb_key_path: Path
) -> None:
    """The measurement itself: a resend after a timeout is a tracker-caused duplicate; the
    owner's identical text and the app's own second copy (duplicate-send) are not."""
    phone = await phone_factory(send_delay_ms=0)
    rig = PhoneRig(0, phone, read_as_system=False)
    rig.attach()
    spec = ActionSpec(action_id="A-1", recipient=TO, body=BODY, phone=0)
    other = ActionSpec(action_id="A-2", recipient=TO, body="Your code is 1945", phone=0)
    groups = {spec.intent_key: [spec], other.intent_key: [other]}
    device = await Device.connect(phone.serial, key_path=adb_key_path, command_timeout_s=1.0)
    try:
        dispatcher = SmsDispatcher(device)
        phone.inject_fault(Fault.HANG_AFTER_SEND)
        with pytest.raises(OutcomeUnknown):
            await dispatcher.send(TO, BODY)
        await dispatcher.send(TO, BODY)  # the naive retry: a second SMS
        phone.inject_fault(Fault.DUPLICATE_SEND)
        await dispatcher.send(TO, other.body)  # the app sends it twice by itself
    finally:
        await device.close()
    date = phone.now_ms()
    owner = phone.store.insert_outgoing(TO, BODY, date_ms=date, message_type=2)
    rig.human[(owner, date)] = "same"
    tally = tally_sends(send_outcomes(rig, groups))
    duplicates, explained = tracker_duplicates_of(groups, tally)
    assert (2, 1) == (tally.out[spec.intent_key], tally.out[other.intent_key])
    assert 1 == duplicates, explained
    assert 5 == len([row for row in phone.store.rows(types=[2]) if row.body in (BODY, other.body)])


async def test_the_tally_tells_twins_apart_by_the_attempt_that_pressed_the_keys(
    phone_factory: Any, adb_key_path: Path
) -> None:
    """Twins share a text: two sends by attempts of one twin and none by the other are one
    duplicate, which counting per text alone would miss; the fence claim in each send's
    command names its attempt."""
    phone = await phone_factory(send_delay_ms=0)
    rig = PhoneRig(0, phone, read_as_system=False)
    rig.attach()
    twin = ActionSpec(action_id="A-1-twin", recipient=TO, body=BODY, phone=0, twin_of="A-1")
    spec = ActionSpec(action_id="A-1", recipient=TO, body=BODY, phone=0)
    groups = {spec.intent_key: [spec, twin]}
    device = await Device.connect(phone.serial, key_path=adb_key_path)
    try:
        epoch = (await ensure_epoch(device)).epoch
        dispatcher = SmsDispatcher(device)
        await dispatcher.send(TO, BODY, fence=("d-1", epoch))
        await dispatcher.send(TO, BODY, fence=("d-2", epoch))
    finally:
        await device.close()
    outcomes = send_outcomes(rig, groups)
    owners = {"d-1": "A-1", "d-2": "A-1"}
    tally = tally_sends(outcomes, owners, {"A-1": spec.intent_key, "A-1-twin": twin.intent_key})
    assert ["d-1", "d-2"] == [outcome.dispatch_id for outcome in outcomes]
    assert (2, 0) == (tally.out_of["A-1"], tally.out_of["A-1-twin"])
    assert 1 == tracker_duplicates_of(groups, tally)[0]


async def test_the_tally_keeps_rows_the_owner_deleted_and_tells_reused_ids_apart(
    phone_factory: Any, adb_key_path: Path
) -> None:
    """Ground truth survives the owner: a sent row deleted with its conversation still counts
    as out, as it was then, and the next send, which takes the deleted row's ``_id``, is told
    apart from it by its date: two sends of one text, one duplicate."""
    phone = await phone_factory(send_delay_ms=0)
    rig = PhoneRig(0, phone, read_as_system=False)
    rig.attach()
    spec = ActionSpec(action_id="A-1", recipient=TO, body=BODY, phone=0)
    groups = {spec.intent_key: [spec]}
    device = await Device.connect(phone.serial, key_path=adb_key_path)
    try:
        dispatcher = SmsDispatcher(device)
        await dispatcher.send(TO, BODY)
        (first,) = [row for row in phone.store.rows() if row.body == BODY]
        rig.keep_removed([row for row in phone.store.rows() if row.thread_id == first.thread_id])
        phone.store.delete_thread(first.thread_id)
        await asyncio.sleep(0.01)  # a later date for the reused id
        await dispatcher.send(TO, BODY)
    finally:
        await device.close()
    outcomes = send_outcomes(rig, groups)
    assert [first._id, first._id] == [outcome.sms_ids[0] for outcome in outcomes]
    assert [True, True] == [outcome.sent for outcome in outcomes]
    tally = tally_sends(outcomes)
    assert (2, 1) == (tally.out[spec.intent_key], tracker_duplicates_of(groups, tally)[0])


async def test_the_tally_counts_framework_sends_from_the_phones_own_record(
    phone_factory: Any, adb_key_path: Path
) -> None:
    """The framework path (``service call isms`` as the shell) is measured too: each call
    that reached the framework's send is a send of the attempt whose fence claim its command
    holds, what it transmitted is what went out, a failed one puts nothing out, and every
    transmission and SENT row of ``com.android.shell`` belongs to a recorded send."""
    phone = await phone_factory(send_delay_ms=0)
    rig = PhoneRig(0, phone, read_as_system=False)
    rig.attach()
    spec = ActionSpec(action_id="A-1", recipient=TO, body=BODY, phone=0)
    groups = {spec.intent_key: [spec]}
    device = await Device.connect(phone.serial, key_path=adb_key_path)
    try:
        epoch = (await ensure_epoch(device)).epoch
        dispatcher = FrameworkDispatcher(device)
        phone.inject_fault(Fault.SEND_FAILS)
        await dispatcher.send(TO, BODY, fence=("d-1", epoch))  # the framework marks it FAILED
        await dispatcher.send(TO, BODY, fence=("d-2", epoch))
        await dispatcher.send(TO, BODY, fence=("d-3", epoch))  # a resend: a second SMS
        await phone.wait_idle()
    finally:
        await device.close()
    outcomes = send_outcomes(rig, groups)
    assert ["framework"] * 3 == [outcome.send.path for outcome in outcomes]
    assert ["d-1", "d-2", "d-3"] == [outcome.dispatch_id for outcome in outcomes]
    assert [False, True, True] == [outcome.out for outcome in outcomes]
    tally = tally_sends(outcomes, {f"d-{n}": "A-1" for n in (1, 2, 3)}, {"A-1": spec.intent_key})
    assert (2, 1) == (tally.out_of["A-1"], tracker_duplicates_of(groups, tally)[0])
    assert [] == rig.unrecorded_framework_sends()
    # a rig that recorded nothing sees them all: two transmissions and their two SENT rows
    assert 4 == len(PhoneRig(0, phone, read_as_system=False).unrecorded_framework_sends())
