"""`starebrain reconcile`: one read-only pass that settles what the phones prove."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, RetryPolicy, SmsIntent, record_submission
from starebrain_actions.cli.main import main
from tests.e2e.conftest import BODY, RECIPIENT, RunCli

SENT = 2


async def in_flight_with_sent_row(
    ledger_path: Path | str, phone: SimulatedPhone, action_id: str
) -> str:
    """An attempt whose send reached the phone half an hour ago but whose reply was lost: the
    row is in the sent box, the ledger still says PENDING. Its messaging app can no longer
    mark the row failed (``RetryPolicy.settle_after``, 30 minutes, has passed), so the first
    read that finds it proves the send. Returns its dispatch id."""
    then = datetime.now(UTC) - timedelta(minutes=30)
    async with Ledger.open(ledger_path) as ledger:
        await ledger.create_action(action_id, SmsIntent(recipient=RECIPIENT, body=BODY), now=then)
        record = await ledger.begin_attempt(action_id, phone.serial, now=then)
        await ledger.apply(
            record_submission(
                record,
                watermark_id=phone.store.max_id(),
                device_clock_ms=phone.now_ms(),
                now=ledger.now(),
            )
        )
    phone.store.insert_outgoing(RECIPIENT, BODY, date_ms=phone.now_ms(), message_type=SENT)
    return record.dispatch_id


async def reconcile(ledger_path: Path, key: Path, *args: str) -> Result:
    """Run `starebrain --db L reconcile --key KEY ARGS` off the phone's event loop."""
    argv = ["--db", str(ledger_path), "reconcile", "--key", str(key), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


async def test_reconcile_confirms_and_prints_changes(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """A lost reply becomes SUCCEEDED by reading alone; the changes are printed; no SMS sent."""
    dispatch_id = await in_flight_with_sent_row(ledger_path, phone, "A-17")
    result = await reconcile(ledger_path, adb_key_path)
    assert 0 == result.exit_code, result.output
    assert phone.serial in result.stdout
    assert "A-17" in result.stdout and dispatch_id in result.stdout
    assert "confirm" in result.stdout and "SUCCEEDED" in result.stdout
    assert not any("am start" in command for command in phone.commands_run)
    assert 1 == len(phone.store.rows(types=[SENT]))


async def test_reconcile_json(phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path) -> None:
    """`reconcile --json` lists each device and every change with from/to status."""
    await in_flight_with_sent_row(ledger_path, phone, "A-18")
    result = await reconcile(ledger_path, adb_key_path, "--device", phone.serial, "--json")
    assert 0 == result.exit_code, result.output
    data = json.loads(result.stdout)
    assert [phone.serial] == [device["device"] for device in data["devices"]]
    assert data["devices"][0]["reachable"] is True
    # dispatched half an hour ago: UNKNOWN (past the grace window) until the read
    assert ("UNKNOWN", "SUCCEEDED") == (
        data["changes"][0]["from_status"],
        data["changes"][-1]["to_status"],
    )


def test_reconcile_nothing_in_flight(run_cli: RunCli, ledger_path: Path) -> None:
    """With no attempt in flight there is no device to read: said plainly, exit 0."""
    asyncio.run(_empty_ledger(ledger_path))
    result = run_cli("reconcile")
    assert 0 == result.exit_code, result.output
    assert "nothing in flight" in result.stdout
    empty = json.loads(run_cli("reconcile", "--json").stdout)
    assert ([], []) == (empty["devices"], empty["changes"])


async def _empty_ledger(path: Path) -> None:
    async with Ledger.open(path):
        pass


async def test_reconcile_unreachable_device_changes_nothing(
    ledger_path: Path, adb_key_path: Path, closed_port: int
) -> None:
    """A device that refuses connections is reported (exit 1); its attempt stays unresolved."""
    serial = f"127.0.0.1:{closed_port}"
    policy = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        grace_window=timedelta(0),
    )
    async with Ledger.open(ledger_path) as ledger:
        await ledger.create_action("A-19", SmsIntent(recipient=RECIPIENT, body=BODY), policy)
        await ledger.begin_attempt("A-19", serial)
    result = await reconcile(ledger_path, adb_key_path)
    assert 1 == result.exit_code, result.output
    assert serial in result.stdout and "NO" in result.stdout
    async with Ledger.open(ledger_path) as ledger:
        summary = await ledger.summary("A-19")
    assert "UNKNOWN" == summary.status.value
    assert "PENDING" == summary.attempts[0].delivery.value


async def test_reconcile_refuses_a_loose_key(
    ledger_path: Path, adb_key_path: Path, tmp_path: Path, closed_port: int
) -> None:
    """An ADB key readable by others is a clear error naming it (exit 1), not a traceback."""
    loose = tmp_path / "loose-adbkey"
    loose.write_bytes(adb_key_path.read_bytes())
    loose.chmod(0o644)
    async with Ledger.open(ledger_path) as ledger:
        await ledger.create_action("A-20", SmsIntent(recipient=RECIPIENT, body=BODY))
        await ledger.begin_attempt("A-20", f"127.0.0.1:{closed_port}")
    result = await asyncio.to_thread(
        CliRunner().invoke,
        main,
        ["--db", str(ledger_path), "reconcile", "--key", str(loose)],
    )
    assert 1 == result.exit_code, result.output
    assert "KeyPermissionError" in result.stderr and "chmod 600" in result.stderr
