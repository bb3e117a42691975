"""Benchmark the bridge against the simulated phone and print its figures.

Run: ``python benchmarks/bench_bridge.py [--latency-ms 30]``. Prints:

* round trips per happy-path send (dispatch + confirmation read; target <= 2);
* ``content query`` parse throughput over 50,000 rows (target >= 50,000 rows/s);
* the cost of reading 100 new rows from a sent box of 100,000 rows vs of 100 rows
  (target: ratio within 1.5x).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from smoke import smoke

from android_bridge import Device, SmsDispatcher, SmsReader, ensure_key
from android_bridge._parser import parse_int_rows, parse_text_column, render_rows
from android_bridge._reader import INT_COLUMNS
from android_bridge.simulator import SimulatedPhone

RECIPIENT = "+12025550143"


def _keys(root: Path) -> tuple[Path, Path]:
    key = ensure_key(root / "adbkey")
    authorized = root / "adb_keys"
    authorized.write_text(Path(str(key) + ".pub").read_text().strip() + "\n")
    return key, authorized


async def bench_round_trips(root: Path, latency_ms: int, sends: int = 10) -> dict[str, float]:
    key, authorized = _keys(root)
    phone = SimulatedPhone(
        store_path=root / "rt.db", authorized_keys_path=authorized, latency_ms=latency_ms
    )
    async with phone:
        device = await Device.connect(phone.serial, key_path=key)
        async with device:
            dispatcher, reader = SmsDispatcher(device), SmsReader(device)
            await dispatcher.send(RECIPIENT, "warm-up")
            await phone.wait_idle()
            per_send: list[int] = []
            started = time.perf_counter()
            for index in range(sends):
                before = device.round_trips
                evidence = await dispatcher.send(RECIPIENT, f"benchmark message {index}")
                await phone.wait_idle()
                read = await reader.read_since(evidence.watermark_id)
                assert read.complete and len(read.rows) == 1
                per_send.append(device.round_trips - before)
            elapsed = time.perf_counter() - started
    figures = {
        "max": max(per_send),
        "mean": statistics.mean(per_send),
        "ms": elapsed / sends * 1000,
    }
    print(
        f"round trips per happy-path send (dispatch + confirmation read): "
        f"max {figures['max']}, mean {figures['mean']:.2f} (target <= 2); "
        f"{figures['ms']:.0f} ms per send+confirm at latency {latency_ms} ms"
    )
    return figures


def bench_parse(rows: int = 50_000) -> float:
    ids = list(range(1, rows + 1))
    int_rows = [(i, 7, 2, -1, 1_700_000_000_000 + i, 1_700_000_000_500 + i, 1, 0) for i in ids]
    int_text = render_rows(INT_COLUMNS, int_rows)
    body_text = render_rows(
        ("_id", "body"), [(i, f"Message {i}, body=x\nRow: 9 _id=1, ok 😀") for i in ids]
    )
    address_text = render_rows(("_id", "address"), [(i, "+12025550143") for i in ids])
    creator_text = render_rows(("_id", "creator"), [(i, "com.example.sms") for i in ids])
    started = time.perf_counter()
    parsed = parse_int_rows(int_text, INT_COLUMNS)
    parse_text_column(address_text, "address", ids)
    parse_text_column(body_text, "body", ids)
    parse_text_column(creator_text, "creator", ids)
    elapsed = time.perf_counter() - started
    assert len(parsed) == rows
    print(
        f"parse throughput: {rows / elapsed:,.0f} rows/s over {rows:,} full rows "
        f"(integer query + 3 text queries; target >= 50,000 rows/s)"
    )
    return rows / elapsed


async def _read_cost(
    root: Path, name: str, box: int, new: int, latency_ms: int
) -> tuple[float, float]:
    key, authorized = _keys(root)
    store = root / f"{name}.db"
    async with SimulatedPhone(store_path=store, authorized_keys_path=authorized):
        pass  # creates the schema
    with sqlite3.connect(store) as db:
        now = time.time_ns() // 1_000_000
        db.executemany(
            "INSERT INTO sms (_id, thread_id, address, body, date, date_sent, type, status,"
            " sub_id, error_code, creator, read, seen) VALUES (?,?,?,?,?,?,?,?,?,?,?,1,1)",
            (
                (i, 1, RECIPIENT, f"stored message {i}", now - (box - i), 0, 2, -1, 1, 0, "b")
                for i in range(1, box + new + 1)
            ),
        )
    phone = SimulatedPhone(store_path=store, authorized_keys_path=authorized, latency_ms=latency_ms)
    async with phone:
        device = await Device.connect(phone.serial, key_path=key)
        async with device:
            reader = SmsReader(device)
            timings: list[float] = []
            for _ in range(5):
                started = time.perf_counter()
                read = await reader.read_since(box)
                timings.append(time.perf_counter() - started)
                assert read.complete and len(read.rows) == new
            # A fresh handle knows no watermark yet: its first send reads the highest _id (LIMIT 1).
            fresh = await Device.connect(phone.serial, key_path=key)
            async with fresh:
                started = time.perf_counter()
                await SmsDispatcher(fresh).send(RECIPIENT, "first send on a fresh handle")
                first_send = time.perf_counter() - started
    return statistics.median(timings), first_send


async def bench_window(root: Path, latency_ms: int, box: int = 100_000) -> tuple[float, float]:
    small, small_first = await _read_cost(root, "small", 100, 100, latency_ms)
    large, large_first = await _read_cost(root, "large", box, 100, latency_ms)
    print(
        f"reading 100 new rows: box of 100 rows {small * 1000:.1f} ms, box of 100,000 rows "
        f"{large * 1000:.1f} ms, ratio {large / small:.2f}x (target <= 1.5x)"
    )
    print(
        f"first send on a handle with no known watermark (reads the highest _id): "
        f"{small_first * 1000:.0f} ms in a box of 200 rows, "
        f"{large_first * 1000:.0f} ms in a box of {box + 100:,} rows"
    )
    return small, large


def run(quick: bool) -> list[dict[str, Any]]:
    """The figures as rows for ``run_all.py`` (``quick``: a box of 10,000 rows, not 100,000)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    box = 1_000 if smoke() else 10_000 if quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trips = asyncio.run(bench_round_trips(root, 30))
        rate = bench_parse(2_000 if smoke() else 10_000 if quick else 50_000)
        small, large = asyncio.run(bench_window(root, 30, box))
    return [
        {
            "work": "bridge: round trips per send and its confirmation read (30 ms)",
            "figure": f"max {trips['max']:.0f}, mean {trips['mean']:.2f}",
            "target": "<= 2",
            "met": trips["max"] <= 2,
        },
        {
            "work": "bridge: parsing `content query` output",
            "figure": f"{rate:,.0f} rows/s",
            "target": ">= 50,000 rows/s",
            "met": rate >= 50_000,
        },
        {
            "work": f"bridge: reading 100 new rows, box of {box:,} vs of 100",
            "figure": f"{large * 1000:.1f} vs {small * 1000:.1f} ms ({large / small:.2f}x)",
            "target": "<= 1.5x",
            "met": large / small <= 1.5,
        },
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency-ms", type=int, default=30)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        asyncio.run(bench_round_trips(root, args.latency_ms))
        bench_parse()
        asyncio.run(bench_window(root, args.latency_ms))


if __name__ == "__main__":
    main()
