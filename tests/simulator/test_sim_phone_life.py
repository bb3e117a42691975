"""What a phone's life does to its rows and its identity, each behaviour held to the source it
follows: the app's optimistic rows (packages/apps/Messaging), the framework's SENT-then-FAILED
write (frameworks/opt/telephony ``SMSDispatcher``), ``_id`` reuse and conversation deletes
(packages/providers/TelephonyProvider), ``android_id`` (frameworks/base SettingsProvider)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect, send_command

BODY = "Your code is 4821"
TO = "+15550100"


async def run(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    """Run ``command`` over a fresh connection; return what it printed."""
    device = await connect(phone, signer)
    try:
        output = await device.shell(command)
    finally:
        await device.close()
    assert isinstance(output, str)
    return output


# -- the app's rows --------------------------------------------------------------------------


@pytest.mark.parametrize("app", ["aosp", "google", "samsung"])
async def test_a_send_the_radio_never_makes_stays_sent_for_good(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, app: str
) -> None:
    """``stuck-outbox``: the app wrote its row SENT before sending
    (``InsertNewMessageAction.insertSendingSmsMessage``: ``MESSAGE_TYPE_SENT``), and when it
    gives up waiting for service, or was sending when it was killed, it marks the message
    failed in its own database only (``ProcessPendingMessagesAction.findNextMessageToSend``,
    ``FixupMessageStatusOnStartupAction``: packages/apps/Messaging android-10.0.0_r30 and
    android-15.0.0_r1): the row stays SENT, through a reboot, though nothing went out."""
    phone = await phone_factory(app=app, faults=["stuck-outbox"], tcpip_survives_reboot=True)
    await run(phone, adb_signer, send_command(TO, BODY))
    await phone.wait_idle()
    [row] = phone.store.rows()
    await phone.reboot()
    await phone.wait_idle()
    assert [(row._id, 2, 0, -1)] == [
        (r._id, r.type, r.date_sent, r.status) for r in phone.store.rows()
    ]
    assert [] == phone.transmissions


@pytest.mark.parametrize("android", [10, 11, 15])
async def test_the_apps_row_keeps_the_providers_error_code(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """The app never writes ``error_code`` (``MmsUtils.addMessageToUri``,
    ``updateSmsMessageSendingStatus``: type and date only, packages/apps/Messaging
    android-10.0.0_r30 and android-15.0.0_r1): sent or failed, its row keeps the column's
    default, 0 in a database made on Android 10 and ``NO_ERROR_CODE`` -1 from 11
    (``MmsSmsDatabaseHelper``, TelephonyProvider android-10.0.0_r30, android-11.0.0_r1)."""
    phone = await phone_factory(android=android, app="aosp")
    await run(phone, adb_signer, send_command(TO, BODY))
    phone.inject_fault("send-fails")
    await run(phone, adb_signer, send_command(TO, BODY))
    await phone.wait_idle()
    default = 0 if android == 10 else -1
    assert [(2, default), (5, default)] == [(r.type, r.error_code) for r in phone.store.rows()]


async def test_an_mms_is_in_the_sent_box_before_the_radio_sends_it(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A text the app sends as MMS is persisted to ``Mms.Sent`` before it is sent
    (``MmsUtils.insertSendReq``; ``PduPersister``'s ``MESSAGE_BOX_MAP``: ``Mms.Sent`` is
    ``MESSAGE_BOX_SENT``, packages/apps/Messaging android-10.0.0_r30 and
    android-15.0.0_r1): ``msg_box`` 2 while nothing has left the phone, 5 if the radio
    fails."""
    phone = await phone_factory(app="aosp", send_delay_ms=200, faults=["mms-convert"])
    await run(phone, adb_signer, send_command(TO, BODY))
    assert [2] == [mms.msg_box for mms in phone.store.mms_messages()]
    await phone.wait_idle()
    (sent,) = phone.transmissions
    (mms,) = phone.store.mms_messages()
    # persisted the radio's delay before anything left the phone (its date is in seconds,
    # rounded down), told by the phone's own clock, not by when this test looked
    assert mms.date is not None and sent.time_ms - mms.date * 1000 >= 200
    phone.inject_fault("mms-convert")
    phone.inject_fault("send-fails")
    await run(phone, adb_signer, send_command(TO, BODY))
    await phone.wait_idle()
    assert [2, 5] == [mms.msg_box for mms in phone.store.mms_messages()]
    assert 1 == len(phone.transmissions)


# -- the framework's rows --------------------------------------------------------------------


def isms_call(version: int, body: str) -> str:
    """``service call isms`` of ``sendTextForSubscriber`` laid out for Android ``version``
    (as ``test_sim_isms.call``)."""
    code = 6 if version == 10 else 5
    args = ["i32 1", "s16 com.android.shell", *(["i32 -1"] if version >= 11 else [])]
    args += [f"s16 {TO}", "i32 -1", f"s16 '{body}'", "i32 0", "i32 0", "i32 1"]
    args += ["i64 0"] if version >= 11 else []
    return f"service call isms {code} " + " ".join(args)


@pytest.mark.parametrize("android", [10, 15])
async def test_a_failed_framework_send_is_seen_sent_then_failed(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """On a radio failure the framework inserts its row into ``content://sms/sent`` (type 2,
    the error code already in it), then updates the type alone to 5 by a second provider
    call (``SMSDispatcher.SmsTracker.persistSentMessageIfRequired``, frameworks/opt/telephony
    android-10.0.0_r30 and android-15.0.0_r1): a read between the two sees it SENT. The same
    ``_id`` throughout (``SmsProvider.update`` is one ``db.update``)."""
    phone = await phone_factory(android=android, send_delay_ms=50, faults=["send-fails"])
    await run(phone, adb_signer, isms_call(android, "hi"))
    seen: list[tuple[int, int]] = []
    async with asyncio.timeout(5):
        while not seen or seen[-1][1] != 5:
            rows = phone.store.rows()
            if rows and (not seen or seen[-1] != (rows[0]._id, rows[0].type)):
                seen.append((rows[0]._id, rows[0].type))
            await asyncio.sleep(0.005)
    [(first_id, first_type), (last_id, last_type)] = seen
    assert (first_id, 2, 5) == (last_id, first_type, last_type)
    assert [1] == [row.error_code for row in phone.store.rows()]
    assert [] == phone.transmissions


@pytest.mark.parametrize("android", [10, 11, 15])
async def test_a_framework_send_keeps_the_providers_error_code(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """A sent row gets no ``error_code`` (``persistSentMessageIfRequired`` puts it only when it
    is not 0 on 10, not ``NO_ERROR_CODE`` from 11: frameworks/opt/telephony
    android-10.0.0_r30, android-15.0.0_r1): it keeps the provider's default, 0 on 10 and -1
    from 11 (``MmsSmsDatabaseHelper``, TelephonyProvider android-10.0.0_r30,
    android-11.0.0_r1)."""
    phone = await phone_factory(android=android)
    await run(phone, adb_signer, isms_call(android, "hi"))
    assert [(2, 0 if android == 10 else -1)] == [
        (row.type, row.error_code) for row in phone.store.rows()
    ]


# -- deletes and _id reuse -------------------------------------------------------------------


async def test_deleting_the_latest_rows_lets_their_ids_be_taken_again(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """``sms`` is ``_id INTEGER PRIMARY KEY`` without AUTOINCREMENT (``MmsSmsDatabaseHelper``
    ``CREATE_SMS_TABLE_STRING``, TelephonyProvider android-10.0.0_r30 and android-15.0.0_r1),
    so SQLite gives the next row the highest ``_id`` left plus one: once the latest rows are
    deleted (``delete_from``, or a thread through ``content://sms/conversations/<id>``,
    ``SmsProvider.delete`` ``SMS_CONVERSATIONS_ID``), a new message takes an ``_id`` a
    deleted one had, with a later date."""
    phone = await phone_factory()
    for _ in range(3):
        await run(phone, adb_signer, send_command(TO, BODY))
    first, second, third = phone.store.rows()
    assert [second._id, third._id] == phone.store.delete_from(second._id)
    await run(phone, adb_signer, send_command("+15550101", BODY))
    [kept, fresh] = phone.store.rows()
    assert (first._id, second._id) == (kept._id, fresh._id)
    assert fresh.date is not None and second.date is not None and fresh.date >= second.date
    assert fresh.thread_id is not None
    assert [fresh._id] == phone.store.delete_thread(fresh.thread_id)
    await run(phone, adb_signer, send_command("+15550101", BODY))
    assert [first._id, second._id] == [row._id for row in phone.store.rows()]


async def test_deleting_a_conversation_takes_its_mms_too(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """The owner deleting a conversation in AOSP Messaging (``MmsUtils.deleteThread``:
    ``Threads.CONTENT_URI/<thread>``) deletes its MMS and its SMS
    (``MmsSmsProvider.deleteConversation``: ``MmsProvider.deleteMessages`` and
    ``db.delete("sms", …)``, TelephonyProvider android-10.0.0_r30 and android-15.0.0_r1);
    ``content://sms/conversations/<thread>`` deletes only the SMS. A ``pdu`` ``_id`` is never
    taken again (``_id INTEGER PRIMARY KEY AUTOINCREMENT``)."""
    phone = await phone_factory(app="aosp")
    await run(phone, adb_signer, send_command(TO, BODY))
    phone.inject_fault("mms-convert")
    await run(phone, adb_signer, send_command(TO, BODY))
    await phone.wait_idle()
    [sms] = phone.store.rows()
    [mms] = phone.store.mms_messages()
    assert sms.thread_id is not None and sms.thread_id == mms.thread_id
    assert ([sms._id], [mms.id]) == phone.store.delete_conversation(sms.thread_id)
    assert ([], []) == (phone.store.rows(), phone.store.mms_messages())
    phone.inject_fault("mms-convert")
    await run(phone, adb_signer, send_command(TO, BODY))
    [again] = phone.store.mms_messages()
    assert again.id > mms.id


# -- android_id --------------------------------------------------------------------------------


async def test_android_id_is_kept_until_a_factory_reset(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, authorized_keys_path: Path
) -> None:
    """``settings get secure android_id`` gives the shell (uid 2000, below
    ``FIRST_APPLICATION_UID``: no per-app SSAID) the stored value of user 0, made once as
    ``Long.toHexString(new SecureRandom().nextLong())`` (up to 16 hex digits) and kept in
    ``/data``: the same after a reboot, new after a factory reset (frameworks/base
    SettingsProvider ``getSecureSetting``/``ensureSecureSettingAndroidIdSetLocked``, read in
    untagged copies only, not at a release tag)."""
    phone = await phone_factory(tcpip_survives_reboot=True)
    keys = authorized_keys_path.read_text(encoding="utf-8")
    before = (await run(phone, adb_signer, "settings get secure android_id")).strip()
    assert re.fullmatch(r"[0-9a-f]{1,16}", before)
    assert before == phone.android_id
    await phone.reboot()
    assert before == (await run(phone, adb_signer, "settings get secure android_id")).strip()
    await phone.wipe_data()
    authorized_keys_path.write_text(keys, encoding="utf-8")  # the owner allows the key again
    await phone.enable_tcpip()
    after = (await run(phone, adb_signer, "settings get secure android_id")).strip()
    assert re.fullmatch(r"[0-9a-f]{1,16}", after)
    assert after != before
    assert after == phone.android_id
