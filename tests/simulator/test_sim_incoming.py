"""Incoming SMS as a phone writes them: the default SMS app's inbox row, its conversation,
what the shell sees of it, and ``starebrain simulator receive-sms`` into a running phone."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest
from adb_shell.adb_device_async import AdbDeviceTcpAsync
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._console import ConsoleError, console_path, send_to_running_phone
from android_bridge.simulator._store import MESSAGING_PACKAGE
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

SENDER = "+12025550143"
INBOX = "content query --uri content://sms --projection _id:type:address:body:sub_id --sort _id"


async def shell(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    """Run one command line on ``phone`` over adb-shell and return its output."""
    device = await connect(phone, signer)
    try:
        return str(await device.shell(command))
    finally:
        await device.close()


async def test_an_incoming_sms_is_an_unread_inbox_row_in_the_senders_thread(
    phone: SimulatedPhone,
) -> None:
    """type 1, read 0, seen 0, the sender's conversation (the one our sent message is in),
    date the phone's clock, date_sent the SC time stamp in whole seconds and not after it,
    the first SIM, and creator the default SMS app (InboundSmsHandler hands the PDUs to it:
    frameworks/opt/telephony android-10.0.0_r46 and 11.0.0_r46, as merged into LineageOS;
    SmsProvider.insert stamps its package: TelephonyProvider android-10.0.0_r30, 15.0.0_r1)."""
    sent = phone.store.insert_outgoing(SENDER, "Your code is 4821", date_ms=phone.now_ms())
    before = phone.now_ms()
    row_id = phone.receive_sms(SENDER, "STOP")
    assert row_id is not None
    row = phone.store.row(row_id)
    sent_row = phone.store.row(sent)
    assert row is not None and sent_row is not None
    assert (1, 0, 0, SENDER, "STOP", 1) == (
        row.type,
        row.read,
        row.seen,
        row.address,
        row.body,
        row.sub_id,
    )
    assert sent_row.thread_id == row.thread_id
    assert row.date is not None and row.date_sent is not None
    assert before <= row.date <= phone.now_ms()
    assert 0 == row.date_sent % 1000
    assert row.date_sent <= row.date
    assert MESSAGING_PACKAGE == row.creator
    assert (-1, -1, 0) == (row.status, row.error_code, row.locked)


async def test_the_conversation_takes_the_snippet_count_and_unread_flag(
    phone: SimulatedPhone,
) -> None:
    """The provider's triggers (MmsSmsDatabaseHelper sms_update_thread_on_insert and
    sms_update_thread_read_on_update, the same at TelephonyProvider android-10.0.0_r30 and
    15.0.0_r1): snippet is the new body, message_count counts it, the thread is unread
    until the row is read, and its date is whole seconds."""
    phone.store.insert_outgoing(SENDER, "hello", date_ms=phone.now_ms())
    row_id = phone.receive_sms(SENDER, "who is this?")
    assert row_id is not None
    row = phone.store.row(row_id)
    assert row is not None and row.thread_id is not None
    thread = phone.store.thread(row.thread_id)
    assert thread is not None
    assert ("who is this?", 2, 0) == (thread.snippet, thread.message_count, thread.read)
    assert 0 == thread.date % 1000
    phone.store.update(row_id, {"read": 1})
    read_thread = phone.store.thread(row.thread_id)
    assert read_thread is not None and 1 == read_thread.read


async def test_a_national_sender_is_kept_and_gets_its_own_conversation(
    phone: SimulatedPhone,
) -> None:
    """The address is the PDU's originating address as the network delivered it: a national
    number stays one, and (MmsSmsProvider.getThreadId matching addresses as given,
    TelephonyProvider android-10.0.0_r30 to 15.0.0_r1) it is a conversation of its own
    beside the +1 form."""
    international = phone.receive_sms(SENDER, "one")
    national = phone.receive_sms("2025550143", "two")
    assert international is not None and national is not None
    first, second = phone.store.row(international), phone.store.row(national)
    assert first is not None and second is not None
    assert "2025550143" == second.address
    assert first.thread_id != second.thread_id


async def test_a_long_text_is_one_row_with_the_whole_body(phone: SimulatedPhone) -> None:
    """A text of several parts is one row holding every part, written once all are in
    (InboundSmsHandler.processMessagePart waits in the raw table for the last part:
    frameworks/opt/telephony android-10.0.0_r46 to 14.0.0_r50, lineage-22.0 for 15)."""
    body = "Please stop texting me. " * 20  # 480 GSM characters: 4 parts
    row_id = phone.receive_sms(SENDER, body)
    assert [body] == [row.body for row in phone.store.rows()]
    assert row_id == phone.store.max_id()


async def test_the_sc_time_stamp_given_is_kept_and_must_be_whole_seconds(
    phone: SimulatedPhone,
) -> None:
    """``date_sent_ms`` is the PDU's TP-SCTS: kept as given, refused below a second (3GPP TS
    23.040 9.2.3.11; SmsMessage.PduParser.getSCTimestampMillis, read only at aosp-mirror
    main, commit 052ac3d, not at a release tag)."""
    row_id = phone.receive_sms(SENDER, "late", date_sent_ms=1_700_000_000_000)
    assert row_id is not None
    row = phone.store.row(row_id)
    assert row is not None and 1_700_000_000_000 == row.date_sent
    with pytest.raises(ValueError, match="one-second resolution"):
        phone.receive_sms(SENDER, "late", date_sent_ms=1_700_000_000_001)


async def test_a_phone_clock_behind_dates_the_row_before_it_was_sent(
    phone_factory: PhoneFactory,
) -> None:
    """``date`` is the phone's clock, ``date_sent`` the network's: a phone whose clock is a
    minute behind writes a row received before it was sent, as a real one does (AOSP
    Messaging SmsReceiver.deliverSmsMessages and MmsUtils.getMessageDate, LineageOS
    lineage-22.0)."""
    phone = await phone_factory(clock_skew_ms=-60_000)
    row_id = phone.receive_sms(SENDER, "skewed")
    assert row_id is not None
    row = phone.store.row(row_id)
    assert row is not None and row.date is not None and row.date_sent is not None
    assert row.date < row.date_sent


async def test_the_sim_is_one_of_the_phones(phone_factory: PhoneFactory) -> None:
    """sub_id is the SIM the SMS came in on: the first by default, another if named, and
    never one the phone does not have (InboundSmsHandler putPhoneIdAndSubIdExtra,
    frameworks/opt/telephony android-10.0.0_r46 to 14.0.0_r50)."""
    phone = await phone_factory(sim_sub_ids=(3, 4))
    first, second = phone.receive_sms(SENDER, "a"), phone.receive_sms(SENDER, "b", sub_id=4)
    assert [3, 4] == [row.sub_id for row in phone.store.rows()]
    assert (first, second) == (1, 2)
    with pytest.raises(ValueError, match="none of the phone's SIMs"):
        phone.receive_sms(SENDER, "c", sub_id=1)


@pytest.mark.parametrize(("android", "error_code"), [(10, 0), (11, -1), (14, -1), (15, -1)])
async def test_an_app_writing_no_error_code_leaves_the_releases_default(
    phone_factory: PhoneFactory, android: int, error_code: int
) -> None:
    """The framework's values (InboundSmsHandler.parseSmsMessage) carry no error_code, so a
    closed app assumed to write them gets the column's default: 0 on a database made on 10,
    NO_ERROR_CODE -1 from 11 (InboundSmsHandler android-10.0.0_r46 and 11.0.0_r46;
    MmsSmsDatabaseHelper, TelephonyProvider android-10.0.0_r30 and 15.0.0_r1)."""
    phone = await phone_factory(android=android)
    phone.receive_sms(SENDER, "hi")
    assert [error_code] == [row.error_code for row in phone.store.rows()]


async def test_aosp_messaging_marks_it_seen_and_read_when_the_conversation_is_open(
    phone_factory: PhoneFactory,
) -> None:
    """AOSP Messaging (ReceiveSmsMessageAction) writes seen 1 always, read 1 only when the
    sender's conversation is the one on screen, and error_code -1; creator is its package
    (packages/apps/Messaging as LineageOS keeps it, lineage-22.0: read there only)."""
    phone = await phone_factory(app="aosp")
    unread = phone.receive_sms(SENDER, "first")
    phone.open_compose(SENDER, "")
    read = phone.receive_sms(SENDER, "second")
    other = phone.receive_sms("+12025550100", "someone else")
    rows = {row.id: row for row in phone.store.rows()}
    assert [(0, 1), (1, 1), (0, 1)] == [
        (rows[row_id].read, rows[row_id].seen)
        for row_id in (unread, read, other)
        if row_id is not None
    ]
    assert {"com.android.messaging"} == {row.creator for row in rows.values()}
    assert {-1} == {row.error_code for row in rows.values()}


async def test_an_sms_received_while_locked_lands_at_the_unlock(
    phone_factory: PhoneFactory,
) -> None:
    """Before the first unlock the parts wait in the raw table
    (processMessagePartWithUserLocked, frameworks/opt/telephony android-10.0.0_r46 to
    14.0.0_r50): no row, until the user unlocks and the app writes it, dated then."""
    phone = await phone_factory()
    await phone.reboot()
    assert not phone.user_unlocked
    assert phone.receive_sms(SENDER, "while you were out") is None
    assert [] == phone.store.rows()
    unlocked_at = phone.now_ms()
    phone.unlock_user()
    [row] = phone.store.rows()
    assert ("while you were out", 1) == (row.body, row.type)
    assert row.date is not None and row.date >= unlocked_at


@pytest.mark.parametrize("root", [False, True])
async def test_the_shell_and_root_see_inbox_rows(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, root: bool
) -> None:
    """Inbox rows are in the restricted view (sms_restricted: types 1 and 2) that the shell
    user and root read, beside sent rows; a failed row is not (ProviderUtil.isAccessRestricted,
    SmsProvider.query, TelephonyProvider android-10.0.0_r30 and 15.0.0_r1)."""
    phone = await phone_factory(root=root)
    phone.store.insert_outgoing(SENDER, "Your code is 4821", date_ms=phone.now_ms(), message_type=2)
    phone.store.insert_outgoing(SENDER, "failed", date_ms=phone.now_ms(), message_type=5)
    phone.receive_sms(SENDER, "STOP")
    assert (
        f"Row: 0 _id=1, type=2, address={SENDER}, body=Your code is 4821, sub_id=1\n"
        f"Row: 1 _id=3, type=1, address={SENDER}, body=STOP, sub_id=1\n"
    ) == await shell(phone, adb_signer, INBOX)


@pytest.mark.parametrize(("android", "visible"), [(13, True), (14, False), (15, False)])
async def test_the_subscription_filter_applies_to_inbox_rows(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, visible: bool
) -> None:
    """From 14 an inbox row of a subscription the user does not have is hidden as a sent
    row is (ProviderUtil.getSelectionBySubIds, TelephonyProvider android-14.0.0_r1 and
    15.0.0_r1); 10 to 13 show it. Rows of both SIMs of a dual-SIM phone are shown."""
    phone = await phone_factory(android=android, sim_sub_ids=(1, 2))
    phone.receive_sms(SENDER, "on one")
    phone.receive_sms(SENDER, "on two", sub_id=2)
    phone.store.insert_incoming(SENDER, "old SIM", date_ms=phone.now_ms(), sub_id=7)
    printed = await shell(phone, adb_signer, INBOX)
    expected = (
        f"Row: 0 _id=1, type=1, address={SENDER}, body=on one, sub_id=1\n"
        f"Row: 1 _id=2, type=1, address={SENDER}, body=on two, sub_id=2\n"
    )
    if visible:
        expected += f"Row: 2 _id=3, type=1, address={SENDER}, body=old SIM, sub_id=7\n"
    assert expected == printed


async def test_inbox_uri_shows_the_received_row(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """``content://sms/inbox`` shows the row with the columns the app wrote (SmsProvider's
    inbox URI, TelephonyProvider android-10.0.0_r30 and 15.0.0_r1)."""
    phone.receive_sms(SENDER, "Reply, x=1\nRow: 9 fake")
    printed = await shell(
        phone,
        adb_signer,
        "content query --uri content://sms/inbox --projection _id:read:seen:creator",
    )
    assert f"Row: 0 _id=1, read=0, seen=0, creator={MESSAGING_PACKAGE}\n" == printed


# -- starebrain simulator receive-sms ---------------------------------------------------------

_LAUNCH = "from starebrain_actions.cli.main import main; main(prog_name='starebrain')"
_LISTENING = re.compile(r"^listening on 127\.0\.0\.1:(\d+) ")


async def _starebrain(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _LAUNCH,
        "simulator",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.slow
async def test_receive_sms_reaches_a_running_phone_and_is_read_over_adb(
    tmp_path: Path, authorized_keys_path: Path, adb_signer: PythonRSASigner
) -> None:
    """`starebrain simulator receive-sms` makes a phone running in another process write
    the inbox row (body with a newline kept), prints its _id, and the row is read back over
    the ADB wire; a SIM the phone lacks is refused (exit 1); the console file goes with the
    phone."""
    store = tmp_path / "phone.db"
    phone = await _starebrain(
        "--port", "0", "--store", str(store), "--authorized-keys", str(authorized_keys_path),
        "--android", "14",
    )  # fmt: skip
    assert phone.stdout is not None
    try:
        async with asyncio.timeout(20):
            match = _LISTENING.match((await phone.stdout.readline()).decode())
        assert match is not None
        injector = await _starebrain(
            "receive-sms", "--store", str(store), "2025550143", "STOP\nplease"
        )
        async with asyncio.timeout(20):
            out, err = await injector.communicate()
        assert (0, "received _id=1\n") == (injector.returncode, out.decode()), err.decode()
        refused = await _starebrain(
            "receive-sms", "--store", str(store), "--sub-id", "5", SENDER, "x"
        )
        async with asyncio.timeout(20):
            _, err = await refused.communicate()
        assert 1 == refused.returncode
        assert "none of the phone's SIMs" in err.decode()

        device = AdbDeviceTcpAsync("127.0.0.1", int(match.group(1)), default_transport_timeout_s=5)
        await device.connect(rsa_keys=[adb_signer], auth_timeout_s=5)
        try:
            printed = await device.shell(
                "content query --uri content://sms --projection _id:type:address:body:read"
            )
        finally:
            await device.close()
        assert "Row: 0 _id=1, type=1, address=2025550143, body=STOP\nplease, read=0\n" == printed
        phone.terminate()
        async with asyncio.timeout(20):
            await phone.communicate()
        assert not console_path(store).exists()
    finally:
        if phone.returncode is None:
            phone.kill()
            await phone.wait()


async def test_receive_sms_without_a_running_phone_says_so(tmp_path: Path) -> None:
    """No console file: a clear error naming the store, nothing written anywhere."""
    store = tmp_path / "none.db"
    with pytest.raises(ConsoleError, match="no simulated phone is running"):
        await send_to_running_phone(store, SENDER, "hi")
    assert not store.exists()
