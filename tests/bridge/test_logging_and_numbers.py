"""Logs never carry numbers or bodies; phone numbers written any way a person would match."""

from __future__ import annotations

import phonenumbers
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from android_bridge import (
    Device,
    SmsDispatcher,
    SmsMessage,
    SmsReader,
    message_matches_intent,
)
from android_bridge._dispatcher import parse_clock

REGIONS = ("US", "GB", "DE", "FR", "IN", "BR", "JP", "AU", "NG", "CH", "ES", "IT", "MX", "ZA")


async def test_logs_never_contain_number_or_body(sim_device: Device) -> None:
    """Every event logged while sending and reading leaves out the recipient and the body."""
    recipient, body = "+12025550143", "secret code 4821"
    with capture_logs() as events:
        evidence = await SmsDispatcher(sim_device).send(recipient, body)
        await SmsReader(sim_device).read_after(evidence)
    text = repr(events)
    assert ("2025550143" in text, "4821" in text, len(events) >= 2) == (False, False, True)


def _row(address: str) -> SmsMessage:
    return SmsMessage(
        id=1,
        thread_id=1,
        address=address,
        body="x",
        type=2,
        status=-1,
        date_ms=0,
        date_sent_ms=0,
        sub_id=1,
        error_code=0,
        creator=None,
    )


@st.composite
def numbers(draw: st.DrawFn) -> tuple[str, phonenumbers.PhoneNumber]:
    region = draw(st.sampled_from(REGIONS))
    example = phonenumbers.example_number_for_type(
        region, phonenumbers.PhoneNumberType.MOBILE
    ) or phonenumbers.example_number(region)
    assert example is not None
    national = str(example.national_number)
    tail = draw(st.text("0123456789", min_size=3, max_size=3))
    candidate = phonenumbers.parse(f"+{example.country_code}{national[:-3]}{tail}")
    return region, candidate


def _spell(number: phonenumbers.PhoneNumber, style: int, separator: str) -> str:
    e164 = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    if style == 0:
        return e164
    if style == 1:
        return "00" + e164[1:]
    fmt = (
        phonenumbers.PhoneNumberFormat.INTERNATIONAL
        if style == 2
        else phonenumbers.PhoneNumberFormat.NATIONAL
    )
    return phonenumbers.format_number(number, fmt).replace(" ", separator)


@settings(max_examples=200)
@given(
    numbers(),
    st.integers(0, 3),
    st.integers(0, 3),
    st.sampled_from([" ", "-", ".", ""]),
)
def test_one_number_spelled_two_ways_matches(
    drawn: tuple[str, phonenumbers.PhoneNumber], style_a: int, style_b: int, separator: str
) -> None:
    """E.164, 00-prefixed, international and national spellings of one number match."""
    region, number = drawn
    a, b = _spell(number, style_a, separator), _spell(number, style_b, separator)
    if not phonenumbers.is_valid_number(number):
        return
    result = message_matches_intent(_row(a), b, "x", region=region)
    assert True is result.recipient_ok, (a, b, region, result.details)


@settings(max_examples=200)
@given(numbers(), numbers())
def test_two_different_numbers_never_match(
    first: tuple[str, phonenumbers.PhoneNumber], second: tuple[str, phonenumbers.PhoneNumber]
) -> None:
    """Two different valid numbers, each in E.164, never match."""
    (region, a), (_, b) = first, second
    if a == b:
        return
    e164 = phonenumbers.PhoneNumberFormat.E164
    result = message_matches_intent(
        _row(phonenumbers.format_number(a, e164)),
        phonenumbers.format_number(b, e164),
        "x",
        region=region,
    )
    assert False is result.recipient_ok


def test_clock_without_millisecond_support_keeps_seconds() -> None:
    """A ``date`` that cannot print %3N still yields the clock, at second precision."""
    expected = (1764420000123, 1764420000000, None)
    assert expected == (
        parse_clock("1764420000123\n"),
        parse_clock("1764420000%3N\n"),
        parse_clock("date: bad format\n"),
    )
