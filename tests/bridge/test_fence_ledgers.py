"""The fence's ledger marks on the simulated phone: made by a claim that succeeded, read back
in one listing, removed one ledger's at a time, and never a claim of their own."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from android_bridge import (
    FENCE_ROOT,
    CommandRejected,
    Device,
    ensure_epoch,
    forget_ledger_marks,
    list_fences,
    read_ledgers,
    remove_fences,
)
from android_bridge._fence import claim_prefix
from tests.bridge.conftest import PhoneFactory

A, B = secrets.token_hex(16), secrets.token_hex(16)


async def claim(device: Device, dispatch_id: str, epoch: str, ledger_id: str | None) -> bool:
    """Run a send script's claim; True when it printed its marker (the claim succeeded)."""
    (step,) = await device.run([claim_prefix(dispatch_id, epoch, "CLAIMED", ledger_id)])
    return "CLAIMED" in step.output


async def test_marks_name_each_attempt_s_ledger_and_the_last_one(
    phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """Two ledgers' claims: each attempt names its ledger, ``.ledger`` the one that claimed
    last; a claim that fails (the name is taken) marks nothing; a claim without a ledger id
    marks nothing either."""
    phone = await phone_factory(android=12)
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        epoch = (await ensure_epoch(device)).epoch
        empty = await read_ledgers(device)
        assert (None, {}) == (empty.last, empty.attempts)
        assert await claim(device, "d-1", epoch, A)
        assert await claim(device, "d-2", epoch, B)
        assert not await claim(device, "d-2", epoch, A)  # taken: no mark of A on it
        assert await claim(device, "d-3", epoch, None)
        found = await read_ledgers(device)
        assert B == found.last
        assert {"d-1": A, "d-2": B} == found.attempts
        assert ("d-1", "d-2", "d-3") == await list_fences(device)


async def test_a_ledger_forgets_only_its_own_marks(
    phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """Removing A's marks leaves the fence names and B's mark; the week-old clean-up of A's
    attempts takes A's mark with the names."""
    phone = await phone_factory(android=15)
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        epoch = (await ensure_epoch(device)).epoch
        for dispatch_id, ledger_id in (("d-1", A), ("d-2", B), ("d-3", A)):
            assert await claim(device, dispatch_id, epoch, ledger_id)
        await forget_ledger_marks(device, A, ["d-1", "d-2"])  # d-2 is B's: untouched
        assert {"d-2": B, "d-3": A} == (await read_ledgers(device)).attempts
        assert ("d-1", "d-2", "d-3") == await list_fences(device)
        await remove_fences(device, ["d-3"], A)
        assert {"d-2": B} == (await read_ledgers(device)).attempts
        listing = (await device.shell(f"ls -1a {FENCE_ROOT}")).decode().split()
        assert not [name for name in listing if name.startswith("d-3")], listing


@pytest.mark.parametrize("bad", ["ABC", "0" * 31, "0" * 32 + "; rm -rf /", "g" * 32])
def test_a_ledger_id_that_is_not_32_hex_digits_never_reaches_the_shell(bad: str) -> None:
    """Only the ledger's own form of id is written into a script."""
    with pytest.raises(CommandRejected):
        claim_prefix("d-1", "0123456789abcdef", "CLAIMED", bad)
