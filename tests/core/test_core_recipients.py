"""One recipient rule: an intent holds only what the sender sends and the matcher accepts."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from android_bridge import CommandRejected, SmsMessage, message_matches_intent, normalize_recipient
from android_bridge._dispatcher import shell_recipient
from starebrain_actions import InvalidInput, SmsIntent

ARABIC_INDIC, PERSIAN, FULLWIDTH = "\u0660", "\u06f0", "\uff10"


def in_script(text: str, zero: str) -> str:
    """``text`` with its ASCII digits written in the script whose zero is ``zero``."""
    return text.translate({ord("0") + n: chr(ord(zero) + n) for n in range(10)})


#: The numbers of issue 9's report, each refused with no region and in the US.
REPORTED = [
    pytest.param("+999123456789", id="unknown-country-code"),
    pytest.param("+1 202 555 01000", id="one-digit-too-many"),
    pytest.param("+1234", id="too-short"),
    pytest.param("+0123456789", id="country-code-0"),
    pytest.param("+999 12", id="unknown-code-short"),
    pytest.param("tel:+12025550143", id="tel-uri"),
    pytest.param("*#06#", id="mmi-code"),
    pytest.param("-1", id="minus-one"),
    pytest.param("1" * 40, id="40-digits"),
    pytest.param("+" + "1" * 40, id="plus-40-digits"),
    pytest.param("+1 (202) 555-010", id="typo-of-the-report"),
    pytest.param(in_script("+1234", ARABIC_INDIC), id="arabic-indic-too-short"),
    pytest.param(in_script("\uff0b1 202 555 010", FULLWIDTH), id="fullwidth-typo"),
]

#: One number, +1 202 555 0143, in the digits of other scripts; every path reads it as ASCII.
SCRIPTS = [
    pytest.param(in_script("+1 202 555 0143", ARABIC_INDIC), id="arabic-indic"),
    pytest.param(in_script("+1 202 555 0143", PERSIAN), id="persian"),
    pytest.param(in_script("\uff0b1 \uff08202\uff09 555\uff0d0143", FULLWIDTH), id="fullwidth"),
]

#: Regions the agreement property reads national numbers in (None: international only; ZZ is
#: no region at all).
REGIONS = (None, "US", "GB", "DE", "FR", "DK", "IN", "JP", "BR", "ZZ")


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


def _paths(text: str, region: str | None) -> tuple[str | None, str | None, str | None]:
    """What intent creation, the sender and the matcher make of ``text`` (None: refused)."""
    try:
        intent: str | None = SmsIntent(recipient=text, body="x", region=region).recipient
    except InvalidInput:
        intent = None
    try:
        shell: str | None = shell_recipient(text, region)
    except CommandRejected:
        shell = None
    normalized = normalize_recipient(text, region)
    return intent, shell, normalized.value if normalized.valid else None


@pytest.mark.parametrize("number", REPORTED)
@pytest.mark.parametrize("region", [None, "US"])
def test_reported_numbers_are_refused_by_every_path(number: str, region: str | None) -> None:
    """Each number of the report is refused by intent creation, the sender and the matcher."""
    assert (None, None, None) == _paths(number, region)


@pytest.mark.parametrize("number", REPORTED)
def test_intent_refusal_says_why(number: str) -> None:
    """The refusal is InvalidInput with a reason that does not repeat the number."""
    with pytest.raises(InvalidInput, match="not a phone number or short code") as caught:
        SmsIntent(recipient=number, body="x", region="US")
    assert number not in str(caught.value)


@pytest.mark.parametrize("number", SCRIPTS)
def test_digits_of_other_scripts_are_read_as_ascii_everywhere(number: str) -> None:
    """Arabic-Indic, Persian and fullwidth digits are the ASCII number on every path, and the
    fingerprint is the ASCII spelling's."""
    assert ("+12025550143",) * 3 == _paths(number, None)
    ascii_intent = SmsIntent(recipient="+1 202 555 0143", body="x")
    assert ascii_intent.fingerprint == SmsIntent(recipient=number, body="x").fingerprint


def test_typo_of_the_report_is_refused_with_its_reason() -> None:
    """The report's "+1 (202) 555-010" is one digit short of a +1 number, and the error says so."""
    with pytest.raises(InvalidInput, match=r"not a valid \+1 number: it is too short"):
        SmsIntent(recipient="+1 (202) 555-010", body="x")


@pytest.mark.parametrize(
    ("number", "region", "expected"),
    [
        ("+1 202 555 0143", None, "+12025550143"),
        ("00 44 20 7946 0958", None, "+442079460958"),
        ("(202) 555-0143", "US", "+12025550143"),
        ("020 7946 0958", "gb", "+442079460958"),
        ("32 12 34 56", "DK", "+4532123456"),
        ("32 12 34 56", None, "32123456"),
        ("112", None, "112"),
        ("12 345", "US", "12345"),
        ("12345678", "US", "12345678"),
    ],
)
def test_accepted_recipients_have_one_canonical_form(
    number: str, region: str | None, expected: str
) -> None:
    """Valid numbers become E.164 (national ones read in the region), short codes their digits."""
    intent = SmsIntent(recipient=number, body="x", region=region)
    assert expected == intent.recipient
    assert expected == intent.canonical()["recipient"]


@pytest.mark.parametrize(
    ("number", "region", "why"),
    [
        ("2025550143", None, "needs a region"),
        ("202555014", "US", "not a valid national number in US"),
        ("2025550143", "ZZ", "not a region"),
        ("12", "US", "too short for a short code"),
        ("123456789", None, "too long for a short code"),
        ("+15550100", None, "without its area code"),
        ("12345#", None, "ends with '#'"),
        ("1 555 0100; reboot", None, "ends with 't'"),
        ("555 0100x12", None, "holds 'x'"),
        ("1+2025550143", None, "a \\+ may only come first"),
        ("000", None, "a leading 00 is read as \\+"),
        ("abc", None, "holds no digits"),
    ],
)
def test_other_refusals_name_their_reason(number: str, region: str | None, why: str) -> None:
    """National numbers need a region and must be valid in it; short codes have 3 to 8 digits."""
    with pytest.raises(InvalidInput, match=why):
        SmsIntent(recipient=number, body="x", region=region)


def test_a_canonical_intent_is_its_own_canonical_form() -> None:
    """Rebuilding an intent from its stored recipient gives the same recipient and fingerprint."""
    first = SmsIntent(recipient="(202) 555-0143", body="x", region="US")
    again = SmsIntent(recipient=first.recipient, body="x", region="US")
    assert (first.recipient, first.fingerprint) == (again.recipient, again.fingerprint)


recipient_texts = st.one_of(
    st.text(max_size=25),
    st.text(alphabet="0123456789+ -().#*/x", max_size=20),
    st.builds(
        "{}{}".format,
        st.sampled_from(["+", "00", "", "(", "\uff0b"]),
        st.text(alphabet="0123456789 -\u0660\u0665\uff10\uff15", min_size=1, max_size=16),
    ),
)


@settings(max_examples=400, deadline=None)
@given(recipient_texts, st.sampled_from(REGIONS), st.sampled_from(REGIONS[1:-1]))
@example("+1 (202) 555-010", None, "US")
@example("+12025550143", "US", "US")
@example("32123456", None, "DK")
@example(in_script("01234", ARABIC_INDIC), None, "US")
def test_the_three_paths_agree_and_an_accepted_recipient_matches_itself(
    text: str, region: str | None, device_region: str
) -> None:
    """For any text, intent creation, the sender and the matcher all accept it (with one value)
    or all refuse it; what the phone stores for an accepted one matches the intent, read in
    the intent's region or, without one, in any device's."""
    intent, shell, matcher = _paths(text, region)
    assert (intent is None, intent is None) == (shell is None, matcher is None)
    assert intent == shell == matcher
    if intent is None:
        return
    assert intent.isascii()
    stored = _row(shell or "")  # the phone stores the smsto: recipient as it was sent
    read_in = region or device_region
    assert True is message_matches_intent(stored, text, "x", region=read_in).matched
    assert True is message_matches_intent(stored, intent, "x", region=read_in).matched


@pytest.mark.parametrize("body", ["a\x00b", "\x00", "code 4821\x00"])
def test_a_body_holding_nul_is_refused_on_every_backend(body: str) -> None:
    """No send path can carry U+0000 (``am`` extras and ``input text`` are C strings) and a
    PostgreSQL ledger cannot store it, where SQLite would: the intent refuses it, so both
    backends behave the same (InvalidInput, exit 2 on the command line)."""
    with pytest.raises(InvalidInput, match="NUL"):
        SmsIntent(recipient="+12025550100", body=body)
