"""`starebrain demo` on a fresh machine: no phone, zero duplicates. (Its time, the README's
"under 30 seconds", is measured by benchmarks/bench_demo.py, not asserted here: a loaded
machine took 33 s and failed a `.ci/run` while the demo did all it should.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long(12)
@pytest.mark.slow
def test_demo_runs_and_the_ledger_agent_sends_no_duplicate(tmp_path: Path) -> None:
    """The installed command exits 0, shows both agents, and the ledger agent
    caused zero duplicates while the naive one caused some; two replies are linked to their
    actions and a send to the number that replied STOP is refused."""
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("STAREBRAIN_ADB_KEY", None)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "starebrain"), "demo", "--plain"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert 0 == result.returncode, result.stdout + result.stderr
    out = result.stdout
    assert "The ledger agent's attempts: two axes each" in out
    assert "The phone's own sent box (ledger agent)" in out
    line = next(line for line in out.splitlines() if "duplicate SMS caused by retries" in line)
    ledger_count, naive_count = (int(word) for word in line.split() if word.isdigit())
    assert 0 == ledger_count
    assert naive_count > 0
    assert "MISMATCH" in out and "AMBIGUOUS" in out
    # the recipients' replies, linked to their actions, and the send after a STOP refused
    replies = out[out.index("Replies, and a STOP") :]
    assert "Got it, thanks  otp-1001" in replies
    assert "STOP            otp-1002   opt_out" in replies
    assert "otp-1010, to a number that replied STOP: refused by the gate (rule opted_out)" in out
    assert not (tmp_path / "config" / "starebrain").exists()  # keys stay in the demo's temp dir
