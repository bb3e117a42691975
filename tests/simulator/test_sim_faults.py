"""The send pipeline and every injectable fault, observed through adb-shell and the store file."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
from pathlib import Path

import attrs
import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner
from adb_shell.exceptions import TcpTimeoutException

from android_bridge.simulator import Fault, SimulatedPhone, _wire
from android_bridge.simulator._apps import AOSP_MESSAGING
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect, send_command, without_wait_lines

BODY = "Your code is 4821"
SENT_OUTPUT = (
    "Starting: Intent { act=android.intent.action.SENDTO dat=smsto:xxxxxxxxx flg=0x8000"
    " (has extras) }\n"
    "Status: ok\n"
    "LaunchState: COLD\n"
    "Activity: com.google.android.apps.messaging/.ui.conversation.ConversationActivity\n"
    "Complete\n"
    "__SB_EXIT:0\n"
)


def stored(path: Path) -> list[tuple[str, str, int]]:
    """(address, body, type) of every row, read straight from the SQLite file."""
    with sqlite3.connect(path) as db:
        return db.execute("SELECT address, body, type FROM sms ORDER BY _id").fetchall()


async def test_normal_send_writes_one_sent_row(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """Without faults one SENT row appears with the columns the app writes before sending
    (``InsertNewMessageAction.insertSendingSmsMessage``, ``MmsUtils.addMessageToUri``:
    type 2, ``STATUS_NONE`` not written, no ``date_sent`` nor ``error_code``;
    packages/apps/Messaging android-10.0.0_r30 and android-15.0.0_r1) and the provider's
    defaults for the rest (``MmsSmsDatabaseHelper``, TelephonyProvider android-11.0.0_r1
    on: ``error_code`` -1)."""
    device = await connect(phone, adb_signer)
    assert SENT_OUTPUT == without_wait_lines(await device.shell(send_command("+15550100", BODY)))
    await device.close()
    [row] = phone.store.rows()
    assert ("+15550100", BODY, 2) == (row.address, row.body, row.type)
    assert "com.google.android.apps.messaging" == row.creator
    assert row.thread_id is not None and row.thread_id > 0
    # written as the app writes it before sending (InsertNewMessageAction): date_sent 0,
    # status -1, error_code the provider's default, never changed by a successful send
    assert row.date is not None and 0 == row.date_sent
    assert (1, 1, -1, -1, 1) == (row.read, row.seen, row.status, row.error_code, row.sub_id)


@pytest.mark.parametrize("app", ["aosp", "google", "samsung"])
async def test_the_app_writes_its_row_sent_before_the_radio_answers(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, app: str
) -> None:
    """Every app writes its row SENT (type 2) before anything is sent and keeps it so while
    it sends (AOSP Messaging's optimistic write, InsertNewMessageAction and
    SendMessageAction, packages/apps/Messaging android-10.0.0_r30 to android-15.0.0_r1;
    assumed of the closed apps): nothing has left the phone yet, and the row, already SENT,
    is no different afterwards."""
    phone = await phone_factory(app=app, send_delay_ms=150)
    device = await connect(phone, adb_signer)
    await device.shell(send_command("+15550100", BODY))
    await device.close()
    assert [("+15550100", BODY, 2)] == stored(phone.store_path)
    before = phone.store.rows()
    await phone.wait_idle()
    (sent,) = phone.transmissions
    (row,) = [row for row in before if row.body == BODY]
    # the row was written SENT the radio's delay before anything left the phone (told by
    # the phone's own clock, not by when this test happened to look)
    assert (BODY, True) == (sent.body, sent.time_ms - row.date >= 150)
    assert before == phone.store.rows()


async def test_an_app_that_writes_the_outbox_first_moves_its_row_to_sent(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A profile with ``optimistic_sent=False`` (no app known to do so; for tests): OUTBOX
    (type 4) at first, SENT after the radio's answer."""
    app = attrs.evolve(AOSP_MESSAGING, optimistic_sent=False)
    phone = await phone_factory(app=app, send_delay_ms=150)
    device = await connect(phone, adb_signer)
    await device.shell(send_command("+15550100", BODY))
    await device.close()
    assert [("+15550100", BODY, 4)] == stored(phone.store_path)
    await phone.wait_idle()
    assert [("+15550100", BODY, 2)] == stored(phone.store_path)


async def test_enter_in_text_field_types_a_newline_instead_of_sending(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Pressing 66 without moving focus to send (22) types a newline, sent as typed by AOSP
    Messaging."""
    phone = await phone_factory(app="aosp", focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(
        "am start -W -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body hi;"
        " input keyevent 66"
    )
    assert [] == stored(phone.store_path)
    await device.shell("input keyevent 22; input keyevent 66")
    await device.close()
    assert [("+15550100", "hi\n", 2)] == stored(phone.store_path)


async def test_drop_after_send_sends_then_resets_the_connection(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """drop-after-send: the store has the SENT row while the client sees a connection error."""
    device = await connect(phone, adb_signer)
    phone.inject_fault("drop-after-send")
    with pytest.raises(ConnectionResetError):
        await device.shell(send_command("+15550100", BODY))
    assert [("+15550100", BODY, 2)] == stored(phone.store_path)
    await device.close()


async def test_drop_before_send_resets_and_sends_nothing(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """drop-before-send: the connection drops and no row is ever written."""
    device = await connect(phone, adb_signer)
    phone.inject_fault(Fault.DROP_BEFORE_SEND)
    with pytest.raises(ConnectionResetError):
        await device.shell(send_command("+15550100", BODY))
    await device.close()
    await phone.wait_idle()
    assert [] == stored(phone.store_path)


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("send-fails", [("+15550100", BODY, 5)]),
        # the radio never sends it: the app's row stays SENT (it gives up in its own
        # database only: ProcessPendingMessagesAction, FixupMessageStatusOnStartupAction)
        ("stuck-outbox", [("+15550100", BODY, 2)]),
        ("duplicate-send", [("+15550100", BODY, 2), ("+15550100", BODY, 2)]),
        ("mangle-body", [("+15550100", "your code is 4821", 2)]),
        ("wrong-recipient", [("+15550101", BODY, 2)]),
    ],
)
async def test_send_faults_change_what_lands_in_the_store(
    phone_factory: PhoneFactory,
    adb_signer: PythonRSASigner,
    fault: str,
    expected: list[tuple[str, str, int]],
) -> None:
    """Each send fault leaves its mark on the rows while the command itself looks successful.
    ``send-fails``: the app rewrites its row FAILED (``ProcessSentMessageAction.processResult``,
    ``SendMessageAction.updateMessageAndStatus``); ``stuck-outbox``: the row it wrote SENT
    before sending stays SENT (``ProcessPendingMessagesAction``,
    ``FixupMessageStatusOnStartupAction`` mark it failed in the app's own database only);
    packages/apps/Messaging android-10.0.0_r30 and android-15.0.0_r1."""
    phone = await phone_factory(send_delay_ms=20, faults=[fault])
    device = await connect(phone, adb_signer)
    assert SENT_OUTPUT == without_wait_lines(await device.shell(send_command("+15550100", BODY)))
    await device.close()
    await phone.wait_idle()
    assert expected == stored(phone.store_path)


async def test_send_fails_records_a_radio_error(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """A failed send is type 5 (the app rewrites only the type and date: MmsUtils
    .updateSmsMessageSendingStatus, packages/apps/Messaging android-10.0.0_r30 and
    android-15.0.0_r1; error_code keeps the provider's default), invisible to the shell user
    (``ProviderUtil.isAccessRestricted``, TelephonyProvider android-10.0.0_r30 to 15.0.0_r1)."""
    phone.inject_fault("send-fails")
    device = await connect(phone, adb_signer)
    await device.shell(send_command("+15550100", BODY))
    assert "No result found.\n" == await device.shell("content query --uri content://sms")
    await device.close()
    [row] = phone.store.rows()
    assert (5, -1) == (row.type, row.error_code)


async def test_fault_count_applies_to_that_many_sends(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """send-fails:2 fails two sends and leaves the third alone."""
    phone.inject_fault("send-fails", count=2)
    device = await connect(phone, adb_signer)
    for index in range(3):
        await device.shell(send_command("+15550100", f"m{index}"))
    await device.close()
    assert [5, 5, 2] == [row[2] for row in stored(phone.store_path)]
    assert {} == phone.faults.remaining()


async def test_provider_error_fails_the_next_query_only(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """provider-error: the next content query prints a permission error, the one after works."""
    phone.store.insert_incoming("+15550100", "hi", date_ms=1)
    phone.inject_fault("provider-error")
    device = await connect(phone, adb_signer)
    query = "content query --uri content://sms --projection body"
    failed = await device.shell(query)
    assert failed.startswith(
        "Error while accessing provider:sms\n"
        "java.lang.SecurityException: Permission Denial: reading"
        " com.android.providers.telephony.SmsProvider uri content://sms from pid="
    )
    assert "Row: 0 body=hi\n" == await device.shell(query)
    await device.close()


async def test_hang_never_answers_until_the_client_times_out(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """hang: the command gets no reply at all; the client's own timeout is what ends it."""
    phone.inject_fault("hang")
    device = await connect(phone, adb_signer)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TcpTimeoutException):
        await device.shell(send_command("+15550100", BODY), transport_timeout_s=0.5)
    assert 0.5 <= loop.time() - started < 3
    assert [] == stored(phone.store_path)
    # the link stalled: this connection carries nothing more, a new one is served
    with pytest.raises(TcpTimeoutException):
        await device.shell("echo fine", transport_timeout_s=0.5)
    await device.close()
    fresh = await connect(phone, adb_signer)
    assert "fine\n" == await fresh.shell("echo fine")
    await fresh.close()


async def test_hang_after_send_sends_but_never_answers(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """hang-after-send: the client times out although the message really went out."""
    phone.inject_fault("hang-after-send")
    device = await connect(phone, adb_signer)
    with pytest.raises(TcpTimeoutException):
        await device.shell(send_command("+15550100", BODY), transport_timeout_s=0.5)
    assert [("+15550100", BODY, 2)] == stored(phone.store_path)
    with pytest.raises(TcpTimeoutException):
        await device.shell("echo fine", transport_timeout_s=0.5)
    await device.close()
    fresh = await connect(phone, adb_signer)
    assert "fine\n" == await fresh.shell("echo fine")
    await fresh.close()


async def test_hang_after_send_runs_the_rest_of_the_script(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """hang-after-send stalls the link, not the script: adbd's shell service runs the command
    on its own (system/core adb/daemon/shell_service.cpp android-10.0.0_r1, packages/modules/adb
    daemon/shell_service.cpp android-11 to 15, ``Subprocess``; the client not reading its
    output does not stop it until that output fills the PTY and socket buffers, kilobytes,
    far more than a send script prints), so what follows the send on the same command line
    still runs on the phone, while the client never gets an answer."""
    phone.inject_fault("hang-after-send")
    device = await connect(phone, adb_signer)
    after = "ln -s 42/. /data/local/tmp/after-the-send"
    with pytest.raises(TcpTimeoutException):
        await device.shell(
            send_command("+15550100", BODY) + f" && {after}", transport_timeout_s=0.5
        )
    assert "42/." == phone.files.readlink("/data/local/tmp/after-the-send")
    await device.close()


@pytest.mark.parametrize(("completes", "final_type"), [(True, 2), (False, 5)])
async def test_reboot_resets_every_connection(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, completes: bool, final_type: int
) -> None:
    """reboot: all connections are reset; the in-flight send finishes or fails as configured."""
    phone = await phone_factory(
        send_delay_ms=100, reboot_completes_sends=completes, faults=[Fault.REBOOT]
    )
    bystander = await connect(phone, adb_signer)
    sender = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await sender.shell(send_command("+15550100", BODY))
    with pytest.raises(ConnectionResetError):
        await bystander.shell("echo still there?")
    await phone.wait_idle()
    assert [("+15550100", BODY, final_type)] == stored(phone.store_path)
    assert 1 == phone.reboots
    with pytest.raises(ConnectionRefusedError):
        await connect(phone, adb_signer)
    await phone.enable_tcpip()
    again = await connect(phone, adb_signer)
    assert "back\n" == await again.shell("echo back")
    for device in (bystander, sender, again):
        await device.close()


async def test_background_sends_add_noise(phone_factory: PhoneFactory) -> None:
    """A simulated human writes rows of their own at the configured rate."""
    phone = await phone_factory(background_sends=200.0, seed=7)
    await asyncio.sleep(0.2)
    await phone.wait_idle()
    rows = phone.store.rows()
    assert len(rows) >= 5
    assert {1, 2} >= {row.type for row in rows}


async def test_clock_skew_shifts_the_device_clock(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """date +%s%3N and row dates follow the skewed device clock."""
    phone = await phone_factory(clock_skew_ms=-3_600_000)
    device = await connect(phone, adb_signer)
    host_ms = time.time_ns() // 1_000_000
    device_ms = int(await device.shell("date +%s%3N"))
    await device.shell(send_command("+15550100", BODY))
    await device.close()
    assert abs(device_ms - (host_ms - 3_600_000)) < 2000
    [row] = phone.store.rows()
    assert row.date is not None
    assert abs(row.date - (host_ms - 3_600_000)) < 2000


def test_unknown_fault_name_lists_valid_ones(tmp_path: Path) -> None:
    """An unknown fault is refused with the list of valid names."""
    with pytest.raises(ValueError, match="valid faults: drop-after-send, drop-before-send"):
        SimulatedPhone(
            store_path=tmp_path / "s.db", authorized_keys_path=tmp_path / "k", faults=["nope"]
        )


async def test_latency_delays_every_command(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """latency_ms holds each shell command back by at least that long."""
    phone = await phone_factory(latency_ms=200)
    device = await connect(phone, adb_signer)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert "late\n" == await device.shell("echo late")
    assert 0.2 <= loop.time() - started
    await device.close()


def _client_writer(device: object) -> asyncio.StreamWriter:
    """The adb-shell connection's socket writer (test instrumentation)."""
    writer: asyncio.StreamWriter = device._io_manager._transport._writer  # type: ignore[attr-defined]
    return writer


async def test_a_stalled_link_reads_nothing_so_the_clients_writes_block(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """hang stalls the link: the phone stops reading the socket, so once the client's own
    send buffer (a real path's: a few KiB here) is full its writes block, as a TCP sender's
    do when nothing is acknowledged; when the link comes back they go through."""
    phone.inject_fault("hang")
    device = await connect(phone, adb_signer)
    with pytest.raises(TcpTimeoutException):
        await device.shell("echo never", transport_timeout_s=0.5)
    writer = _client_writer(device)
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    # valid packets the phone ignores (a WRTE to no stream), 1 MiB in all
    packet = _wire.encode_packet(_wire.A_WRTE, 77, 99_999, b"z" * 4096, with_checksum=True)
    for _ in range(256):
        writer.write(packet)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(writer.drain(), 2)
    assert writer.transport.get_write_buffer_size() > 512 * 1024
    phone.resume_links()
    await asyncio.wait_for(writer.drain(), 10)
    assert writer.transport.get_write_buffer_size() < 64 * 1024
    writer.transport.abort()


async def test_an_outage_stalls_open_connections_and_a_new_one_is_served(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """stall_links: an open connection answers nothing (not even a command it could run at
    once); a connection made afterwards is served."""
    device = await connect(phone, adb_signer)
    phone.stall_links()
    with pytest.raises(TcpTimeoutException):
        await device.shell("echo stalled", transport_timeout_s=0.5)
    assert "echo stalled" not in phone.commands_run
    await device.close()
    fresh = await connect(phone, adb_signer)
    assert "served\n" == await fresh.shell("echo served")
    await fresh.close()


async def test_the_phone_answers_without_waiting_for_a_delayed_ack(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """The phone's accepted connections are TCP with ``TCP_NODELAY`` (asyncio sets it only
    when the listening socket names its protocol): without it every small reply waited on the
    client's delayed ACK, 44 ms a round trip, and the whole suite slowed (found when a
    listening socket made with ``socket.create_server`` left the protocol 0)."""
    device = await connect(phone, adb_signer)
    assert "hi" in await device.shell("echo hi")
    sockets = [c._writer.get_extra_info("socket") for c in phone._connections]
    assert sockets
    assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets)


async def test_wait_idle_is_bounded_and_says_what_is_busy(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A send the app's timeout holds for a minute (``app-timeout``): ``wait_idle`` gives up
    at its bound and names the delayed send, rather than holding the test run; the row is
    still SENT and nothing went out. Unbounded it is still there."""
    phone = await phone_factory(app="aosp", app_send_timeout_ms=60_000)
    phone.inject_fault("app-timeout")
    device = await connect(phone, adb_signer)
    await device.shell(send_command("+15550100", BODY))
    await device.close()
    with pytest.raises(AssertionError, match=r"still busy after 0\.3 s: delayed sends"):
        await phone.wait_idle(within_s=0.3)
    assert ([2], []) == ([row.type for row in phone.store.rows()], phone.transmissions)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(phone.wait_idle(within_s=None), 0.3)


#: 209 GSM-7 septets: two SMS (153 + 56).
LONG = ("Your appointment is confirmed. " * 7).strip()


async def _send_once(phone: SimulatedPhone, signer: PythonRSASigner, body: str) -> None:
    device = await connect(phone, signer)
    await device.shell(send_command("+15550100", body))
    await device.close()
    await phone.wait_idle()


@pytest.mark.parametrize("fault", ["send-fails", "part-fails"])
async def test_a_long_text_failed_by_the_radio_has_its_first_parts_delivered(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, fault: str
) -> None:
    """AOSP Messaging keeps the worst result across a long text's parts
    (``SmsSender.SendResult.setPartResult``, packages/apps/Messaging android-10.0.0_r30 to
    android-15.0.0_r1, read as LineageOS 17.1 and 22.0 mirror it): one failed part makes the
    row FAILED although the parts before it went out. The phone fails the last part, the
    unkindest case: the first is delivered, the row says FAILED."""
    phone = await phone_factory(app="aosp", send_delay_ms=20)
    phone.inject_fault(fault)
    await _send_once(phone, adb_signer, LONG)
    assert [("+15550100", LONG, 5)] == stored(phone.store_path)
    assert [(LONG, 1)] == [(t.body, t.parts_out) for t in phone.transmissions]


async def test_part_fails_waits_for_a_long_text(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """``part-fails`` is used up by a text of several SMS only: a short one goes out whole."""
    phone = await phone_factory(app="aosp", send_delay_ms=20)
    phone.inject_fault("part-fails")
    await _send_once(phone, adb_signer, BODY)
    assert ({Fault.PART_FAILS: 1}, [(BODY, None)]) == (
        phone.faults.remaining(),
        [(t.body, t.parts_out) for t in phone.transmissions],
    )


async def test_the_app_s_own_timeout_fails_its_row_and_the_sms_still_goes_out(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """AOSP Messaging gives a send try ``SMS_SEND_TIMEOUT_IN_MILLIS_DEFAULT`` (5 minutes,
    ``BugleGservicesKeys``) and then rewrites its row FAILED; the radio's success that comes
    after is ignored (``SmsSender.setResult``: "ignoring sent result"; packages/apps/Messaging
    android-10.0.0_r30 to android-15.0.0_r1). The row stays SENT for the timeout (told by the
    phone's own clock), then FAILED, and the SMS left the phone."""
    phone = await phone_factory(app="aosp", app_send_timeout_ms=400)
    phone.inject_fault("app-timeout")
    await _send_once(phone, adb_signer, BODY)
    (row,) = phone.store.rows()
    (sent,) = phone.transmissions
    assert (5, BODY, True) == (row.type, sent.body, sent.time_ms - row.date >= 400)


async def test_an_mms_that_never_gets_its_network_fails_late_and_sends_nothing(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """The text goes as MMS; its sent-box row (Messaging writes it before sending) turns
    FAILED once MmsService gives up waiting for the MMS network
    (``MmsNetworkManager.DEFAULT_MMS_SERVICE_NETWORK_REQUEST_TIMEOUT_MILLIS``, 30 minutes,
    after Messaging's 20-minute resend window; packages/services/Mms as LineageOS 17.1 to 21.0
    mirror it), and nothing left the phone."""
    phone = await phone_factory(app="google", mms_fail_after_ms=300)
    phone.inject_fault("mms-network-timeout")
    await _send_once(phone, adb_signer, BODY)
    assert ([5], [], []) == (
        [mms.msg_box for mms in phone.store.mms_messages()],
        stored(phone.store_path),
        phone.transmissions,
    )


async def test_the_owner_s_manual_resend_rewrites_the_same_row_with_a_new_date(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Tapping a failed message: ``MessageData.markMessageManualResend`` sets its timestamp
    to now and ``SendMessageAction.updateMessageAndStatus`` writes the same telephony row
    back to type 2 with that date (packages/apps/Messaging android-10.0.0_r30 to
    android-15.0.0_r1, as LineageOS 17.1 and 22.0 mirror it); the radio sends it again. A
    row that is not a failed one of the app is refused."""
    phone = await phone_factory(app="aosp", send_delay_ms=20)
    phone.inject_fault("send-fails")
    await _send_once(phone, adb_signer, BODY)
    (failed,) = phone.store.rows()
    await phone.resend_failed(failed._id)
    await phone.wait_idle()
    (row,) = phone.store.rows()
    (sent,) = phone.transmissions
    assert (failed._id, 2, BODY) == (row._id, row.type, sent.body)
    assert row.date > failed.date
    with pytest.raises(ValueError, match="no failed message of the app"):
        await phone.resend_failed(row._id)
