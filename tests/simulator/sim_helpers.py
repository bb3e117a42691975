"""Helpers for simulator tests: an adb-shell connection and a raw ADB client for wire tests."""

from __future__ import annotations

import asyncio
import shlex
import struct
from typing import Any

from adb_shell.adb_device_async import AdbDeviceTcpAsync
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone

CNXN = 0x4E584E43
AUTH = 0x48545541
OPEN = 0x4E45504F
OKAY = 0x59414B4F
CLSE = 0x45534C43
WRTE = 0x45545257
HEADER = struct.Struct("<6I")


async def connect(
    phone: SimulatedPhone, signer: PythonRSASigner, **kwargs: Any
) -> AdbDeviceTcpAsync:
    """Connect and authenticate to ``phone`` with adb-shell, as production code would."""
    device = AdbDeviceTcpAsync(phone.host, phone.port, default_transport_timeout_s=5)
    kwargs.setdefault("auth_timeout_s", 2)
    kwargs.setdefault("read_timeout_s", 5)
    await device.connect(rsa_keys=[signer], **kwargs)
    return device


def send_command(address: str, body: str, *, wait: bool = True, clear_task: bool = True) -> str:
    """The command line that opens a compose window and presses send.

    ``-W`` makes ``am`` return only once the window is displayed (without it the keys may
    reach the window that had focus before); ``--activity-clear-task`` makes the intent's
    extras reach a fresh window even when the app's task is still open with an older draft.
    """
    options = (" -W" if wait else "") + (" --activity-clear-task" if clear_task else "")
    return (
        f"am start{options} -a android.intent.action.SENDTO"
        f" -d {shlex.quote('smsto:' + address)} --es sms_body {shlex.quote(body)};"
        ' input keyevent 22; input keyevent 66; echo "__SB_EXIT:$?"'
    )


def without_wait_lines(output: str) -> str:
    """``am start -W`` output without its timing lines (``TotalTime``, ``WaitTime``)."""
    return "".join(
        line
        for line in output.splitlines(keepends=True)
        if not line.startswith(("TotalTime: ", "WaitTime: "))
    )


class RawClient:
    """A minimal ADB client on a raw socket, to control versions, checksums and bad bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.checksums = True

    @classmethod
    async def open(cls, phone: SimulatedPhone) -> RawClient:
        """Open a TCP connection to ``phone``."""
        reader, writer = await asyncio.open_connection(phone.host, phone.port)
        return cls(reader, writer)

    def close(self) -> None:
        """Close the socket."""
        self.writer.close()

    async def send(
        self,
        command: int,
        arg0: int,
        arg1: int,
        payload: bytes = b"",
        *,
        data_check: int | None = None,
    ) -> None:
        """Send one packet; the checksum is the byte sum unless given or checksums are off."""
        if data_check is None:
            data_check = sum(payload) & 0xFFFFFFFF if self.checksums else 0
        header = HEADER.pack(command, arg0, arg1, len(payload), data_check, command ^ 0xFFFFFFFF)
        self.writer.write(header + payload)
        await self.writer.drain()

    async def read(self, wait_s: float = 5.0) -> tuple[int, int, int, bytes, int]:
        """Read one packet: (command, arg0, arg1, payload, data_check)."""
        async with asyncio.timeout(wait_s):
            raw = await self.reader.readexactly(HEADER.size)
            command, arg0, arg1, length, data_check, magic = HEADER.unpack(raw)
            assert command ^ 0xFFFFFFFF == magic
            payload = await self.reader.readexactly(length) if length else b""
        return command, arg0, arg1, payload, data_check

    async def handshake(self, signer: PythonRSASigner, version: int) -> bytes:
        """CNXN then AUTH SIGNATURE; return the device's CNXN banner."""
        self.checksums = version < 0x01000001
        await self.send(CNXN, version, 256 * 1024, b"host::raw\0")
        command, arg0, _, token, _ = await self.read()
        assert (AUTH, 1) == (command, arg0)
        await self.send(AUTH, 2, 0, signer.Sign(token))
        command, _, _, banner, _ = await self.read()
        assert CNXN == command
        return banner

    async def shell(self, command: str, local_id: int = 1) -> bytes:
        """Run ``command`` on one stream and return everything written before CLSE."""
        await self.send(OPEN, local_id, 0, f"shell:{command}\0".encode())
        kind, remote_id, _, _, _ = await self.read()
        assert OKAY == kind
        output = b""
        while True:
            kind, _, _, payload, _ = await self.read()
            if kind == CLSE:
                await self.send(CLSE, local_id, remote_id)
                return output
            assert WRTE == kind
            output += payload
            await self.send(OKAY, local_id, remote_id)

    async def at_eof(self, wait_s: float = 5.0) -> bool:
        """Whether the server closed this connection (EOF or reset) within ``wait_s``."""
        try:
            async with asyncio.timeout(wait_s):
                data = await self.reader.read(65536)
                while data:
                    data = await self.reader.read(65536)
        except (ConnectionError, OSError):
            return True
        except TimeoutError:
            return False
        return True


async def run_until_dropped(
    phone: SimulatedPhone, signer: PythonRSASigner, service: str, script: str
) -> None:
    """Open ``service`` (``shell:``, ``exec:``, ``shell,v2,raw:``…) with ``script`` on a raw
    ADB client that takes every output packet, until the phone resets the connection (an
    armed ``drop_after_command``); then wait for the scripts that run on after it."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(signer, 0x01000001)
        await client.send(OPEN, 5, 0, f"{service}{script}\0".encode())
        kind, remote_id, _, _, _ = await client.read()
        assert OKAY == kind
        try:
            while True:
                kind, _, _, _, _ = await client.read()
                assert WRTE == kind, "the stream ended before the connection dropped"
                await client.send(OKAY, 5, remote_id)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the phone reset the connection
    finally:
        client.close()
    await phone.wait_idle()
