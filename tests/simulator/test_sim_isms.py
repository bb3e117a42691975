"""``service call isms`` on the simulated phone, through the real ADB protocol: the framework's
send path without UI, per Android release (frameworks/base ``ISms.aidl``, ``cmds/service``)."""

from __future__ import annotations

import random
import shlex

import pytest
from adb_shell.adb_device_async import AdbDeviceTcpAsync
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._isms import format_parcel
from starebrain_actions.core.segments import count_segments
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

RELEASES = [10, 11, 12, 13, 14, 15]
OK = "Result: Parcel(00000000    '....')\n"
TO = "+12025550143"


def call(version: int, body: str, *, code: int | None = None, package: str = "") -> str:
    """``service call isms`` of ``sendTextForSubscriber`` laid out for Android ``version``."""
    layout_code = 6 if version == 10 else 5
    args = ["i32 1", f"s16 {package or 'com.android.shell'}"]
    if version >= 11:
        args.append("i32 -1")
    args += [f"s16 {shlex.quote(TO)}", "i32 -1", f"s16 {shlex.quote(body)}"]
    args += ["i32 0", "i32 0", "i32 1"] + (["i64 0"] if version >= 11 else [])
    return f"service call isms {layout_code if code is None else code} " + " ".join(args)


async def shell(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    """Run ``command`` through adb-shell and return what it printed."""
    device: AdbDeviceTcpAsync = await connect(phone, signer)
    try:
        output = await device.shell(command)
    finally:
        await device.close()
    assert isinstance(output, str)
    return output


@pytest.mark.parametrize("version", RELEASES)
async def test_right_code_sends_one_sms_as_shell(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, version: int
) -> None:
    """The release's sendTextForSubscriber code (6 on 10, 5 on 11-15) sends one SMS and the
    framework writes a SENT row with creator com.android.shell (ISms.aidl android-10.0.0_r1 /
    android-11..15; SMSDispatcher.persistSentMessageIfRequired)."""
    phone = await phone_factory(android=version)
    output = await shell(phone, adb_signer, call(version, "hello"))
    assert OK == output
    rows = phone.store.rows()
    assert [(2, "com.android.shell", TO, "hello")] == [
        (row.type, row.creator, row.address, row.body) for row in rows
    ]
    sent = await phone.wait_transmissions(then_idle=True)
    assert [("sms", "com.android.shell")] == [(t.channel, t.app) for t in sent]


@pytest.mark.parametrize("version", RELEASES)
async def test_other_release_code_sends_nothing_and_looks_like_success(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, version: int
) -> None:
    """The other release's code reaches another ISms method: with this layout it sends nothing,
    yet the shell sees the same void reply (ISms.aidl android-10.0.0_r1 vs android-11+)."""
    phone = await phone_factory(android=version)
    wrong = 5 if version == 10 else 7
    output = await shell(phone, adb_signer, call(version, "hello", code=wrong))
    assert OK == output
    await phone.radio_idle()
    assert [] == phone.store.rows()
    assert [] == phone.transmissions


async def test_unknown_code_says_so(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A code outside ISms fails with UNKNOWN_TRANSACTION, printed by Parcel::print, and
    service still exits 0 (frameworks/native cmds/service/service.cpp)."""
    phone = await phone_factory()
    output = await shell(phone, adb_signer, 'service call isms 999 i32 1; echo "x:$?"')
    assert 'Result: Parcel(Error: 0xffffffffffffffb6 "Not a data message")\nx:0\n' == output
    await phone.radio_idle()
    assert [] == phone.transmissions


async def test_check_and_missing_service(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """``service check isms`` finds it; a missing service exits 10 (cmds/service/service.cpp)."""
    phone = await phone_factory()
    output = await shell(
        phone, adb_signer, 'service check isms; service call nosuch 1; echo "x:$?"'
    )
    assert "Service isms: found\nservice: Service nosuch does not exist\nx:10\n" == output


@pytest.mark.parametrize("version", [10, 15])
async def test_other_package_is_a_security_exception(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, version: int
) -> None:
    """A callingPkg that is not the shell's fails the SEND_SMS app-op check: an EX_SECURITY
    reply and nothing sent (SmsPermissions.checkCallingCanSendText, frameworks/opt/telephony)."""
    phone = await phone_factory(android=version)
    output = await shell(phone, adb_signer, call(version, "hi", package="com.example.app"))
    assert output.startswith("Result: Parcel(\n  0x00000000: ffffffff ")
    await phone.radio_idle()
    assert [] == phone.transmissions


async def test_usage_limit_holds_the_31st_send(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """SmsUsageMonitor allows 30 sends per package per 60 s; the 31st waits on a dialog while
    the shell sees the same void reply (DEFAULT_SMS_MAX_COUNT, DEFAULT_SMS_CHECK_PERIOD,
    frameworks/opt/telephony android-10.0.0_r30 and android-15.0.0_r1)."""
    phone = await phone_factory(android=14)
    output = await shell(phone, adb_signer, "; ".join(call(14, f"m{i}") for i in range(31)))
    assert OK * 31 == output
    assert 30 == len(await phone.wait_transmissions(count=30, then_idle=True))
    assert ["m30"] == [held.body for held in phone.held_framework_sends]


async def test_failed_send_is_a_type_5_row(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A radio failure leaves the framework's row as type 5 with an error code
    (SMSDispatcher.SmsTracker.onFailed, persistSentMessageIfRequired: inserted SENT with the
    code, then the type updated to FAILED; frameworks/opt/telephony android-10.0.0_r30 and
    android-15.0.0_r1)."""
    phone = await phone_factory(android=15, faults=["send-fails"])
    await shell(phone, adb_signer, call(15, "hi"))
    assert [(5, 1, "com.android.shell")] == [
        (row.type, row.error_code, row.creator) for row in phone.store.rows()
    ]
    await phone.radio_idle()
    assert [] == phone.transmissions


async def test_no_row_while_the_radio_sends(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """The framework writes the row only on the radio's result, never OUTBOX first
    (SMSDispatcher.SmsTracker.persistOrUpdateMessage from onSent/onFailed,
    frameworks/opt/telephony android-10.0.0_r30 and android-15.0.0_r1)."""
    phone = await phone_factory(android=13, send_delay_ms=300)
    await shell(phone, adb_signer, call(13, "later"))
    assert [] == phone.store.rows()
    await phone.wait_idle()
    assert [2] == [row.type for row in phone.store.rows()]


@pytest.mark.parametrize("version", [10, 15])
async def test_a_held_radio_holds_the_framework_row_until_it_answers(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, version: int
) -> None:
    """``hold_radio`` (a radio that answers late, whatever the load): with no send delay at
    all, the framework still writes nothing, and nothing leaves, until the radio answers;
    then one SENT row and one transmission (SMSDispatcher.SmsTracker
    .persistSentMessageIfRequired runs only at the send's final result, onSent/onFailed;
    frameworks/opt/telephony android-10.0.0_r30 and android-15.0.0_r1)."""
    phone = await phone_factory(android=version, send_delay_ms=0)
    phone.hold_radio()
    assert OK == await shell(phone, adb_signer, call(version, "held"))
    assert ([], []) == (phone.store.rows(), phone.transmissions)
    phone.release_radio()
    await phone.wait_idle()
    assert [2] == [row.type for row in phone.store.rows()]
    assert ["held"] == [t.body for t in phone.transmissions]


@pytest.mark.parametrize("version", [10, 15])
@pytest.mark.parametrize(
    "body",
    [
        pytest.param("a" * 161, id="161-septets"),
        pytest.param("{" * 81, id="162-septets-extension"),
        pytest.param("ж" * 71, id="71-ucs2"),
        pytest.param("😀" * 36, id="72-ucs2-surrogates"),
    ],
)
async def test_text_of_more_than_one_pdu_is_not_sent_yet_the_call_succeeds(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, version: int, body: str
) -> None:
    """A text needing a second PDU (over 160 GSM-7 septets, over 70 UCS-2 code units):
    getSubmitPdu returns null, sendText sends nothing and writes no row, the failure goes to
    the null sentIntent, and the shell sees the usual success parcel (SMSDispatcher.sendText,
    frameworks/opt/telephony android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=version)
    options = 8 if version == 10 else 6  # sendTextForSubscriberWithOptions
    output = await shell(
        phone, adb_signer, f"{call(version, body)}; {call(version, body, code=options)}"
    )
    assert OK * 2 == output
    await phone.wait_idle()
    assert [] == phone.store.rows()
    assert [] == phone.transmissions
    assert [] == list(phone.held_framework_sends)


def near_the_one_pdu_limit() -> list[str]:
    """Bodies on both sides of one PDU, in every way a body can reach it: GSM-7 septets,
    extension characters (two septets), UCS-2 code units, surrogate pairs (two units), and
    a GSM-7 text turned UCS-2 by its last character; plus a seeded random sample."""
    bodies = [
        *("a" * n for n in (159, 160, 161)),
        *("a" * n + "€" for n in (157, 158, 159)),
        *("ж" * n for n in (69, 70, 71)),
        *("a" * n + "😀" for n in (67, 68, 69)),
        *("a" * n + "\u2019" for n in (68, 69, 70)),
    ]
    rng = random.Random(21)
    pool = "aZ9 @£{€ñ\nжé\u2019😀👍🏽"
    for _ in range(40):
        bodies.append("".join(rng.choice(pool) for _ in range(rng.randint(30, 170))))
    return bodies


@pytest.mark.parametrize("version", [10, 15])
async def test_the_phone_sends_exactly_what_the_product_counts_as_one_segment(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, version: int
) -> None:
    """The simulated framework's one-PDU rule (``_apps.sms_segments``: ``getSubmitPdu`` with
    ``SmsMessage.calculateLength``'s encoding, 160 GSM 7-bit septets, extension characters
    two, else 70 UCS-2 code units; frameworks/base ``gsm/SmsMessage``, ``GsmAlphabet``, read
    in untagged copies only; national language shift tables off, as in AOSP's default
    config) and the product's segment count (``starebrain_actions.core.segments``) agree: of
    bodies around the limit, the phone sends exactly those the product counts as one SMS."""
    phone = await phone_factory(android=version)
    bodies = near_the_one_pdu_limit()
    output = await shell(phone, adb_signer, "; ".join(call(version, body) for body in bodies))
    assert OK * len(bodies) == output
    await phone.wait_idle()
    expected = [body for body in bodies if count_segments(body).segments == 1]
    assert 10 < len(expected) < len(bodies) - 10
    assert expected == [transmission.body for transmission in phone.transmissions]
    assert expected == [row.body for row in phone.store.rows()]


async def test_too_long_texts_do_not_count_towards_the_usage_limit(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """getSubmitPdu fails before a tracker exists, so SmsUsageMonitor counts nothing: after
    30 texts too long, 30 short ones are all sent (SMSDispatcher.sendText, sendRawPdu;
    frameworks/opt/telephony android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_factory(android=14)
    long_calls = "; ".join(call(14, "a" * 161) for _ in range(30))
    short_calls = "; ".join(call(14, f"m{i}") for i in range(30))
    assert OK * 60 == await shell(phone, adb_signer, f"{long_calls}; {short_calls}")
    assert 30 == len(await phone.wait_transmissions(count=30, then_idle=True))
    assert [] == list(phone.held_framework_sends)


@pytest.mark.parametrize("body", ['it\'s "quoted" $HOME `x`', "two\nlines\r\n", "emoji 😀👍🏽"])
async def test_s16_carries_any_text_exactly(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, body: str
) -> None:
    """``s16`` writes the argument as UTF-16 (String16 from UTF-8), so the row holds the text
    byte for byte (cmds/service/service.cpp)."""
    phone = await phone_factory(android=12)
    await shell(phone, adb_signer, call(12, body))
    assert [body] == [row.body for row in phone.store.rows()]


def test_parcel_print_forms() -> None:
    """Parcel::print shows up to 32 bytes on one line and longer parcels with offsets
    (libbinder Parcel.cpp / HexDump.cpp)."""
    assert "Parcel(00000000 00000001   '........')" == format_parcel(b"\0" * 4 + b"\1\0\0\0")
    assert format_parcel(b"\xff" * 36).startswith("Parcel(\n  0x00000000: ffffffff ffffffff")
