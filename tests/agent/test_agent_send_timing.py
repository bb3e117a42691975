"""The agent learns when a phone's sent messages show up, and reads no earlier than that."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from starebrain_actions import Status
from starebrain_actions.core.model import SmsIntent
from starebrain_actions.core.ports import DispatchReceipt, Phone, PhoneRead
from starebrain_actions.orchestration.agent import SmsAgent
from starebrain_actions.orchestration.send_timer import (
    SEND_TIME_RECHECK_AFTER,
    SEND_TIME_SEED_MAX_S,
    SendTimer,
)
from tests.conftest import OUTBOX_FIRST

from .conftest import sent_rows

TO = "+1 202 555 0100"


# --------------------------------------------------------------------------- the timer alone


def test_nothing_learnt_reads_at_once_then_probes_between_the_bounds() -> None:
    """With nothing learnt the first read comes as soon as the send returns; after a send
    whose reads at 0.04 and 0.13 s missed and at 0.26 s found the message, the next first
    read probes halfway between 0.13 and 0.26 s."""
    timer = SendTimer()
    assert 0.0 == timer.first_read()
    timer.learn([0.04, 0.13], 0.26)
    assert (0.26, 0.13) == (timer.found_s, timer.missed_s)
    assert pytest.approx(0.195) == timer.first_read()


def test_the_bounds_narrow_until_the_first_read_is_where_it_was_found() -> None:
    """Probes that find the message lower the upper bound, probes that miss raise the lower
    one; once the two are within the tolerance, the first read is at the upper bound."""
    timer = SendTimer()
    timer.learn([0.1], 0.3)
    timer.learn([], 0.2)  # the probe at 0.2 found it
    assert 0.2 == timer.found_s
    timer.learn([0.15], 0.2)  # the probe at 0.15 missed; the read at 0.2 found it
    assert pytest.approx(0.175) == timer.first_read()
    probes = 0
    while timer.first_read() < 0.2:  # every probe misses: the message shows up at 0.2
        timer.learn([timer.first_read()], 0.2)
        probes += 1
    assert 3 == probes  # 0.175, 0.1875, 0.19375: then within 10 ms of 0.2
    assert 0.2 == timer.found_s


def test_after_a_probe_misses_the_next_read_is_where_it_was_found() -> None:
    """A missed probe below the due time is followed by a read at the due time (or at once,
    if that is past); a miss at or past it by reads ``retry_s`` apart, the wait doubling up
    to the cap."""
    timer = SendTimer(found_s=0.3, missed_s=0.1)
    due = timer.due()
    assert 0.3 == due
    assert (0.3, 0.05) == timer.next_read(0.2, 0.22, 0.05, 0.25, due)
    assert (0.35, 0.05) == timer.next_read(0.2, 0.35, 0.05, 0.25, due)
    assert (0.36, 0.1) == timer.next_read(0.31, 0.31, 0.05, 0.25, due)
    assert (0.5, 0.25) == timer.next_read(0.31, 0.3, 0.2, 0.25, due)
    # the message was due: the first retry is at once, then 50 ms
    assert 0.0 == timer.first_retry(0.25)
    assert (0.34, 0.05) == timer.next_read(0.3, 0.34, 0.0, 0.25, due)
    assert (None, 0.05) == (SendTimer().due(), SendTimer().first_retry(0.25))
    assert 0.02 == SendTimer().first_retry(0.02)


def test_a_phone_that_got_slower_starts_the_bounds_over() -> None:
    """A read at the upper bound that misses means the phone got slower: the bounds become
    this send's own."""
    timer = SendTimer(found_s=0.2, missed_s=0.19)
    timer.learn([0.2, 0.3], 0.45)
    assert (0.45, 0.3) == (timer.found_s, timer.missed_s)


def test_seeded_from_history_reads_just_before_the_quickest_confirmation() -> None:
    """A timer seeded from the ledger (the smallest delay from receipt to confirmation,
    ignoring negative ones and ones past the cap) expects the message at that delay after
    the send command started, reads first a tenth earlier, and after a miss there reads at
    the expected time; once it has learnt from a send of its own, its own figures count."""
    timer = SendTimer()
    timer.seed([0.9, 0.5, -1.0, SEND_TIME_SEED_MAX_S + 1, 0.6])
    assert (None, 0.5) == (timer.found_s, timer.seed_s)
    assert pytest.approx(0.45) == timer.first_read()
    assert pytest.approx(0.35) == timer.first_read(0.1)  # the command took 0.1 s of it
    assert pytest.approx(0.4) == timer.due(0.1)
    assert (0.0, 0.0) == (timer.first_read(0.6), timer.due(0.6))
    assert 0.0 == timer.first_retry(0.25)  # the message is due: read again at once
    at, retry = timer.next_read(0.35, 0.37, 0.0, 0.25, timer.due(0.1))
    assert pytest.approx(0.4) == at
    assert 0.0 == retry
    timer.learn([], 0.3)
    assert (0.3, 0.15) == (timer.due(0.1), timer.first_read(0.1))
    unseeded = SendTimer()
    unseeded.seed([-0.5, SEND_TIME_SEED_MAX_S + 1])
    assert (None, 0.0) == (unseeded.seed_s, unseeded.first_read())


def test_a_read_that_caught_the_message_being_sent_moves_the_first_read_later() -> None:
    """A first read at the upper bound that found the message only after reading again (the
    rows changed while it ran) counts as a miss there: the next first read comes one
    tolerance later, past the moment the phone sends."""
    timer = SendTimer(found_s=0.2, missed_s=0.195, sends=5)
    timer.learn([], 0.2, caught_sending=True)
    assert 0.2 == timer.missed_s
    assert pytest.approx(0.21) == timer.found_s
    assert pytest.approx(0.21) == timer.first_read()


def test_many_first_read_finds_loosen_the_lower_bound_once() -> None:
    """After ``SEND_TIME_RECHECK_AFTER`` sends found at their first read, the lower bound is
    loosened by one tolerance, so that the next first read probes below the upper bound."""
    timer = SendTimer(found_s=0.2, missed_s=0.195)
    for _ in range(SEND_TIME_RECHECK_AFTER - 1):
        timer.learn([], 0.2)
        assert 0.2 == timer.first_read()
    timer.learn([], 0.2)
    assert timer.first_read() < 0.2


# --------------------------------------------------------------------------- with a phone


class _Spy:
    """The agent's phone, noting when each send command starts and each read runs."""

    def __init__(self, phone: Phone) -> None:
        self._phone = phone
        self.events: list[tuple[str, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._phone, name)

    async def dispatch(self, intent: SmsIntent, **options: Any) -> DispatchReceipt:
        self.events.append(("dispatch", time.monotonic()))
        try:
            return await self._phone.dispatch(intent, **options)
        finally:
            self.events.append(("returned", time.monotonic()))

    async def read_outgoing(self, **kwargs: Any) -> PhoneRead:
        self.events.append(("read", time.monotonic()))
        return await self._phone.read_outgoing(**kwargs)


def _first_read_after(events: Sequence[tuple[str, float]], mark: str) -> float:
    """Seconds from the (last) send command's start (``dispatch``) or end (``returned``) to
    the first read after it."""
    start = max(at for kind, at in events if kind == mark)
    return min(at for kind, at in events if kind == "read" and at >= start) - start


async def test_the_second_send_reads_no_earlier_than_the_phone_showed_the_first(
    sms_phone: Any, agent_for: Any
) -> None:
    """A phone whose radio takes 300 ms: the first send reads as soon as its command returns
    (nothing learnt); the agent learns when the row showed up, and the second send's first
    read comes no earlier than it planned from that, at least a third of the send delay after
    the command returned."""
    # an app writing its row OUTBOX first: it shows SENT once the radio sent it (an app that
    # writes SENT first shows it at once, and the first read after the command finds it)
    phone = await sms_phone(send_delay_ms=300, app=OUTBOX_FIRST)
    async with agent_for(phone) as agent:
        spy = _Spy(agent.phone)
        agent.phone = spy
        assert agent.send_timer.found_s is None
        first = await agent.send("T-1", TO, "first")
        assert agent.send_timer.found_s is not None
        planned = agent.send_timer.first_read()
        spy.events.clear()
        second = await agent.send("T-2", TO, "second")
    assert Status.SUCCEEDED == first.status
    assert Status.SUCCEEDED == second.status
    assert [1, 1] == [len(sent_rows(phone, TO, body)) for body in ("first", "second")]
    assert planned >= 0.1
    assert _first_read_after(spy.events, "returned") >= planned - 0.01


async def test_a_new_agent_starts_from_the_ledger_history_of_the_phone(
    sms_phone: Any, agent_for: Any
) -> None:
    """An agent opened later on the same ledger has learnt nothing itself, yet its first send
    reads first no earlier than nine tenths of the quickest confirmation the ledger holds for
    the phone."""
    phone = await sms_phone(send_delay_ms=300)
    async with agent_for(phone) as agent:
        await agent.send("H-1", TO, "earlier one")
        await agent.send("H-2", TO, "earlier two")
    async with agent_for(phone) as later:
        assert isinstance(later, SmsAgent)
        delays = await later.ledger.confirmation_delays(phone.serial, 16)
        assert 2 == len(delays)
        quickest = min(delays)
        assert quickest >= timedelta(milliseconds=150)
        spy = _Spy(later.phone)
        later.phone = spy
        outcome = await later.send("H-3", TO, "later")
    assert Status.SUCCEEDED == outcome.status
    assert 1 == len(sent_rows(phone, TO, "later"))
    expected = 0.9 * quickest.total_seconds()
    assert _first_read_after(spy.events, "dispatch") >= expected - 0.01
