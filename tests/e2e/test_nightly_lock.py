"""The nightly job under cron: one run at a time, and a crashed run never blocks the next."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

from android_bridge.simulator import SimulatedPhone
from starebrain_actions.ledger.pg import LOCK_KEY_SQL, is_url
from starebrain_actions.orchestration.nightly.lock import NIGHTLY_LOCK, lock_path_for
from tests.conftest import PhoneFactory
from tests.e2e.conftest import Target, run_installed, seed_ledger, starebrain_command
from tests.e2e.test_cli_reconcile import in_flight_with_sent_row

_HOLDER = """
import sys, time
from pathlib import Path
from starebrain_actions.orchestration.nightly.lock import nightly_lock
with nightly_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(120)
"""


#: A process holding a PostgreSQL ledger's nightly lock, as a nightly run does.
_PG_HOLDER = """
import asyncio, sys
from starebrain_actions import Ledger
async def main():
    async with Ledger.open(sys.argv[1], create=False) as ledger:
        async with ledger.exclusive(sys.argv[2], wait=False) as held:
            print("locked" if held else "busy", flush=True)
            await asyncio.sleep(120)
asyncio.run(main())
"""


def fingerprint(ledger_path: Path) -> dict[str, str]:
    """sha256 of the ledger and its side files (the lock file aside)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in ledger_path.parent.iterdir()
        if path.name.startswith(ledger_path.name) and not path.name.endswith(".lock")
    }


def hold_lock(ledger_path: Path) -> subprocess.Popen[str]:
    """Start a process that takes the nightly lock of ``ledger_path`` and keeps it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(ledger_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert "locked" == holder.stdout.readline().strip()
    return holder


def test_second_run_while_locked_exits_0_and_touches_nothing(
    seeded_ledger: Path, ledger_path: Path, tmp_path: Path
) -> None:
    """While another process holds the lock, `starebrain nightly` says so, exits 0, and
    neither reads the phones nor writes the ledger or the report."""
    before = fingerprint(seeded_ledger)
    holder = hold_lock(seeded_ledger)
    try:
        report_path = tmp_path / "report.json"
        done = run_installed(["--db", str(seeded_ledger), "nightly", "--report", str(report_path)])
        assert 0 == done.returncode, done.stderr
        assert f"another nightly run (pid {holder.pid}) holds" in done.stdout
        assert not report_path.exists()
        assert before == fingerprint(seeded_ledger)
    finally:
        holder.kill()
        holder.wait()


def test_lock_dies_with_a_crashed_holder(
    seeded_ledger: Path, ledger_path: Path, tmp_path: Path
) -> None:
    """After the lock holder is killed with SIGKILL the next nightly run works normally."""
    holder = hold_lock(seeded_ledger)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert lock_path_for(seeded_ledger).exists()
    report_path = tmp_path / "report.json"
    done = run_installed(["--db", str(seeded_ledger), "nightly", "--report", str(report_path)])
    assert 1 == done.returncode, done.stderr  # the seeded ledger needs a person
    assert report_path.exists()


async def advisory_lock_holders(url: str) -> list[int]:
    """The server pids of the sessions holding the nightly advisory lock."""
    conn = await asyncpg.connect(url)  # in the ledger's schema: the key mixes it in
    try:
        key = await conn.fetchval(f"SELECT {LOCK_KEY_SQL}", NIGHTLY_LOCK) & 0xFFFF_FFFF_FFFF_FFFF
        rows = await conn.fetch(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1",
            key >> 32,
            key & 0xFFFF_FFFF,
        )
    finally:
        await conn.close()
    return [row["pid"] for row in rows]


async def test_two_real_runs_overlap(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path, tmp_path: Path
) -> None:
    """Two `starebrain nightly` processes started together: the second leaves at once with
    exit 0 and no report; the first settles the lost reply. On PostgreSQL the lock is the
    advisory lock (no lock file is made)."""
    ledger_path = ledger_target
    phone: SimulatedPhone = await phone_factory(latency_ms=1000)
    await in_flight_with_sent_row(ledger_path, phone, "A-17")
    env = {key: value for key, value in os.environ.items() if key != "STAREBRAIN_DB"}

    async def start(report: Path) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *starebrain_command(), "--db", str(ledger_path), "nightly", "--key",
            str(adb_key_path), "--report", str(report),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip

    first = await start(tmp_path / "first.json")
    deadline = time.monotonic() + 20
    while not await lock_taken(ledger_path, first.pid):
        assert time.monotonic() < deadline, "the first run never took the lock"
        await asyncio.sleep(0.05)
    second = await start(tmp_path / "second.json")
    out2, _ = await asyncio.wait_for(second.communicate(), timeout=30)
    assert 0 == second.returncode
    assert "another nightly run" in out2.decode()
    out1, err1 = await asyncio.wait_for(first.communicate(), timeout=60)
    assert 0 == first.returncode, err1.decode()
    assert "nothing needs a person" in out1.decode()
    assert (tmp_path / "first.json").exists()
    assert not (tmp_path / "second.json").exists()


async def lock_taken(target: Target, pid: int) -> bool:
    """Does the nightly run ``pid`` hold the nightly lock of ``target`` (the lock file's
    pid, or any session holding the advisory lock)?"""
    if is_url(target):
        return bool(await advisory_lock_holders(str(target)))
    lock = lock_path_for(Path(target))
    return lock.exists() and lock.read_text().strip() == str(pid)


async def test_postgresql_lock_is_advisory_and_dies_with_its_holder(
    pg_url: str, closed_port: int, tmp_path: Path
) -> None:
    """On a PostgreSQL ledger, while another process holds the nightly advisory lock, a run
    says so, exits 0 and writes no report; once that holder is killed with SIGKILL the
    server drops the lock and the next run works. No lock file is made anywhere."""
    await seed_ledger(pg_url, waiting_device=f"127.0.0.1:{closed_port}")
    holder = subprocess.Popen(
        [sys.executable, "-c", _PG_HOLDER, pg_url, NIGHTLY_LOCK],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert holder.stdout is not None
        assert "locked" == holder.stdout.readline().strip()
        report_path = tmp_path / "report.json"
        args = ["--db", pg_url, "nightly", "--report", str(report_path)]
        done = await asyncio.to_thread(run_installed, args)
        assert 0 == done.returncode, done.stderr
        assert "another nightly run holds the lock" in done.stdout
        assert not report_path.exists()
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while await advisory_lock_holders(pg_url):
        assert time.monotonic() < deadline, "the server kept a dead holder's lock"
        await asyncio.sleep(0.05)
    done = await asyncio.to_thread(run_installed, args)
    assert 1 == done.returncode, done.stderr  # the seeded ledger needs a person
    assert report_path.exists()
    assert [] == [path.name for path in tmp_path.rglob("*.lock")]
