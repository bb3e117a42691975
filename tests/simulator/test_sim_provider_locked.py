"""Before the first unlock after boot the message database is in locked credential storage."""

from __future__ import annotations

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

VERSIONS = (10, 11, 12, 13, 14, 15)
CANNOT_OPEN = (
    "Error while accessing provider:sms\n"
    "android.database.sqlite.SQLiteException: Cannot open database"
    " '/data/user/0/com.android.providers.telephony/databases/mmssms.db': Directory"
    " /data/user/0/com.android.providers.telephony/databases doesn't exist\n"
    "\tat android.database.DatabaseUtils.readExceptionFromParcel(DatabaseUtils.java:186)\n"
)


async def run(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    """Run one command line on ``phone`` over adb-shell and return its merged output."""
    device = await connect(phone, signer)
    try:
        return str(await device.shell(command))
    finally:
        await device.close()


@pytest.mark.parametrize("android", VERSIONS)
async def test_sms_query_is_a_provider_error_until_unlock(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """SmsProvider opens mmssms.db in credential-encrypted storage and lets the open failure
    through; after the unlock the rows are back (ProviderUtil.getCredentialEncryptedContext,
    MmsSmsDatabaseHelper.getInstanceForCe, SmsProvider.query, TelephonyProvider
    android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=android, build_type="userdebug")
    phone.store.insert_incoming("+15550100", "hi", date_ms=1)
    phone.user_unlocked = False
    for command in (
        "content query --uri content://sms",
        "su 1000 content query --uri content://sms/9/x",
    ):
        printed = await run(phone, adb_signer, f'{command}; echo "rc=$?"')
        assert printed.startswith(CANNOT_OPEN)
        assert printed.endswith("\nrc=0\n")
    phone.user_unlocked = True
    assert "Row: 0 body=hi\n" == await run(
        phone, adb_signer, "content query --uri content://sms --projection body"
    )


@pytest.mark.parametrize("android", VERSIONS)
async def test_mms_query_prints_no_result_found_while_locked(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """MmsProvider catches the SQLiteException and returns null, so a locked MMS store looks
    empty (MmsProvider.query, TelephonyProvider android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=android)
    phone.store.insert_incoming_mms("+15550100", "hi", date_ms=1_000)
    phone.user_unlocked = False
    assert "No result found.\n" == await run(phone, adb_signer, "content query --uri content://mms")


@pytest.mark.parametrize("android", VERSIONS)
async def test_a_rejected_query_never_reaches_the_locked_database(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """SqlQueryChecker runs before the database is opened, so a rejected query still prints
    'No result found.' (SmsProvider.query, TelephonyProvider android-10.0.0_r30 to
    android-15.0.0_r1)."""
    phone = await phone_factory(android=android)
    phone.user_unlocked = False
    assert "No result found.\n" == await run(
        phone, adb_signer, "content query --uri content://sms --where '_id IN (SELECT 1)'"
    )
