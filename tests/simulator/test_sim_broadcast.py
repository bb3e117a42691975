"""A text to several recipients sent as SMS (group MMS off): the app's summary row."""

from __future__ import annotations

from pathlib import Path

import attrs
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge import Device, SmsReader, ensure_key, message_matches_intent
from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._apps import AOSP_MESSAGING
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect, send_command

A, B = "+12025550100", "+12025550101"
TEXT = "Meeting moved to 3pm"


async def _broadcast(phone: SimulatedPhone, signer: PythonRSASigner) -> None:
    device = await connect(phone, signer)
    await device.shell(send_command(f"{A};{B}", TEXT))
    await device.close()
    await phone.radio_idle()


async def test_a_broadcast_writes_a_summary_row_before_each_recipients_own(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """AOSP Messaging with group MMS off (``InsertNewMessageAction``): a SENT row addressed
    to every recipient joined by a space, status COMPLETE, in the group's conversation and
    dated 1 ms later, then one row per recipient in its own conversation; only those two
    leave the phone."""
    phone = await phone_factory(app=attrs.evolve(AOSP_MESSAGING, group_mms=False))
    await _broadcast(phone, adb_signer)
    summary, to_a, to_b = phone.store.rows()
    assert (f"{A} {B}", TEXT, 2, 0) == (summary.address, summary.body, summary.type, summary.status)
    assert [A, B] == [to_a.address, to_b.address]
    assert summary._id < to_a._id < to_b._id
    assert summary.date == to_a.date + 1 == to_b.date + 1
    assert phone.store.thread_id_for([A, B]) == summary.thread_id
    assert [phone.store.thread_id_for(A), phone.store.thread_id_for(B)] == [
        to_a.thread_id,
        to_b.thread_id,
    ]
    assert [(A,), (B,)] == [t.addresses for t in phone.transmissions]


async def test_the_summary_row_says_sent_when_every_real_send_failed(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """The radio fails both messages: their rows end FAILED (hidden from the shell's
    restricted view), the summary row stays SENT, and nothing left the phone."""
    phone = await phone_factory(app=attrs.evolve(AOSP_MESSAGING, group_mms=False))
    phone.inject_fault("send-fails")
    await _broadcast(phone, adb_signer)
    assert [2, 5, 5] == [row.type for row in phone.store.rows()]
    assert [] == phone.transmissions
    device = await connect(phone, adb_signer)
    shown = await device.shell("content query --uri content://sms --projection address:type")
    await device.close()
    assert f"Row: 0 address={A} {B}, type=2\n" == shown


async def test_the_product_never_takes_a_summary_row_for_a_message_to_one_recipient(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, tmp_path: Path
) -> None:
    """The bridge reads the summary row as one more SENT row (the shell's view shows it,
    alone, when the real sends failed), but its address is no phone number: it never
    matches an intent to any one recipient, so no attempt is confirmed by it."""
    phone = await phone_factory(
        app=attrs.evolve(AOSP_MESSAGING, group_mms=False), allow_new_keys=True
    )
    phone.inject_fault("send-fails")
    await _broadcast(phone, adb_signer)
    key = ensure_key(tmp_path / "bridge" / "adbkey")
    async with await Device.connect(phone.serial, key_path=key) as device:
        read = await SmsReader(device).read_since(0)
    (summary,) = read.rows
    assert f"{A} {B}" == summary.address
    for recipient in (A, B, f"{A} {B}", f"{A};{B}"):
        verdict = message_matches_intent(summary, recipient, TEXT, region="US")
        assert (False, "recipient_invalid") == (verdict.matched, verdict.reason)
