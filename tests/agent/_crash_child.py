"""A sender that kills itself (SIGKILL) at a chosen step, for the crash tests.

Run as ``python -m tests.agent._crash_child DB SERIAL KEY STEP``. Steps:
``before_commit`` (the action exists, the attempt receipt is not yet committed),
``after_commit`` (the receipt is committed, nothing reached the phone),
``after_send`` (the send reached the phone; the process dies before the reply),
``during_reconcile`` (the phone was read; the process dies before applying what it proves).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from typing import Any

from starebrain_actions import Ledger, RetryPolicy, SmsIntent
from starebrain_actions.core.ports import DispatchReceipt, PhoneRead
from starebrain_actions.orchestration.agent import SmsAgent
from starebrain_actions.phone.android import AndroidPhone

TO, BODY = "+1 202 555 0100", "Your code is 4821"
POLICY = RetryPolicy(
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
    maximum_attempts=3,
    grace_window=timedelta(seconds=1),
)


def die() -> None:
    """Die as a power cut or kill -9 would: no cleanup, no flush."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class DyingPhone:
    """The real Android phone, except that the process dies at the chosen step."""

    def __init__(self, phone: AndroidPhone, step: str) -> None:
        self._phone = phone
        self._step = step

    @property
    def device(self) -> str:
        return self._phone.device

    async def dispatch(self, intent: SmsIntent, **fence: Any) -> DispatchReceipt:
        if self._step == "after_commit":
            die()
        if self._step == "after_send":
            print("sending", flush=True)  # the parent kills us while the command hangs
        return await self._phone.dispatch(intent, **fence)

    async def fence_epoch(self) -> str:
        return await self._phone.fence_epoch()

    async def void(self, attempts: Any) -> Any:
        return await self._phone.void(attempts)

    async def peek(self, attempts: Any) -> Any:
        return await self._phone.peek(attempts)

    async def read_outgoing(self, **window: Any) -> PhoneRead:
        read = await self._phone.read_outgoing(**window)
        if self._step == "during_reconcile":
            die()
        return read

    def judge(self, message: Any, intent: SmsIntent) -> Any:
        return self._phone.judge(message, intent)

    async def close(self) -> None:
        await self._phone.close()


async def main(db: str, serial: str, key: str, step: str) -> None:
    async with Ledger.open(db) as ledger:
        if step == "before_commit":
            await ledger.create_action("A-17", SmsIntent(recipient=TO, body=BODY), POLICY)
            die()
        # during_reconcile: the send hangs (hang-after-send) until this timeout, then the
        # first read kills the process; other steps die (or are killed) long before it
        timeout_s = 3 if step == "during_reconcile" else 30
        phone = await AndroidPhone.connect(serial, key_path=key, command_timeout_s=timeout_s)
        agent = SmsAgent(ledger, DyingPhone(phone, step), policy=POLICY, poll_interval_s=0.05)
        await agent.send("A-17", TO, BODY, wait=30)
    print("finished without dying", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
