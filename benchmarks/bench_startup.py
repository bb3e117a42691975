#!/usr/bin/env python3
"""CLI start-up: ``starebrain --help``, ``starebrain status X`` and importing what a
``send`` imports, against ``python -c pass``.

Each command runs in a fresh interpreter, as the ``starebrain`` console script runs it
(``from starebrain_actions.cli.main import main; sys.exit(main())``), N times, interleaved with
the baseline so machine noise hits all alike; the figure is the median wall time and its
ratio to the baseline's median, each beside its target (issue 37): ``--help`` <= 150 ms,
``status`` <= 4x the baseline. ``status`` reads a small real ledger, built through the public
API in a temporary directory. The send's imports have no target of their own (a CLI send's
target, <= 1.5x an API send, is ``bench_send.py``'s); they show what start-up costs a send.

    python benchmarks/bench_startup.py [--quick] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: What the ``starebrain`` console script does (pyproject's ``[project.scripts]``).
ENTRY_POINT = "import sys; from starebrain_actions.cli.main import main; sys.exit(main())"
#: What a CLI ``send`` imports before it reaches the phone (the command line, the agent, the
#: ledger, the bridge's ADB stack; structlog only when it writes an event): ``bench_send.py``
#: times the same statement.
SEND_IMPORTS = (
    "import starebrain_actions.cli.main, starebrain_actions.cli.send,"
    " starebrain_actions.cli.body, starebrain_actions.orchestration.agent,"
    " starebrain_actions.phone.android, starebrain_actions.ledger.store"
)
#: The start-up target of ``--help``, in ms (issue 37).
TARGET_HELP_MS = 150.0
#: The start-up target of ``status``, in multiples of ``python -c pass`` (issue 37).
TARGET_STATUS_RATIO = 4.0
ACTION_ID = "bench-startup-1"


async def build_ledger(path: Path) -> None:
    """A small ledger: a few actions, one with a confirmed and accepted attempt."""
    from starebrain_actions import Ledger, MatchVerdict, SmsIntent, confirm_delivery, try_accept

    async with Ledger.open(path) as ledger:
        for number in range(1, 6):
            action_id = f"bench-startup-{number}"
            intent = SmsIntent(recipient="+12025550143", body=f"start-up {number}")
            await ledger.create_action(action_id, intent)
            record = await ledger.begin_attempt(action_id, f"127.0.0.1:{5554 + number}")
            now = datetime.now(UTC)
            record = await ledger.apply(
                confirm_delivery(record, provider_object_id=number, now=now)
            )
            await ledger.apply(try_accept(record, MatchVerdict(matched=True), now=now))


def time_command(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds for one run; a failing command stops the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[2:]} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def measure(runs: int) -> dict[str, Any]:
    """Median wall times (ms) of the baseline and of each command."""
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as folder:
        where = Path(folder)
        ledger = where / "ledger.db"
        asyncio.run(build_ledger(ledger))
        env = {
            **os.environ,
            "STAREBRAIN_DB": str(ledger),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure with bytecode caches, as installed
        commands = {
            "python -c pass": [python, "-c", "pass"],
            f"starebrain status {ACTION_ID}": [python, "-c", ENTRY_POINT, "status", ACTION_ID],
            "starebrain --help": [python, "-c", ENTRY_POINT, "--help"],
            "importing what send imports": [python, "-c", SEND_IMPORTS],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for argv in commands.values():  # a warm-up: bytecode caches, the page cache
            time_command(argv, env, where)
        for _ in range(runs):
            for name, argv in commands.items():
                times[name].append(time_command(argv, env, where))
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    return {"runs": runs, "median_ms": {name: round(ms, 1) for name, ms in medians.items()}}


def verdicts(figures: dict[str, Any]) -> list[tuple[str, float, float, str, bool | None]]:
    """(command, ms, ratio to the baseline, target, met) for each command but the baseline."""
    medians = figures["median_ms"]
    baseline = medians["python -c pass"]
    found = []
    for name, ms in medians.items():
        if name == "python -c pass":
            continue
        ratio = ms / baseline
        if name == "starebrain --help":
            target, met = f"<= {TARGET_HELP_MS:.0f} ms", ms <= TARGET_HELP_MS
        elif name.startswith("starebrain status"):
            target, met = f"<= {TARGET_STATUS_RATIO:.0f}x", ratio <= TARGET_STATUS_RATIO
        else:
            target, met = "- (a send: <= 1.5x the API, bench_send.py)", None
        found.append((name, ms, ratio, target, met))
    return found


def rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures as rows of ``run_all``'s table."""
    baseline = figures["median_ms"]["python -c pass"]
    return [
        {
            "work": f"`{name}` start-up",
            "figure": f"{ms:.0f} ms ({ratio:.1f}x `python -c pass`, {baseline:.0f} ms)",
            "target": target,
            "met": met,
        }
        for name, ms, ratio, target, met in verdicts(figures)
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    """For ``benchmarks/run_all.py``: the rows of the table."""
    return rows(measure(7 if quick else 25))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="7 runs each instead of 25")
    parser.add_argument("--runs", type=int, default=None, help="runs of each command")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    figures = measure(args.runs or (7 if args.quick else 25))
    baseline = figures["median_ms"]["python -c pass"]
    print(f"start-up, median of {figures['runs']} runs each (fresh interpreter every run):")
    print(f"  {'python -c pass':32} {baseline:7.1f} ms")
    for name, ms, ratio, target, met in verdicts(figures):
        mark = {True: "met", False: "MISSED", None: "-"}[met]
        print(f"  {name:32} {ms:7.1f} ms  {ratio:5.1f}x  target {target}: {mark}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
