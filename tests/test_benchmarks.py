"""The benchmarks keep working: ``benchmarks/run_all.py --quick`` runs every one of them and
prints the table (figures are not judged here: no test depends on a timing)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


#: The benchmarks in two halves of about equal length, run at once (the machine's two cores;
#: no figure is judged here, so sharing them changes nothing this test looks at).
HALVES = ("reconcile,startup,ledger,bridge,nightly_backlog,fleet", "send,reads,demo,postgres")


def test_every_benchmark_runs_and_reports_its_rows(tmp_path: Path) -> None:
    """Each benchmark of ``run_all.py`` gives rows with a figure and a target; none fails."""
    runs = []
    for number, only in enumerate(HALVES):
        work = tmp_path / f"half-{number}"
        work.mkdir()
        argv = [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick"]
        argv += ["--only", only, "--json", str(work / "figures.json")]
        # the ledgers they build stay in ``work`` (TMPDIR)
        process = subprocess.Popen(
            argv,
            cwd=work,
            env={**os.environ, "TMPDIR": str(work)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        runs.append((work / "figures.json", process))
    rows = []
    for out, process in runs:
        stdout, stderr = process.communicate(timeout=900)
        assert 0 == process.returncode, stderr[-3000:]
        assert "| work | figure | target | met |" in stdout
        data = json.loads(out.read_text(encoding="utf-8"))
        assert data["quick"] is True and data["machine"]
        rows += data["rows"]
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    assert spec is not None and spec.loader is not None
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    every = sorted(name for name, _ in run_all.BENCHMARKS)
    assert every == sorted(name for half in HALVES for name in half.split(","))
    assert not [row for row in rows if "did not run" in row["work"]]
    assert all(row["figure"] and row["target"] for row in rows)
    works = " | ".join(row["work"] for row in rows)
    for expected in (
        "nightly",
        "in flight on",
        "reconcile pass",
        "SmsAgent.send",
        "start-up",
        "ledger vs sqlite3",
        "bridge:",
        "starebrain demo",
        "PostgreSQL",
        "fleet of workers",
        "the agent's CPU per send",
    ):
        assert expected in works
