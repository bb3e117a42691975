"""``message_matches_intent`` judges recipients and bodies as a person would."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from android_bridge import SmsMessage, message_matches_intent, normalize_body, normalize_recipient
from tests.bridge.strategies import bodies


def _row(address: str | None, body: str | None) -> SmsMessage:
    return SmsMessage(
        id=1,
        thread_id=1,
        address=address,
        body=body,
        type=2,
        status=-1,
        date_ms=0,
        date_sent_ms=0,
        sub_id=1,
        error_code=0,
        creator=None,
    )


SAME = [
    ("+1 202 555 0143", "(202) 555-0143", "US"),
    ("+12025550143", "202-555-0143", "US"),
    ("0012025550143", "+1 (202) 555-0143", "US"),
    ("2025550143", "202.555.0143", "US"),
    ("+44 20 7946 0958", "020 7946 0958", "GB"),
    ("00 44 20 7946 0958", "+442079460958", "DE"),
    ("12345", "12345", "US"),
    ("12 345", "12345", "US"),
    ("+33 6 12 34 56 78", "06 12 34 56 78", "FR"),
]
DIFFERENT = [
    ("+12025550143", "+12025550144", "US"),
    ("020 7946 0958", "+442079460958", "US"),  # a US device cannot reach a UK national number
    ("12345", "123456", "US"),
    ("12345", "+12345", "US"),
    ("+44 20 7946 0958", "+1 20 7946 0958", "US"),
    ("abc", "abc", "US"),
    ("", "", "US"),
    ("+12025550143#", "+12025550143", "US"),
]


@pytest.mark.parametrize(("intended", "stored", "region"), SAME)
def test_same_number_written_differently_matches(intended: str, stored: str, region: str) -> None:
    """National vs international, spaces, dashes, parentheses and 00 are one number."""
    result = message_matches_intent(_row(stored, "hi"), intended, "hi", region=region)
    expected = (True, "match")
    assert expected == (result.matched, result.reason)


@pytest.mark.parametrize(("intended", "stored", "region"), DIFFERENT)
def test_different_or_invalid_numbers_do_not_match(intended: str, stored: str, region: str) -> None:
    """Different numbers, short codes vs numbers and invalid input never match."""
    result = message_matches_intent(_row(stored, "hi"), intended, "hi", region=region)
    expected = (False, False, True)
    assert expected == (result.matched, result.recipient_ok, result.body_ok)


def test_an_invalid_recipient_is_explained_not_mismatched() -> None:
    """The report's typo never matches, and the details say why without the number."""
    result = message_matches_intent(
        _row("+1202555010", "hi"), "+1 (202) 555-010", "hi", region="US"
    )
    assert ("recipient_invalid", False) == (result.reason, result.matched)
    assert ["intended recipient: not a valid +1 number: it is too short"] == [
        item for item in result.details if item.startswith("intended recipient:")
    ]
    assert "555" not in " ".join(result.details)


def test_digits_of_another_script_match_their_ascii_spelling() -> None:
    """A stored address in Arabic-Indic digits is the ASCII number."""
    stored = "+\u0661\u0662\u0660\u0662\u0665\u0665\u0665\u0660\u0661\u0664\u0663"
    result = message_matches_intent(_row(stored, "hi"), "+1 202 555 0143", "hi", region="US")
    assert True is result.matched


def test_without_a_region_only_international_numbers_and_short_codes_match() -> None:
    """With no region a national stored address is invalid; E.164 and short codes still match."""
    national = message_matches_intent(_row("2025550143", "hi"), "+12025550143", "hi", region=None)
    e164 = message_matches_intent(_row("+12025550143", "hi"), "+12025550143", "hi", region=None)
    short = message_matches_intent(_row("12345", "hi"), "12 345", "hi", region=None)
    expected = ("recipient_invalid", True, True)
    assert expected == (national.reason, e164.matched, short.matched)


def test_short_code_is_digits() -> None:
    """A short code compares as its digits."""
    expected = ("digits", "12345")
    normalized = normalize_recipient("12 345", "US")
    assert expected == (normalized.kind, normalized.value)


def test_body_line_endings_and_nfc_are_normalised() -> None:
    """CRLF, CR and decomposed accents equal LF and composed accents."""
    result = message_matches_intent(
        _row("+12025550143", "cafe\u0301\r\nline\rend"),
        "+12025550143",
        "café\nline\nend",
        region="US",
    )
    assert True is result.matched


def test_trailing_space_differs_unless_loose() -> None:
    """Trailing whitespace is a mismatch by default and ignored with loose_whitespace."""
    row = _row("+12025550143", "hello  \n")
    strict = message_matches_intent(row, "+12025550143", "hello", region="US")
    loose = message_matches_intent(row, "+12025550143", "hello", region="US", loose_whitespace=True)
    expected = (False, "body_mismatch", True)
    assert expected == (strict.matched, strict.reason, loose.matched)


def test_mismatch_details_never_contain_the_body() -> None:
    """Details say where bodies differ without repeating them."""
    result = message_matches_intent(
        _row("+12025550143", "secret 4821"), "+12025550143", "secret 4822", region="US"
    )
    assert "4821" not in " ".join(result.details)
    expected = "body_mismatch"
    assert expected == result.reason


def test_null_body_is_missing() -> None:
    """A row with a NULL body does not match and says so."""
    result = message_matches_intent(_row("+12025550143", None), "+12025550143", "x", region="US")
    expected = (False, "body_missing")
    assert expected == (result.matched, result.reason)


def test_both_wrong_reports_both() -> None:
    """Wrong recipient and wrong body report both."""
    result = message_matches_intent(_row("+12025550144", "b"), "+12025550143", "a", region="US")
    expected = "both_mismatch"
    assert expected == result.reason


@settings(max_examples=100)
@given(bodies(500))
def test_any_body_matches_itself_after_crlf_rewrite(body: str) -> None:
    """A body matches itself even if the phone stored its newlines as CRLF."""
    stored = body.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\r\n")
    assert normalize_body(body) == normalize_body(stored)
