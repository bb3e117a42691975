"""Phones named ``usb:SERIAL``: the name, the optional extra, and the thread adapter that lets
adb-shell's blocking USB transport drive ``AdbDeviceAsync``.

No USB phone is attached here: the adapter is tested with adb-shell's *blocking TCP*
transport against the simulated phone (the same adapter, the real ADB protocol), and a real
USB phone runs only in the ``device``-marked test, named by ``STAREBRAIN_TEST_USB_DEVICE``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
from pathlib import Path

import pytest
from adb_shell import exceptions as adb_exceptions
from adb_shell.adb_device_async import AdbDeviceAsync
from adb_shell.transport.tcp_transport import TcpTransport
from hypothesis import given
from hypothesis import strategies as st

from android_bridge import Device, DeviceUnreachable
from android_bridge._keys import load_signer
from android_bridge._usb import ThreadedTransport, usb_serial, usb_transport
from android_bridge.simulator import SimulatedPhone

USB_DEVICE_ENV = "STAREBRAIN_TEST_USB_DEVICE"


@pytest.fixture
def no_usb_support(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``libusb1`` unimportable, as it is without the ``[usb]`` extra."""
    monkeypatch.setitem(sys.modules, "usb1", None)
    monkeypatch.delitem(sys.modules, "adb_shell.transport.usb_transport", raising=False)


@pytest.fixture
def closed_port() -> int:
    """A loopback TCP port with nothing listening on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def blocking_tcp(address: str) -> ThreadedTransport:
    """The thread adapter over adb-shell's blocking TCP transport to ``host:port``."""
    host, port = address.rsplit(":", 1)

    def opener(timeout_s: float | None) -> TcpTransport:
        transport = TcpTransport(host, int(port))
        transport.connect(timeout_s)
        return transport

    return ThreadedTransport(opener, name=address, errors=(adb_exceptions.TcpTimeoutException,))


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", fullmatch=True))
def test_usb_names_carry_their_serial(serial: str) -> None:
    """Any well-formed serial round-trips through its ``usb:`` name."""
    assert serial == usb_serial("usb:" + serial)


@pytest.mark.parametrize(
    "name", ["usb:", "usb:-x", "usb:a b", "usb:a/b", "usb:é", "usb:" + "a" * 129]
)
def test_malformed_usb_names_are_refused(name: str) -> None:
    """A ``usb:`` name with no serial or a malformed one is a ValueError saying the form."""
    with pytest.raises(ValueError, match="usb:SERIAL"):
        usb_serial(name)


@pytest.mark.parametrize("name", ["127.0.0.1:5555", "[::1]:5555", "emulator-5554"])
def test_other_names_are_not_usb(name: str) -> None:
    """Names without the ``usb:`` prefix are left to TCP."""
    assert usb_serial(name) is None


async def test_usb_phone_without_the_extra_is_unreachable_with_what_to_install(
    no_usb_support: None, tmp_path: Path
) -> None:
    """Without libusb1, connecting to ``usb:SERIAL`` is DeviceUnreachable (nothing was sent)
    naming the extra to install; a TCP name is not affected."""
    with pytest.raises(DeviceUnreachable, match=r"pip install 'starebrain-actions\[usb\]'"):
        usb_transport("usb:0123456789ABCDEF")
    with pytest.raises(DeviceUnreachable, match=r"usb:R58M: phones on USB need .*\[usb\]"):
        await Device.connect("usb:R58M", key_path=tmp_path / "adbkey", connect_timeout_s=1)


async def test_thread_adapter_speaks_adb_to_a_phone(
    sim_phone: SimulatedPhone, bridge_key: Path
) -> None:
    """adb-shell's async device over the adapter: handshake, RSA auth and shell round trips
    work exactly as over the async TCP transport."""
    transport = blocking_tcp(sim_phone.serial)
    adb = AdbDeviceAsync(transport, default_transport_timeout_s=5)
    assert await adb.connect(rsa_keys=[load_signer(bridge_key)], auth_timeout_s=5)
    assert transport.is_alive()
    first = await adb.shell("id", decode=False)
    second = await adb.shell("getprop ro.build.version.sdk", decode=False)
    await adb.close()
    assert b"uid=2000(shell)" in first
    assert b"35" == second.strip()
    assert not transport.is_alive()


async def test_thread_adapter_maps_transport_errors(
    sim_phone: SimulatedPhone, closed_port: int
) -> None:
    """A blocking transport's own errors become ConnectionError (an OSError the device layer
    maps), socket errors stay what they are; either way the link is no longer alive."""
    refused = blocking_tcp(f"127.0.0.1:{closed_port}")
    with pytest.raises(ConnectionRefusedError):
        await refused.connect(1)
    assert not refused.is_alive()
    silent = blocking_tcp(sim_phone.serial)
    await silent.connect(1)
    assert silent.is_alive()
    with pytest.raises(ConnectionError, match=sim_phone.serial):
        await silent.bulk_read(24, 0.05)  # the phone waits for our CNXN first: a timeout
    assert not silent.is_alive()
    await silent.close()
    with pytest.raises(ConnectionResetError, match="not connected"):
        await silent.bulk_write(b"x", 1)


async def test_a_transport_opened_after_its_caller_gave_up_is_closed(
    sim_phone: SimulatedPhone,
) -> None:
    """A worker thread cannot be cancelled: when the caller gives up while the blocking opener
    runs (a deadline, Ctrl-C), the transport it opens late is closed, not left holding the
    phone (a USB interface stays claimed until its handle closes)."""
    host, port = sim_phone.serial.rsplit(":", 1)
    release = threading.Event()
    closed = threading.Event()
    opened: list[TcpTransport] = []

    class Recorded(TcpTransport):
        def close(self) -> None:
            super().close()
            closed.set()

    def slow_opener(timeout_s: float | None) -> TcpTransport:
        transport = Recorded(host, int(port))
        transport.connect(timeout_s)
        opened.append(transport)
        release.wait(10)
        return transport

    adapter = ThreadedTransport(slow_opener, name=sim_phone.serial)
    connecting = asyncio.create_task(adapter.connect(1))
    await asyncio.sleep(0.05)
    connecting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await connecting
    assert not adapter.is_alive()
    assert not closed.is_set()
    release.set()
    assert await asyncio.to_thread(closed.wait, 10)
    assert 1 == len(opened)


@pytest.mark.device
async def test_a_real_usb_phone_answers() -> None:
    """A phone on USB (``STAREBRAIN_TEST_USB_DEVICE=usb:SERIAL``, the [usb] extra installed,
    no adb server running) connects, authenticates and reads its facts."""
    name = os.environ.get(USB_DEVICE_ENV)
    if not name:
        pytest.skip(f"set {USB_DEVICE_ENV}=usb:SERIAL to run against a phone on USB")
    device = await Device.connect(name, key_path=os.environ.get("STAREBRAIN_ADB_KEY"))
    async with device:
        facts = await device.facts()
    assert facts.uid in (0, 2000)
    assert name == device.serial
