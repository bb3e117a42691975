"""Pure helpers of the device handle: addresses and the region."""

from __future__ import annotations

import pytest

from android_bridge._device import parse_address, region_from_props


@pytest.mark.parametrize(
    ("sim", "locale", "region"),
    [
        ("us", "", "US"),
        ("us,gb", "fr-FR", "US"),
        (",gb", "", "GB"),
        ("", "en-GB", "GB"),
        ("", "zh-Hans-CN", "CN"),
        ("", "de_DE", "DE"),
        ("", "en", None),
        ("\n", "\n", None),
    ],
)
def test_region_from_sim_then_locale(sim: str, locale: str, region: str | None) -> None:
    """The SIM's country wins, then the locale's region, else none (the caller's default)."""
    assert region == region_from_props(sim, locale)


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        ("127.0.0.1:5555", ("127.0.0.1", 5555)),
        ("emulator-host", ("emulator-host", 5555)),
        ("[::1]:5037", ("::1", 5037)),
    ],
)
def test_address_parsing(address: str, parsed: tuple[str, int]) -> None:
    """host:port, a bare host (port 5555) and [v6]:port are understood."""
    assert parsed == parse_address(address)


@pytest.mark.parametrize("address", ["", "host:0", "host:70000", "a:b:c", "host:x"])
def test_bad_addresses_are_refused(address: str) -> None:
    """Malformed addresses raise ValueError before any connection."""
    with pytest.raises(ValueError):
        parse_address(address)
