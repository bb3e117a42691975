"""How many SMS segments a body becomes, split the way Android splits it before sending.

Pure: no I/O. Android (``android.telephony.SmsMessage.fragmentText`` and
``calculateLength``, frameworks/opt/telephony ``GsmAlphabet`` and ``SmsMessageBase``,
android-10.0.0_r1 to android-15.0.0_r1) encodes a body as **GSM-7** when every character is
in the GSM 03.38 default alphabet or its extension table, else as **UCS-2**:

* GSM-7: a character of the default alphabet is one septet, one of the extension table
  (``^ { } \\ [ ~ ] | €`` and form feed) two (the escape, then the character). Up to 160
  septets fit in one SMS; a longer body is split into segments of at most 153 septets (a
  user data header of 6 bytes takes the other 7), and an extension character is never split
  from its escape (``GsmAlphabet.findGsmSeptetLimitIndex``).
* UCS-2: UTF-16 code units, a character outside the Basic Multilingual Plane (most emoji)
  counting 2. Up to 70 fit in one SMS, else segments of at most 67 units that never end
  inside a surrogate pair and, where one can, end on a grapheme cluster boundary
  (``SmsMessageBase.findNextUnicodePosition``, ICU's ``BreakIterator.getCharacterInstance``).

What this does not model: national language shift tables (off unless the carrier enables
them, ``config_sms_enabled_single_shift_tables``), a carrier forcing 7-bit
(``config_sms_force_7bit_encoding``), CDMA, and the rarer rules of Unicode's grapheme
clusters (prepended marks, Indic conjuncts): the cluster rules here are those of UAX #29
that matter for emoji and combining marks.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Final, Literal

import attrs

#: The GSM 03.38 default alphabet in code order (Android's ``GsmAlphabet`` table 0). Position
#: 0x1B is the escape to the extension table, not a character: a NUL stands in for it here.
GSM7_DEFAULT_ALPHABET: Final = (
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞ\x00ÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
#: The characters of the default extension table (each costs the escape septet too).
GSM7_EXTENSION: Final = frozenset("\f^{}\\[~]|€")

#: Septets in one SMS, and in each segment of a longer one (the concatenation header).
GSM7_SINGLE: Final = 160
GSM7_PER_SEGMENT: Final = 153
#: UTF-16 code units in one SMS, and in each segment of a longer one.
UCS2_SINGLE: Final = 70
UCS2_PER_SEGMENT: Final = 67

_BASIC: Final = frozenset(GSM7_DEFAULT_ALPHABET) - {"\x00"}

Encoding = Literal["GSM-7", "UCS-2"]


@attrs.frozen(kw_only=True)
class SegmentCount:
    """How a body goes out as SMS."""

    #: "GSM-7" or "UCS-2"
    encoding: Encoding
    #: septets (GSM-7) or UTF-16 code units (UCS-2) of the whole body
    units: int
    #: SMS segments the phone sends it as (0 for an empty body)
    segments: int
    #: the most units one segment holds at this count (160/153 or 70/67)
    per_segment: int
    #: the first character that rules out GSM-7 (None for GSM-7)
    first_non_gsm: str | None = None

    @property
    def unit_name(self) -> str:
        """What ``units`` counts: "septets" or "UTF-16 code units"."""
        return "septets" if self.encoding == "GSM-7" else "UTF-16 code units"


def gsm7_septets(character: str) -> int | None:
    """Septets ``character`` takes in GSM-7 (1 or 2), None when GSM-7 cannot carry it."""
    if character in _BASIC:
        return 1
    if character in GSM7_EXTENSION:
        return 2
    return None


def utf16_units(character: str) -> int:
    """UTF-16 code units of one code point: 2 outside the Basic Multilingual Plane."""
    return 2 if ord(character) > 0xFFFF else 1


def count_segments(body: str) -> SegmentCount:
    """The encoding, length and segment count of ``body`` as Android sends it."""
    return _count(body, fragments(body))


@functools.lru_cache(maxsize=4096)
def body_segments(body: str) -> int:
    """How many SMS ``body`` is sent as (``count_segments``), remembered: every read of the
    phone asks it again of each attempt it watches."""
    return count_segments(body).segments


def fragments(body: str) -> tuple[str, ...]:
    """``body`` cut into the texts of its SMS segments, as ``SmsMessage.fragmentText`` does."""
    first_non_gsm = next((char for char in body if gsm7_septets(char) is None), None)
    if first_non_gsm is None:
        septets = [gsm7_septets(char) or 0 for char in body]
        if sum(septets) <= GSM7_SINGLE:
            return (body,) if body else ()
        return _split_gsm7(body, septets)
    units = [utf16_units(char) for char in body]
    if sum(units) <= UCS2_SINGLE:
        return (body,)
    return _split_ucs2(body, units)


def _count(body: str, parts: tuple[str, ...]) -> SegmentCount:
    first_non_gsm = next((char for char in body if gsm7_septets(char) is None), None)
    if first_non_gsm is None:
        return SegmentCount(
            encoding="GSM-7",
            units=sum(gsm7_septets(char) or 0 for char in body),
            segments=len(parts),
            per_segment=GSM7_SINGLE if len(parts) <= 1 else GSM7_PER_SEGMENT,
        )
    return SegmentCount(
        encoding="UCS-2",
        units=sum(utf16_units(char) for char in body),
        segments=len(parts),
        per_segment=UCS2_SINGLE if len(parts) <= 1 else UCS2_PER_SEGMENT,
        first_non_gsm=first_non_gsm,
    )


def _split_gsm7(body: str, septets: list[int]) -> tuple[str, ...]:
    """``GsmAlphabet.findGsmSeptetLimitIndex``: as many characters as fit, greedily."""
    parts: list[str] = []
    start = 0
    while start < len(body):
        used = 0
        end = start
        while end < len(body) and used + septets[end] <= GSM7_PER_SEGMENT:
            used += septets[end]
            end += 1
        parts.append(body[start:end])
        start = end
    return tuple(parts)


def _split_ucs2(body: str, units: list[int]) -> tuple[str, ...]:
    """``SmsMessageBase.findNextUnicodePosition``: as many code units as fit, moved back to
    the last grapheme cluster boundary when that leaves something in the segment, else to
    the last code point boundary (a surrogate pair is never split)."""
    boundaries = _cluster_boundaries(body)
    parts: list[str] = []
    start = 0
    while start < len(body):
        used = 0
        end = start
        while end < len(body) and used + units[end] <= UCS2_PER_SEGMENT:
            used += units[end]
            end += 1
        if end < len(body) and end not in boundaries:
            preceding = max((index for index in boundaries if start < index < end), default=None)
            if preceding is not None:
                end = preceding
        parts.append(body[start:end])
        start = end
    return tuple(parts)


# --------------------------------------------------------------------------- clusters

_CR, _LF, _CONTROL, _EXTEND, _ZWJ, _RI, _SPACING, _L, _V, _T, _LV, _LVT, _PICT, _OTHER = range(14)


def _is_extended_pictographic(code: int) -> bool:
    """Most of Unicode's ``Extended_Pictographic`` (emoji and their reserved blocks)."""
    return (
        code in (0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139, 0x3030, 0x303D, 0x3297, 0x3299)
        or 0x2190 <= code <= 0x21FF
        or 0x2300 <= code <= 0x23FF
        or 0x25A0 <= code <= 0x27BF
        or 0x2934 <= code <= 0x2935
        or 0x2B05 <= code <= 0x2B55
        or (0x1F000 <= code <= 0x1FAFF and not 0x1F1E6 <= code <= 0x1F1FF)
        or 0x1FC00 <= code <= 0x1FFFD
    )


def _break_class(character: str) -> int:
    """The UAX #29 ``Grapheme_Cluster_Break`` class of a code point (approximated)."""
    code = ord(character)
    if character == "\r":
        return _CR
    if character == "\n":
        return _LF
    if code == 0x200D:
        return _ZWJ
    if 0x1F1E6 <= code <= 0x1F1FF:
        return _RI
    if 0x1100 <= code <= 0x115F or 0xA960 <= code <= 0xA97C:
        return _L
    if 0x1160 <= code <= 0x11A7 or 0xD7B0 <= code <= 0xD7C6:
        return _V
    if 0x11A8 <= code <= 0x11FF or 0xD7CB <= code <= 0xD7FB:
        return _T
    if 0xAC00 <= code <= 0xD7A3:
        return _LV if (code - 0xAC00) % 28 == 0 else _LVT
    if (
        code == 0x200C
        or 0x1F3FB <= code <= 0x1F3FF  # emoji modifiers (skin tones)
        or 0xE0020 <= code <= 0xE007F  # tags (subdivision flags)
        or 0xFF9E <= code <= 0xFF9F  # halfwidth katakana voiced sound marks
    ):
        return _EXTEND
    category = unicodedata.category(character)
    if category in ("Mn", "Me"):
        return _EXTEND
    if category == "Mc":
        return _SPACING
    if category in ("Cc", "Zl", "Zp") or (category == "Cf" and code != 0x200C):
        return _CONTROL
    if _is_extended_pictographic(code):
        return _PICT
    return _OTHER


def _cluster_boundaries(text: str) -> frozenset[int]:
    """Indexes (in code points) where a grapheme cluster starts, 0 and ``len(text)`` included."""
    classes = [_break_class(char) for char in text]
    boundaries = {0, len(text)}
    regional_run = 0  # regional indicators in a row right before ``index``
    pict_extend = False  # text[:index] ends with ExtPict Extend*
    pict_zwj = False  # text[:index] ends with ExtPict Extend* ZWJ (GB11)
    for index in range(1, len(text)):
        before, after = classes[index - 1], classes[index]
        regional_run = regional_run + 1 if before == _RI else 0
        if before == _ZWJ:
            pict_zwj, pict_extend = pict_extend, False
        elif before == _PICT:
            pict_zwj, pict_extend = False, True
        elif before == _EXTEND:
            pict_zwj = False
        else:
            pict_zwj = pict_extend = False
        if not _joined(before, after, regional_run, pict_zwj):
            boundaries.add(index)
    return frozenset(boundaries)


def _joined(before: int, after: int, regional_run: int, emoji_zwj: bool) -> bool:
    """True when UAX #29 forbids a break between ``before`` and ``after`` (GB3 to GB13)."""
    if before == _CR and after == _LF:
        return True  # GB3
    if before in (_CR, _LF, _CONTROL) or after in (_CR, _LF, _CONTROL):
        return False  # GB4, GB5
    if before == _L and after in (_L, _V, _LV, _LVT):
        return True  # GB6
    if before in (_LV, _V) and after in (_V, _T):
        return True  # GB7
    if before in (_LVT, _T) and after == _T:
        return True  # GB8
    if after in (_EXTEND, _ZWJ, _SPACING):
        return True  # GB9, GB9a
    if emoji_zwj and after == _PICT:
        return True  # GB11
    return before == _RI and after == _RI and regional_run % 2 == 1  # GB12, GB13
