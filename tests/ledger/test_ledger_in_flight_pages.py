"""A backlog of unresolved attempts is read a phone and a page at a time (issue 26 §2): the
pages of ``iter_in_flight`` give exactly ``in_flight``, the counts agree with it, and a pass
over a phone that cannot be connected to, with a page far smaller than its backlog, still
notes and reports every attempt, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from starebrain_actions import Ledger, SmsIntent
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.exceptions import InvalidInput, PhoneError
from starebrain_actions.core.model import ReviewReason
from starebrain_actions.orchestration.nightly.report import report_data, report_json_chunks
from starebrain_actions.orchestration.nightly.run import _read_ledger
from starebrain_actions.orchestration.reconciler import reconcile_pending
from starebrain_actions.render.json_output import json_text, versioned

START = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
DEVICES = ("phone-a", "phone-b")


async def _backlog(ledger: Ledger, per_device: int) -> dict[str, list[str]]:
    """``per_device`` unresolved attempts on each device: all but the latest in review as
    UNVERIFIED (which frees the phone for the next), the latest holding the lease; two of
    them dispatched at the same instant (the keyset's tie on ``dispatched_at``). Returns the
    dispatch ids per device, oldest first."""
    made: dict[str, list[str]] = {device: [] for device in DEVICES}
    for number in range(per_device):
        for device in DEVICES:
            at = START + timedelta(minutes=number if number != 1 else 0)
            action_id = f"{device}-{number}"
            await ledger.create_action(
                action_id, SmsIntent(recipient="+12025550143", body=f"text {number}"), now=at
            )
            record = await ledger.begin_attempt(action_id, device, now=at)
            made[device].append(record.dispatch_id)
            if number < per_device - 1:
                await ledger.apply(_core.flag_for_review(record, ReviewReason.UNVERIFIED, now=at))
    for device in DEVICES:
        # the order in_flight gives: dispatch time, then dispatch id
        found = await ledger.in_flight(device)
        assert sorted(made[device]) == sorted(r.dispatch_id for r in found)
        made[device] = [r.dispatch_id for r in found]
    return made


@pytest.mark.parametrize("page_size", [1, 2, 3, 7, 500])
async def test_pages_give_every_unresolved_attempt_once_in_order(
    ledger: Ledger, page_size: int
) -> None:
    made = await _backlog(ledger, 7)
    for device in DEVICES:
        pages = [page async for page in ledger.iter_in_flight(device, page_size=page_size)]
        assert all(0 < len(page) <= page_size for page in pages)
        assert made[device] == [r.dispatch_id for page in pages for r in page]
        assert 7 == await ledger.count_in_flight(device)
    assert dict.fromkeys(DEVICES, 7) == await ledger.in_flight_counts()
    assert 0 == await ledger.count_in_flight("no-such-phone")
    assert [] == [page async for page in ledger.iter_in_flight("no-such-phone")]
    with pytest.raises(InvalidInput):
        [page async for page in ledger.iter_in_flight(DEVICES[0], page_size=0)]


async def test_a_settled_attempt_between_pages_shifts_nothing(ledger: Ledger) -> None:
    made = await _backlog(ledger, 6)
    device = DEVICES[0]
    seen: list[str] = []
    async for page in ledger.iter_in_flight(device, page_size=2):
        seen += [r.dispatch_id for r in page]
        if len(seen) == 2:
            # the first attempt of the page read next fails meanwhile: it is not unresolved
            # any more when its page is read, and nothing else is skipped or repeated
            gone = (await ledger.attempts_by_id([made[device][2]]))[made[device][2]]
            await ledger.apply(_core.fail_delivery(gone, reason="gone", now=START))
    assert [d for d in made[device] if d != made[device][2]] == seen


async def test_an_unreachable_phone_with_a_backlog_larger_than_a_page(ledger: Ledger) -> None:
    """Each attempt is noted once, the pass reports them all, and the nightly read counts
    them per device; a second pass notes nothing again."""
    made = await _backlog(ledger, 5)
    now = START + timedelta(hours=2)

    async def down(serial: str) -> None:
        raise PhoneError(f"{serial} refused the connection")

    for rounds in range(2):
        result = await reconcile_pending(
            ledger, list(DEVICES), open_phone=down, now=now, in_flight_page=2
        )
        assert [(r.device, r.reachable, r.in_flight) for r in result.devices] == [
            (device, False, 5) for device in DEVICES
        ]
        for device in DEVICES:
            records = await ledger.in_flight(device)
            assert made[device] == [r.dispatch_id for r in records]
            assert {r.last_error for r in records} == {
                f"reconcile read failed: {device} refused the connection"
            }
            for record in records:
                entries = await ledger.history(record.action_id)
                history = [e for e in entries if e.event.value == "note_error"]
                assert 1 == len(history), (rounds, history)
    read = await _read_ledger(ledger, now, timedelta(hours=1))
    assert dict.fromkeys(DEVICES, 5) == dict(read.in_flight_per_device)
    report = read.builder.report(
        ledger_path="ledger", duration_s=0.0, devices=(), duplicates=(), tally=read.tally
    )
    assert sorted(d for ids in made.values() for d in ids) == sorted(
        line.dispatch_id for line in report.unresolved
    )
    # the report's JSON, written a line at a time, is the whole report's JSON byte for byte
    for extra in ({}, {"dry_run": True}):
        whole = json_text(versioned({**report_data(report), **extra}))
        assert whole == "".join(report_json_chunks(report, extra))
