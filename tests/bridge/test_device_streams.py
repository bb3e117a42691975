"""One stream at a time on a Device's connection: adb-shell loses a CLSE when several share it."""

from __future__ import annotations

import asyncio

from adb_shell import constants
from adb_shell.hidden_helpers import _AdbPacketStore

from android_bridge import Device
from android_bridge.simulator import SimulatedPhone


def test_adb_shell_keeps_no_close_for_a_stream_it_holds_nothing_for() -> None:
    """adb-shell's packet store (0.4.4) drops a CLSE for a stream it holds no queue for, so a
    stream whose CLSE another stream's read takes off the wire never sees it (issue 38)."""
    # Failing after an upgrade means adb-shell keeps them now; a Device could then carry
    # several streams at once on its connection.
    store = _AdbPacketStore()
    store.put(7, 3, constants.CLSE, b"")
    assert store.find(7, 3) is None


async def test_concurrent_commands_on_one_device_run_one_at_a_time(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """Twenty commands sent at once through one Device all return their own output, and no
    two of them run on the phone at the same time (each holds a directory while it runs)."""

    async def one(index: int) -> bytes:
        return await sim_device.shell(
            "mkdir /data/local/tmp/busy 2>/dev/null || echo overlap;"
            f" sleep 0.01; echo out-{index}; rmdir /data/local/tmp/busy"
        )

    async with asyncio.timeout(60):
        results = await asyncio.gather(*(one(index) for index in range(20)))
    assert [f"out-{index}\n".encode() for index in range(20)] == results
    assert 1 == sim_phone.connections


async def test_reconnect_waits_for_the_command_under_way(sim_device: Device) -> None:
    """A reconnect asked for while a command runs waits for it: the command's output arrives
    and the next command goes over the new connection."""
    command = asyncio.create_task(sim_device.shell("sleep 0.3; echo finished"))
    async with asyncio.timeout(30):
        # until the command holds the connection (the Device offers no event for it)
        while not sim_device._lock.locked():  # noqa: ASYNC110
            await asyncio.sleep(0)
    connections = sim_device.connections
    await sim_device.reconnect()
    assert b"finished\n" == await command
    assert connections + 1 == sim_device.connections
    assert b"again\n" == await sim_device.shell("echo again")
