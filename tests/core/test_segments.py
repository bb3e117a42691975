"""SMS segments: GSM-7 vs UCS-2 and the split Android makes (``SmsMessage.fragmentText``)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starebrain_actions.core.segments import (
    GSM7_DEFAULT_ALPHABET,
    GSM7_EXTENSION,
    GSM7_PER_SEGMENT,
    GSM7_SINGLE,
    UCS2_PER_SEGMENT,
    UCS2_SINGLE,
    count_segments,
    fragments,
    gsm7_septets,
    utf16_units,
)

GSM_BASIC = sorted(set(GSM7_DEFAULT_ALPHABET) - {"\x00"})
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 7 code points, 11 units
FLAG_FR = "\U0001f1eb\U0001f1f7"


@pytest.mark.parametrize(
    ("body", "encoding", "units", "segments"),
    [
        pytest.param("a" * 160, "GSM-7", 160, 1, id="160-septets-one-sms"),
        pytest.param("a" * 161, "GSM-7", 161, 2, id="161-septets-two"),
        pytest.param("a" * 306, "GSM-7", 306, 2, id="two-full-segments"),
        pytest.param("a" * 307, "GSM-7", 307, 3, id="one-septet-more-three"),
        pytest.param("€" * 80, "GSM-7", 160, 1, id="extension-counts-double"),
        pytest.param("€" * 81, "GSM-7", 162, 2, id="extension-over-160"),
        pytest.param("ñandù @ £5 Ç", "GSM-7", 12, 1, id="default-alphabet-accents"),
        pytest.param("ñandú", "UCS-2", 5, 1, id="u-acute-is-not-gsm"),
        pytest.param("Ж" * 70, "UCS-2", 70, 1, id="70-units-one-sms"),
        pytest.param("Ж" * 71, "UCS-2", 71, 2, id="71-units-two"),
        pytest.param("Ж" * 135, "UCS-2", 135, 3, id="two-full-ucs2-segments-plus-one"),
        pytest.param("😀" * 35, "UCS-2", 70, 1, id="emoji-count-two-units"),
        pytest.param("😀" * 36, "UCS-2", 72, 2, id="emoji-over-70-units"),
        pytest.param("a" * 159 + "\u2019", "UCS-2", 160, 3, id="one-curly-quote-forces-ucs2"),
        pytest.param("", "GSM-7", 0, 0, id="empty"),
    ],
)
def test_known_counts(body: str, encoding: str, units: int, segments: int) -> None:
    """Encoding, units and segment counts of bodies whose split is known."""
    count = count_segments(body)
    assert (encoding, units, segments) == (count.encoding, count.units, count.segments)


def test_extension_character_is_never_split_from_its_escape() -> None:
    """152 septets then '€' (2): the euro cannot end the first segment at 154, so it opens
    the second (``findGsmSeptetLimitIndex``), even though 164 septets would fit in 2 anyway."""
    body = "a" * 152 + "€" + "a" * 10
    assert ["a" * 152, "€" + "a" * 10] == list(fragments(body))


def test_extension_at_segment_edges_can_add_a_segment() -> None:
    """153 euros are 306 septets, but a segment holds 76 of them (152 septets, a 77th would
    make 154): 3 segments where ceil(306 / 153) says 2."""
    count = count_segments("€" * 153)
    assert (306, 3) == (count.units, count.segments)
    assert [76, 76, 1] == [len(part) for part in fragments("€" * 153)]


def test_surrogate_pair_is_never_split() -> None:
    """36 emoji (72 units): the first segment holds 33 (66 units), not 33 and a half."""
    assert [33, 3] == [len(part) for part in fragments("😀" * 36)]


def test_zwj_sequence_moves_whole_to_the_next_segment() -> None:
    """A family emoji (11 units) that would straddle unit 67 goes whole to the next segment."""
    parts = fragments(FAMILY * 7)
    assert [FAMILY * 6, FAMILY] == list(parts)


def test_flags_stay_whole() -> None:
    """Regional indicators pair into flags: a segment never ends between the two halves."""
    parts = fragments(FLAG_FR * 17 + "x")
    assert all(len(part) % 2 == 0 for part in parts[:-1])
    assert FLAG_FR * 17 + "x" == "".join(parts)


def test_combining_mark_stays_with_its_base() -> None:
    """'e' + COMBINING ACUTE ACCENT is one cluster: 33 pairs (66 units), then the rest."""
    assert [66, 14] == [len(part) for part in fragments("e\u0301" * 40)]


def test_first_non_gsm_character_is_named() -> None:
    """The character that forces UCS-2 is reported (the first one)."""
    assert "\u2019" == count_segments("It\u2019s \u201chere\u201d").first_non_gsm


@given(st.text(alphabet=st.sampled_from([*GSM_BASIC, *sorted(GSM7_EXTENSION)]), max_size=700))
def test_gsm7_split_is_a_partition_within_limits(body: str) -> None:
    """Any GSM-7 body: the segments join back to the body, each fits, and one SMS holds it
    exactly when it has at most 160 septets."""
    parts = fragments(body)
    septets = [sum(gsm7_septets(char) or 0 for char in part) for part in parts]
    count = count_segments(body)
    assert "GSM-7" == count.encoding
    assert body == "".join(parts)
    assert (count.units <= GSM7_SINGLE) == (len(parts) <= 1)
    limit = GSM7_SINGLE if len(parts) == 1 else GSM7_PER_SEGMENT
    assert all(0 < used <= limit for used in septets)
    assert len(parts) >= math.ceil(count.units / limit) if body else not parts
    # greedy: no segment could have taken the next character
    for used, following in zip(septets, parts[1:], strict=False):
        assert used + (gsm7_septets(following[0]) or 0) > GSM7_PER_SEGMENT


@given(st.text(min_size=1, max_size=300).filter(lambda t: any(gsm7_septets(c) is None for c in t)))
def test_ucs2_split_is_a_partition_within_limits(body: str) -> None:
    """Any body GSM-7 cannot carry: UCS-2, segments join back, each fits in 70 (one) or 67
    (several) UTF-16 units, and none is empty."""
    parts = fragments(body)
    count = count_segments(body)
    units = [sum(utf16_units(char) for char in part) for part in parts]
    assert "UCS-2" == count.encoding
    assert len(body.encode("utf-16-le")) // 2 == count.units
    assert body == "".join(parts)
    limit = UCS2_SINGLE if len(parts) == 1 else UCS2_PER_SEGMENT
    assert all(0 < used <= limit for used in units)
    assert (count.units <= UCS2_SINGLE) == (len(parts) == 1)
