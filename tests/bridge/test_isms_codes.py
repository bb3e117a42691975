"""Reading the ISms transaction codes from the phone's own framework jar
(android_bridge._isms_codes) against the simulated phone over the real ADB protocol, and the
doctor check built on it: proven on 10 to 15, refused with the reason for each jar a real
phone can have that proves nothing, failed for a jar that proves another code."""

from __future__ import annotations

import base64
import io
import zipfile
from pathlib import Path

import pytest

from android_bridge import Device, FrameworkDispatcher
from android_bridge._isms_codes import (
    CodesUnproven,
    IsmsCodes,
    framework_codes_check,
    isms_codes_commands,
    parse_isms_codes,
    read_isms_codes,
)
from android_bridge.simulator._dexwriter import build_dex
from android_bridge.simulator._framework_jar import framework_jar
from tests.bridge.conftest import PhoneFactory

TO = "+12025550143"


async def connect(serial: str, key: Path) -> Device:
    """A bridge Device on the simulated phone."""
    return await Device.connect(serial, key_path=key, connect_timeout_s=2, command_timeout_s=5)


async def codes_of(phone_serial: str, key: Path, **kwargs: int) -> tuple[object, int | None]:
    """What read_isms_codes found, the API level, and the round trips it took."""
    async with await connect(phone_serial, key) as device:
        sdk = (await device.facts()).sdk
        before = device.round_trips
        found = await read_isms_codes(device, **kwargs)
        assert 1 == device.round_trips - before
    return found, sdk


@pytest.mark.parametrize("version", [10, 11, 12, 13, 14, 15])
async def test_codes_proven_on_each_release_and_check_is_ok(
    make_phone: PhoneFactory, bridge_key: Path, version: int
) -> None:
    """One round trip reads the release's codes (6 and 10 on Android 10, 5 and 8 on 11-15)
    and the check is ok: the code the bridge sends with is the phone's own."""
    phone = await make_phone(android=version)
    found, sdk = await codes_of(phone.serial, bridge_key)
    jar = framework_jar(version)
    assert jar is not None
    expected = (6, 10) if version == 10 else (5, 8)
    assert IsmsCodes(send_text=expected[0], send_multipart=expected[1], jar_bytes=len(jar)) == (
        found
    )
    assert isinstance(found, IsmsCodes)
    check = framework_codes_check(found, sdk)
    assert ("framework-codes", "ok") == (check.name, check.verdict)
    assert f"sendTextForSubscriber {expected[0]}" in check.evidence


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("stripped", "no DEX in /system/framework/framework.jar defines ISms$Stub"),
        ("no-stub", "no DEX in /system/framework/framework.jar defines ISms$Stub"),
        ("dex041", "041"),
        ("no-read-permission", "Permission denied"),
        ("missing", "No such file or directory"),
    ],
)
async def test_jar_that_proves_nothing_warns_with_the_reason(
    make_phone: PhoneFactory, bridge_key: Path, kind: str, reason: str
) -> None:
    """A stripped jar, one without the stub, a DEX of another version, an unreadable or
    missing file: unproven, and the check warns, saying why and that auto keeps its rule."""
    phone = await make_phone(android=13, framework_jar=kind)
    found, sdk = await codes_of(phone.serial, bridge_key)
    assert isinstance(found, CodesUnproven)
    assert reason in found.reason
    check = framework_codes_check(found, sdk)
    assert "warn" == check.verdict
    assert reason in check.evidence
    assert "auto keeps today's rule" in check.consequence


async def test_jar_over_the_bound_is_not_pulled(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """A jar bigger than the bound: the phone checks the size and prints no base64 at all,
    and the reason names the size."""
    phone = await make_phone(android=12)
    async with await connect(phone.serial, bridge_key) as device:
        steps = await device.run(isms_codes_commands(100))
    assert ("", 1) == (steps[1].output, steps[1].exit_status)
    found = parse_isms_codes(steps[0].output, 0, "", 1, 100)
    assert isinstance(found, CodesUnproven)
    assert "over the 100 bytes pulled" in found.reason


@pytest.mark.parametrize("version", [10, 14])
async def test_vendor_reordered_isms_fails_the_check(
    make_phone: PhoneFactory, bridge_key: Path, version: int
) -> None:
    """An OEM ISms with one method in front: the jar proves another code than the bridge's,
    the check fails, and a framework send with the bridge's code indeed sends nothing."""
    phone = await make_phone(android=version, framework_jar="vendor-reordered")
    found, sdk = await codes_of(phone.serial, bridge_key)
    assert isinstance(found, IsmsCodes)
    assert (7 if version == 10 else 6) == found.send_text
    check = framework_codes_check(found, sdk)
    assert "fail" == check.verdict
    assert "never send with --send-path framework" in check.consequence
    async with await connect(phone.serial, bridge_key) as device:
        await FrameworkDispatcher(device).send(TO, "hello")
    await phone.radio_idle()
    assert [] == phone.transmissions


def test_truncated_or_garbled_copy_proves_nothing() -> None:
    """A copy shorter than stat's size, or bytes flipped inside it (the zip's CRC), or text
    that is not base64, is refused rather than read."""
    jar = framework_jar(14)
    assert jar is not None
    text = base64.b64encode(jar).decode()
    short = parse_isms_codes(f"{len(jar)}\n", 0, base64.b64encode(jar[:-10]).decode(), 0)
    assert isinstance(short, CodesUnproven)
    assert "stat said" in short.reason
    index = jar.index(b"TRANSACTION_sendText")
    flipped = jar[:index] + b"X" + jar[index + 1 :]
    garbled = parse_isms_codes(f"{len(jar)}\n", 0, base64.b64encode(flipped).decode(), 0)
    assert isinstance(garbled, CodesUnproven)
    assert "CRC" in garbled.reason
    not_base64 = parse_isms_codes(f"{len(jar)}\n", 0, text[:-4] + "!!!!", 0)
    assert isinstance(not_base64, CodesUnproven)
    assert isinstance(parse_isms_codes(f"{len(jar)}\n", 0, text, 0), IsmsCodes)


def test_release_without_a_bridge_code_warns() -> None:
    """Codes proven on a release the bridge has no call layout for: warn, not used."""
    check = framework_codes_check(IsmsCodes(send_text=5, send_multipart=8, jar_bytes=1), 36)
    assert "warn" == check.verdict
    assert "not used here" in check.consequence


def test_a_stub_without_constant_values_proves_nothing() -> None:
    """A build whose ISms$Stub sets its TRANSACTION_ fields in <clinit> (no static_values for
    them: the DEX says 0, the type's default) proves no code: 0 is never a transaction code
    (FIRST_CALL_TRANSACTION is 1), so it is unproven, not a code that differs."""
    stub = "Lcom/android/internal/telephony/ISms$Stub;"
    dex = build_dex(
        {stub: {"TRANSACTION_sendTextForSubscriber": 0, "TRANSACTION_x": 0}},
        omit_trailing_defaults=True,
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("classes.dex", dex)
    jar = buffer.getvalue()
    found = parse_isms_codes(f"{len(jar)}\n", 0, base64.b64encode(jar).decode(), 0)
    assert isinstance(found, CodesUnproven)
    assert "no constant value" in found.reason
    assert "warn" == framework_codes_check(found, 34).verdict
