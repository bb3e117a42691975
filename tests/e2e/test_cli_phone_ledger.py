"""`starebrain send`, `doctor` and `--share-phone` with two ledgers on one simulated phone.

Ledger A is the test's (a SQLite file, or a PostgreSQL schema), ledger B a second SQLite file:
the README's two examples, when they used two ledgers. The ground truth is the phone's store.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger
from starebrain_actions.cli.main import main
from tests.e2e.conftest import BODY, RECIPIENT, Target

SENT = 2


async def starebrain(ledger: Target, *argv: str) -> Result:
    """`starebrain --db LEDGER ARGV`, in-process, off the phone's loop."""
    return await asyncio.to_thread(
        CliRunner().invoke, main, ["--db", str(ledger), *argv], catch_exceptions=False
    )


async def send(ledger: Target, key: Path, phone: SimulatedPhone, *args: str) -> Result:
    return await starebrain(
        ledger, "send", "--device", phone.serial, "--key", str(key), "--to", RECIPIENT, *args
    )


async def doctor_ledger_check(ledger: Target, key: Path, phone: SimulatedPhone) -> dict[str, Any]:
    """doctor's ``ledger`` check, as ``--json`` reports it, with doctor's exit status."""
    result = await starebrain(
        ledger, "doctor", "--device", phone.serial, "--key", str(key), "--json"
    )
    report = json.loads(result.stdout)
    [check] = [check for check in report["checks"] if check["name"] == "ledger"]
    return {**check, "exit_code": result.exit_code}


def rows_with(phone: SimulatedPhone, body: str) -> int:
    """SENT rows carrying ``body`` in the phone's own store."""
    return sum(1 for row in phone.store.rows(types=[SENT]) if row.body == body)


async def ledger_id(ledger: Target) -> str:
    async with Ledger.open(ledger) as opened:
        return await opened.ledger_id()


async def test_two_ledgers_on_one_phone_are_noticed(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, tmp_path: Path
) -> None:
    """A's attempt open (sent, settling for 30 minutes): B's send exits 7 naming both ledgers,
    records and sends nothing, and doctor on B fails its ledger check; ``--share-phone``
    sends; then A is warned once on stderr that B sent last (doctor warns too), not twice."""
    other = tmp_path / "other.db"
    first = await send(
        ledger_target, adb_key_path, phone,
        "--body", BODY, "--action-id", "otp-1001", "--send-path", "ui",
        "--settle-after", "1800", "--wait", "20",
    )  # fmt: skip
    assert 6 == first.exit_code, first.output  # sent, settling: the attempt is open
    a_id = await ledger_id(ledger_target)

    refused = await send(other, adb_key_path, phone, "--body", BODY, "--action-id", "otp-2002")
    assert 7 == refused.exit_code, refused.output
    b_id = await ledger_id(other)
    assert a_id in refused.output and b_id in refused.output, refused.output
    assert "--share-phone" in refused.output
    async with Ledger.open(other) as ledger:
        assert [] == await ledger.summaries()
    assert 1 == rows_with(phone, BODY)

    check = await doctor_ledger_check(other, adb_key_path, phone)
    assert ("fail", 1) == (check["verdict"], check["exit_code"]), check
    assert a_id in check["evidence"] and b_id in check["evidence"], check
    mine = await doctor_ledger_check(ledger_target, adb_key_path, phone)
    assert "ok" == mine["verdict"], mine

    shared = await send(
        other, adb_key_path, phone,
        "--body", BODY, "--action-id", "otp-2002", "--share-phone", "--wait", "20",
    )  # fmt: skip
    assert shared.exit_code in (0, 6), shared.output
    assert "warning" not in shared.stderr, shared.stderr  # knowingly: nothing to warn of
    assert 2 == rows_with(phone, BODY)

    later = await doctor_ledger_check(ledger_target, adb_key_path, phone)
    assert "warn" == later["verdict"] and b_id in later["evidence"], later
    warned = await send(
        ledger_target, adb_key_path, phone, "--body", "Table for two at 8", "--wait", "20"
    )
    assert warned.exit_code in (0, 6), warned.output
    assert 1 == warned.stderr.count(f"another ledger, {b_id}"), warned.stderr
    again = await send(
        ledger_target, adb_key_path, phone, "--body", "Table for three at 9", "--wait", "20"
    )
    assert again.exit_code in (0, 6), again.output
    assert "another ledger" not in again.stderr, again.stderr
    assert 1 == rows_with(phone, "Table for two at 8") == rows_with(phone, "Table for three at 9")
