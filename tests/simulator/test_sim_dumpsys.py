"""``dumpsys power``/``window``, ``cmd role`` and ``settings`` as the services print them."""

from __future__ import annotations

import re

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

RELEASES = [10, 11, 12, 13, 14, 15]
ROLE = "cmd role get-role-holders android.app.role.SMS; echo rc=$?"
SETTING = "settings get secure sms_default_application"


async def _shell(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    device = await connect(phone, signer)
    output = await device.shell(command)
    await device.close()
    assert isinstance(output, str)
    return output


def _line(output: str, name: str) -> str:
    (line,) = [line for line in output.splitlines() if line.lstrip().startswith(name + "=")]
    return line


@pytest.mark.parametrize("android", RELEASES)
async def test_role_holder_is_the_apps_package(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """cmd role prints the holder from 12 (RoleShellCommand, packages/modules/Permission); where
    the release has no get-role-holders it says Unknown command and exits 255 (ShellCommand)."""
    phone = await phone_factory(android=android, app="aosp")
    output = await _shell(phone, adb_signer, f"{ROLE}; {SETTING}")
    if phone.release.role_shell_command:
        expected = "com.android.messaging\nrc=0\ncom.android.messaging\n"
    else:
        expected = "Unknown command: get-role-holders\nrc=255\ncom.android.messaging\n"
    assert expected == output


@pytest.mark.parametrize("android", RELEASES)
async def test_no_role_holder_with_two_apps(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """No holder: cmd role prints an empty line (String.join of no holders, RoleShellCommand)
    and settings prints null (SettingsService, SettingsProvider android-10.0.0_r30)."""
    phone = await phone_factory(android=android, second_sms_app=True)
    output = await _shell(phone, adb_signer, f"{ROLE}; {SETTING}")
    role = (
        "\nrc=0\n"
        if phone.release.role_shell_command
        else ("Unknown command: get-role-holders\nrc=255\n")
    )
    assert role + "null\n" == output


@pytest.mark.parametrize(
    ("screen", "wakefulness"), [("on", "Awake"), ("locked", "Awake"), ("off", "Asleep")]
)
async def test_power_wakefulness_line(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, screen: str, wakefulness: str
) -> None:
    """dumpsys power prints '  mWakefulness=<state>' (PowerManagerService.dumpInternal,
    android-10.0.0_r30..15): a keyguard does not make the phone asleep."""
    phone = await phone_factory(screen=screen)
    output = await _shell(phone, adb_signer, "dumpsys power")
    assert f"  mWakefulness={wakefulness}" == _line(output, "mWakefulness")


@pytest.mark.parametrize(
    ("screen", "showing"), [("on", "false"), ("locked", "true"), ("off", "true")]
)
async def test_policy_keyguard_line(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, screen: str, showing: str
) -> None:
    """dumpsys window policy shows KeyguardStateMonitor's mIsShowing (policy/keyguard,
    android-10.0.0_r30..15): true whenever the screen is not unlocked."""
    phone = await phone_factory(screen=screen)
    output = await _shell(phone, adb_signer, "dumpsys window policy")
    assert f"mIsShowing={showing}" == _line(output, "mIsShowing").strip()


@pytest.mark.parametrize("android", RELEASES)
async def test_focus_follows_the_window_stack(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """mCurrentFocus names the compose window, then the launcher after HOME, then the keyguard
    (StatusBar on 10, NotificationShade from 11) once locked (DisplayContent.dump)."""
    phone = await phone_factory(android=android, app="aosp")
    start = (
        "am start -W -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body hi"
        " >/dev/null; dumpsys window displays"
    )
    composed = _line(await _shell(phone, adb_signer, start), "mCurrentFocus")
    home = _line(
        await _shell(phone, adb_signer, "input keyevent 3; dumpsys window displays"),
        "mCurrentFocus",
    )
    phone.screen = "locked"
    locked = await _shell(phone, adb_signer, "dumpsys window")
    keyguard = "StatusBar" if android == 10 else "NotificationShade"
    window = r"  mCurrentFocus=Window\{[0-9a-f]{7} u0 "
    assert re.fullmatch(
        window + r"com\.android\.messaging/com\.android\.messaging\.ui\.conversation"
        r"\.ConversationActivity\}",
        composed,
    )
    assert re.fullmatch(window + r"com\.google\.android\.apps\.nexuslauncher/\S+\}", home)
    assert re.fullmatch(window + keyguard + r"\}", _line(locked, "mCurrentFocus"))


@pytest.mark.parametrize("android", [10, 11])
async def test_focused_app_record_format(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """mFocusedApp is an AppWindowToken around the ActivityRecord on 10 and the ActivityRecord
    itself from 11 (DisplayContent.dump, android-10.0.0_r30 / android-11.0.0_r1)."""
    phone = await phone_factory(android=android)
    focused = _line(await _shell(phone, adb_signer, "dumpsys window displays"), "mFocusedApp")
    record = r"ActivityRecord\{[0-9a-f]{7} u0 com\.google\.android\.apps\.nexuslauncher/\S+ t\d+\}"
    if android == 10:
        record = r"AppWindowToken\{[0-9a-f]{7} token=Token\{[0-9a-f]{7} " + record + r"\}\}"
    assert re.fullmatch("  mFocusedApp=" + record, focused)
