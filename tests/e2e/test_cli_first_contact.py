"""``starebrain send`` to a phone its ledger never met runs doctor's checks first (one round
trip) and refuses a phone that breaks an assumption, before anything is recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner, Result

from android_bridge import Device
from starebrain_actions import Ledger
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory

TO, BODY = "+12025550143", "Your code is 4821"


async def cli(*argv: str) -> Result:
    """Run `starebrain ARGV` in-process, off the simulated phones' event loop."""
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, main, list(argv), catch_exceptions=False)


async def test_send_to_a_new_phone_whose_fence_cannot_work_exits_1_and_records_nothing(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """A file where the fence's directory should be: exit 1, one line naming the fence check
    and what to do; the ledger holds no action and no phone, the phone sent nothing. Mended,
    the same command sends once."""
    phone = await phone_factory(android=14)
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        await device.shell("touch /data/local/tmp/starebrain")
    argv = [
        "--db", str(ledger_path), "send", "--device", phone.serial, "--key", str(adb_key_path),
        "--to", TO, "--body", BODY, "--action-id", "first-1", "--wait", "10",
    ]  # fmt: skip
    refused = await cli(*argv)
    assert 1 == refused.exit_code, refused.output
    assert "fence (" in refused.output and "never met" in refused.output, refused.output
    async with Ledger.open(ledger_path) as ledger:
        assert ([], []) == (await ledger.summaries(), list(await ledger.phones()))
    await phone.radio_idle()
    assert [] == phone.transmissions
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        await device.shell("rm /data/local/tmp/starebrain")
    sent = await cli(*argv)
    assert sent.exit_code in (0, 6), sent.output
    assert 1 == len(await phone.wait_transmissions(then_idle=True))
