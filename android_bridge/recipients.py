"""One rule for what an SMS recipient is: used to create an intent, to send, and to match.

A recipient is accepted in exactly two forms, and reduced to ASCII:

* a **valid phone number** (``phonenumbers.is_valid_number``, not merely a possible length):
  written with ``+`` (or ``00``) and its country code, or as a national number read in the
  given region. Its value is E.164, ``+12025550143``.
* a **short code**: 3 to 8 digits, no ``+``, that is not a valid national number of the
  region. Its value is the digits, ``12345``.

The value is at once what the ledger fingerprints, what goes into ``smsto:`` and what the
matcher compares, so a recipient one path accepts is never refused by another. Everything
else is refused with a reason that never repeats the number (at most the one character that
is wrong): letters and URIs (``tel:+1…``), ``*``, ``#``, ``;``, ``?``, a ``+`` after the first
character, a leading dash (``-1``), an unknown country code (``+999…``), a wrong length for
the country (``+1 202 555 010``), and a national number with no region to read it in (a
short code needs no region).

Digits of any script (Arabic-Indic U+0660…, Persian U+06F0…, fullwidth U+FF10…) are read as
the digits they are, as ``phonenumbers`` reads them, and the fullwidth plus as ``+``; the
value is always ASCII. Whitespace, ``-``, ``.``, ``/``, parentheses (ASCII and fullwidth) and
the Unicode dashes separate digit groups and are dropped.

Pure: imports only ``phonenumbers`` and ``attrs``; no I/O, no logging. It is the one module
of the bridge that the ledger's model imports (``starebrain_actions.core.model`` canonicalises an
intent's recipient with it), so it must stay free of the bridge's I/O modules.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Final, Literal

import attrs
import phonenumbers

RecipientKind = Literal["e164", "digits", "invalid"]

#: A short code has this many digits, inclusive (no ``+``): 3 (``112``) to 8.
SHORT_CODE_DIGITS: Final = (3, 8)

_PLUS: Final = frozenset("+\uff0b")  # ASCII and fullwidth plus
_OPENERS: Final = frozenset("(\uff08")
#: Dropped between digits: ASCII and fullwidth ``- . / ( )``, the Unicode dashes and minus.
_SEPARATORS: Final = frozenset(
    "-./()\u2010\u2011\u2012\u2013\u2014\u2015\u2212\uff08\uff09\uff0d\uff0e\uff0f"
)
_PARSE_ERRORS: Final = {
    phonenumbers.NumberParseException.INVALID_COUNTRY_CODE: "no country uses its calling code",
    phonenumbers.NumberParseException.NOT_A_NUMBER: "it is not a phone number",
    phonenumbers.NumberParseException.TOO_SHORT_AFTER_IDD: "it is too short",
    phonenumbers.NumberParseException.TOO_SHORT_NSN: "it is too short",
    phonenumbers.NumberParseException.TOO_LONG: "it is too long",
}
_LENGTH_PROBLEMS: Final = {
    phonenumbers.ValidationResult.TOO_SHORT: "too short",
    phonenumbers.ValidationResult.TOO_LONG: "too long",
    phonenumbers.ValidationResult.INVALID_LENGTH: "of a length no number has",
    phonenumbers.ValidationResult.IS_POSSIBLE_LOCAL_ONLY: "a local number without its area code",
}


@attrs.frozen(kw_only=True)
class NormalizedRecipient:
    """A recipient reduced to the one form that is fingerprinted, sent and compared."""

    #: "e164" (a valid number), "digits" (a short code) or "invalid".
    kind: RecipientKind
    #: ``+12025550143``-style E.164, a short code's ASCII digits, or "" when invalid. This is
    #: also exactly what goes into ``smsto:``.
    value: str
    #: Why the recipient is invalid (None when it is valid); never quotes the number.
    reason: str | None = None

    @property
    def valid(self) -> bool:
        """True for a valid number or a short code."""
        return self.kind != "invalid"


def _invalid(reason: str) -> NormalizedRecipient:
    return NormalizedRecipient(kind="invalid", value="", reason=reason)


def _compact(text: str) -> tuple[bool, str] | str:
    """``(has_plus, ascii_digits)``, or the reason the text is not a number as people write it."""
    if not text:
        return "it is empty"
    if not any(unicodedata.category(char) == "Nd" for char in text):
        return "it holds no digits"
    if not (text[0] in _PLUS or text[0] in _OPENERS or unicodedata.category(text[0]) == "Nd"):
        return f"it starts with {text[0]!r}, not with a digit, + or ("
    if unicodedata.category(text[-1]) != "Nd":
        return f"it ends with {text[-1]!r}, not with a digit"
    digits: list[str] = []
    for index, char in enumerate(text):
        if unicodedata.category(char) == "Nd":
            digits.append(str(unicodedata.decimal(char)))
        elif char in _PLUS and index > 0:
            return "a + may only come first"
        elif not (char in _PLUS or char.isspace() or char in _SEPARATORS):
            return f"it holds {char!r}, which is no part of a phone number"
    return text[0] in _PLUS, "".join(digits)


def _international(digits: str) -> NormalizedRecipient:
    """``+<digits>``: valid, or why not."""
    try:
        parsed = phonenumbers.parse("+" + digits, None)
    except phonenumbers.NumberParseException as exc:
        why = _PARSE_ERRORS.get(exc.error_type, "it is not a phone number")
        return _invalid(f"not a valid international number: {why}")
    if not phonenumbers.is_valid_number(parsed):
        problem = _LENGTH_PROBLEMS.get(
            phonenumbers.is_possible_number_with_reason(parsed),
            "of a possible length, but not in any numbering plan",
        )
        return _invalid(f"not a valid +{parsed.country_code} number: it is {problem}")
    value = phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)
    return NormalizedRecipient(kind="e164", value=value)


def _national(digits: str, region: str | None) -> NormalizedRecipient:
    """Digits with no ``+``: a valid national number of ``region``, else a short code."""
    code = region.upper() if region else None
    if code in phonenumbers.SUPPORTED_REGIONS:
        try:
            parsed = phonenumbers.parse(digits, code)
        except phonenumbers.NumberParseException:
            parsed = None
        if parsed is not None and phonenumbers.is_valid_number(parsed):
            value = phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)
            return NormalizedRecipient(kind="e164", value=value)
    low, high = SHORT_CODE_DIGITS
    if low <= len(digits) <= high:
        return NormalizedRecipient(kind="digits", value=digits)
    size = "too short" if len(digits) < low else "too long"
    short = f"{size} for a short code ({low} to {high} digits)"
    if code is None:
        return _invalid(f"{short}, and a national number needs a region (or write it with +)")
    if code not in phonenumbers.SUPPORTED_REGIONS:
        return _invalid(f"{short}, and {region!r} is not a region national numbers can be read in")
    return _invalid(f"{short}, and not a valid national number in {code}")


@functools.lru_cache(maxsize=4096)
def _normalize(number: str, region: str | None) -> NormalizedRecipient:
    compact = _compact(number.strip())
    if isinstance(compact, str):
        return _invalid(compact)
    has_plus, digits = compact
    if not has_plus and digits.startswith("00"):
        international = _international(digits[2:])
        if international.reason is None:
            return international
        return _invalid(f"{international.reason} (a leading 00 is read as +)")
    if has_plus:
        return _international(digits)
    return _national(digits, region)


def normalize_recipient(number: str, region: str | None) -> NormalizedRecipient:
    """Reduce ``number`` to E.164 (a valid number; national ones read in ``region``) or to a
    short code's digits, or say why it is neither (see the module docstring).

    ``region`` is an ISO 3166 code such as "US"; None reads international numbers and short
    codes only.
    """
    if not isinstance(number, str):
        return _invalid("it is not text")
    if region is not None and not isinstance(region, str):
        return _invalid("the region is not text")
    return _normalize(number, region)
