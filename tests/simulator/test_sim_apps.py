"""Messaging app profiles: RCS chat, MMS conversion, text changes, the keyguard and the chooser."""

from __future__ import annotations

import asyncio
import shlex

import attrs
import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import APP_PROFILES, Fault, SimulatedPhone, app_profile
from android_bridge.simulator._apps import GOOGLE_MESSAGES, sms_segments
from android_bridge.simulator.cli import _app_profile
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

KEYS = "input keyevent 22; input keyevent 66"


def sendto(address: str, body: str, *extra: str) -> str:
    """``am start -W`` for a SENDTO to ``address`` with ``body``, then the send keys."""
    return (
        f"am start -W -a android.intent.action.SENDTO -d {shlex.quote('smsto:' + address)}"
        f" --es sms_body {shlex.quote(body)} {' '.join(extra)}; {KEYS}"
    )


def sms_rows(phone: SimulatedPhone) -> list[tuple[str | None, str | None, int | None]]:
    """(address, body, type) of every row in content://sms."""
    return [(row.address, row.body, row.type) for row in phone.store.rows()]


def mms_rows(phone: SimulatedPhone) -> list[tuple[tuple[str, ...], str, int]]:
    """(recipients, text, msg_box) of every message in content://mms."""
    return [(mms.addresses, mms.body, mms.msg_box) for mms in phone.store.mms_messages()]


def test_profiles_bundle_each_app() -> None:
    """Three profiles exist, each naming its package, and an unknown name is refused."""
    assert ["aosp", "google", "samsung"] == sorted(APP_PROFILES)
    assert "com.android.messaging" == app_profile("aosp").package
    assert "com.google.android.apps.messaging" == app_profile("google").package
    assert "com.samsung.android.messaging" == app_profile("samsung").package
    with pytest.raises(ValueError, match="choose one of aosp, google, samsung"):
        app_profile("textra")


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("a" * 160, 1),
        ("a" * 161, 2),
        ("a" * 306, 2),
        ("a" * 307, 3),
        ("€" * 80, 1),
        ("€" * 81, 2),
        ("ж" * 70, 1),
        ("ж" * 71, 2),
        ("😀" * 35, 1),
        ("😀" * 36, 2),
    ],
)
def test_segments_are_counted_as_sms_message_does(text: str, segments: int) -> None:
    """GSM 7-bit holds 160 septets (153 per part, € takes two), UCS-2 70 units (67 per part)
    (SmsMessage.calculateLength, frameworks/base android-15)."""
    assert segments == sms_segments(text)


@pytest.mark.parametrize("app", ["google", "samsung"])
async def test_rcs_recipient_gets_chat_and_no_provider_row(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, app: str
) -> None:
    """An RCS-reachable recipient gets a chat message: nothing in content://sms or content://mms,
    one rcs transmission (docs/android.md: what never lands in content://sms)."""
    phone = await phone_factory(app=app, rcs_recipients=["+15550100"], focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(sendto("+1 555-0100", "hello"))
    await device.shell(sendto("+15550177", "hello", "--activity-clear-task"))
    await device.close()
    assert [("+15550177", "hello", 2)] == sms_rows(phone)
    assert [] == mms_rows(phone)
    assert [("rcs", ("+1 555-0100",), None), ("sms", ("+15550177",), 1)] == [
        (t.channel, t.addresses, t.provider_id)
        for t in await phone.wait_transmissions(count=2, then_idle=True)
    ]


async def test_aosp_messaging_has_no_rcs(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """AOSP Messaging sends SMS even to an RCS user (packages/apps/Messaging has no RCS)."""
    phone = await phone_factory(app="aosp", rcs_recipients="all", focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(sendto("+15550100", "hello"))
    await device.close()
    assert [("+15550100", "hello", 2)] == sms_rows(phone)


@pytest.mark.parametrize(
    ("app", "length", "channel"),
    [
        ("google", 459, "sms"),
        ("google", 460, "mms"),
        ("samsung", 460, "mms"),
        ("aosp", 2000, "sms"),
    ],
)
async def test_long_text_turns_into_mms(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, app: str, length: int, channel: str
) -> None:
    """Past the app's segment threshold the text goes as MMS to content://mms; AOSP's threshold is
    -1 (DraftMessageData.getIsMms and mms_config.xml smsToMmsTextThreshold,
    packages/apps/Messaging)."""
    phone = await phone_factory(app=app, focus_delay_ms=20)
    body = "a" * length
    device = await connect(phone, adb_signer)
    await device.shell(sendto("+15550100", body))
    await device.close()
    [transmission] = await phone.wait_transmissions(count=1, then_idle=True)
    assert channel == transmission.channel
    if channel == "mms":
        assert [] == sms_rows(phone)
        [mms] = phone.store.mms_messages()
        assert (("+15550100",), body, 2) == (mms.addresses, mms.body, mms.msg_box)
        assert (mms.id, app_profile(app).package) == (transmission.provider_id, mms.creator)
    else:
        assert [("+15550100", body, 2)] == sms_rows(phone)
        assert [] == mms_rows(phone)


@pytest.mark.parametrize("app", ["aosp", "google", "samsung"])
async def test_group_goes_as_one_mms(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, app: str
) -> None:
    """Several recipients make one group MMS (DraftMessageData.getIsMms, group_mms_pref_default
    true, packages/apps/Messaging)."""
    phone = await phone_factory(app=app, focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(sendto("+15550100;+15550101", "dinner?"))
    await device.close()
    assert [] == sms_rows(phone)
    assert [(("+15550100", "+15550101"), "dinner?", 2)] == mms_rows(phone)


@pytest.mark.parametrize(("app", "channel"), [("google", "mms"), ("aosp", "sms")])
async def test_subject_turns_into_mms_where_the_app_reads_it(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, app: str, channel: str
) -> None:
    """A subject makes an MMS; AOSP Messaging never reads a subject extra
    (DraftMessageData.getIsMms, LaunchConversationActivity, packages/apps/Messaging)."""
    phone = await phone_factory(app=app, focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(sendto("+15550100", "hello", "--es subject Plans"))
    await device.close()
    assert [channel] == [t.channel for t in await phone.wait_transmissions(then_idle=True)]
    if channel == "mms":
        assert ["Plans"] == [mms.subject for mms in phone.store.mms_messages()]


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        ("aosp", "  Café crème  "),
        ("google", "Café crème"),
        (attrs.evolve(GOOGLE_MESSAGES, simple_characters=True), "Cafe creme"),
    ],
)
async def test_the_app_may_alter_the_text(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, app: object, expected: str
) -> None:
    """AOSP sends the text as typed (ComposeMessageView, packages/apps/Messaging); Google Messages
    is assumed to trim, and strips accents with "Use simple characters"."""
    phone = await phone_factory(app=app, focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(sendto("+15550100", "  Café crème  "))
    await device.close()
    assert [("+15550100", expected, 2)] == sms_rows(phone)
    assert [expected] == [t.body for t in await phone.wait_transmissions(then_idle=True)]


@pytest.mark.parametrize("app", ["aosp", "google", "samsung"])
async def test_each_profile_sends_with_its_key_sequence(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, app: str
) -> None:
    """The profile's send keys send from a freshly opened compose window (DPAD_RIGHT to the send
    button, ENTER on it)."""
    phone = await phone_factory(app=app, focus_delay_ms=20)
    keys = " ".join(str(code) for code in phone.app.send_keys)
    device = await connect(phone, adb_signer)
    await device.shell(
        "am start -W -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body hi;"
        f" input keyevent {keys}"
    )
    await device.close()
    assert [(("+15550100",), "hi", phone.app.package)] == [
        (t.addresses, t.body, t.app) for t in await phone.wait_transmissions(then_idle=True)
    ]


@pytest.mark.parametrize("screen", ["locked", "off"])
async def test_keyguard_takes_the_keys_and_the_activity_starts_behind_it(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, screen: str
) -> None:
    """While locked or asleep the keyguard takes every key; the window waits behind it and -W
    reports no launch time (ActivityTaskSupervisor.stopWaitingForActivityVisible, frameworks/base
    android-15)."""
    phone = await phone_factory(screen=screen, focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    output = await device.shell(f"{sendto('+15550100', 'hello')}; input keyevent 224; {KEYS}")
    assert "LaunchState: UNKNOWN (0)\n" in output
    assert "TotalTime" not in output
    await phone.radio_idle()
    assert [] == phone.transmissions
    assert "locked" == phone.screen
    phone.screen = "on"
    await asyncio.sleep(0.1)
    await device.shell(KEYS)
    await device.close()
    assert [("+15550100", "hello", 2)] == sms_rows(phone)


async def test_two_sms_apps_bring_up_the_chooser(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """An implicit SENDTO with two SMS apps and no default opens ResolverActivity, which takes the
    keys; -p bypasses it (ActivityStarter, frameworks/base android-15)."""
    phone = await phone_factory(second_sms_app=True, focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    output = await device.shell(sendto("+15550100", "hello"))
    assert "Activity: android/com.android.internal.app.ResolverActivity\n" in output
    await phone.radio_idle()
    assert [] == phone.transmissions
    await device.shell(
        sendto("+15550100", "hello", "-p com.google.android.apps.messaging") + "; input keyevent 4"
    )
    await device.close()
    assert [("+15550100", "hello", 2)] == sms_rows(phone)


@pytest.mark.parametrize(
    ("fault", "channel"),
    [(Fault.RCS_SEND, "rcs"), (Fault.MMS_CONVERT, "mms"), (Fault.SIMPLE_CHARACTERS, "sms")],
)
async def test_send_faults_for_the_app_behaviours(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, fault: Fault, channel: str
) -> None:
    """rcs-send, mms-convert and simple-characters change the next send only."""
    phone = await phone_factory(faults=[fault], focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(sendto("+15550100", "Café"))
    await device.shell(sendto("+15550100", "Café", "--activity-clear-task"))
    await device.close()
    first_body = "Cafe" if fault is Fault.SIMPLE_CHARACTERS else "Café"
    assert [(channel, first_body), ("sms", "Café")] == [
        (t.channel, t.body) for t in await phone.wait_transmissions(count=2, then_idle=True)
    ]


@pytest.mark.parametrize("fault", [Fault.SCREEN_OFF, Fault.CHOOSER, Fault.SLOW_LAUNCH])
async def test_am_faults_keep_the_keys_from_the_compose_window(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, fault: Fault
) -> None:
    """screen-off, chooser and slow-launch each make the next send keys miss the compose window."""
    phone = await phone_factory(faults=[fault], focus_delay_ms=100)
    device = await connect(phone, adb_signer)
    await device.shell(
        "am start -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body hi;"
        f" sleep 0.3; {KEYS}"
    )
    await device.close()
    await phone.radio_idle()
    assert [] == phone.transmissions
    assert {} == phone.faults.remaining()


@pytest.mark.parametrize(
    ("fault", "count"), [("duplicate-send", 2), ("send-fails", 0), ("stuck-outbox", 0)]
)
async def test_transmissions_count_what_really_left(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, fault: str, count: int
) -> None:
    """phone.transmissions holds every message that left the phone: two for a duplicate, none for a
    failed or stuck one."""
    phone = await phone_factory(faults=[fault], focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(sendto("+15550100", "hello"))
    await device.close()
    assert count == len(await phone.wait_transmissions(count=count, then_idle=True))


def test_command_line_switches_change_one_behaviour_of_the_profile() -> None:
    """--simple-characters and --mms-after-segments evolve the chosen profile, nothing else."""
    profile = _app_profile("google", simple_characters=True, mms_after_segments=0)
    assert attrs.evolve(GOOGLE_MESSAGES, simple_characters=True, mms_after_segments=None) == profile
    assert (
        5 == _app_profile("aosp", simple_characters=False, mms_after_segments=5).mms_after_segments
    )
