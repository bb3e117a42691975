#!/usr/bin/env python3
"""Run every speed benchmark and print one table: each figure beside its target.

    python benchmarks/run_all.py            # the full run (several minutes)
    python benchmarks/run_all.py --quick    # small sizes only (well under a minute or two)
    python benchmarks/run_all.py --smoke    # the smallest: does each still run? (the tests')
    python benchmarks/run_all.py --only send,startup --json figures.json

Each benchmark is also a script of its own (``python benchmarks/bench_send.py --help``) that
prints more detail, and a ratio against a baseline measured in the same run. The figures
depend on the machine; the table starts with the machine it came from. Benchmarks are not
tests: nothing here fails a build, and no test depends on a timing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import smoke  # noqa: E402

#: (name, module) in the order the table lists them
BENCHMARKS: tuple[tuple[str, str], ...] = (
    ("reads", "bench_reads"),
    ("nightly_backlog", "bench_nightly_backlog"),
    ("reconcile", "bench_reconcile"),
    ("send", "bench_send"),
    ("startup", "bench_startup"),
    ("ledger", "bench_ledger"),
    ("bridge", "bench_bridge"),
    ("demo", "bench_demo"),
    ("postgres", "bench_postgres"),
    ("fleet", "bench_fleet"),
)


def machine() -> str:
    """One line naming the machine the figures come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cpu}, {cores} core(s), {platform.system()} {platform.release()},"
        f" Python {platform.python_version()}"
    )


def _mark(met: bool | None) -> str:
    return {True: "met", False: "MISSED", None: "-"}[met]


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (work, figure, target, met)."""
    lines = ["| work | figure | target | met |", "|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['work']} | {row['figure']} | {row['target']} | {_mark(row.get('met'))} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest sizes, to show each benchmark still runs (implies --quick; its"
        " figures mean nothing)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated benchmarks to run (" + ", ".join(n for n, _ in BENCHMARKS) + ")",
    )
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick = True
        os.environ[smoke.ENV] = "1"
    wanted = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = wanted - {name for name, _ in BENCHMARKS}
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    started = time.monotonic()
    for name, module_name in BENCHMARKS:
        if wanted and name not in wanted:
            continue
        print(f"-- {name} ...", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(module_name)
            found = module.run(args.quick)
        except Exception:  # a broken benchmark is reported, the others still run
            traceback.print_exc()
            failed.append(name)
            rows.append({"work": f"{name}: did not run", "figure": "-", "target": "-"})
            continue
        rows.extend(found)
    print(f"machine: {machine()}")
    mode = (
        "smoke (smallest sizes)" if args.smoke else "quick (small sizes)" if args.quick else "full"
    )
    print(f"mode: {mode}, {time.monotonic() - started:.0f} s")
    print()
    print(table(rows))
    if args.json is not None:
        args.json.write_text(
            json.dumps({"machine": machine(), "quick": args.quick, "rows": rows}, indent=2) + "\n",
            encoding="utf-8",
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
