"""Property: whatever rows the provider holds, a read returns them exactly or refuses."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from android_bridge import Device, IncompleteRead, SmsReader, UnparseableOutput, ensure_key
from android_bridge.simulator import SimulatedPhone
from tests.bridge.strategies import bodies

SUB_ID = 1  # the subscription the simulated shell user can see

texts = st.one_of(st.none(), st.just("NULL"), bodies(300))
rows = st.lists(
    st.tuples(st.sampled_from([1, 2, 2, 2]), texts, texts, texts), min_size=0, max_size=7
)


def test_stored_rows_read_back_exactly_or_refused() -> None:
    """Random rows (NULLs, the text NULL, hazards, any type) read back exactly, page by page."""
    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as runner:
        root = Path(tmp)
        key = ensure_key(root / "adbkey")
        keys = root / "adb_keys"
        keys.write_text(Path(str(key) + ".pub").read_text().strip() + "\n")
        phone = SimulatedPhone(store_path=root / "sms.db", authorized_keys_path=keys)
        runner.run(phone.start())
        device = runner.run(Device.connect(phone.serial, key_path=key, command_timeout_s=5))
        outcomes: list[str] = []

        async def scenario(
            generated: list[tuple[int, str | None, str | None, str | None]], page_size: int
        ) -> None:
            now = time.time_ns() // 1_000_000
            anchor = phone.store.insert_incoming("+12025550100", "anchor", date_ms=now)
            expected = []
            for row_type, address, body, creator in generated:
                row_id = phone.store.insert(
                    type=row_type,
                    address=address,
                    body=body,
                    creator=creator,
                    date=now,
                    sub_id=SUB_ID,
                    thread_id=1,
                )
                if row_type == 2:
                    expected.append((row_id, address, body, creator))
            try:
                read = await SmsReader(device, page_size=page_size).read_since(anchor)
            except (UnparseableOutput, IncompleteRead):
                outcomes.append("refused")
                return
            got = [(row.id, row.address, row.body, row.creator) for row in read.rows]
            assert expected == got
            assert True is read.complete
            outcomes.append("exact")

        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(rows, st.integers(1, 4))
        def check(
            generated: list[tuple[int, str | None, str | None, str | None]], size: int
        ) -> None:
            runner.run(scenario(generated, size))

        try:
            check()
        finally:
            runner.run(device.close())
            runner.run(phone.stop())
    assert outcomes.count("exact") >= len(outcomes) // 2
