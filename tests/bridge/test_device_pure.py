"""Pure helpers of the device handle: addresses and the region."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from android_bridge import Device, UnparseableOutput
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


class _CannedShell(Device):
    """A Device whose shell answers with canned bytes built from the framed command."""

    def __init__(self, render: Callable[[str], bytes]) -> None:
        super().__init__(
            "127.0.0.1:1",
            signer=None,
            connect_timeout_s=1,
            command_timeout_s=1,
            default_region="US",
        )
        self._render = render

    async def shell(self, command: str) -> bytes:
        match = re.search(r"echo (SB\w+):0:begin", command)
        assert match is not None
        return self._render(match.group(1))


async def test_pty_output_is_refused() -> None:
    """Output whose own frame lines end in CRLF came through a PTY: refused."""
    device = _CannedShell(lambda n: f"{n}:0:begin\r\nhi\r\n{n}:0:end:0\r\n".encode())
    with pytest.raises(UnparseableOutput, match="PTY"):
        await device.run(["echo hi"])


async def test_invalid_utf8_is_refused() -> None:
    """Bytes that are not UTF-8 are refused rather than decoded lossily."""
    device = _CannedShell(
        lambda n: f"{n}:0:begin\n".encode() + b"\xff\n" + f"{n}:0:end:0\n".encode()
    )
    with pytest.raises(UnparseableOutput, match="UTF-8"):
        await device.run(["x"])


async def test_clean_framed_output_is_split() -> None:
    """Framed output is split into each step's text and exit status."""
    device = _CannedShell(
        lambda n: f"{n}:0:begin\na\r\nb\n{n}:0:end:0\n{n}:1:begin\n{n}:1:end:127\n".encode()
    )
    steps = await device.run(["x", "y"])
    expected = [("a\r\nb\n", 0), ("", 127)]
    assert expected == [(step.output, step.exit_status) for step in steps]
