"""The benchmarks keep working: ``benchmarks/run_all.py --quick`` runs every one of them and
prints the table (figures are not judged here: no test depends on a timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_benchmark_runs_and_reports_its_rows(tmp_path: Path) -> None:
    """Each benchmark of ``run_all.py`` gives rows with a figure and a target; none fails."""
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--json", str(out)],
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the ledgers they build stay here
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert 0 == done.returncode, done.stderr[-3000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True and data["machine"]
    rows = data["rows"]
    assert not [row for row in rows if "did not run" in row["work"]]
    assert all(row["figure"] and row["target"] for row in rows)
    works = " | ".join(row["work"] for row in rows)
    for expected in (
        "nightly",
        "reconcile pass",
        "SmsAgent.send",
        "start-up",
        "ledger vs sqlite3",
        "bridge:",
        "starebrain demo",
    ):
        assert expected in works
    assert "| work | figure | target | met |" in done.stdout
