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

from android_bridge.simulator import SimulatedPhone
from starebrain_actions._nightly import lock_path_for
from tests.conftest import PhoneFactory
from tests.e2e.conftest import run_installed, starebrain_command
from tests.e2e.test_cli_reconcile import in_flight_with_sent_row

_HOLDER = """
import sys, time
from pathlib import Path
from starebrain_actions._nightly import nightly_lock
with nightly_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(120)
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
    seeded_ledger: Path, tmp_path: Path
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


def test_lock_dies_with_a_crashed_holder(seeded_ledger: Path, tmp_path: Path) -> None:
    """After the lock holder is killed with SIGKILL the next nightly run works normally."""
    holder = hold_lock(seeded_ledger)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert lock_path_for(seeded_ledger).exists()
    report_path = tmp_path / "report.json"
    done = run_installed(["--db", str(seeded_ledger), "nightly", "--report", str(report_path)])
    assert 1 == done.returncode, done.stderr  # the seeded ledger needs a person
    assert report_path.exists()


async def test_two_real_runs_overlap(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path, tmp_path: Path
) -> None:
    """Two `starebrain nightly` processes started together: the second leaves at once with
    exit 0 and no report; the first settles the lost reply."""
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
    lock = lock_path_for(ledger_path)
    deadline = time.monotonic() + 20
    while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
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
