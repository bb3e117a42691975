"""``SmsAgent.send`` answers when the answer is known (issue 35, item 3): a row that cannot
settle within ``wait`` is answered as soon as it is found (VERIFYING, ``settles_at``), and
``wait_settled=True`` reads it until the wait ends; a call again sends nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs

from starebrain_actions.core.decisions import settling_until
from starebrain_actions.core.model import Status
from tests.agent.conftest import FAST, sent_rows

TO = "+12025550100"
BODY = "Your code is 4821"
#: A wait no early answer comes near.
LONG_WAIT = 120.0
#: The app's row settles an hour after the send: never within a wait here.
HOUR = attrs.evolve(FAST, settle_after=timedelta(hours=1))


async def test_send_answers_once_the_row_is_found_and_again_sends_nothing(
    sms_phone: Any, agent_for: Callable[..., Any]
) -> None:
    """Through the app, a row settling in an hour: VERIFYING as soon as it is found, not
    after the wait; the same call again reads it and returns at once, sending nothing; one
    SMS in the phone's store."""
    phone = await sms_phone()
    async with agent_for(phone, policy=HOUR) as agent:
        started = time.monotonic()
        outcome = await agent.send("E-1", TO, BODY, wait=LONG_WAIT)
        took = time.monotonic() - started
        assert Status.VERIFYING is outcome.status
        latest = outcome.summary.latest
        assert latest is not None and settling_until(latest) is not None
        assert took < LONG_WAIT / 2, took
        again = await agent.send("E-1", TO, BODY, wait=LONG_WAIT)
        assert (Status.VERIFYING, 1, 1) == (
            again.status,
            agent.dispatches,
            len(again.summary.attempts),
        )
    await phone.radio_idle()
    assert 1 == len(sent_rows(phone, TO, BODY)) == len(phone.transmissions)


async def test_wait_settled_reads_the_row_until_the_wait_ends(
    sms_phone: Any, agent_for: Callable[..., Any]
) -> None:
    """``wait_settled=True``: the same row is followed for the whole wait (it cannot settle
    within it), then VERIFYING; one dispatch, one SMS."""
    phone = await sms_phone()
    async with agent_for(phone, policy=HOUR) as agent:
        started = time.monotonic()
        outcome = await agent.send("E-2", TO, BODY, wait=3.0, wait_settled=True)
        took = time.monotonic() - started
        assert (Status.VERIFYING, 1) == (outcome.status, agent.dispatches)
        assert took >= 3.0, took
    await phone.radio_idle()
    assert 1 == len(sent_rows(phone, TO, BODY)) == len(phone.transmissions)


async def test_a_settle_within_the_wait_is_followed_to_succeeded(
    sms_phone: Any, agent_for: Callable[..., Any]
) -> None:
    """A row that settles within the wait (the framework's, 0.5 s after it is seen by
    default) is followed without being asked: SUCCEEDED in the same call."""
    phone = await sms_phone()
    policy = attrs.evolve(FAST, framework_settle_after=timedelta(milliseconds=500))
    async with agent_for(phone, policy=policy, send_path="framework") as agent:
        outcome = await agent.send("E-3", TO, BODY, wait=LONG_WAIT)
    assert (Status.SUCCEEDED, 1) == (outcome.status, agent.dispatches)
    assert 1 == len(sent_rows(phone, TO, BODY)) == len(phone.transmissions)
