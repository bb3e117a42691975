"""Phones on USB, named ``usb:SERIAL``, through adb-shell's USB transport (optional).

adb-shell's ``UsbTransport`` (its ``usb`` extra, which installs ``libusb1``) is blocking, and
:class:`~android_bridge._device.Device` speaks to ``AdbDeviceAsync``; :class:`ThreadedTransport`
runs each blocking call in a worker thread. USB support is optional: without
``starebrain-actions[usb]`` a ``usb:`` device is refused, before anything is attempted, with
an error saying what to install.

Only one program at a time can hold a phone's ADB interface: stop the ``adb`` server
(``adb kill-server``) before using a phone on USB here. On Linux the user needs access to the
USB device (the distribution's android-udev rules, or ``plugdev``).
"""

from __future__ import annotations

import asyncio
import importlib
import re
import threading
from collections.abc import Callable
from typing import Any, Final

from adb_shell.transport.base_transport_async import BaseTransportAsync

from android_bridge.exceptions import DeviceUnusable

#: How a phone on USB is named, everywhere a device is: ``usb:`` and its USB serial number
#: (what ``adb devices`` lists), e.g. ``usb:1A2B3C4D5E6F``.
USB_PREFIX: Final = "usb:"
#: A USB serial number as this package accepts it.
USB_SERIAL_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
#: What to install for USB support.
USB_EXTRA: Final = "starebrain-actions[usb]"

_SERIAL = re.compile(USB_SERIAL_PATTERN)

#: Opens a blocking adb-shell transport (connected) within a timeout in seconds.
Opener = Callable[[float | None], Any]


def usb_serial(address: str) -> str | None:
    """The serial number of a ``usb:SERIAL`` device name; None for any other name.

    Raises:
        ValueError: the name starts with ``usb:`` but the serial is malformed.
    """
    if not address.startswith(USB_PREFIX):
        return None
    serial = address[len(USB_PREFIX) :]
    if not _SERIAL.fullmatch(serial):
        raise ValueError(
            f"expected usb:SERIAL with the phone's USB serial number (letters, digits, '.', '_',"
            f" '-'), got {address!r}"
        )
    return serial


def _usb_module(address: str) -> Any:
    """adb-shell's USB transport module.

    Raises:
        DeviceUnusable: the ``[usb]`` extra (``libusb1``) or the libusb library is missing.
    """
    try:
        return importlib.import_module("adb_shell.transport.usb_transport")
    except ImportError as exc:
        raise DeviceUnusable(
            f"{address}: phones on USB need the optional USB support: pip install"
            f" '{USB_EXTRA}' (it installs libusb1 for adb-shell); ADB over TCP (HOST:PORT)"
            " works without it"
        ) from exc
    except OSError as exc:  # libusb1 is there, the libusb shared library is not
        raise DeviceUnusable(
            f"{address}: the libusb library could not be loaded ({exc}); install libusb-1.0"
            " (e.g. apt install libusb-1.0-0)"
        ) from exc


class ThreadedTransport(BaseTransportAsync):  # type: ignore[misc]
    """A blocking adb-shell transport driven from asyncio, one worker thread per call.

    Errors of the blocking transport listed in ``errors`` become :class:`ConnectionError`
    (an ``OSError``), which the device layer maps like a TCP transport's socket errors; after
    one, the link is considered dead.
    """

    def __init__(
        self, opener: Opener, *, name: str, errors: tuple[type[BaseException], ...] = ()
    ) -> None:
        self._opener = opener
        self._name = name
        self._errors = errors
        self._transport: Any = None
        self._broken = False

    async def _call(self, function: Callable[[], Any]) -> Any:
        try:
            return await asyncio.to_thread(function)
        except self._errors as exc:
            self._broken = True
            raise ConnectionError(f"{self._name}: {exc}") from exc
        except OSError:
            self._broken = True
            raise

    async def connect(self, transport_timeout_s: float | None) -> None:
        """Open and connect the blocking transport (in a worker thread).

        A worker thread cannot be stopped: when the caller is cancelled (a deadline, Ctrl-C)
        while it opens, the transport it opens late is closed as soon as it exists, so the
        phone's USB interface is not left claimed by a handle nobody holds.
        """
        self._broken = False
        opening = asyncio.ensure_future(self._call(lambda: self._opener(transport_timeout_s)))
        try:
            self._transport = await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(_close_late)
            raise

    async def bulk_read(self, numbytes: int, transport_timeout_s: float | None) -> bytes:
        """Read up to ``numbytes`` (in a worker thread)."""
        transport = self._connected()
        data: bytes = await self._call(lambda: transport.bulk_read(numbytes, transport_timeout_s))
        return bytes(data)

    async def bulk_write(self, data: bytes, transport_timeout_s: float | None) -> int:
        """Write ``data`` (in a worker thread)."""
        transport = self._connected()
        written: int = await self._call(lambda: transport.bulk_write(data, transport_timeout_s))
        return written

    async def close(self) -> None:
        """Close the blocking transport (idempotent)."""
        transport, self._transport = self._transport, None
        if transport is not None:
            await asyncio.to_thread(transport.close)

    def is_alive(self) -> bool:
        """True while connected and no call has failed."""
        return self._transport is not None and not self._broken

    def _connected(self) -> Any:
        if self._transport is None:
            raise ConnectionResetError(f"{self._name}: not connected")
        return self._transport


def _close_late(opening: asyncio.Future[Any]) -> None:
    """Close a transport whose opener finished after its caller gave up (in a thread)."""
    if opening.cancelled() or opening.exception() is not None:
        return
    transport = opening.result()
    threading.Thread(target=transport.close, name="close-abandoned-transport").start()


def usb_transport(address: str) -> ThreadedTransport:
    """The transport to the phone on USB named ``address`` (``usb:SERIAL``); it finds the
    phone by its serial number when it connects.

    Raises:
        ValueError: ``address`` is not a well-formed ``usb:SERIAL``.
        DeviceUnusable: USB support is not installed.
    """
    serial = usb_serial(address)
    if serial is None:
        raise ValueError(f"not a usb:SERIAL device name: {address!r}")
    module = _usb_module(address)
    adb_errors = importlib.import_module("adb_shell.exceptions")
    errors: tuple[type[BaseException], ...] = (
        module.usb1.USBError,
        adb_errors.UsbDeviceNotFoundError,
        adb_errors.UsbReadFailedError,
        adb_errors.UsbWriteFailedError,
    )

    def opener(timeout_s: float | None) -> Any:
        try:
            transport = module.UsbTransport.find_adb(
                serial=serial, default_transport_timeout_s=timeout_s
            )
        except adb_errors.UsbDeviceNotFoundError as exc:
            raise ConnectionRefusedError(
                f"no phone with USB serial {serial} answers as an ADB device: is it plugged in,"
                " with USB debugging on, and no adb server holding it (adb kill-server)?"
            ) from exc
        transport.connect(timeout_s)
        return transport

    return ThreadedTransport(opener, name=address, errors=errors)
