"""A lost reply ends SUCCEEDED by proof: the connection drops right after the send key.

adbd hangs the send script up when the connection goes (a PTY hang-up), but the script ignores
SIGHUP and writes its output to a file on the phone (``android_bridge._fence.run_to_the_end``),
so it runs on to its end: it records its ``keys`` stage marker with the phone's clock. The
next pass reads the fence, whose ``am`` and ``keys`` markers close the attempt's send window,
and the row inside it confirms the one SMS. The ground truth is the phone's: what left it
(``phone.transmissions``) and its store (``phone.store.rows()``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import attrs
import pytest

from starebrain_actions import DeliveryState, Status

from .conftest import FAST, sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"
#: How each variant reads the phone: the restricted view of the shell user (a user build),
#: or the system uid's full view (``su 1000`` on a userdebug build).
VIEWS = {"shell": {"root": False}, "system": {}}


def ours(phone: Any) -> list[int]:
    """The provider ids of the messages that really left the phone with BODY."""
    return [t.provider_id for t in phone.transmissions if t.body == BODY]


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("android", [10, 15])
async def test_a_reply_lost_right_after_the_send_key_succeeds_with_one_sms(
    sms_phone: Any, agent_for: Any, android: int, view: str
) -> None:
    """``drop-after-send``: the message goes out and the connection resets before the reply.
    The script runs on and records its keys; the fence's stage markers bound the window and a
    read confirms the one SMS: SUCCEEDED, one SMS, nothing in review, nothing resent."""
    phone = await sms_phone(android=android, **VIEWS[view])
    phone.inject_fault("drop-after-send")
    async with agent_for(phone) as agent, asyncio.timeout(120):
        outcome = await agent.send("A-17", TO, BODY, wait=30)
        again = await agent.send("A-17", TO, BODY, wait=5)
    await phone.wait_idle()
    record = outcome.record
    assert record is not None
    assert (Status.SUCCEEDED, (), 1) == (
        outcome.status,
        outcome.summary.review_reasons,
        len(again.summary.attempts),
    )
    assert "claimed" == record.evidence.get("fence")
    assert {"am", "keys"} <= {
        str(stage).partition("@")[0] for stage in record.evidence["fence_stages"]
    }
    assert 1 == len(ours(phone))
    assert ours(phone) == sent_rows(phone, TO, BODY) == [record.provider_object_id]


@pytest.mark.parametrize("view", sorted(VIEWS))
async def test_the_owners_identical_text_right_after_a_lost_reply_is_never_claimed(
    sms_phone: Any, agent_for: Any, view: str
) -> None:
    """The reply is lost right after the send key, and the phone's owner sends the very same
    text to the same number two seconds later, before our row settled (the app writes it
    SENT before the radio sends). The stage markers close our window: our row is confirmed,
    the owner's
    (dated after the window) is neither claimed nor recorded as a duplicate, and nothing
    goes to review."""
    phone = await sms_phone(android=15, send_delay_ms=1500, **VIEWS[view])
    phone.inject_fault("drop-after-send")
    # our row settles well after the owner's text lands, however slow the machine
    policy = attrs.evolve(FAST, settle_after=timedelta(seconds=6))
    async with agent_for(phone, policy=policy) as agent, asyncio.timeout(120):
        first = await agent.send("A-17", TO, BODY, wait=0)
        assert first.status in (Status.IN_FLIGHT, Status.UNKNOWN, Status.VERIFYING)
        await phone.wait_idle()  # our script has ended on the phone, our SMS has left
        phone.advance_time(timedelta(seconds=2))
        owners = phone.store.insert_outgoing(
            TO.replace(" ", ""), BODY, date_ms=phone.now_ms(), message_type=2
        )
        outcome = await agent.send("A-17", TO, BODY, wait=30)
        duplicates = await agent.ledger.duplicates("A-17")
        claimed = await agent.ledger.claimed_provider_ids(phone.serial, 0)
    record = outcome.record
    assert record is not None
    assert (Status.SUCCEEDED, (), DeliveryState.CONFIRMED) == (
        outcome.status,
        outcome.summary.review_reasons,
        record.delivery,
    )
    assert ours(phone) == [record.provider_object_id]
    assert sorted([*ours(phone), owners]) == sent_rows(phone, TO, BODY)
    assert owners not in {row_id for row_id, _date in claimed}
    assert [] == duplicates
