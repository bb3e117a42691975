"""The sender refuses what the matcher would refuse, and what it sends matches on the phone."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import phonenumbers
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from android_bridge import (
    CommandRejected,
    Device,
    SmsDispatcher,
    SmsReader,
    ensure_key,
    message_matches_intent,
    normalize_recipient,
)
from android_bridge._dispatcher import shell_recipient
from android_bridge.simulator import SimulatedPhone
from tests.core.test_core_recipients import ARABIC_INDIC, FULLWIDTH, REPORTED, in_script

#: Regions whose numbers the round trip draws (the phone itself is in the US).
REGIONS = ("US", "GB", "DE", "FR", "IN", "JP", "DK", "BR", "CH")
PHONE_REGION = "US"


@pytest.mark.parametrize("number", REPORTED)
async def test_reported_numbers_never_reach_the_phone(
    number: str, sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """SmsDispatcher.send refuses each reported number before any command reaches the phone."""
    before = list(sim_phone.commands_run)
    with pytest.raises(CommandRejected, match="phone number or short code"):
        await SmsDispatcher(sim_device).send(number, "hello")
    assert before == sim_phone.commands_run
    assert [] == sim_phone.transmissions


@pytest.mark.parametrize(
    ("number", "region", "expected"),
    [
        ("+1 (202) 555-0143", None, "+12025550143"),
        ("0044 20 7946 0958", None, "+442079460958"),
        ("(202) 555-0143", "US", "+12025550143"),
        (in_script("+1 202 555 0143", ARABIC_INDIC), None, "+12025550143"),
        (in_script("\uff0b1 202 555 0143", FULLWIDTH), None, "+12025550143"),
        ("12 345", None, "12345"),
    ],
)
def test_smsto_gets_ascii_e164_or_short_code_digits(
    number: str, region: str | None, expected: str
) -> None:
    """What goes into smsto: is the recipient's one canonical ASCII form."""
    assert expected == shell_recipient(number, region)


def test_a_national_number_needs_a_region_to_be_sent() -> None:
    """Without a region a national number is refused: the phone would read it in its own."""
    with pytest.raises(CommandRejected, match="needs a region"):
        shell_recipient("(202) 555-0143")


@st.composite
def recipients(draw: st.DrawFn) -> tuple[str, str | None]:
    """An accepted recipient spelled as a person might, and the region it is written for."""
    if draw(st.booleans()):
        digits = draw(st.text("0123456789", min_size=3, max_size=8))
        assume(not digits.startswith("00"))  # 00 is read as +
        spelled = " ".join(digits[i : i + 3] for i in range(0, len(digits), 3))
        return spelled, draw(st.sampled_from((None, PHONE_REGION)))
    region = draw(st.sampled_from(REGIONS))
    example = phonenumbers.example_number_for_type(region, phonenumbers.PhoneNumberType.MOBILE)
    assert example is not None
    national = str(example.national_number)
    tail = draw(st.text("0123456789", min_size=2, max_size=2))
    number = phonenumbers.parse(f"+{example.country_code}{national[:-2]}{tail}")
    assume(phonenumbers.is_valid_number(number))
    style = draw(st.sampled_from(("E164", "INTERNATIONAL", "NATIONAL")))
    text = phonenumbers.format_number(number, getattr(phonenumbers.PhoneNumberFormat, style))
    script = draw(st.sampled_from(("0", ARABIC_INDIC, FULLWIDTH)))
    return in_script(text, script), region if style == "NATIONAL" else None


def test_an_accepted_recipient_matches_itself_after_a_round_trip_through_the_phone() -> None:
    """Any accepted recipient, sent to the simulated phone, lands in its store as the ASCII
    smsto: value and matches the intent it was written for."""
    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as runner:
        root = Path(tmp)
        key = ensure_key(root / "adbkey")
        keys = root / "adb_keys"
        keys.write_text(Path(str(key) + ".pub").read_text().strip() + "\n")
        phone = SimulatedPhone(
            store_path=root / "sms.db", authorized_keys_path=keys, region=PHONE_REGION
        )
        runner.run(phone.start())
        device = runner.run(Device.connect(phone.serial, key_path=key, command_timeout_s=5))
        sent: list[str] = []

        async def round_trip(text: str, region: str | None) -> None:
            normalized = normalize_recipient(text, region)
            assert True is normalized.valid, (text, region, normalized.reason)
            body = f"round trip {len(sent)}"
            evidence = await SmsDispatcher(device).send(normalized.value, body)
            assert f"smsto:{normalized.value}" in phone.commands_run[-1]
            rows = list((await SmsReader(device).read_after(evidence)).rows)
            assert [normalized.value] == [row.address for row in rows]
            verdict = message_matches_intent(rows[0], text, body, region=region or PHONE_REGION)
            assert (True, "match") == (verdict.matched, verdict.reason)
            sent.append(normalized.value)

        # under the ~30 sends a minute SmsUsageMonitor lets one package make
        @settings(
            max_examples=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(recipients())
        def check(drawn: tuple[str, str | None]) -> None:
            runner.run(round_trip(*drawn))

        try:
            check()
            out = runner.run(phone.wait_transmissions(count=len(sent), then_idle=True))
        finally:
            runner.run(device.close())
            runner.run(phone.stop())
        assert len(sent) == len(out)
