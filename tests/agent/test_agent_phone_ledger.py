"""One phone, two ledgers: the fence on the phone names the ledger that claimed it.

Each test drives one simulated phone from two ledgers (the test's own, on both backends, and a
second SQLite file), as the README's two examples did when they used two ledgers. The ground
truth is what the phone's store holds and what its radio sent, never the ledgers alone.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from structlog.testing import capture_logs

from android_bridge import FENCE_ROOT, Device
from starebrain_actions import Ledger, Status
from starebrain_actions.core.exceptions import PhoneHeldByAnotherLedger
from tests.agent.conftest import FAST, sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"
#: Ledger A's policy: a sent row is judged only after 30 minutes (the app's real settle
#: time), so its attempt stays open (VERIFYING) until a test lets it settle.
SLOW = attrs.evolve(FAST, settle_after=timedelta(minutes=30))


async def sent(phone: Any, expected: int) -> int:
    """How many messages carrying ``BODY`` left the phone, counted once the ``expected``
    ones have and nothing more can."""
    if expected:
        await phone.wait_transmissions(lambda t: t.body == BODY, count=expected)
    await phone.radio_idle()
    return sum(1 for t in phone.transmissions if t.body == BODY)


async def open_attempt_of(agent_for: Any, phone: Any) -> str:
    """Ledger A (the test's ledger) sends ``BODY`` and leaves its attempt open (VERIFYING:
    the phone shows it sent, the app may still fail it); its dispatch id."""
    async with agent_for(phone, policy=SLOW) as agent:
        outcome = await agent.send("otp-1001", TO, BODY, wait=30)
        assert Status.VERIFYING == outcome.status, outcome
        return outcome.summary.attempts[-1].dispatch_id


async def settle(agent_for: Any, phone: Any, dispatch_id: str) -> None:
    """Ledger A rules its open attempt sent (as a person would with ``resolve``) and meets the
    phone again: its mark of the attempt is removed."""
    async with agent_for(phone) as agent:
        await agent.ledger.resolve(
            "otp-1001",
            as_sent=True,
            reason="seen on the phone",
            operator="op",
            dispatch_id=dispatch_id,
        )
    async with agent_for(phone) as agent:
        assert agent.shared_phone is None


async def test_each_ledger_has_its_own_id_kept_across_openings(
    db_path: str, tmp_path: Path
) -> None:
    """The id is made once with the ledger and never changes; another ledger has another."""
    async with Ledger.open(db_path) as ledger:
        first = await ledger.ledger_id()
    async with Ledger.open(db_path) as ledger:
        assert first == await ledger.ledger_id()
    async with Ledger.open(tmp_path / "other.db") as other:
        assert first != await other.ledger_id()
    assert 32 == len(first) and set(first) <= set("0123456789abcdef")


async def test_the_send_script_marks_the_attempt_with_its_ledger(
    sms_phone: Any, agent_for: Any, db_path: str, adb_key_path: Path
) -> None:
    """The fence's folder names the ledger beside the attempt, and as the last one to send."""
    phone = await sms_phone()
    dispatch_id = await open_attempt_of(agent_for, phone)
    async with Ledger.open(db_path) as ledger:
        ours = await ledger.ledger_id()
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        names = (await device.shell(f"ls -1a {FENCE_ROOT}")).decode().split()
        last = (await device.shell(f"cat {FENCE_ROOT}/.ledger")).decode().strip()
    assert f"{dispatch_id}.ledger-{ours}" in names, names
    assert ours == last


async def test_another_ledger_is_refused_while_an_attempt_is_open_then_warned_once(
    sms_phone: Any, agent_for: Any, tmp_path: Path, db_path: str
) -> None:
    """While ledger A's attempt is open on the phone, ledger B is refused before it records
    or sends anything, both ledgers named; once A settled it, B is warned once and sends;
    then A is warned once in its turn, and not again."""
    phone = await sms_phone()
    other = tmp_path / "other.db"
    dispatch_id = await open_attempt_of(agent_for, phone)
    async with Ledger.open(db_path) as ledger:
        a_id = await ledger.ledger_id()
    with pytest.raises(PhoneHeldByAnotherLedger) as refused:
        async with agent_for(phone, db=other):
            pytest.fail("a ledger was let onto a phone where another one's attempt is open")
    async with Ledger.open(other) as ledger:
        b_id = await ledger.ledger_id()
        assert [] == await ledger.summaries()  # nothing recorded
        assert [] == await ledger.phones()
    message = str(refused.value)
    assert a_id in message and b_id in message and dispatch_id in message, message
    assert (a_id, (dispatch_id,)) == (refused.value.other_ledger_id, refused.value.open_attempts)
    assert 1 == await sent(phone, 1)

    await settle(agent_for, phone, dispatch_id)
    with capture_logs() as logs:
        async with agent_for(phone, db=other) as agent:
            assert agent.shared_phone is not None
            assert (a_id, ()) == (
                agent.shared_phone.other_ledger_id,
                agent.shared_phone.open_attempts,
            )
            outcome = await agent.send("otp-2002", TO, BODY, wait=30)
            assert outcome.status in (Status.VERIFYING, Status.SUCCEEDED)
    assert ["phone_used_by_another_ledger"] == [
        entry["event"] for entry in logs if entry["log_level"] == "warning"
    ]
    assert 2 == await sent(phone, 2)
    assert 2 == len(sent_rows(phone, TO, BODY))

    async with agent_for(phone) as agent:  # A: B sent last, and is now done
        assert agent.shared_phone is not None and b_id == agent.shared_phone.other_ledger_id
        await agent.send("otp-3003", TO, "Your code is 7730", wait=30)
    async with agent_for(phone) as agent:  # A sent last: nothing to warn of
        assert agent.shared_phone is None


async def test_share_phone_sends_beside_another_ledger_s_open_attempt(
    sms_phone: Any, agent_for: Any, tmp_path: Path
) -> None:
    """``share_phone=True`` lets ledger B send knowingly beside A's open attempt: it names A's
    attempt, and the phone sends B's message."""
    phone = await sms_phone()
    dispatch_id = await open_attempt_of(agent_for, phone)
    async with agent_for(phone, db=tmp_path / "other.db", share_phone=True) as agent:
        assert agent.shared_phone is not None
        assert (dispatch_id,) == agent.shared_phone.open_attempts
        assert agent.shared_phone.allowed
        outcome = await agent.send("otp-2002", TO, BODY, wait=30)
        assert outcome.status in (Status.VERIFYING, Status.SUCCEEDED)
    assert 2 == await sent(phone, 2)
    assert 2 == len(sent_rows(phone, TO, BODY))
