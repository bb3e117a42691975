"""Fixtures for bridge tests: a simulated phone on loopback, or a real device when asked.

``STAREBRAIN_TEST_DEVICE=host:port`` points the ``target`` fixture's device-marked variant at
a real emulator or phone; without it those variants are skipped.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from android_bridge import Device, ensure_key
from android_bridge.simulator import SimulatedPhone

DEVICE_ENV = "STAREBRAIN_TEST_DEVICE"
RECIPIENT_ENV = "STAREBRAIN_TEST_RECIPIENT"

PhoneFactory = Callable[..., Awaitable[SimulatedPhone]]


@pytest.fixture
def bridge_key(tmp_path: Path) -> Path:
    """A fresh ADB key pair for this test (0600)."""
    return ensure_key(tmp_path / "keys" / "adbkey")


@pytest.fixture
def bridge_authorized_keys(tmp_path: Path, bridge_key: Path) -> Path:
    """An ``adb_keys`` file that authorises ``bridge_key``."""
    path = tmp_path / "adb_keys"
    path.write_text(Path(str(bridge_key) + ".pub").read_text(encoding="utf-8").strip() + "\n")
    return path


@pytest.fixture
def make_phone(phone_factory: PhoneFactory, bridge_authorized_keys: Path) -> PhoneFactory:
    """Start simulated phones that authorise ``bridge_key`` (the shared ``phone_factory``
    stops them at teardown); keyword arguments go to SimulatedPhone."""

    async def factory(**kwargs: Any) -> SimulatedPhone:
        kwargs.setdefault("authorized_keys_path", bridge_authorized_keys)
        return await phone_factory(**kwargs)

    return factory


@pytest.fixture
async def sim_phone(make_phone: PhoneFactory) -> SimulatedPhone:
    """A started shell-mode simulated phone."""
    return await make_phone()


@pytest.fixture
async def sim_device(sim_phone: SimulatedPhone, bridge_key: Path) -> AsyncIterator[Device]:
    """A bridge Device connected to ``sim_phone``."""
    device = await Device.connect(
        sim_phone.serial, key_path=bridge_key, connect_timeout_s=2, command_timeout_s=5
    )
    async with device:
        yield device


@attrs.frozen
class Target:
    """What an integration check runs against: the simulator or a real device."""

    device: Device
    #: The simulated phone, or None on a real device.
    phone: SimulatedPhone | None
    #: A number it is fine to text.
    recipient: str


@pytest.fixture(
    params=["simulator", pytest.param("device", marks=pytest.mark.device)],
)
async def target(
    request: pytest.FixtureRequest, make_phone: PhoneFactory, bridge_key: Path
) -> AsyncIterator[Target]:
    """A connected device: the simulated phone, or the real one named by STAREBRAIN_TEST_DEVICE."""
    if request.param == "device":
        address = os.environ.get(DEVICE_ENV)
        if not address:
            pytest.skip(f"set {DEVICE_ENV}=host:port to run against a real device")
        key = os.environ.get("STAREBRAIN_ADB_KEY")
        device = await Device.connect(address, key_path=key, command_timeout_s=30)
        async with device:
            yield Target(device, None, os.environ.get(RECIPIENT_ENV, "5554"))
        return
    phone = await make_phone()
    device = await Device.connect(phone.serial, key_path=bridge_key, command_timeout_s=5)
    async with device:
        yield Target(device, phone, "+12025550143")
