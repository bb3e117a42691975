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


def _role_block(indent: str, name: str, holders: tuple[str, ...], fallback: bool) -> str:
    """One role object of ``dumpsys role`` as ``DualDumpOutputStream`` prints it."""
    lines = [f"{indent}{{", f"{indent}  name={name}"]
    if fallback:
        lines.append(f"{indent}  fallback_enabled=false")
    lines.extend(f"{indent}  holders={holder}" for holder in holders)
    lines.append(f"{indent}}}")
    return "".join(line + "\n" for line in lines)


#: (release, Permission module updated by Play) -> cmd role get-role-holders exists.
GET_ROLE_HOLDERS = {
    (10, False): False, (10, True): False, (11, False): False, (11, True): False,
    (12, False): False, (12, True): True, (13, False): False, (13, True): True,
    (14, False): True, (14, True): True, (15, False): True, (15, True): True,
}  # fmt: skip


@pytest.mark.parametrize(("android", "updated"), sorted(GET_ROLE_HOLDERS))
async def test_get_role_holders_only_where_the_module_has_it(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, updated: bool
) -> None:
    """cmd role get-role-holders prints the holder and exits 0 on 14 and 15 and on 12/13 with a
    Play-updated Permission module (RoleShellCommand, commit 2e97608b: in android-14.0.0_r11,
    not in 12.0.0_r12, 12.1.0_r11, 13.0.0_r11, 13.0.0_r52); elsewhere, 10 and 11 whatever the
    module (frameworks/base RoleManagerShellCommand), it prints Unknown command on stdout and
    exits 255 (BasicShellCommandHandler.handleDefaultCommands)."""
    phone = await phone_factory(android=android, app="aosp", permission_module_updated=updated)
    output = await _shell(phone, adb_signer, ROLE)
    if GET_ROLE_HOLDERS[android, updated]:
        assert "com.android.messaging\nrc=0\n" == output
    else:
        assert "Unknown command: get-role-holders\nrc=255\n" == output


@pytest.mark.parametrize("android", RELEASES)
async def test_no_role_holder_with_two_apps(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """No holder: cmd role (where it exists) prints an empty line (String.join of no holders,
    RoleShellCommand, packages/modules/Permission android-14.0.0_r11), dumpsys role lists the
    SMS role with no holders= line (RoleUserState.dump: frameworks/base on 10 and 11, read in
    untagged copies; the module at android-12.0.0_r12 to 14.0.0_r11), and settings prints
    null (SettingsService, SettingsProvider android-10.0.0_r30)."""
    phone = await phone_factory(android=android, second_sms_app=True)
    output = await _shell(phone, adb_signer, f"{ROLE}; {SETTING}; dumpsys role")
    role = (
        "\nrc=0\n"
        if phone.release.role_shell_command
        else "Unknown command: get-role-holders\nrc=255\n"
    )
    assert output.startswith(role + "null\n")
    sms = _role_block("      ", "android.app.role.SMS", (), android == 15)
    assert sms in output


@pytest.mark.parametrize("android", RELEASES)
async def test_the_setting_is_never_the_role_holder(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """settings get secure sms_default_application is not written from Android 10 on
    (SmsApplication.setDefaultApplicationInternal only adds the role holder; the role service
    reads the setting once, to migrate: frameworks/base, read in untagged Q- and R-era copies
    only; packages/modules/Permission has no reference to it at any tag): null on a phone
    first booted on 10+, a stale package on one upgraded from 9, and neither follows the
    role."""
    fresh = await phone_factory(android=android, app="aosp")
    upgraded = await phone_factory(
        android=android, app="aosp", sms_default_setting="com.google.android.apps.messaging"
    )
    upgraded.system_state.sms_role_holder = "org.example.sms"
    assert ("null\n", "com.google.android.apps.messaging\n") == (
        await _shell(fresh, adb_signer, SETTING),
        await _shell(upgraded, adb_signer, SETTING),
    )


async def test_global_settings_are_null_unless_set(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """settings get global KEY prints null for an unset key (SettingsService, SettingsProvider;
    the platform then uses its default: frameworks/opt/telephony SmsUsageMonitor's 30 per
    60 s, as _isms cites it; frameworks/base AdbDebuggingManager's 7 days, as _platform cites
    it for android-10 to 15); Developer options' "Disable adb authorization timeout" stores
    adb_allowed_connection_time 0."""
    plain = await phone_factory(android=15)
    never = await phone_factory(android=15, disable_adb_auth_timeout=True)
    never.system_state.global_settings["sms_outgoing_check_max_count"] = "10"
    expiry = "settings get global adb_allowed_connection_time"
    limit = "settings get global sms_outgoing_check_max_count"
    assert ("null\n", "null\n", "0\n", "10\n") == (
        await _shell(plain, adb_signer, expiry),
        await _shell(plain, adb_signer, limit),
        await _shell(never, adb_signer, expiry),
        await _shell(never, adb_signer, limit),
    )


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


@pytest.mark.parametrize("android", [12, 13, 14])
async def test_an_updated_module_prints_fallback_enabled(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """A Permission module updated from the 15 line prints fallback_enabled= (RoleUserState.dump,
    lineage-22.0) on 12 to 14 too: the dump is the module's from 12 on."""
    phone = await phone_factory(android=android, app="aosp", permission_module_updated=True)
    output = await _shell(phone, adb_signer, "dumpsys role")
    assert _role_block("      ", "android.app.role.SMS", ("com.android.messaging",), True) in output


@pytest.mark.parametrize("android", [10, 11])
async def test_an_updated_module_changes_nothing_on_10_and_11(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """On 10 and 11 the role service is frameworks/base's RoleManagerService (it moved into
    packages/modules/Permission, APEX com.android.permission, with commit 4e6bc7ac2: there at
    android-12.0.0_r12, the earliest 12 tag read): a Permission module update changes
    neither cmd role nor dumpsys role."""
    plain = await phone_factory(android=android, app="aosp")
    updated = await phone_factory(android=android, app="aosp", permission_module_updated=True)
    command = f"{ROLE}; dumpsys role"
    assert await _shell(plain, adb_signer, command) == await _shell(updated, adb_signer, command)


@pytest.mark.parametrize("android", [11, 15])
async def test_dumpsys_role_with_a_work_profile_and_a_secondary_user(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Several users: user_states=[ with one unnamed { } per user in ascending id (the first
    created user is 10); the work profile has no SMS role (SmsRoleBehavior.isAvailableAsUser
    refuses profiles, packages/modules/Permission android-13.0.0_r11), the secondary user's
    SMS role has its own holder; cmd role --user N reads that user (an empty line for one
    without the role: RoleService.getRoleHoldersAsUser, android-14.0.0_r11). The first user
    created after user 0 is 10 (UserManagerService MIN_USER_ID, frameworks/base, untagged)."""
    phone = await phone_factory(
        android=android,
        app="aosp",
        work_profile=True,
        secondary_user_sms_app="org.example.other",
        permission_module_updated=True,
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


@pytest.mark.parametrize(("android", "updated"), sorted(GET_ROLE_HOLDERS))
async def test_the_send_scripts_role_read_on_each_release(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, updated: bool
) -> None:
    """ROLE_HOLDER_READ finds user 0's holder on every release: from cmd role where it exits 0
    (RoleShellCommand, packages/modules/Permission android-14.0.0_r11 on), else from the dump
    (RoleUserState.dump through DualDumpOutputStream, read by the phone's awk: one-true-awk,
    external/one-true-awk android-10.0.0_r30 to 15.0.0_r1), with a stale setting and another
    user's different SMS app around; the report line says which (t:d:holders)."""
    phone = await phone_factory(
        android=android,
        app="aosp",
        permission_module_updated=updated,
        sms_default_setting="com.google.android.apps.messaging",
        secondary_user_sms_app="org.example.other",
    )
    output = await _shell(phone, adb_signer, f"{ROLE_HOLDER_READ}; {ROLE_REPORT}")
    status = "0" if GET_ROLE_HOLDERS[android, updated] else "255"
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


@pytest.mark.parametrize(("android", "updated"), sorted(GET_ROLE_HOLDERS))
async def test_role_help_exits_255(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, updated: bool
) -> None:
    """``cmd role``, ``cmd role help`` and ``-h`` print the help and exit 255, as an unknown
    command does (``handleDefaultCommands``: ``onHelp()`` then ``return -1``; ShellCommand /
    BasicShellCommandHandler, read in untagged copies): only its exit status tells a read
    that answered. The help names ``get-role-holders`` only where it exists
    (``RoleShellCommand.onHelp``, packages/modules/Permission android-13.0.0_r11 without,
    14.0.0_r11 with); 10 and 11 head it "Role manager (role) commands:"
    (``RoleManagerShellCommand``, frameworks/base, untagged copies)."""
    phone = await phone_factory(android=android, permission_module_updated=updated)
    for command in ("cmd role", "cmd role help", "cmd role -h"):
        output = await _shell(phone, adb_signer, f"{command}; echo rc=$?")
        header = "Role manager (role)" if android <= 11 else "Role (role)"
        assert output.startswith(f"{header} commands:\n") and output.endswith("rc=255\n")
        assert ("get-role-holders" in output) == GET_ROLE_HOLDERS[android, updated]


async def test_settings_user_n_reads_that_users_values_or_refuses_a_user_not_there(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """``settings --user N`` (SettingsService ``MyShellCommand.onCommand``): a user the phone
    does not have is ``Invalid user: N``, status 255, not user 0's values; another user's
    ``secure`` values are its own (its ``android_id`` differs), ``global`` ones are the
    device's; ``--user`` may follow ``get``, and twice is ``Bad arguments``."""
    plain = await phone_factory(disable_adb_auth_timeout=True)
    work = await phone_factory(work_profile=True, sms_default_setting="com.example.old")
    status = "; echo rc=$?"
    assert "Invalid user: 10\nrc=255\n" == await _shell(
        plain, adb_signer, "settings --user 10 get secure android_id 2>&1" + status
    )
    assert "Bad arguments\nrc=255\n" == await _shell(
        plain, adb_signer, "settings --user 0 get --user 0 global x 2>&1" + status
    )
    assert "0\n" == await _shell(
        plain, adb_signer, "settings get --user current global adb_allowed_connection_time"
    )
    own = await _shell(work, adb_signer, "settings get secure android_id")
    assert own == await _shell(work, adb_signer, "settings --user 0 get secure android_id")
    profile = await _shell(work, adb_signer, "settings --user 10 get secure android_id")
    assert re.fullmatch(r"[0-9a-f]{1,16}\n", profile) and profile != own
    assert ("com.example.old\n", "null\n") == (
        await _shell(work, adb_signer, SETTING),
        await _shell(work, adb_signer, "settings --user 10 get secure sms_default_application"),
    )
