#!/usr/bin/env python3
"""Time ``starebrain demo`` (the README's first command) from start to exit.

Run: ``python benchmarks/bench_demo.py [--runs N]``. Prints the median wall time of N runs
(each a new process, in a temporary working directory) and checks that each exits 0 (the
ledger agent caused no duplicate).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _starebrain() -> list[str]:
    """The installed ``starebrain`` command, or the same entry point through this Python."""
    script = Path(sys.executable).parent / "starebrain"
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "from starebrain_actions.cli.main import main; main()"]


def demo_seconds(runs: int) -> list[float]:
    """Wall seconds of ``runs`` runs of ``starebrain demo``, each exiting 0."""
    timings: list[float] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "HOME": tmp, "XDG_CONFIG_HOME": tmp, "XDG_DATA_HOME": tmp}
            started = time.perf_counter()
            done = subprocess.run(
                [*_starebrain(), "demo"], cwd=tmp, env=env, capture_output=True, check=False
            )
            timings.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise RuntimeError(f"starebrain demo exited {done.returncode}: {done.stderr!r}")
    return timings


def run(quick: bool) -> list[dict[str, Any]]:
    """The figure as a row for ``run_all.py`` (one run when ``quick``, else the median of 3)."""
    timings = demo_seconds(1 if quick else 3)
    return [
        {
            "work": "`starebrain demo` (two simulated phones, 9 messages, both agents)",
            "figure": f"{statistics.median(timings):.1f} s, exit 0",
            "target": "-",
            "met": None,
        }
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    timings = demo_seconds(args.runs)
    print(
        f"starebrain demo: median {statistics.median(timings):.1f} s over {args.runs} run(s)"
        f" ({', '.join(f'{t:.1f}' for t in timings)} s), each exiting 0"
    )


if __name__ == "__main__":
    main()
