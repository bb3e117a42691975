"""Every failure maps to the class that tells the ledger whether the command could have run."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from android_bridge import (
    CommandRejected,
    Device,
    DeviceUnreachable,
    KeyPermissionError,
    MessagingApp,
    NotSent,
    OutcomeUnknown,
    ProviderError,
    ReadFailed,
    SmsDispatcher,
    SmsReader,
    ensure_key,
)
from android_bridge._dispatcher import _AM_ERROR_LINE, shell_recipient
from tests.bridge.conftest import PhoneFactory

RECIPIENT = "+12025550143"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _connect(serial: str, key: Path, *, command_timeout_s: float = 2.0) -> Device:
    return await Device.connect(
        serial, key_path=key, connect_timeout_s=2, command_timeout_s=command_timeout_s
    )


async def test_closed_port_is_unreachable(bridge_key: Path) -> None:
    """Connection refused is DeviceUnreachable, a NotSent."""
    with pytest.raises(DeviceUnreachable) as caught:
        await _connect(f"127.0.0.1:{_closed_port()}", bridge_key)
    assert isinstance(caught.value.__cause__, OSError)


async def test_unknown_key_is_refused(make_phone: PhoneFactory, tmp_path: Path) -> None:
    """A phone that does not know our key refuses us: DeviceUnreachable."""
    phone = await make_phone()
    stranger = ensure_key(tmp_path / "stranger" / "adbkey")
    with pytest.raises(DeviceUnreachable):
        await _connect(phone.serial, stranger)


async def test_loose_key_is_refused_before_connecting(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A world-readable key is refused with KeyPermissionError; nothing is sent."""
    phone = await make_phone()
    bridge_key.chmod(0o644)
    with pytest.raises(KeyPermissionError):
        await _connect(phone.serial, bridge_key)
    assert [] == phone.commands_run


async def test_hang_on_send_is_outcome_unknown(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """A send whose reply never comes is OutcomeUnknown, not a failure."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key, command_timeout_s=0.5)
    async with device:
        phone.inject_fault("hang")
        with pytest.raises(OutcomeUnknown):
            await SmsDispatcher(device).send(RECIPIENT, "hi")


async def test_hang_on_read_is_outcome_unknown(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """A read that never answers raises (and so proves nothing): the page that timed out is
    read again smaller, and the phone that hangs on that too (here already on the identity
    check of the reconnection) fails the read."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key, command_timeout_s=0.5)
    async with device:
        phone.inject_fault("hang", 10)
        with pytest.raises((OutcomeUnknown, DeviceUnreachable)):
            await SmsReader(device).read_since(0)


async def test_a_page_that_times_out_is_read_again_smaller(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A page whose round trip times out once is read again from the same anchor in a
    smaller page (a read has no side effect), and the read is whole."""
    phone = await make_phone()
    anchor = phone.store.insert_incoming("+12025550100", "anchor", date_ms=1_000)
    for index in range(3):
        phone.store.insert_outgoing(RECIPIENT, f"out {index}", date_ms=2_000, message_type=2)
    device = await _connect(phone.serial, bridge_key, command_timeout_s=0.5)
    async with device:
        phone.inject_fault("hang")
        read = await SmsReader(device, page_size=400).read_since(anchor)
    assert (["out 0", "out 1", "out 2"], True) == ([row.body for row in read.rows], read.complete)
    # the page's integer query asks for its anchor and 400 rows, then for it and 100
    queries = [c for c in phone.commands_run if "content query" in c]
    assert [True, True] == ["LIMIT 401'" in queries[0], "LIMIT 101'" in queries[1]]
    assert 2 == len(queries)


async def test_drop_after_send_is_unknown_and_row_is_found(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """The connection dropping after the send is OutcomeUnknown; a later read finds the SMS."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key)
    async with device:
        watermark = device.known_max_id
        phone.inject_fault("drop-after-send")
        with pytest.raises(OutcomeUnknown):
            await SmsDispatcher(device).send(RECIPIENT, "dropped after")
        await phone.wait_idle()
        read = await SmsReader(device).read_since(watermark)
    assert ["dropped after"] == [row.body for row in read.rows]
    assert 2 == device.connections


async def test_a_script_killed_before_its_keys_is_unknown_and_absence_is_provable(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """adbd restarting before the keys (init kills the script: a dropped connection alone no
    longer stops it) still looks unknown; a complete read then shows nothing."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key)
    async with device:
        dispatcher = SmsDispatcher(device)
        first = await dispatcher.send(RECIPIENT, "anchor")
        await phone.wait_idle()
        anchor_read = await SmsReader(device).read_since(first.watermark_id)
        anchor = anchor_read.max_seen_id
        phone.drop_after_command("am", adbd_restarts=True)
        with pytest.raises(OutcomeUnknown):
            await dispatcher.send(RECIPIENT, "never")
    async with await _connect(phone.serial, bridge_key) as device:
        read = await SmsReader(device).read_since(anchor)
    assert (True, ()) == (read.complete, read.rows)


async def test_reboot_is_unknown_and_reads_prove_nothing_until_the_phone_is_back(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A reboot during the send is OutcomeUnknown. After it, adb tcpip is off (connection
    refused: adbd daemon/main.cpp, service.adb.tcp.port is not persistent) and, once it is
    back on, the SMS database is locked until the first unlock (ProviderUtil
    .getCredentialEncryptedContext): both are read failures, never an empty answer."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key)
    async with device:
        phone.inject_fault("reboot")
        with pytest.raises(OutcomeUnknown):
            await SmsDispatcher(device).send(RECIPIENT, "during reboot")
        with pytest.raises(DeviceUnreachable):
            await SmsReader(device).read_since(0)
        await phone.enable_tcpip()
        with pytest.raises(ReadFailed):
            await SmsReader(device).read_since(0)
        phone.unlock_user()
        read = await SmsReader(device).read_since(0)
    assert 1 == phone.reboots
    assert "during reboot" in [row.body for row in read.rows]


async def test_provider_error_on_read_is_provider_error(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A provider failure during a read raises ProviderError, never an empty result."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key)
    async with device:
        await SmsDispatcher(device).send(RECIPIENT, "x")
        phone.inject_fault("provider-error")
        with pytest.raises(ProviderError):
            await SmsReader(device).read_since(0)


async def test_provider_error_on_watermark_leaves_it_unproven(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """If the watermark query fails the send still reports, but marks the watermark unproven."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key)
    async with device:
        phone.inject_fault("provider-error")
        evidence = await SmsDispatcher(device).send(RECIPIENT, "x")
    assert False is evidence.watermark_proven


async def test_device_gone_between_calls_is_unreachable(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """When the phone is gone before the command is written, the send is NotSent."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key)
    async with device:
        await phone.stop()
        with pytest.raises(DeviceUnreachable):
            await SmsDispatcher(device).send(RECIPIENT, "x")
    assert 0 == sum("sms_body" in command for command in phone.commands_run)


async def test_am_error_with_exit_zero_is_rejected(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """``Error: Activity not started`` (exit 0 up to Android 14, ActivityManagerShellCommand
    android-14.0.0_r1) for a role holder with no SENDTO activity is CommandRejected, and
    nothing is sent."""
    phone = await make_phone(android=14)
    phone.system_state.sms_role_holder = "org.example.none"
    device = await _connect(phone.serial, bridge_key)
    async with device:
        dispatcher = SmsDispatcher(device, app=MessagingApp(package="org.example.none"))
        with pytest.raises(CommandRejected, match="Activity not started"):
            await dispatcher.send(RECIPIENT, "x")
        read = await SmsReader(device).read_since(0)
    assert () == read.rows


@pytest.mark.parametrize("recipient", ["abc", "+1555;reboot", "12#", "", "5550100?body=x"])
def test_bad_recipient_is_rejected(recipient: str) -> None:
    """Recipients that are not numbers never reach the shell."""
    with pytest.raises(CommandRejected):
        shell_recipient(recipient)


def test_rejections_are_not_sent() -> None:
    """CommandRejected is a NotSent: safe to mark FAILED."""
    assert issubclass(CommandRejected, NotSent)


async def test_oversized_command_is_not_sent(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """A body too large for one ADB packet is refused before anything is written."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key)
    async with device:
        with pytest.raises(NotSent):
            await SmsDispatcher(device).send(RECIPIENT, "x" * 2_000_000)
    assert 0 == sum("sms_body" in command for command in phone.commands_run)


async def test_hang_after_send_is_unknown_and_row_is_found(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A reply that never comes after a real send is OutcomeUnknown; the SMS is found later."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key, command_timeout_s=0.5)
    async with device:
        phone.inject_fault("hang-after-send")
        with pytest.raises(OutcomeUnknown):
            await SmsDispatcher(device).send(RECIPIENT, "sent, then silence")
        await phone.wait_idle()
        read = await SmsReader(device).read_since(0)
    assert ["sent, then silence"] == [row.body for row in read.rows]


@pytest.mark.parametrize("body", ["", "   ", "\n\t"])
async def test_blank_body_is_rejected(sim_device: Device, body: str) -> None:
    """A blank body, which a messaging app would not send, is refused before the shell."""
    before = sim_device.round_trips
    with pytest.raises(CommandRejected):
        await SmsDispatcher(sim_device).send(RECIPIENT, body)
    assert before == sim_device.round_trips


async def test_device_reconnects_after_phone_restart(
    make_phone: PhoneFactory, bridge_key: Path, tmp_path: Path
) -> None:
    """After the phone restarts on the same port, the next call reconnects by itself."""
    phone = await make_phone(store_path=tmp_path / "restart.db")
    port = phone.port
    device = await _connect(phone.serial, bridge_key)
    async with device:
        await phone.stop()
        await make_phone(store_path=tmp_path / "restart.db", port=port)
        await SmsDispatcher(device).send(RECIPIENT, "after restart")
        read = await SmsReader(device).read_since(0)
    expected = (2, ["after restart"])
    assert expected == (device.connections, [row.body for row in read.rows])


@pytest.mark.parametrize(
    ("am_output", "rejected"),
    [
        ("Error: Activity not started, unable to resolve Intent { act=x }\n", True),
        ("Warning: Activity not started, its current task has been brought to the front\n", True),
        (
            "Warning: Activity not started, intent has been delivered to currently running "
            "top-most instance.\n",
            True,
        ),
        (
            "Starting: Intent { act=android.intent.action.SENDTO dat=smsto:xxx (has extras) }\n",
            False,
        ),
    ],
)
def test_am_output_is_judged(am_output: str, rejected: bool) -> None:
    """am lines saying the intent reached no activity, or was not delivered as a new launch,
    are named as the rejection's cause; a clean start line is not."""
    assert rejected == bool(_AM_ERROR_LINE.search(am_output))


async def test_cancelled_command_drops_the_link(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """A caller that cancels mid-command leaves no half-used link: the next call reconnects."""
    phone = await make_phone()
    device = await _connect(phone.serial, bridge_key, command_timeout_s=5)
    async with device:
        phone.inject_fault("hang")
        task = asyncio.create_task(SmsReader(device).read_since(0))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        read = await SmsReader(device).read_since(0)
    expected = (2, False)
    assert expected == (device.connections, read.complete)
