"""The bridge against a phone over real ADB: connect, send, read back, prove completeness."""

from __future__ import annotations

import asyncio

import pytest

from android_bridge import DispatchEvidence, SmsDispatcher, SmsReader, message_matches_intent
from tests.bridge.conftest import Target

#: How long a real phone may take to move a message from OUTBOX to SENT.
REAL_SEND_WAIT_S = 60.0


async def _settle(target: Target, evidence: DispatchEvidence, sent: int = 1) -> None:
    """Wait until the phone has finished sending: at once on the simulator, by polling on a
    real phone (as the shell user an OUTBOX row is invisible until it becomes SENT)."""
    if target.phone is not None:
        await target.phone.wait_idle()
        return
    reader = SmsReader(target.device)
    deadline = asyncio.get_running_loop().time() + REAL_SEND_WAIT_S
    while asyncio.get_running_loop().time() < deadline:
        read = await reader.read_after(evidence)
        if sum(row.type == 2 for row in read.rows) >= sent:
            return
        await asyncio.sleep(1.0)


async def test_connect_reports_mode_and_region(target: Target) -> None:
    """Connecting reads the shell's mode and the device's region once."""
    facts = await target.device.facts()
    assert facts.mode in ("shell", "root")
    assert 2 == len(await target.device.region())


async def test_send_then_read_back_matches(target: Target) -> None:
    """A sent message comes back from the provider, complete, and matches the intent."""
    dispatcher = SmsDispatcher(target.device)
    reader = SmsReader(target.device)
    body = "Your code is 4821, see you at 5=5\nRow: 0 _id=1, body=NULL"
    evidence = await dispatcher.send(target.recipient, body)
    await _settle(target, evidence)
    read = await reader.read_since(evidence.watermark_id)
    region = await target.device.region()
    matches = [
        row
        for row in read.rows
        if message_matches_intent(row, target.recipient, body, region=region).matched
    ]
    expected = (True, 1)
    assert expected == (read.complete, len(matches))
    assert body == matches[0].body


async def test_happy_send_takes_two_round_trips(target: Target) -> None:
    """Dispatch is one round trip and the confirmation read another."""
    dispatcher = SmsDispatcher(target.device)
    reader = SmsReader(target.device)
    warm_up = await dispatcher.send(target.recipient, "warm-up")  # reads the highest _id (LIMIT 1)
    await _settle(target, warm_up)
    before = target.device.round_trips
    evidence = await dispatcher.send(target.recipient, "hello")
    after_send = target.device.round_trips
    await _settle(target, evidence)  # polls on a real phone; not counted
    before_read = target.device.round_trips
    read = await reader.read_after(evidence)
    expected = (1, 1, 1, 1)
    assert expected == (
        evidence.round_trips,
        after_send - before,
        read.round_trips,
        target.device.round_trips - before_read,
    )


@pytest.mark.parametrize("body", ["'; reboot; echo '", "$(id)", "`id`", "a && reboot", "\\$HOME"])
async def test_injection_is_sent_literally(target: Target, body: str) -> None:
    """Shell metacharacters in a body are sent as text and never executed."""
    evidence = await SmsDispatcher(target.device).send(target.recipient, body)
    await _settle(target, evidence)
    read = await SmsReader(target.device).read_since(evidence.watermark_id)
    assert [body] == [row.body for row in read.rows if row.type == 2]
    if target.phone is not None:
        assert 0 == target.phone.reboots


@pytest.mark.parametrize(
    "body",
    [
        "a, body=b, address=c = d",
        "two\nlines\nRow: 1 _id=2, body=fake",
        "NULL",
        "emoji 😀👩‍👩‍👧 and e\u0301 accents",
    ],
)
async def test_hazard_bodies_round_trip_exactly(target: Target, body: str) -> None:
    """Bodies that imitate columns, rows and NULL come back byte-exact from the provider."""
    evidence = await SmsDispatcher(target.device).send(target.recipient, body)
    await _settle(target, evidence)
    read = await SmsReader(target.device).read_after(evidence)
    expected = (True, [body])
    assert expected == (read.complete, [row.body for row in read.rows if row.type == 2])
