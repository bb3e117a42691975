"""Who sees what in ``content://sms``: the restricted view, root, ``su`` and the full view."""

from __future__ import annotations

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

VERSIONS = (10, 11, 12, 13, 14, 15)
ALL_TYPES = "".join(f"Row: {n} _id={n + 1}, type={n + 1}\n" for n in range(6))
SENT_AND_RECEIVED = "Row: 0 _id=1, type=1\nRow: 1 _id=2, type=2\n"
QUERY = "content query --uri content://sms --projection _id:type --sort _id"


async def run(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    """Run one command line on ``phone`` over adb-shell and return its merged output."""
    device = await connect(phone, signer)
    try:
        return str(await device.shell(command))
    finally:
        await device.close()


def one_row_of_each_type(phone: SimulatedPhone) -> None:
    """Rows of types 1 to 6 (_id 1 to 6), all on the phone's SIM."""
    for message_type in range(1, 7):
        phone.store.insert(
            address="+15550100", body=f"t{message_type}", type=message_type, date=message_type
        )


@pytest.mark.parametrize("android", VERSIONS)
async def test_shell_user_sees_only_inbox_and_sent(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """The shell reads sms_restricted: types 1 and 2 (ProviderUtil.isAccessRestricted,
    SmsProvider.getSmsTable, TelephonyProvider android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=android)
    one_row_of_each_type(phone)
    assert SENT_AND_RECEIVED == await run(phone, adb_signer, QUERY)


@pytest.mark.parametrize("android", VERSIONS)
async def test_root_reads_through_the_restricted_view_too(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Root (adb root) sees types 1 and 2 only (ProviderUtil.isAccessRestricted, TelephonyProvider
    android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=android, root=True)
    one_row_of_each_type(phone)
    assert (await run(phone, adb_signer, "id")).startswith("uid=0(root) gid=0(root)")
    assert SENT_AND_RECEIVED == await run(phone, adb_signer, QUERY)
    assert "No result found.\n" == await run(
        phone, adb_signer, "content query --uri content://sms/outbox"
    )


@pytest.mark.parametrize("android", VERSIONS)
async def test_su_1000_reads_every_type(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """su 1000 runs content as the system uid, which is not restricted (system/extras su.cpp;
    Content.resolveCallingPackage; ProviderUtil.isAccessRestricted, TelephonyProvider
    android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=android, build_type="userdebug")
    one_row_of_each_type(phone)
    assert ALL_TYPES == await run(phone, adb_signer, f"su 1000 {QUERY}")


@pytest.mark.parametrize("who", ["system", "radio", "1001", " +1000junk"])
async def test_su_takes_names_and_numbers(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, who: str
) -> None:
    """WHO is a passwd name or a strtoul number, and the phone uid reads everything too
    (system/extras su.cpp pwtoid; ProviderUtil.isAccessRestricted, TelephonyProvider
    android-15.0.0_r1)."""
    phone = await phone_factory(build_type="eng")
    one_row_of_each_type(phone)
    assert ALL_TYPES == await run(phone, adb_signer, f"su '{who}' {QUERY}")


async def test_su_root_is_still_restricted(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """su with no WHO is root, and root reads sms_restricted (system/extras su.cpp;
    ProviderUtil.isAccessRestricted, TelephonyProvider android-15.0.0_r1)."""
    phone = await phone_factory(build_type="userdebug")
    one_row_of_each_type(phone)
    assert SENT_AND_RECEIVED == await run(phone, adb_signer, f"su root {QUERY}")
    assert SENT_AND_RECEIVED == await run(phone, adb_signer, f"su 0 sh -c '{QUERY}'")


async def test_su_changes_what_id_and_whoami_print(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """su 1000 id prints uid 1000 in the su domain, the shell's groups inherited (system/extras
    su.cpp, toybox id.c; system/sepolicy private/su.te)."""
    phone = await phone_factory(build_type="userdebug")
    printed = await run(phone, adb_signer, "su 1000 id; su system whoami; whoami")
    lines = printed.splitlines()
    assert lines[0].startswith("uid=1000(system) gid=1000(system) groups=1000(system),1004(input)")
    assert lines[0].endswith(" context=u:r:su:s0")
    assert ["system", "shell"] == lines[1:]


async def test_su_is_missing_on_user_builds(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A user build has no su binary: mksh prints 'inaccessible or not found' and exits 127
    (system/extras su Android.mk LOCAL_MODULE_TAGS debug)."""
    phone = await phone_factory(build_type="user")
    assert "/system/bin/sh: su: inaccessible or not found\nrc=127\n" == await run(
        phone, adb_signer, f'su 1000 {QUERY}; echo "rc=$?"'
    )


async def test_su_refuses_callers_other_than_root_and_shell(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Only uid 0 and 2000 may call su: uid 1000 gets 'su: not allowed', status 1
    (system/extras su.cpp at android-10.0.0_r1 to 15)."""
    phone = await phone_factory(build_type="userdebug")
    assert "su: not allowed\nrc=1\n" == await run(
        phone, adb_signer, 'su 1000 su 0 id; echo "rc=$?"'
    )


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("su nosuchuser id", "su: invalid uid/gid 'nosuchuser'\nrc=1\n"),
        ("su 1000 nosuchtool", "su: failed to exec nosuchtool: No such file or directory\nrc=1\n"),
        ("su -1 id", "su: setgid failed: Invalid argument\nrc=1\n"),
    ],
)
async def test_su_errors(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, command: str, expected: str
) -> None:
    """su's own errors print 'su: ...' and exit 1 (system/extras su.cpp, bionic error())."""
    phone = await phone_factory(build_type="userdebug")
    assert expected == await run(phone, adb_signer, f'{command}; echo "rc=$?"')


async def test_su_help_goes_to_stderr_with_status_zero(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """su --help prints its usage on stderr and exits 0 (system/extras su.cpp)."""
    phone = await phone_factory(build_type="userdebug")
    printed = await run(phone, adb_signer, 'su --help 2>/dev/null; echo "rc=$?"; su -h')
    assert printed.startswith("rc=0\nusage: su [WHO [COMMAND...]]\n")


async def test_an_app_uid_without_a_package_is_refused(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """content as an app uid names no package and is refused READ_SMS (Content.java
    resolveCallingPackage; ContentProvider.Transport.enforceReadPermission)."""
    phone = await phone_factory(build_type="userdebug")
    printed = await run(phone, adb_signer, "su u0_a123 content query --uri content://sms")
    assert printed.startswith(
        "Error while accessing provider:sms\n"
        "java.lang.SecurityException: Permission Denial: reading"
        " com.android.providers.telephony.SmsProvider uri content://sms from pid=4242,"
        " uid=10123 requires android.permission.READ_SMS, or grantUriPermission()\n"
    )
