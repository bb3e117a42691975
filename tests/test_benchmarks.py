"""The benchmarks keep working: ``benchmarks/run_all.py --smoke`` runs every one of them at its
smallest sizes and prints the table (figures are not judged here: no test depends on a
timing)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


#: The benchmarks in three parts of about equal length (10-20 s each with --smoke, alone on
#: two cores), each a test of its own, so that pytest-xdist runs them on different workers
#: beside other tests
PARTS = (
    "reconcile,fleet,bridge",
    "send,ledger,startup",
    "demo,postgres,reads,nightly_backlog",
)


#: What each benchmark's rows say (a part of each row's "work")
ROWS = {
    "nightly_backlog": ("nightly", "in flight on"),
    "reconcile": ("reconcile pass",),
    "send": ("SmsAgent.send", "SmsAgent.send to SUCCEEDED, framework send path"),
    "startup": ("start-up",),
    "ledger": ("ledger vs sqlite3",),
    "bridge": ("bridge:",),
    "demo": ("starebrain demo",),
    "postgres": ("PostgreSQL",),
    "fleet": ("fleet of workers", "the agent's CPU per send"),
    "reads": ("list --limit 0",),
}


def _run_all() -> Any:
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    assert spec is not None and spec.loader is not None
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    return run_all


def test_the_parts_hold_every_benchmark_once() -> None:
    """Every benchmark of ``run_all.py`` is in exactly one part."""
    names = [name for part in PARTS for name in part.split(",")]
    assert sorted(name for name, _ in _run_all().BENCHMARKS) == sorted(names)
    assert len(set(names)) == len(names)


@pytest.mark.long(15)
@pytest.mark.parametrize("only", PARTS)
def test_every_benchmark_runs_and_reports_its_rows(tmp_path: Path, only: str) -> None:
    """Each benchmark of ``run_all.py`` gives rows with a figure and a target; none fails."""
    argv = [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--smoke"]
    argv += ["--only", only, "--json", str(tmp_path / "figures.json")]
    # the ledgers they build stay in ``tmp_path`` (TMPDIR)
    process = subprocess.run(
        argv,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert 0 == process.returncode, process.stderr[-3000:]
    assert "| work | figure | target | met |" in process.stdout
    data = json.loads((tmp_path / "figures.json").read_text(encoding="utf-8"))
    assert data["quick"] is True and data["machine"]
    rows = data["rows"]
    assert not [row for row in rows if "did not run" in row["work"]]
    assert all(row["figure"] and row["target"] for row in rows)
    works = " | ".join(row["work"] for row in rows)
    for name in only.split(","):
        for expected in ROWS[name]:
            assert expected in works, name


def _benchmark(name: str) -> Any:
    """A module of ``benchmarks/`` (imported as the benchmarks import one another)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_each_send_paths_floor_is_derived_from_the_simulated_phones_settings() -> None:
    """``floors.py`` states each path's floor from the simulator's settings: the app path
    waits for the command, the compose window's focus and the read, never the radio (the
    app writes its row SENT first); the framework path waits for the command and the radio,
    whose delay the read's own round trip overlaps; its defaults are the simulator's."""
    from android_bridge.simulator._device import DEFAULT_FOCUS_DELAY_MS

    floors = _benchmark("floors")
    assert 7 + 11 + 7 == floors.send_floor_ms(
        "ui", latency_ms=7, focus_delay_ms=11, send_delay_ms=1000
    )
    assert 7 + 1000 == floors.send_floor_ms(
        "framework", latency_ms=7, focus_delay_ms=11, send_delay_ms=1000
    )
    latency, radio = floors.LATENCY_MS, floors.SEND_DELAY_MS
    assert 2 * latency + DEFAULT_FOCUS_DELAY_MS == floors.send_floor_ms("ui")
    assert latency + radio == floors.send_floor_ms("framework")
    with pytest.raises(ValueError, match="no floor"):
        floors.send_floor_ms("carrier-pigeon")


def test_every_benchmark_reports_against_the_one_floor() -> None:
    """``bench_send`` and ``bench_postgres`` (whose floor ``bench_fleet`` uses) take their
    floors from ``floors.py``, on the path they send on."""
    floors = _benchmark("floors")
    bench_send = _benchmark("bench_send")
    bench_postgres = _benchmark("bench_postgres")
    assert floors.send_floor_ms("ui") == bench_send.floor_ms("ui")
    assert floors.send_floor_ms("framework") == bench_send.floor_ms("framework")
    assert "ui" == bench_postgres.FLEET_PATH
    assert floors.send_floor_s("ui") == bench_postgres.send_floor_s()
    fleet_source = (ROOT / "benchmarks" / "bench_fleet.py").read_text(encoding="utf-8")
    assert 'floors.send_floor_s("ui")' in fleet_source and '"--send-path", "ui"' in fleet_source
