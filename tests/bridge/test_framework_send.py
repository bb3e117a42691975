"""The framework send path (``service call isms``) against the simulated phone, through the
real ADB protocol (frameworks/base ISms.aidl, frameworks/opt/telephony SMSDispatcher)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from android_bridge import (
    CommandRejected,
    Device,
    DeviceUnusable,
    FenceLost,
    FenceState,
    FrameworkDispatcher,
    SmsDispatcher,
    ensure_epoch,
    probe_framework_send,
    void_fences,
)
from android_bridge._device import DeviceFacts
from android_bridge._framework import framework_probe, service_call_command
from tests.bridge.conftest import PhoneFactory

TO = "+12025550143"


async def connect(serial: str, key: Path) -> Device:
    """A bridge Device on the simulated phone."""
    return await Device.connect(serial, key_path=key, connect_timeout_s=2, command_timeout_s=5)


@pytest.mark.parametrize("version", [10, 11, 12, 13, 14, 15])
async def test_send_writes_one_shell_row_per_release(
    make_phone: PhoneFactory, bridge_key: Path, version: int
) -> None:
    """The release's code sends exactly one SMS whose row has creator com.android.shell
    (ISms.aidl code 6 on android-10.0.0_r1, 5 on 11-15; SMSDispatcher persistence)."""
    phone = await make_phone(android=version)
    async with await connect(phone.serial, bridge_key) as device:
        assert await probe_framework_send(device) is True
        evidence = await FrameworkDispatcher(device).send(TO, "Your code is 4821")
    assert "Result: Parcel(00000000    '....')\n" == evidence.am_output
    assert [(2, "com.android.shell", "Your code is 4821")] == [
        (row.type, row.creator, row.body) for row in phone.store.rows()
    ]
    assert 1 == len(await phone.wait_transmissions(then_idle=True))


async def test_the_handle_reads_what_the_probe_needs_in_its_first_round_trip(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """``facts`` reads the release, the build fingerprint and ``service check isms`` with the
    uid and region, in one round trip; the probe then costs none of its own."""
    phone = await make_phone(android=13)
    async with await connect(phone.serial, bridge_key) as device:
        facts = await device.facts()
        trips = device.round_trips
        assert await probe_framework_send(device) is True
        assert trips == device.round_trips
    assert (33, True, 2000) == (facts.sdk, facts.isms, facts.uid)
    assert facts.build.startswith("starebrain/") and ":13/" in facts.build


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"isms": False}, "isms service is not there"),
        ({"sdk": 28}, "API level 28"),
        ({"sdk": None}, "API level None"),
        ({"uid": 1000}, "neither the shell user nor root"),
    ],
)
def test_the_probe_says_why_a_phone_cannot_take_the_framework_path(
    change: dict[str, object], reason: str
) -> None:
    """No isms service, a release without a known code (Android 9 and older; a vendor's sdk
    the table does not know), or a shell that is not uid 2000 or 0: the probe says so."""
    good = DeviceFacts(mode="shell", uid=2000, region="US", sdk=35, build="b", isms=True)
    assert framework_probe(good) is True
    verdict = framework_probe(attrs.evolve(good, **change))  # type: ignore[arg-type]
    assert isinstance(verdict, str) and reason in verdict


async def test_owner_rows_are_told_apart_by_creator(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """The owner's own sends carry the messaging app's creator, ours the shell's
    (ProviderUtil.shouldSetCreator, TelephonyProvider android-14.0.0_r1)."""
    phone = await make_phone(android=14)
    phone.store.insert_outgoing(TO, "from the owner", date_ms=phone.now_ms(), message_type=2)
    async with await connect(phone.serial, bridge_key) as device:
        await FrameworkDispatcher(device).send(TO, "from the agent")
    by_creator = {row.body: row.creator for row in phone.store.rows()}
    assert "com.android.shell" == by_creator["from the agent"]
    assert "com.android.shell" != by_creator["from the owner"]


async def test_voided_attempt_sends_nothing(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """A fence voided first makes the framework send's claim fail: nothing is called
    (the fence of android_bridge._fence on /data/local/tmp, init.rc 0771 shell:shell)."""
    phone = await make_phone(android=15)
    async with await connect(phone.serial, bridge_key) as device:
        epoch = await ensure_epoch(device)
        (report,) = await void_fences(device, [("d-1", epoch.epoch)])
        assert FenceState.VOIDED == report.state
        with pytest.raises(CommandRejected, match="fence"):
            await FrameworkDispatcher(device).send(TO, "hi", fence=("d-1", epoch.epoch))
    assert [] == phone.transmissions
    assert [] == phone.store.rows()


async def test_fenced_send_leaves_its_stages(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """A fenced framework send claims its name and go, and a later void finds it CLAIMED with
    both stages (android_bridge._fence semantics; toybox ln -s)."""
    phone = await make_phone(android=11)
    async with await connect(phone.serial, bridge_key) as device:
        epoch = await ensure_epoch(device)
        evidence = await FrameworkDispatcher(device).send(TO, "hi", fence=("d-2", epoch.epoch))
        (report,) = await void_fences(device, [("d-2", epoch.epoch)])
    assert evidence.fence_claimed
    assert FenceState.CLAIMED == report.state
    assert ["am", "keys"] == [stage for stage, _ in report.stages]
    assert 1 == len(await phone.wait_transmissions(then_idle=True))


async def test_usage_limit_refuses_before_the_phone_holds(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """Past SmsUsageMonitor's 30 sends per 60 s the phone would hold the send behind a dialog
    while the shell sees success, so the dispatcher refuses the 31st first
    (DEFAULT_SMS_MAX_COUNT, frameworks/opt/telephony SmsUsageMonitor)."""
    phone = await make_phone(android=14)
    async with await connect(phone.serial, bridge_key) as device:
        dispatcher = FrameworkDispatcher(device, usage_limit=(2, 60.0))
        await dispatcher.send(TO, "one")
        await dispatcher.send(TO, "two")
        with pytest.raises(CommandRejected, match="SmsUsageMonitor"):
            await dispatcher.send(TO, "three")
    sent = await phone.wait_transmissions(count=2, then_idle=True)
    assert ["one", "two"] == [t.body for t in sent]


async def test_phone_held_send_is_not_a_proof(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """A send the phone holds (the package's budget spent by another caller) returns evidence
    like a send, and nothing is sent: only a later read can settle it (SmsUsageMonitor)."""
    phone = await make_phone(android=15)
    async with await connect(phone.serial, bridge_key) as device:
        for index in range(30):
            await FrameworkDispatcher(device, usage_limit=None).send(TO, f"m{index}")
        evidence = await FrameworkDispatcher(device).send(TO, "held")
    assert "Result: Parcel(00000000    '....')\n" == evidence.am_output
    sent = await phone.wait_transmissions(count=30, then_idle=True)
    assert "held" not in [t.body for t in sent]
    assert ["held"] == [held.body for held in phone.held_framework_sends]


@pytest.mark.parametrize(
    "body", ['it\'s "q" $HOME $(id) `id`', "line one\nline two\r\n", "emoji 😀👍🏽 ünï", "-h"]
)
async def test_hostile_bodies_arrive_exactly(
    make_phone: PhoneFactory, bridge_key: Path, body: str
) -> None:
    """Quotes, ``$``, newlines and emoji reach the row byte for byte through ``s16``
    (cmds/service/service.cpp writeString16; getopt stops at ``call``)."""
    phone = await make_phone(android=10)
    async with await connect(phone.serial, bridge_key) as device:
        await FrameworkDispatcher(device).send(TO, body)
    assert [body] == [row.body for row in phone.store.rows()]


def test_release_without_a_known_code_is_refused() -> None:
    """An API level outside the ISms.aidl table (android-10.0.0_r1..15) gets no call at all."""
    with pytest.raises(CommandRejected, match="API level 28"):
        service_call_command(28, 1, TO, "x")


@pytest.mark.parametrize("path", ["ui", "framework"])
async def test_a_claim_refused_for_a_cleared_folder_says_the_fence_is_lost(
    make_phone: PhoneFactory, bridge_key: Path, path: str
) -> None:
    """``rm -rf /data/local/tmp/*`` after the handle learnt its epoch: the send's claim fails,
    and the phone, asked at once, is still the same phone without that epoch: ``FenceLost``
    (nothing was sent; the attempt needs the phone's new epoch, not a person)."""
    phone = await make_phone(android=15, build_type="userdebug")
    async with await connect(phone.serial, bridge_key) as device:
        epoch = await ensure_epoch(device)
        phone.clear_tmp()
        dispatcher = FrameworkDispatcher(device) if path == "framework" else SmsDispatcher(device)
        with pytest.raises(FenceLost, match="epoch"):
            await dispatcher.send(TO, "hi", fence=("d-1", epoch.epoch))
        assert device.replaced is None
    assert ([], []) == (phone.transmissions, phone.store.rows())


@pytest.mark.parametrize("path", ["ui", "framework"])
async def test_a_claim_refused_by_a_reset_phone_refuses_that_phone(
    make_phone: PhoneFactory, bridge_key: Path, path: str
) -> None:
    """The phone was reset under a link that stayed up (its data, android_id and fence folder
    gone between two round trips, with no reconnect for the handle to read its identity
    again): the send's claim fails, and the identity read at once names another phone, so
    the handle refuses it for good (``DeviceUnusable``, ``replaced``), as after a reconnect;
    nothing was sent."""
    phone = await make_phone(android=15, build_type="userdebug")
    async with await connect(phone.serial, bridge_key) as device:
        epoch = await ensure_epoch(device)
        phone.store.wipe()  # the stores and android_id, as a factory reset leaves them
        phone.clear_tmp()
        dispatcher = FrameworkDispatcher(device) if path == "framework" else SmsDispatcher(device)
        with pytest.raises(DeviceUnusable, match="another phone answers here now"):
            await dispatcher.send(TO, "hi", fence=("d-1", epoch.epoch))
        assert device.replaced is not None
        with pytest.raises(DeviceUnusable):
            await ensure_epoch(device)  # for good
    assert ([], []) == (phone.transmissions, phone.store.rows())
