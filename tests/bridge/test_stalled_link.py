"""A stalled link (the phone gone from the network without a reset): every operation ends."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest

from android_bridge import Device, OutcomeUnknown
from tests.bridge.conftest import PhoneFactory

#: What the client's own socket holds for a stalled peer, as on a real path whose buffers
#: are smaller than loopback's (Linux sizes a sender's buffer by the path's MSS: 64 KiB
#: segments on loopback, 1448 bytes on Wi-Fi, ``tcp_sndbuf_expand``); Linux doubles it.
_SMALL_SEND_BUFFER = 4096


def _shrink_send_buffer(device: Device) -> None:
    """Give the handle's socket the send buffer of a slow path (test instrumentation)."""
    transport = device._transport  # the socket of the connection under test
    writer = getattr(transport, "_writer", None)
    assert writer is not None
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SMALL_SEND_BUFFER)


async def test_a_command_whose_write_blocks_on_a_stalled_link_still_ends(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """The link stalls before a long command: the phone reads nothing, so the command's
    bytes fill the socket buffers and the write blocks. The command still ends within its
    timeout as OutcomeUnknown (its first bytes may be on their way), and closing the
    handle does not wait for bytes that can never leave."""
    phone = await make_phone()
    device = await Device.connect(
        phone.serial, key_path=bridge_key, connect_timeout_s=2, command_timeout_s=1
    )
    _shrink_send_buffer(device)
    phone.stall_links()
    command = "echo " + "x" * 100_000
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(15):
        with pytest.raises(OutcomeUnknown):
            await device.shell(command)
        await device.close()
    assert loop.time() - started < 5
    assert command not in phone.commands_run  # nothing reached the phone


async def test_closing_a_handle_whose_write_is_stuck_does_not_wait(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A caller that gives up on a command stuck in its write (its own deadline) and closes
    the handle gets control back at once, and the socket is closed, not left open holding
    bytes that can never leave."""
    phone = await make_phone()
    device = await Device.connect(
        phone.serial, key_path=bridge_key, connect_timeout_s=2, command_timeout_s=30
    )
    _shrink_send_buffer(device)
    phone.stall_links()
    writer = device._transport._writer  # type: ignore[union-attr]  # the socket under test
    async with asyncio.timeout(15):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await device.shell("echo " + "y" * 100_000)
        await device.close()
    assert writer.transport.is_closing()
    # an aborted transport closes its socket when its connection_lost runs: wait for that
    async with asyncio.timeout(5):
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    assert writer.get_extra_info("socket").fileno() == -1  # not left open holding bytes
