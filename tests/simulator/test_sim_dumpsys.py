"""``dumpsys power``/``window``/``role``, ``cmd role`` and ``settings`` as the services print
them, per release."""

from __future__ import annotations

import re

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge._role import ROLE_HOLDER_READ, ROLE_REPORT, ROLE_SMS
from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._system_state import java_string_hash
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


def _role_block(indent: str, name: str, holders: tuple[str, ...], fallback: bool) -> str:
    """One role object of ``dumpsys role`` as ``DualDumpOutputStream`` prints it."""
    lines = [f"{indent}{{", f"{indent}  name={name}"]
    if fallback:
        lines.append(f"{indent}  fallback_enabled=false")
    lines.extend(f"{indent}  holders={holder}" for holder in holders)
    lines.append(f"{indent}}}")
    return "".join(line + "\n" for line in lines)


@pytest.mark.parametrize("android", RELEASES)
async def test_dumpsys_role_text_per_release(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """dumpsys role: the header (ROLE MANAGER STATE on 10/11, frameworks/base
    RoleManagerService; ROLE STATE from 12, the module's RoleService), then one user as
    user_states={ with user_id=, version=, packages_hash=, roles=[ and a { name= holders= }
    per role (RoleUserState.dump through DualDumpOutputStream, two spaces per level); 15 adds
    fallback_enabled= after name= (commit cdc0ad9ab, android-14.0.0_r29 on)."""
    phone = await phone_factory(android=android, app="aosp")
    output = await _shell(phone, adb_signer, "dumpsys role")
    header = "ROLE MANAGER STATE (dumpsys role):" if android <= 11 else "ROLE STATE (dumpsys role):"
    lines = output.splitlines()
    assert [header, "{", "  user_states={", "    user_id=0"] == lines[:4]
    assert re.fullmatch(r"    version=-?\d+", lines[4])
    assert re.fullmatch(r"    packages_hash=[0-9A-F]{64}", lines[5])
    assert ["    roles=[", "    ]", "  }", "}"] == [lines[6], *lines[-3:]]
    sms = ("com.android.messaging",)
    assert _role_block("      ", "android.app.role.SMS", sms, android == 15) in output
    assert ("fallback_enabled=" in output) == (android == 15)
    names = [line.strip()[5:] for line in lines if line.strip().startswith("name=")]
    assert "android.app.role.SMS" in names[1:]  # never the only role, nor the first
    assert names == sorted(names, key=java_string_hash)  # ArrayMap order


@pytest.mark.parametrize("android", [11, 15])
async def test_dumpsys_role_with_a_work_profile_and_a_secondary_user(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Several users: user_states=[ with one unnamed { } per user in ascending id (the first
    created user is 10); the work profile has no SMS role (SmsRoleBehavior.isAvailableAsUser
    refuses profiles), the secondary user's SMS role has its own holder; cmd role --user N
    reads that user (an empty line for one without the role)."""
    phone = await phone_factory(
        android=android,
        app="aosp",
        work_profile=True,
        secondary_user_sms_app="org.example.other",
    )
    output = await _shell(phone, adb_signer, "dumpsys role")
    lines = output.splitlines()
    assert ["{", "  user_states=[", "    {", "      user_id=0"] == lines[1:5]
    users = [line.strip() for line in lines if line.strip().startswith("user_id=")]
    assert ["user_id=0", "user_id=10", "user_id=11"] == users
    profile = output[output.index("user_id=10") : output.index("user_id=11")]
    assert "android.app.role.SMS" not in profile
    other = _role_block("        ", "android.app.role.SMS", ("org.example.other",), android == 15)
    assert other in output[output.index("user_id=11") :]
    if android == 15:
        holders = [
            await _shell(phone, adb_signer, f"cmd role get-role-holders --user {user} {ROLE_SMS}")
            for user in (0, 10, 11, 12)
        ]
        assert ["com.android.messaging\n", "\n", "org.example.other\n", "\n"] == holders


@pytest.mark.parametrize("android", RELEASES)
async def test_the_send_scripts_role_read_on_each_release(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """ROLE_HOLDER_READ finds user 0's holder on every release: from cmd role where it exits 0,
    else from the dump (through the phone's awk), with another user's different SMS app
    around; the report line says which (t:d:holders)."""
    phone = await phone_factory(
        android=android, app="aosp", secondary_user_sms_app="org.example.other"
    )
    output = await _shell(phone, adb_signer, f"{ROLE_HOLDER_READ}; {ROLE_REPORT}")
    status = "0" if phone.release.role_shell_command else "255"
    assert f"{status}:0:com.android.messaging\n" == output


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
