"""``resume`` finishes what was started: PLANNED actions and FAILED ones with attempts left are
sent through ``send``'s path, once each, whatever else runs or dies meanwhile. Every test runs
on SQLite and on PostgreSQL (``db_path``); ground truth is the phone's own store."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, SmsIntent, Status

from .conftest import FAST, sent_rows

TO = "+1 202 555 0100"


def body(number: int) -> str:
    return f"resumed message {number}"


async def plan(db_path: str, count: int, *, prefix: str = "R") -> list[str]:
    """``count`` PLANNED actions (created, never sent), as a crashed agent leaves them."""
    ids = []
    async with Ledger.open(db_path) as ledger:
        for number in range(count):
            action_id = f"{prefix}-{number}"
            await ledger.create_action(action_id, SmsIntent(recipient=TO, body=body(number)), FAST)
            ids.append(action_id)
    return ids


def once_each(phone: SimulatedPhone, count: int) -> list[int]:
    """How many SENT rows carry each planned body (the phone's ground truth)."""
    return [len(sent_rows(phone, TO, body(number))) for number in range(count)]


async def test_resume_sends_planned_and_failed_actions_once_and_then_nothing(
    sms_phone: Any, agent_for: Any
) -> None:
    """Three PLANNED actions and one the locked phone refused are each sent once; a second
    resume finds nothing to do and sends nothing."""
    phone = await sms_phone(screen="locked")
    async with agent_for(phone) as agent:
        refused = await agent.send("F-1", TO, "refused while locked", wait=0.2)
        assert Status.PLANNED == refused.status  # waiting for the phone
        phone.screen = "on"
        for number in range(3):
            await agent.ledger.create_action(
                f"R-{number}", SmsIntent(recipient=TO, body=body(number)), FAST
            )
        told: list[str] = []
        first = await agent.resume(wait=10, on_item=lambda item: told.append(item.action_id))
        second = await agent.resume(wait=10)
    assert ["F-1", "R-0", "R-1", "R-2"] == sorted(told)
    assert {Status.SUCCEEDED, Status.VERIFYING} >= {item.after for item in first.items}
    assert [1, 1, 1] == once_each(phone, 3)
    assert 1 == len(sent_rows(phone, TO, "refused while locked"))
    assert () == second.items


async def test_planned_actions_are_dealt_among_phones(sms_phone: Any, agent_for: Any) -> None:
    """With ``share``, two phones resuming together each take their own PLANNED actions."""
    one, two = await sms_phone(), await sms_phone()
    async with agent_for(one) as first, agent_for(two) as second:
        for number in range(4):
            await first.ledger.create_action(
                f"R-{number}", SmsIntent(recipient=TO, body=body(number)), FAST
            )
        a, b = await asyncio.gather(
            first.resume(wait=10, share=(0, 2)), second.resume(wait=10, share=(1, 2))
        )
    assert (["R-0", "R-2"], ["R-1", "R-3"]) == (
        sorted(item.action_id for item in a.items),
        sorted(item.action_id for item in b.items),
    )
    assert [1, 1, 1, 1] == [
        len(sent_rows(one, TO, body(n))) + len(sent_rows(two, TO, body(n))) for n in range(4)
    ]


async def test_the_deal_is_the_same_when_phones_resume_one_after_another(
    sms_phone: Any, agent_for: Any
) -> None:
    """A phone resuming after another has sent its share (as ``nightly --resume`` does,
    phone after phone) takes the same share as if they had started together: none is left
    to no phone."""
    one, two = await sms_phone(), await sms_phone()
    async with agent_for(one) as first, agent_for(two) as second:
        for number in range(4):
            await first.ledger.create_action(
                f"R-{number}", SmsIntent(recipient=TO, body=body(number)), FAST
            )
        a = await first.resume(wait=10, share=(0, 2))
        b = await second.resume(wait=10, share=(1, 2))
    assert (["R-0", "R-2"], ["R-1", "R-3"]) == (
        sorted(item.action_id for item in a.items),
        sorted(item.action_id for item in b.items),
    )
    assert [1, 1, 1, 1] == [
        len(sent_rows(one, TO, body(n))) + len(sent_rows(two, TO, body(n))) for n in range(4)
    ]


def resume_command(db_path: str, phone: SimulatedPhone, key: Path, wait: float = 15) -> list[str]:
    return [
        str(Path(sys.executable).parent / "starebrain"),
        "--db",
        str(db_path),
        "resume",
        "--device",
        phone.serial,
        "--key",
        str(key),
        "--wait",
        str(wait),
    ]


async def run(command: list[str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, output.decode()


@pytest.mark.slow
async def test_two_resumes_racing_send_each_action_once(
    sms_phone: Any, db_path: str, adb_key_path: Path
) -> None:
    """Two `starebrain resume` processes on one phone and one ledger, started together: every
    PLANNED action goes out exactly once (the phone's store), and both exit 0 or 3."""
    phone = await sms_phone(send_delay_ms=100)
    count = 6
    await plan(db_path, count)
    results = await asyncio.gather(
        *(run(resume_command(db_path, phone, adb_key_path)) for _ in range(2))
    )
    for code, output in results:
        assert code in (0, 3), output
    assert [1] * count == once_each(phone, count)
    async with Ledger.open(db_path) as ledger:
        statuses = {(await ledger.summary(f"R-{n}")).status for n in range(count)}
    assert statuses <= {Status.SUCCEEDED, Status.VERIFYING}


@pytest.mark.slow
async def test_a_resume_killed_mid_run_loses_nothing_and_sends_nothing_twice(
    sms_phone: Any, db_path: str, adb_key_path: Path
) -> None:
    """`starebrain resume` is killed (SIGKILL) right after its first message is on the phone;
    a second resume finishes the rest: every action exactly once on the phone, none left
    PLANNED."""
    phone = await sms_phone(send_delay_ms=300)
    count = 5
    await plan(db_path, count)
    process = await asyncio.create_subprocess_exec(
        *resume_command(db_path, phone, adb_key_path),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    # killed once its first message is on the phone (a kill before the script ran would
    # leave an attempt only a void, 25 s later, can free: another test's matter)
    for _ in range(800):
        if any(once_each(phone, count)):
            break
        await asyncio.sleep(0.025)
    os.kill(process.pid, signal.SIGKILL)
    await process.wait()
    async with Ledger.open(db_path) as ledger:
        left = [n for n in range(count) if not (await ledger.summary(f"R-{n}")).attempts]
    assert left, "the kill came after the whole run: nothing was left to resume"
    code, output = await run(resume_command(db_path, phone, adb_key_path, wait=20))
    assert code in (0, 3), output
    # what a killed sender left unresolved is settled by reads, never sent again
    code, output = await run(resume_command(db_path, phone, adb_key_path, wait=20))
    assert code in (0, 3), output
    assert [1] * count == once_each(phone, count)
    async with Ledger.open(db_path) as ledger:
        planned = [n for n in range(count) if not (await ledger.summary(f"R-{n}")).attempts]
    assert [] == planned


async def test_a_planned_action_goes_only_to_the_phone_its_sender_named(
    sms_phone: Any, agent_for: Any
) -> None:
    """An action created for phone A (as `send --device A` creates it) and never started is
    left alone by a resume on phone B, and sent by a resume on A."""
    one, two = await sms_phone(), await sms_phone()
    async with agent_for(one) as first, agent_for(two) as second:
        await first.ledger.create_action(
            "A-1", SmsIntent(recipient=TO, body=body(0)), FAST, device=first.phone.device
        )
        elsewhere = await second.resume(wait=5)
        home = await first.resume(wait=5)
    assert ((), ["A-1"]) == (elsewhere.items, [item.action_id for item in home.items])
    assert (1, 0) == (len(sent_rows(one, TO, body(0))), len(sent_rows(two, TO, body(0))))
