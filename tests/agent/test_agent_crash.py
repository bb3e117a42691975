"""kill -9 of the sending process at each step, then a rerun: exactly one SMS, no lost record."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from starebrain_actions import Ledger, RetryPolicy, Status
from starebrain_actions.orchestration.agent import SmsAgent

from .conftest import sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


async def run_child(db: Path, serial: str, key: Path, step: str, phone: Any) -> str:
    """Run the dying sender; for ``after_send`` kill it once the phone has the message."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.agent._crash_child",
        str(db),
        serial,
        str(key),
        step,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    if step == "after_send":
        for _ in range(200):
            if sent_rows(phone, TO, BODY):
                break
            await asyncio.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert -signal.SIGKILL == process.returncode, output.decode()
    return output.decode()


@pytest.mark.parametrize(
    "step", ["before_commit", "after_commit", "after_send", "during_reconcile"]
)
async def test_a_killed_sender_rerun_sends_exactly_one_sms(
    step: str, sms_phone: Any, db_path: Path, adb_key_path: Path
) -> None:
    """Whatever step the process dies at, rerunning the same send ends with one SMS and the
    original records intact; a receipt committed for a send that never left is voided on the
    phone by the rerun (the fence) and retried."""
    phone = await sms_phone()
    if step == "after_send":
        phone.inject_fault("hang-after-send")
    if step == "during_reconcile":
        phone.inject_fault("hang-after-send")
    await run_child(db_path, phone.serial, adb_key_path, step, phone)
    async with Ledger.open(db_path) as ledger:
        before = await ledger.attempts("A-17")
    assert (0 if step == "before_commit" else 1) == len(before)
    policy = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=3,
        grace_window=timedelta(seconds=1),
    )
    async with SmsAgent.open(
        db=db_path,
        device=phone.serial,
        key_path=adb_key_path,
        policy=policy,
        poll_interval_s=0.05,
        void_after=timedelta(seconds=1),  # the dead sender's command cannot be on its way
    ) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=10)
        after = await agent.ledger.attempts("A-17")
    assert Status.SUCCEEDED == outcome.status
    assert 1 == len(sent_rows(phone, TO, BODY))
    for original in before:
        kept = next(record for record in after if record.dispatch_id == original.dispatch_id)
        assert original.dispatched_at == kept.dispatched_at
    expected_attempts = {"before_commit": 1, "after_commit": 2, "after_send": 1}
    assert expected_attempts.get(step, 1) == len(after)
