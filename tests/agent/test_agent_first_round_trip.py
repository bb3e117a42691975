"""A connection's first round trip carries the fence's listing: opening an agent on a phone
its ledger knows costs one round trip (the facts, the other ledgers' marks and the fence
epoch together), and each attempt still notes the epoch the phone holds, a new one when the
folder was cleared. Both ledger backends, the simulated phone over the real ADB protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from android_bridge import FENCE_ROOT, Device, ensure_epoch
from starebrain_actions import Status

TO = "+1 202 555 0100"


async def _phone_epoch(serial: str, key: Path) -> str:
    """The epoch the phone holds now, read on a connection of its own."""
    async with await Device.connect(serial, key_path=key) as device:
        return (await ensure_epoch(device)).epoch


async def test_a_known_phone_opens_in_one_round_trip_and_its_epoch_is_noted(
    sms_phone: Any, agent_for: Any, adb_key_path: Path
) -> None:
    """The first opening registers the phone and makes its epoch; the next one costs one
    round trip before the send, whose attempt notes the epoch the phone holds."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        first = await agent.send("otp-1", TO, "Your code is 1111", wait=30)
        assert first.status in (Status.VERIFYING, Status.SUCCEEDED), first
    epoch = await _phone_epoch(phone.serial, adb_key_path)
    async with agent_for(phone) as agent:
        assert 1 == agent.phone.round_trips
        outcome = await agent.send("otp-2", TO, "Your code is 2222", wait=30)
        assert outcome.status in (Status.VERIFYING, Status.SUCCEEDED), outcome
    assert epoch == first.summary.attempts[-1].evidence["fence_epoch"]
    assert epoch == outcome.summary.attempts[-1].evidence["fence_epoch"]
    assert 2 == len(phone.transmissions)


async def test_a_cleared_fence_folder_gets_a_new_epoch_before_the_next_attempt(
    sms_phone: Any, agent_for: Any, adb_key_path: Path
) -> None:
    """The listing finds no epoch once the folder is gone: the epoch is made in a round trip
    of its own before the attempt, which notes the new one (an attempt noted with the old
    epoch could never be voided, nor proven unsent)."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await agent.send("otp-1", TO, "Your code is 1111", wait=30)
    old = await _phone_epoch(phone.serial, adb_key_path)
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        await device.shell(f"rm -rf {FENCE_ROOT}")
    async with agent_for(phone) as agent:
        assert 1 == agent.phone.round_trips
        outcome = await agent.send("otp-2", TO, "Your code is 2222", wait=30)
        assert outcome.status in (Status.VERIFYING, Status.SUCCEEDED), outcome
    new = outcome.summary.attempts[-1].evidence["fence_epoch"]
    assert new != old
    assert new == await _phone_epoch(phone.serial, adb_key_path)
