"""A cancellation (a Ctrl-C, a caller's deadline) that comes while a command runs is never
lost, even when something on the way swallows it: Python 3.11's ``asyncio.wait_for``, with
which adb-shell reads every packet, returns a read that completed as the cancellation
arrived and drops the cancellation (cpython gh-86296). A `send` interrupted that way ran on
to the end of its ``--wait`` (issue 38: the Ctrl-C tests, red in ``.ci/run``)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from android_bridge import Device, _device


async def test_a_cancel_swallowed_during_a_command_is_kept(
    sim_device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection's read swallows a cancellation of the command's task, as 3.11's
    ``wait_for`` does when the read completes in the same turn: the command still raises
    CancelledError, and the next command runs on a new connection."""
    await sim_device.shell("echo warm")
    read = _device._EofAwareTransport.bulk_read
    swallowed: list[bool] = []

    async def swallowing_read(
        self: _device._EofAwareTransport, numbytes: int, transport_timeout_s: float | None
    ) -> bytes:
        data = await read(self, numbytes, transport_timeout_s)
        task = asyncio.current_task()
        if not swallowed and task is not None and data:
            swallowed.append(True)
            task.cancel()
            # the cancellation is delivered at the next await, and dropped: the read's data
            # is returned, as 3.11's wait_for returns it
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
        return data

    monkeypatch.setattr(_device._EofAwareTransport, "bulk_read", swallowing_read)
    with pytest.raises(asyncio.CancelledError):
        await sim_device.shell("echo one; echo two")
    assert swallowed
    monkeypatch.undo()
    assert b"next\n" == await sim_device.shell("echo next")
