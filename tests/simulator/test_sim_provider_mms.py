"""``content://mms``: the pdu, addr and part tables, the restricted view and the store's MMS API."""

from __future__ import annotations

from pathlib import Path

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone, SmsStore
from android_bridge.simulator._store import (
    MESSAGING_PACKAGE,
    MMS_BOX_FAILED,
    MMS_BOX_OUTBOX,
    MMS_BOX_SENT,
    MMS_TYPE_NOTIFICATION_IND,
    MmsMessage,
)
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

VERSIONS = (10, 11, 12, 13, 14, 15)
DATE_MS = 1_700_000_000_987


async def run(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    """Run one command line on ``phone`` over adb-shell and return its merged output."""
    device = await connect(phone, signer)
    try:
        return str(await device.shell(command))
    finally:
        await device.close()


def test_store_writes_an_outgoing_mms_as_the_app_does(tmp_path: Path) -> None:
    """insert_outgoing_mms writes pdu (date in seconds), one TO addr per recipient, the FROM
    token and a text/plain part; mark_mms_sent and mark_mms_failed move its box
    (MmsSmsDatabaseHelper, MmsProvider.insert, TelephonyProvider android-15.0.0_r1)."""
    store = SmsStore(tmp_path / "mms.db")
    try:
        first = store.insert_outgoing_mms(
            ["+15550101", "+15550102"], "hello", date_ms=DATE_MS, subject="Hi"
        )
        second = store.insert_outgoing_mms(["+15550103"], "bye", date_ms=DATE_MS + 1000)
        store.mark_mms_sent(first, date_sent_ms=DATE_MS + 5000)
        store.mark_mms_failed(second)
        assert [
            MmsMessage(
                id=first,
                thread_id=store.thread_id_for(["+15550101", "+15550102"]),
                msg_box=MMS_BOX_SENT,
                m_type=128,
                addresses=("+15550101", "+15550102"),
                sender="insert-address-token",
                body="hello",
                subject="Hi",
                date=DATE_MS // 1000,
                date_sent=(DATE_MS + 5000) // 1000,
                sub_id=1,
                creator=MESSAGING_PACKAGE,
            ),
            MmsMessage(
                id=second,
                thread_id=store.thread_id_for("+15550103"),
                msg_box=MMS_BOX_FAILED,
                m_type=128,
                addresses=("+15550103",),
                sender="insert-address-token",
                body="bye",
                subject=None,
                date=(DATE_MS + 1000) // 1000,
                date_sent=0,
                sub_id=1,
                creator=MESSAGING_PACKAGE,
            ),
        ] == store.mms_messages()
    finally:
        store.close()


@pytest.mark.parametrize("android", VERSIONS)
async def test_restricted_callers_see_inbox_and_sent_mms_only(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """The shell and root read pdu_restricted: boxes 1 and 2 without m_type 130 notifications
    (MmsProvider.getPduTable, MmsSmsDatabaseHelper, TelephonyProvider android-10.0.0_r30 to
    android-15.0.0_r1)."""
    phone = await phone_factory(android=android, root=True)
    received = phone.store.insert_incoming_mms("+15550100", "in", date_ms=DATE_MS)
    sent = phone.store.insert_outgoing_mms(["+15550101"], "out", date_ms=DATE_MS + 1000)
    phone.store.mark_mms_sent(sent, date_sent_ms=DATE_MS + 2000)
    phone.store.insert_outgoing_mms(["+15550102"], "queued", date_ms=DATE_MS + 3000)
    failed = phone.store.insert_outgoing_mms(["+15550103"], "failed", date_ms=DATE_MS + 4000)
    phone.store.mark_mms_failed(failed)
    phone.store.insert_pdu(msg_box=1, m_type=MMS_TYPE_NOTIFICATION_IND, date=DATE_MS // 1000)
    query = "content query --uri content://mms --projection _id:msg_box:date"
    assert (
        f"Row: 0 _id={sent}, msg_box=2, date={(DATE_MS + 1000) // 1000}\n"
        f"Row: 1 _id={received}, msg_box=1, date={DATE_MS // 1000}\n"
    ) == await run(phone, adb_signer, query)
    assert "No result found.\n" == await run(
        phone, adb_signer, "content query --uri content://mms/outbox"
    )
    assert 5 == len((await run(phone, adb_signer, f"su 1000 {query}")).splitlines())


@pytest.mark.parametrize("android", VERSIONS)
async def test_addresses_and_parts_are_readable_for_every_box(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """MmsProvider reads addr and part from the tables themselves, so a restricted caller sees
    them even for an outbox message (MmsProvider.query MMS_MSG_ADDR, MMS_MSG_PART, MMS_ALL_PART,
    TelephonyProvider android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=android)
    outbox = phone.store.insert_outgoing_mms(
        ["+15550101", "+15550102"], "long text", date_ms=DATE_MS, msg_box=MMS_BOX_OUTBOX
    )
    assert (
        "Row: 0 address=+15550101, type=151, charset=106\n"
        "Row: 1 address=+15550102, type=151, charset=106\n"
        "Row: 2 address=insert-address-token, type=137, charset=106\n"
    ) == await run(
        phone,
        adb_signer,
        f"content query --uri content://mms/{outbox}/addr --projection address:type:charset",
    )
    expected_part = f"Row: 0 mid={outbox}, seq=0, ct=text/plain, chset=106, text=long text\n"
    assert expected_part == await run(
        phone,
        adb_signer,
        f"content query --uri content://mms/{outbox}/part --projection mid:seq:ct:chset:text",
    )
    assert expected_part == await run(
        phone,
        adb_signer,
        "content query --uri content://mms/part --projection mid:seq:ct:chset:text",
    )


@pytest.mark.parametrize(("android", "has_sub_id"), [(13, False), (14, True), (15, True)])
async def test_addr_and_part_sub_id_columns_from_14(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, has_sub_id: bool
) -> None:
    """addr and part gained sub_id with database version 68 (MmsSmsDatabaseHelper,
    TelephonyProvider android-13.0.0_r1 version 67, android-14.0.0_r1 version 68)."""
    phone = await phone_factory(android=android)
    pdu = phone.store.insert_incoming_mms("+15550100", "x", date_ms=DATE_MS)
    printed = await run(phone, adb_signer, f"content query --uri content://mms/{pdu}/addr")
    columns = "_id=1, msg_id=1, contact_id=NULL, address=+15550100, type=137, charset=106"
    assert f"Row: 0 {columns}{', sub_id=1' if has_sub_id else ''}\n" == printed


@pytest.mark.parametrize("android", VERSIONS)
async def test_message_uris_select_by_id_and_box(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """content://mms/<id> selects by _id, content://mms/<box>/<id> by _id and box
    (MmsProvider.query MMS_ALL_ID, MMS_INBOX_ID, TelephonyProvider android-10.0.0_r30 to
    android-15.0.0_r1)."""
    phone = await phone_factory(android=android)
    pdu = phone.store.insert_incoming_mms("+15550100", "x", date_ms=DATE_MS, subject="S")
    assert f"Row: 0 _id={pdu}, sub=S\n" == await run(
        phone, adb_signer, f"content query --uri content://mms/{pdu} --projection _id:sub"
    )
    assert f"Row: 0 _id={pdu}\n" == await run(
        phone, adb_signer, f"content query --uri content://mms/inbox/{pdu} --projection _id"
    )
    assert "No result found.\n" == await run(
        phone, adb_signer, f"content query --uri content://mms/sent/{pdu} --projection _id"
    )


@pytest.mark.parametrize("android", VERSIONS)
async def test_an_sql_error_is_no_result_found_for_mms(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """MmsProvider catches SQLiteException and returns null (MmsProvider.query, TelephonyProvider
    android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=android)
    phone.store.insert_incoming_mms("+15550100", "x", date_ms=DATE_MS)
    assert "No result found.\n" == await run(
        phone, adb_signer, "content query --uri content://mms --where 'nosuch = 1'"
    )


@pytest.mark.parametrize(("android", "checked"), [(10, False), (12, False), (13, True), (15, True)])
async def test_mms_checker_from_13_is_a_provider_error(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, checked: bool
) -> None:
    """MmsProvider runs SqlQueryChecker from android-13.0.0_r1 and does not catch it; before, a
    restricted caller's subquery runs (MmsProvider.query, TelephonyProvider android-12.0.0_r1,
    13.0.0_r1)."""
    phone = await phone_factory(android=android)
    phone.store.insert_incoming_mms("+15550100", "x", date_ms=DATE_MS)
    phone.store.insert_outgoing_mms(["+15550101"], "y", date_ms=DATE_MS)
    printed = await run(
        phone,
        adb_signer,
        "content query --uri content://mms --projection"
        " '(SELECT COUNT(*) FROM pdu WHERE msg_box = 4) AS queued'",
    )
    if checked:
        assert printed.startswith(
            "Error while accessing provider:mms\n"
            "java.lang.IllegalArgumentException: SELECT token not allowed in query\n"
            "\tat android.database.DatabaseUtils.readExceptionFromParcel(DatabaseUtils.java:172)\n"
        )
    else:
        assert "Row: 0 queued=1\n" == printed


async def test_unknown_mms_path_is_no_result_found(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """An unknown path is logged and answered with a null cursor (MmsProvider.query default
    case, TelephonyProvider android-15.0.0_r1)."""
    phone = await phone_factory()
    assert "No result found.\n" == await run(
        phone, adb_signer, "content query --uri content://mms/failed"
    )
