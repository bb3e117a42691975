"""LIMIT paging and the first send's watermark, against the simulated phone."""

from __future__ import annotations

import time

from android_bridge import Device, SmsDispatcher, SmsReader
from android_bridge.simulator import SimulatedPhone

RECIPIENT = "+12025550143"


def _now() -> int:
    return time.time_ns() // 1_000_000


async def test_small_pages_read_exactly_what_one_page_reads(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """A window of 23 outgoing rows among inbox, outbox and old rows, read in pages of 5 with a
    date filter, holds the same rows as one page, in order, and is proven complete."""
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    start = _now()
    for index in range(30):
        date = start - 60_000 if index % 7 == 0 else start + index
        sim_phone.store.insert_outgoing(RECIPIENT, f"out {index}", date_ms=date, message_type=2)
        if index % 3 == 0:
            sim_phone.store.insert_incoming("+12025550100", f"in {index}", date_ms=start + index)
        if index % 4 == 0:  # an outbox row: hidden from the shell's restricted view
            sim_phone.store.insert_outgoing(RECIPIENT, f"queued {index}", date_ms=start + index)
    paged = await SmsReader(sim_device, page_size=5).read_since(anchor, since_ms=start)
    whole = await SmsReader(sim_device, page_size=1_000).read_since(anchor, since_ms=start)
    expected = [f"out {i}" for i in range(30) if i % 7 != 0]
    assert expected == [row.body for row in paged.rows]
    assert [row.id for row in whole.rows] == [row.id for row in paged.rows]
    # 25 rows in pages of 5: five full pages, then one that proves nothing follows
    assert (True, True, 6, 1) == (
        paged.complete,
        whole.complete,
        paged.round_trips,
        whole.round_trips,
    )


async def test_a_deleted_anchor_still_proves_nothing_when_paged(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """The rows come back, but with the anchor row out of sight (turned into a draft, which
    the restricted view hides, as if deleted) the paged read is not complete."""
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    for index in range(7):
        sim_phone.store.insert_outgoing(RECIPIENT, f"out {index}", date_ms=_now(), message_type=2)
    sim_phone.store.update(anchor, {"type": 3})
    read = await SmsReader(sim_device, page_size=3).read_since(anchor)
    assert ([f"out {i}" for i in range(7)], False) == (
        [row.body for row in read.rows],
        read.complete,
    )
    assert read.incomplete_reason is not None and f"_id={anchor}" in read.incomplete_reason


async def test_the_first_send_reads_only_the_highest_visible_row(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """With no known id, the watermark is the highest row the shell can see (an outbox row
    above it is invisible to it), read with ``_id DESC LIMIT 1`` in the send's round trip."""
    for index in range(40):
        sim_phone.store.insert_outgoing(RECIPIENT, f"old {index}", date_ms=_now(), message_type=2)
    highest = sim_phone.store.insert_incoming("+12025550100", "latest", date_ms=_now() + 5)
    sim_phone.store.insert_outgoing(RECIPIENT, "queued", date_ms=_now())  # outbox: hidden
    evidence = await SmsDispatcher(sim_device).send(RECIPIENT, "hi")
    assert "--sort '_id DESC LIMIT 1'" in sim_phone.commands_run[-1]
    assert (highest, True) == (evidence.watermark_id, evidence.watermark_proven)
    assert evidence.watermark_date_ms is not None


async def test_the_first_send_on_an_empty_box_proves_no_watermark(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """No visible row: ``No result found.`` proves nothing, so the watermark is not proven."""
    evidence = await SmsDispatcher(sim_device).send(RECIPIENT, "hi")
    assert (0, False) == (evidence.watermark_id, evidence.watermark_proven)
