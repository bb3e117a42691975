"""What the bridge reports when the phone's messaging app misbehaves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from android_bridge import (
    Device,
    IncompleteRead,
    SmsDispatcher,
    SmsReader,
    message_matches_intent,
)
from tests.bridge.conftest import PhoneFactory
from tests.conftest import OUTBOX_FIRST

RECIPIENT = "+12025550143"


async def _send_and_read(
    make_phone: PhoneFactory,
    key: Path,
    fault: str | None,
    *,
    root: bool = False,
    read_as_system: bool = False,
    app: Any = "google",
) -> list[tuple[int, str | None, str]]:
    build = "userdebug" if root or read_as_system else "user"
    phone = await make_phone(root=root, build_type=build, app=app)
    async with await Device.connect(
        phone.serial, key_path=key, command_timeout_s=5, read_as_system=read_as_system
    ) as device:
        dispatcher = SmsDispatcher(device)
        await dispatcher.send(RECIPIENT, "first")
        await phone.wait_idle()
        if fault is not None:
            phone.inject_fault(fault)
        evidence = await dispatcher.send(RECIPIENT, "hi there")
        await phone.wait_idle()
        read = await SmsReader(device).read_since(
            evidence.watermark_id, anchor_date_ms=evidence.watermark_date_ms
        )
        assert read.complete
        return [
            (
                row.type,
                row.body,
                message_matches_intent(row, RECIPIENT, "hi there", region="US").reason,
            )
            for row in read.rows
        ]


async def test_duplicate_send_shows_two_matching_rows(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """When the app sends twice, both rows come back and both match."""
    expected = [(2, "hi there", "match"), (2, "hi there", "match")]
    assert expected == await _send_and_read(make_phone, bridge_key, "duplicate-send")


async def test_mangled_body_is_a_body_mismatch(make_phone: PhoneFactory, bridge_key: Path) -> None:
    """An autocorrected body is reported as a body mismatch."""
    rows = await _send_and_read(make_phone, bridge_key, "mangle-body")
    assert ["body_mismatch"] == [reason for _, _, reason in rows]


async def test_wrong_recipient_is_a_recipient_mismatch(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A message sent to another number is reported as a recipient mismatch."""
    rows = await _send_and_read(make_phone, bridge_key, "wrong-recipient")
    assert ["recipient_mismatch"] == [reason for _, _, reason in rows]


@pytest.mark.parametrize(("fault", "row_type"), [("send-fails", 5), ("stuck-outbox", 4)])
async def test_failed_and_outbox_rows_only_visible_to_the_system_uid(
    make_phone: PhoneFactory, bridge_key: Path, fault: str, row_type: int
) -> None:
    """As shell and as root the FAILED/OUTBOX row is invisible; read through su 1000 it is
    reported (ProviderUtil.isAccessRestricted, TelephonyProvider android-14.0.0_r1). (An app
    writing its row OUTBOX first: every real profile writes it SENT before sending.)"""
    shell_rows = await _send_and_read(make_phone, bridge_key, fault, app=OUTBOX_FIRST)
    root_rows = await _send_and_read(make_phone, bridge_key, fault, root=True, app=OUTBOX_FIRST)
    system_rows = await _send_and_read(
        make_phone, bridge_key, fault, read_as_system=True, app=OUTBOX_FIRST
    )
    assert ([], [], [row_type]) == (shell_rows, root_rows, [row[0] for row in system_rows])


async def test_reads_under_background_traffic_are_exact_or_refused(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """With the phone's owner texting meanwhile, every read is exact or raises IncompleteRead."""
    phone = await make_phone(background_sends=50.0, seed=7)
    async with await Device.connect(phone.serial, key_path=bridge_key) as device:
        dispatcher, reader = SmsDispatcher(device), SmsReader(device, page_size=5)
        evidence = await dispatcher.send(RECIPIENT, "needle")
        outcomes = []
        for _ in range(10):
            await asyncio.sleep(0.02)
            try:
                read = await reader.read_since(evidence.watermark_id, types=(1, 2))
            except IncompleteRead:
                outcomes.append("refused")
                continue
            stored = {row.id: row.body for row in phone.store.rows()}
            assert all(stored[row.id] == row.body for row in read.rows)
            outcomes.append("exact")
    assert "exact" in outcomes
