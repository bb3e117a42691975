"""``content query`` against the simulated SMS provider, through adb-shell, checked to the byte."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator

import pytest
from adb_shell.adb_device_async import AdbDeviceTcpAsync
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from tests.simulator.sim_helpers import connect

HAZARD_BODY = (
    "Code 4821, x=1 and y=2\n"
    "Row: 1 _id=99, address=+15550000, body=forged\n"
    "NULL = nothing 🎉 ünïcödé "
) + "z" * 1910

ERROR_TRACE_TAIL = (
    "\tat com.android.commands.content.Content$Command.execute(Content.java:533)\n"
    "\tat com.android.commands.content.Content.main(Content.java:763)\n"
    "\tat com.android.internal.os.RuntimeInit.nativeFinishInit(Native Method)\n"
    "\tat com.android.internal.os.RuntimeInit.main(RuntimeInit.java:371)\n"
)


@pytest.fixture
async def device(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> AsyncIterator[AdbDeviceTcpAsync]:
    """An adb-shell connection to the default (shell-mode) phone."""
    connection = await connect(phone, adb_signer)
    yield connection
    await connection.close()


async def test_hazard_body_is_printed_raw(phone: SimulatedPhone, device: AdbDeviceTcpAsync) -> None:
    """A body with ', x=', '=', newlines, a fake 'Row: ' line, NULL, emoji, 2,000 chars is exact."""
    assert 2000 <= len(HAZARD_BODY)
    phone.store.insert_outgoing("+15550100", HAZARD_BODY, date_ms=1, message_type=2)
    with sqlite3.connect(phone.store_path) as db:
        stored = db.execute("SELECT _id, address, body, type FROM sms").fetchall()
    assert [(1, "+15550100", HAZARD_BODY, 2)] == stored
    printed = await device.shell(
        "content query --uri content://sms/sent --projection _id:address:body:type"
    )
    assert f"Row: 0 _id=1, address=+15550100, body={HAZARD_BODY}, type=2\n" == printed


async def test_null_and_blob_and_default_columns(
    phone: SimulatedPhone, device: AdbDeviceTcpAsync
) -> None:
    """SQL NULL prints as the bare word NULL and every telephony column appears in table order."""
    phone.store.insert_incoming("+15550100", "hi", date_ms=1_700_000_000_000)
    printed = await device.shell("content query --uri content://sms")
    expected = (
        "Row: 0 _id=1, thread_id=1, address=+15550100, person=NULL, date=1700000000000,"
        " date_sent=1699999998000, protocol=0, read=0, status=-1, type=1,"
        " reply_path_present=0, subject=NULL, body=hi, service_center=+15555550000, locked=0,"
        " sub_id=1, error_code=-1, creator=com.google.android.apps.messaging, seen=0\n"
    )
    assert expected == printed


async def test_no_result_found_for_empty_result(device: AdbDeviceTcpAsync) -> None:
    """Zero rows print 'No result found.' and the exit status is still 0."""
    assert "No result found.\n__SB_EXIT:0\n" == await device.shell(
        'content query --uri content://sms/inbox; echo "__SB_EXIT:$?"'
    )


async def test_shell_user_sees_only_inbox_and_sent_of_its_subscription(
    phone: SimulatedPhone, device: AdbDeviceTcpAsync
) -> None:
    """On the default Android 15, types 3-6 and rows of another SIM are invisible to the shell
    (ProviderUtil.isAccessRestricted, getSelectionBySubIds, TelephonyProvider android-15.0.0_r1;
    per release in test_sim_provider_access and test_sim_provider_subs)."""
    for message_type in range(1, 7):
        phone.store.insert(
            address="+15550100",
            body=f"t{message_type}",
            type=message_type,
            date=message_type,
            sub_id=1,
        )
    phone.store.insert(address="+15550100", body="other sim", type=2, date=10, sub_id=2)
    printed = await device.shell(
        "content query --uri content://sms --projection _id:type --sort _id"
    )
    assert "Row: 0 _id=1, type=1\nRow: 1 _id=2, type=2\n" == printed
    assert "No result found.\n" == await device.shell(
        "content query --uri content://sms/outbox --projection _id"
    )


async def test_subqueries_print_no_result_found_not_an_error(
    phone: SimulatedPhone, device: AdbDeviceTcpAsync
) -> None:
    """There is no "Invalid token" grammar: a SELECT is refused by SqlQueryChecker with a null
    cursor, and LIMIT in --sort works (SmsProvider.query, TelephonyProvider android-15.0.0_r1)."""
    phone.store.insert_incoming("+15550100", "hi", date_ms=1)
    phone.store.insert_incoming("+15550100", "ho", date_ms=2)
    assert "No result found.\nrc=0\n" == await device.shell(
        "content query --uri content://sms --where '_id IN (SELECT _id FROM sms)'; echo \"rc=$?\""
    )
    assert "Row: 0 body=ho\n" == await device.shell(
        "content query --uri content://sms --projection body --sort '_id DESC LIMIT 1'"
    )


async def test_string_literals_are_not_tokens(
    phone: SimulatedPhone, device: AdbDeviceTcpAsync
) -> None:
    """A keyword inside a quoted SQL string is data, not a refused token."""
    phone.store.insert_incoming("+15550100", "select me", date_ms=1)
    printed = await device.shell(
        "content query --uri content://sms --projection body --where \"body='select me'\""
    )
    assert "Row: 0 body=select me\n" == printed


async def test_bad_column_is_an_sqlite_provider_error(device: AdbDeviceTcpAsync) -> None:
    """An unknown column is an SQLiteException rethrown by DatabaseUtils; on Android 15 the WHERE
    carries the subscription filter (SmsProvider.query, TelephonyProvider android-15.0.0_r1)."""
    printed = await device.shell("content query --uri content://sms --where 'nosuch=1'")
    assert (
        "Error while accessing provider:sms\n"
        "android.database.sqlite.SQLiteException: no such column: nosuch (code 1 SQLITE_ERROR[1]):"
        " , while compiling: SELECT * FROM sms_restricted WHERE ((nosuch=1) AND"
        " (sub_id IN ('1','-1') OR address IN ('112','911'))) ORDER BY date DESC\n"
        "\tat android.database.DatabaseUtils.readExceptionFromParcel(DatabaseUtils.java:186)\n"
        "\tat android.database.DatabaseUtils.readExceptionFromParcel(DatabaseUtils.java:142)\n"
        "\tat android.content.ContentProviderProxy.query(ContentProviderNative.java:481)\n"
        "\tat com.android.commands.content.Content$QueryCommand.onExecute(Content.java:676)\n"
        + ERROR_TRACE_TAIL
    ) == printed


async def test_where_cannot_write(phone: SimulatedPhone, device: AdbDeviceTcpAsync) -> None:
    """Even a crafted where clause cannot change the store."""
    phone.store.insert_incoming("+15550100", "keep", date_ms=1)
    await device.shell('content query --uri content://sms --where "1); DELETE FROM sms; --"')
    assert ["keep"] == [row.body for row in phone.store.rows()]


async def test_default_sort_is_date_descending(
    phone: SimulatedPhone, device: AdbDeviceTcpAsync
) -> None:
    """Without --sort rows come newest first, as SmsProvider's default order says."""
    phone.store.insert_incoming("+15550100", "old", date_ms=1000)
    phone.store.insert_incoming("+15550100", "new", date_ms=2000)
    assert "Row: 0 body=new\nRow: 1 body=old\n" == await device.shell(
        "content query --uri content://sms --projection body"
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ("", "Unsupported operation: null"),
        ("frobnicate", "Unsupported operation: frobnicate"),
        ("query", "Content provider URI not specified. Did you specify --uri argument?"),
        ("query --uri", "No value for argument: --uri"),
        ("query --uri content://sms --bogus 1", "Unsupported argument: --bogus"),
        ("query --uri content://sms --user abc", 'For input string: "abc"'),
        ("query --uri content://sms --where --sort", "No value for argument: --where"),
    ],
)
async def test_bad_arguments_print_usage_and_error(
    device: AdbDeviceTcpAsync, args: str, error: str
) -> None:
    """Bad arguments print the full usage text, a blank line, then '[ERROR] ...', exit 0."""
    printed = await device.shell(f'content {args}; echo "rc=$?"')
    assert printed.startswith("usage: adb shell content [subcommand] [options]\n\n")
    assert printed.endswith(
        "  adb shell content gettype --uri content://media/internal/audio/media/\n\n\n"
        f"[ERROR] {error}\nrc=0\n"
    )


async def test_unknown_provider_is_an_error(device: AdbDeviceTcpAsync) -> None:
    """A URI with another authority prints 'Could not find provider'."""
    printed = await device.shell("content query --uri content://nosuch/things")
    assert (
        "Error while accessing provider:nosuch\n"
        "java.lang.IllegalStateException: Could not find provider: nosuch\n" + ERROR_TRACE_TAIL
    ) == printed


async def test_projection_split_and_single_row_uri(
    phone: SimulatedPhone, device: AdbDeviceTcpAsync
) -> None:
    """Projection names split on ':' with spaces trimmed; content://sms/<id> selects one row."""
    phone.store.insert_incoming("+15550100", "first", date_ms=1)
    second = phone.store.insert_incoming("+15550101", "second", date_ms=2)
    assert "Row: 0 _id=2, body=second\n" == await device.shell(
        f"content query --uri content://sms/{second} --projection '_id : body'"
    )
