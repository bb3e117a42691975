"""Windowed reads against the simulated phone: exact rows, proven completeness, honest modes."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from android_bridge import (
    Device,
    DeviceUnreachable,
    MessagingApp,
    ProviderError,
    SmsDispatcher,
    SmsReader,
    UnparseableOutput,
    ensure_key,
)
from android_bridge.simulator import SimulatedPhone
from tests.bridge.conftest import PhoneFactory
from tests.bridge.strategies import bodies

RECIPIENT = "+12025550143"
SUB_ID = 1  # the subscription the simulated shell user can see


def _now() -> int:
    return time.time_ns() // 1_000_000


async def _connect(phone: SimulatedPhone, key: Path) -> Device:
    return await Device.connect(phone.serial, key_path=key, command_timeout_s=5)


def test_random_bodies_come_back_byte_exact_or_refused() -> None:
    """Any body (Unicode, emoji, hazards, up to 2,000 chars) reads back exactly, or is refused
    (AOSP Messaging, which sends the text as typed and never converts it to MMS)."""
    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as runner:
        root = Path(tmp)
        key = ensure_key(root / "adbkey")
        keys = root / "adb_keys"
        keys.write_text(Path(str(key) + ".pub").read_text().strip() + "\n")
        phone = SimulatedPhone(store_path=root / "sms.db", authorized_keys_path=keys, app="aosp")
        runner.run(phone.start())
        device = runner.run(_connect(phone, key))
        dispatcher, reader = SmsDispatcher(device), SmsReader(device)
        outcomes: list[str] = []

        async def round_trip(body: str) -> None:
            evidence = await dispatcher.send(RECIPIENT, body)
            await phone.wait_idle()
            try:
                read = await reader.read_since(evidence.watermark_id)
            except UnparseableOutput:
                outcomes.append("refused")
                return
            assert [body] == [row.body for row in read.rows]
            assert True is read.complete
            outcomes.append("exact")

        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(bodies(2000).filter(lambda body: body.strip() != ""))
        def check(body: str) -> None:
            runner.run(round_trip(body))

        try:
            check()
        finally:
            runner.run(device.close())
            runner.run(phone.stop())
    assert outcomes.count("exact") >= len(outcomes) // 2


async def test_hazard_bodies_read_back_exact(sim_phone: SimulatedPhone, sim_device: Device) -> None:
    """Stored rows whose bodies imitate rows, columns, NULL and newlines are read exactly."""
    hazards = [
        "a, body=b, address=c",
        "x\nRow: 1 _id=999, address=+1, body=fake",
        "NULL",
        "",
        "line1\r\nline2\rline3\n",
        "Row: 0 _id=1, body=",
        "😀👩‍👩‍👧 e\u0301",
    ]
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    for body in hazards:
        sim_phone.store.insert_outgoing(RECIPIENT, body, date_ms=_now(), message_type=2)
    read = await SmsReader(sim_device).read_since(anchor)
    assert hazards == [row.body for row in read.rows]
    assert True is read.complete


async def test_sql_null_and_text_null_are_told_apart(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """A NULL body and the text "NULL" differ, resolved with one extra round trip."""
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    sim_phone.store.insert(
        address=RECIPIENT, body=None, type=2, date=_now(), creator=None, sub_id=SUB_ID
    )
    sim_phone.store.insert(
        address="NULL", body="NULL", type=2, date=_now(), creator="NULL", sub_id=SUB_ID
    )
    read = await SmsReader(sim_device).read_since(anchor)
    expected = [(RECIPIENT, None, None), ("NULL", "NULL", "NULL")]
    assert expected == [(row.address, row.body, row.creator) for row in read.rows]
    assert 2 == read.round_trips


async def test_missing_anchor_proves_nothing(sim_phone: SimulatedPhone, sim_device: Device) -> None:
    """When the anchor row is gone the read is not complete, even though rows came back."""
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    sim_phone.store.insert_outgoing(RECIPIENT, "later", date_ms=_now(), message_type=2)
    sim_phone.store._db.execute("DELETE FROM sms WHERE _id = ?", (anchor,))
    read = await SmsReader(sim_device).read_since(anchor)
    assert (False, ["later"]) == (read.complete, [row.body for row in read.rows])


async def test_reused_anchor_id_is_a_candidate_not_proof(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """A new row reusing a deleted anchor's _id is reported, and the read is not complete."""
    sim_phone.store.insert_incoming("+12025550100", "older", date_ms=_now())
    evidence = await SmsDispatcher(sim_device).send(RECIPIENT, "first")
    watermark = evidence.watermark_id
    sim_phone.store._db.execute("DELETE FROM sms WHERE _id > ?", (watermark - 1,))
    reused = sim_phone.store.insert_outgoing(RECIPIENT, "mine", date_ms=_now() + 5, message_type=2)
    read = await SmsReader(sim_device).read_since(
        watermark, anchor_date_ms=evidence.watermark_date_ms
    )
    assert (watermark, False, ["mine"]) == (reused, read.complete, [r.body for r in read.rows])


async def test_empty_store_read_proves_nothing(sim_device: Device) -> None:
    """With no anchor and no rows, ``No result found.`` proves nothing."""
    read = await SmsReader(sim_device).read_since(0)
    assert (False, ()) == (read.complete, read.rows)


async def test_shell_mode_cannot_see_outbox_or_failed(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """As the shell user, OUTBOX/FAILED rows are invisible; the read says which types it covers."""
    phone = await make_phone()
    anchor = phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    phone.store.insert_outgoing(RECIPIENT, "stuck", date_ms=_now(), message_type=4)
    phone.store.insert_outgoing(RECIPIENT, "failed", date_ms=_now(), message_type=5)
    async with await _connect(phone, bridge_key) as device:
        read = await SmsReader(device).read_since(anchor)
    assert ("shell", (2,), ()) == (read.mode, read.visible_types, read.rows)


async def test_root_reads_the_restricted_view_too(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """After adb root, OUTBOX and FAILED rows stay invisible: uid 0 is not exempt
    (ProviderUtil.isAccessRestricted, TelephonyProvider android-10.0.0_r1 to 15.0.0_r1)."""
    phone = await make_phone(root=True)
    anchor = phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    phone.store.insert_outgoing(RECIPIENT, "stuck", date_ms=_now(), message_type=4)
    phone.store.insert_outgoing(RECIPIENT, "failed", date_ms=_now(), message_type=5)
    async with await _connect(phone, bridge_key) as device:
        read = await SmsReader(device).read_since(anchor)
    assert ("root", (2,), ()) == (read.mode, read.visible_types, read.rows)


@pytest.mark.parametrize("root", [False, True])
async def test_reading_as_system_sees_every_type(
    make_phone: PhoneFactory, bridge_key: Path, root: bool
) -> None:
    """Through su 1000 on a userdebug build, OUTBOX and FAILED rows are visible and reported
    (ProviderUtil.isAccessRestricted exempts uid 1000; system/extras su.cpp)."""
    phone = await make_phone(root=root, build_type="userdebug")
    anchor = phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    phone.store.insert_outgoing(RECIPIENT, "stuck", date_ms=_now(), message_type=4)
    phone.store.insert_outgoing(RECIPIENT, "failed", date_ms=_now(), message_type=5)
    async with await Device.connect(
        phone.serial, key_path=bridge_key, read_as_system=True
    ) as device:
        read = await SmsReader(device).read_since(anchor)
    assert ((2, 4, 5, 6), [4, 5], True) == (
        read.visible_types,
        [row.type for row in read.rows],
        read.complete,
    )


async def test_rows_out_of_sight_are_reported_as_unseen_ids(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """``find_unseen``: the ids above the anchor that no visible row holds are the rows the
    restricted view hides (outbox, failed, draft) and deleted ones; incoming rows, visible
    but outside the window, are listed and leave no gap. Ids above the highest visible row
    are not reported (nothing shows they exist). The simulated store numbers rows as
    ``mmssms.db`` does: ``_id INTEGER PRIMARY KEY``, no AUTOINCREMENT (TelephonyProvider
    ``MmsSmsDatabaseHelper.java`` at android-10.0.0_r30 and android-15.0.0_r17), and the
    restricted view as ``ProviderUtil.isAccessRestricted`` (same tags)."""
    phone = await make_phone()
    anchor = phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    stuck = phone.store.insert_outgoing(RECIPIENT, "stuck", date_ms=_now(), message_type=4)
    failed = phone.store.insert_outgoing(RECIPIENT, "failed", date_ms=_now(), message_type=5)
    phone.store.insert_incoming("+12025550100", "reply", date_ms=_now())
    draft = phone.store.insert_outgoing(RECIPIENT, "draft", date_ms=_now(), message_type=3)
    sent = phone.store.insert_outgoing(RECIPIENT, "sent", date_ms=_now(), message_type=2)
    phone.store.insert_outgoing(RECIPIENT, "on top", date_ms=_now(), message_type=5)
    async with await _connect(phone, bridge_key) as device:
        read = await SmsReader(device).read_since(anchor, find_unseen=True)
        plain = await SmsReader(device).read_since(anchor)
    assert ((stuck, failed), (draft, draft)) == read.unseen_ids
    assert ([sent], True) == ([row.id for row in read.rows], read.complete)
    assert (None, 1) == (plain.unseen_ids, read.round_trips)


async def test_a_read_as_system_sees_only_deleted_ids_as_unseen(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """The system uid sees every type: what is left unseen was deleted (a deleted row's
    ``_id`` stays a gap unless it was the highest: ``_id INTEGER PRIMARY KEY`` without
    AUTOINCREMENT, ``MmsSmsDatabaseHelper.java`` at android-10.0.0_r30 and
    android-15.0.0_r17)."""
    phone = await make_phone(build_type="userdebug")
    anchor = phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    phone.store.insert_outgoing(RECIPIENT, "failed", date_ms=_now(), message_type=5)
    gone = phone.store.insert_incoming("+12025550100", "deleted", date_ms=_now())
    phone.store.insert_outgoing(RECIPIENT, "draft", date_ms=_now(), message_type=3)
    phone.store.insert_outgoing(RECIPIENT, "sent", date_ms=_now(), message_type=2)
    phone.store.delete(gone)
    async with await Device.connect(
        phone.serial, key_path=bridge_key, read_as_system=True
    ) as device:
        read = await SmsReader(device).read_since(anchor, find_unseen=True)
    assert ((gone, gone),) == read.unseen_ids


async def test_reading_as_system_is_refused_on_a_user_build(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A user build has no su: asking to read as system fails at connect, with the reason."""
    phone = await make_phone()
    with pytest.raises(DeviceUnreachable, match="su 1000"):
        await Device.connect(phone.serial, key_path=bridge_key, read_as_system=True)


async def test_time_window_excludes_older_rows(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """Rows dated before ``since_ms`` are outside the window."""
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    sim_phone.store.insert_outgoing(RECIPIENT, "old", date_ms=1_000, message_type=2)
    sim_phone.store.insert_outgoing(RECIPIENT, "new", date_ms=_now(), message_type=2)
    read = await SmsReader(sim_device).read_since(anchor, since_ms=_now() - 60_000)
    assert ["new"] == [row.body for row in read.rows]


async def test_key_events_are_configurable(sim_phone: SimulatedPhone, sim_device: Device) -> None:
    """The key events come from the MessagingApp: ENTER alone types a newline, sending nothing."""
    app = MessagingApp(key_events=(66,))
    evidence = await SmsDispatcher(sim_device, app=app).send(RECIPIENT, "unsent")
    read = await SmsReader(sim_device).read_since(evidence.watermark_id)
    sent_command = sim_phone.commands_run[-2]
    assert ("input keyevent 66" in sent_command, "input keyevent 22" in sent_command) == (
        True,
        False,
    )
    assert () == read.rows


async def test_evidence_carries_clock_and_watermark_read_before_send(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """Watermark and device clock are read in the same round trip, before ``am``."""
    sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    before = _now()
    evidence = await SmsDispatcher(sim_device).send(RECIPIENT, "hi")
    command = sim_phone.commands_run[-1]
    order = [command.index("content query"), command.index("date +"), command.index("am start")]
    assert order == sorted(order)
    assert evidence.device_clock_ms is not None
    assert before - 1000 <= evidence.device_clock_ms <= _now() + 1000
    assert (1, True) == (evidence.watermark_id, evidence.watermark_proven)


async def test_pages_cover_the_window_exactly(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """A window larger than a page is read page by page, every row once, in order."""
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    expected = []
    for index in range(11):
        sim_phone.store.insert_incoming("+12025550100", f"in {index}", date_ms=_now())
        body = f"out {index}"
        sim_phone.store.insert_outgoing(RECIPIENT, body, date_ms=_now(), message_type=2)
        expected.append(body)
    read = await SmsReader(sim_device, page_size=4).read_since(anchor)
    # LIMIT pages of 4 window rows (the inbox rows between them are not counted): 4, 4, 3.
    assert (expected, True, 3) == ([r.body for r in read.rows], read.complete, read.round_trips)


async def test_a_window_of_exactly_full_pages_ends_with_an_empty_anchored_page(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """8 rows in pages of 4: a full page may not be the last, so a third page, anchored at
    the last row, proves there is nothing more; the read is complete."""
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    for index in range(8):
        sim_phone.store.insert_outgoing(RECIPIENT, f"out {index}", date_ms=_now(), message_type=2)
    read = await SmsReader(sim_device, page_size=4).read_since(anchor)
    assert (8, True, 3) == (len(read.rows), read.complete, read.round_trips)
    fresh = await SmsReader(sim_device, page_size=4).read_since(0)
    assert (9, True, 3) == (len(fresh.rows) + 1, fresh.complete, fresh.round_trips)


async def test_provider_error_in_a_paged_read_raises(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """A provider error during a paged read raises ProviderError instead of a short result."""
    anchor = sim_phone.store.insert_incoming("+12025550100", "anchor", date_ms=_now())
    for index in range(3):
        sim_phone.store.insert_outgoing(RECIPIENT, f"out {index}", date_ms=_now(), message_type=2)
    sim_phone.inject_fault("provider-error", count=1)
    with pytest.raises(ProviderError):
        await SmsReader(sim_device, page_size=2).read_since(anchor)


async def test_hostile_incoming_anchor_cannot_block_reads(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """An incoming anchor whose text quotes the next rows' headers is never parsed as text."""
    next_id = sim_phone.store.rows()[-1].id + 2 if sim_phone.store.rows() else 2
    forged = "".join(f"\nRow: 1 _id={i}, body=forged" for i in range(next_id - 1, next_id + 5))
    anchor = sim_phone.store.insert_incoming("+12025550199", forged, date_ms=_now())
    sim_phone.store.insert_outgoing(RECIPIENT, "real", date_ms=_now(), message_type=2)
    read = await SmsReader(sim_device).read_since(anchor)
    expected = (True, ["real"])
    assert expected == (read.complete, [row.body for row in read.rows])


async def test_previous_body_quoting_next_header_cannot_block_confirmation(
    sim_phone: SimulatedPhone, sim_device: Device
) -> None:
    """The previous outgoing message is the next anchor; its text is never parsed either."""
    dispatcher, reader = SmsDispatcher(sim_device), SmsReader(sim_device)
    await dispatcher.send(RECIPIENT, "warm-up")
    base = sim_device.known_max_id
    forged = "x" + "".join(f"\nRow: 1 _id={i}, body=forged" for i in range(base, base + 6))
    await dispatcher.send(RECIPIENT, forged)
    evidence = await dispatcher.send(RECIPIENT, "the real one")
    read = await reader.read_after(evidence)
    expected = (True, ["the real one"], 1)
    assert expected == (read.complete, [row.body for row in read.rows], read.round_trips)
