"""The send script checks the phone before it presses any key, in the send's one round trip."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from android_bridge import CommandRejected, Device, MessagingApp, PhoneNotReady, SmsDispatcher
from android_bridge.simulator import SimulatedPhone
from tests.bridge.conftest import PhoneFactory

RECIPIENT = "+12025550143"
BODY = "checked before pressed"
ANDROID = (10, 11, 12, 13, 14, 15)


async def _connect(phone: SimulatedPhone, key: Path) -> Device:
    return await Device.connect(
        phone.serial, key_path=key, connect_timeout_s=2, command_timeout_s=5
    )


async def _rejected(
    phone: SimulatedPhone, key: Path, app: MessagingApp | None = None, *, not_ready: str = ""
) -> str:
    """The message of the send's refusal; ``not_ready``: the check it must name as a
    ``PhoneNotReady`` (with a remedy), else it must be a plain ``CommandRejected``."""
    device = await _connect(phone, key)
    async with device:
        with pytest.raises(CommandRejected) as caught:
            await SmsDispatcher(device, app=app).send(RECIPIENT, BODY)
    error = caught.value
    if not_ready:
        assert isinstance(error, PhoneNotReady)
        assert (not_ready, True) == (error.reason, bool(error.remedy))
    else:
        assert not isinstance(error, PhoneNotReady)
    return str(error)


@pytest.mark.parametrize("android", ANDROID)
async def test_happy_path_is_one_round_trip_to_the_role_holder(
    make_phone: PhoneFactory, bridge_key: Path, android: int
) -> None:
    """The role holder is read (cmd role get-role-holders on 14 and 15, RoleShellCommand; user
    0's holder in dumpsys role on 10 to 13, RoleUserState.dump) and started with -p: one round
    trip, one SMS."""
    phone = await make_phone(android=android, app="aosp")
    device = await _connect(phone, bridge_key)
    async with device:
        evidence = await SmsDispatcher(device).send(RECIPIENT, BODY)
    sent = await phone.wait_transmissions(then_idle=True)
    assert (1, [("com.android.messaging", BODY)]) == (
        evidence.round_trips,
        [(t.app, t.body) for t in sent],
    )
    assert '-p "$r"' in phone.commands_run[-1]


@pytest.mark.parametrize("android", (10, 15))
async def test_sleeping_screen_stops_before_am(
    make_phone: PhoneFactory, bridge_key: Path, android: int
) -> None:
    """mWakefulness=Asleep (PowerManagerService.dumpInternal, android-10.0.0_r30..15) stops the
    script before am and any key."""
    phone = await make_phone(android=android, screen="off")
    message = await _rejected(phone, bridge_key, not_ready="screen_off")
    assert ([], None) == (phone.transmissions, phone.compose)
    assert "not awake" in message and "no key was pressed" in message


@pytest.mark.parametrize("android", (10, 15))
async def test_locked_screen_stops_before_am(
    make_phone: PhoneFactory, bridge_key: Path, android: int
) -> None:
    """mIsShowing=true (KeyguardStateMonitor.dump under dumpsys window policy,
    android-10.0.0_r30..15) stops the script before am and any key."""
    phone = await make_phone(android=android, screen="locked")
    message = await _rejected(phone, bridge_key, not_ready="keyguard_showing")
    assert ([], None) == (phone.transmissions, phone.compose)
    assert "keyguard" in message


@pytest.mark.parametrize("android", ANDROID)
async def test_two_sms_apps_and_no_default_stop_before_am(
    make_phone: PhoneFactory, bridge_key: Path, android: int
) -> None:
    """No SMS role holder (an empty line from cmd role, RoleShellCommand; no holders= line in
    dumpsys role, RoleUserState.dump) stops the script before am: no chooser is ever
    started."""
    phone = await make_phone(android=android, second_sms_app=True)
    message = await _rejected(phone, bridge_key, not_ready="no_default_sms_app")
    assert ([], None) == (phone.transmissions, phone.compose)
    assert "no default SMS app" in message
    assert "am start" not in "".join(phone.commands_run[:-1])


@pytest.mark.parametrize("android", ANDROID)
async def test_configured_package_that_is_not_the_default_is_refused(
    make_phone: PhoneFactory, bridge_key: Path, android: int
) -> None:
    """A configured package that is not the SMS role holder (cmd role, or dumpsys role before
    14) stops the script before am, naming both packages."""
    phone = await make_phone(android=android, app="google")
    app = MessagingApp(package="com.android.messaging")
    message = await _rejected(phone, bridge_key, app, not_ready="not_default_sms_app")
    assert ([], None) == (phone.transmissions, phone.compose)
    assert "com.google.android.apps.messaging, not the configured com.android.messaging" in (
        message
    )


async def test_configured_package_that_is_the_default_sends(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A configured package that holds the SMS role sends, in one round trip."""
    phone = await make_phone(app="aosp")
    device = await _connect(phone, bridge_key)
    async with device:
        app = MessagingApp(package="com.android.messaging")
        evidence = await SmsDispatcher(device, app=app).send(RECIPIENT, BODY)
    sent = await phone.wait_transmissions(then_idle=True)
    assert (1, [BODY]) == (evidence.round_trips, [t.body for t in sent])


@pytest.mark.parametrize("android", (10, 15))
async def test_focus_race_stops_before_the_keys(
    make_phone: PhoneFactory, bridge_key: Path, android: int
) -> None:
    """Another window on top right before the keys (mCurrentFocus, DisplayContent.dump
    android-10.0.0_r30..15) stops the script: the compose window keeps its unsent text."""
    phone = await make_phone(android=android, app="aosp")
    device = await _connect(phone, bridge_key)
    other = await _connect(phone, bridge_key)
    app = MessagingApp(settle_ms=800)
    async with device, other:
        send = asyncio.create_task(SmsDispatcher(device, app=app).send(RECIPIENT, BODY))
        for _ in range(250):  # the compose window opens within the focus delay
            if phone.compose is not None:
                break
            await asyncio.sleep(0.02)
        # am -W returns once the window has focus; the script then settles for 800 ms.
        await asyncio.sleep(0.4)
        await other.run(["input keyevent 3"])
        with pytest.raises(PhoneNotReady, match="did not have focus") as caught:
            await send
    assert ("focus_lost", "no key was pressed") == (caught.value.reason, "no key was pressed")
    assert "no key was pressed" in str(caught.value)
    compose = phone.compose
    assert compose is not None
    assert ([], BODY, "text") == (phone.transmissions, compose.body, compose.focus)
