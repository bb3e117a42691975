#!/usr/bin/env python3
"""Round trips per receipt and per transition on PostgreSQL, and lifecycles per second on
PostgreSQL against SQLite with 16 processes in the same run (issue 26 §2).

Run: ``python benchmarks/bench_pg_round_trips.py [--quick] [--json]``. The server is
``$STAREBRAIN_TEST_PG`` or ``postgresql://postgres@127.0.0.1:5432/test`` (a fresh schema per
case, dropped after). Prints:

* **round trips** (statements sent to the server, ``BEGIN``/``COMMIT`` and the pool's own
  included, counted by ``PgDatabase.statements``) per ``begin_attempt`` (a receipt), per
  ``apply`` (one transition) and per ``apply_many`` of a confirmation and an acceptance,
  averaged over lifecycles on one process; target ≤ 2 for a receipt and for a transition;
* **lifecycles per second** with 16 agent processes, each its own actions and device, on
  PostgreSQL and on SQLite, one after the other in this run, three rounds alternating which
  goes first (the ratio is the median of the rounds' ratios) (``bench_postgres.py`` defines a
  lifecycle: ``create_action``, ``begin_attempt``, ``apply`` of the submission, ``apply_many``
  of the confirmation and the acceptance); target PG/SQLite ≥ 0.7 (issue 37, item 6);
* **CPU per lifecycle** on one process, SQLite and PostgreSQL in the same run: the agent
  process (and, of it, the thread of the PostgreSQL connections' event loop) and the server
  processes of its connections (read from ``/proc`` when the server runs on this machine).
  Two cores run 16 processes and the server: the lifecycle rate follows the CPU a lifecycle
  costs, so SQLite's CPU over PostgreSQL's (agent and server) is the ratio a quiet machine
  gives, and it drifts far less with the load than the rate does.

The machine's cores are shared: the lifecycle figures are noisy (the round trips are a count).
``run_all.py`` shows these rows with ``bench_postgres.py``'s (``--only postgres``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_postgres import (  # noqa: E402
    RECIPIENT,
    _quiet,
    fresh_schema,
    lifecycle,
    lifecycle_figures,
)
from smoke import smoke  # noqa: E402

from starebrain_actions import (  # noqa: E402
    Ledger,
    MatchVerdict,
    RetryPolicy,
    SmsIntent,
    confirm_delivery,
    try_accept,
)
from starebrain_actions.core import transitions as _core  # noqa: E402

#: Targets: round trips per receipt and per transition; the PG/SQLite lifecycle ratio.
TARGET_ROUND_TRIPS = 2
TARGET_RATIO = 0.7
PROCESSES = 16
#: Rounds of the lifecycle figure (PG and SQLite alternating which goes first): the machine
#: is shared and its load drifts, so the ratio is the median of each round's.
ROUNDS = 3


async def round_trips(lifecycles: int) -> dict[str, float]:
    """Statements sent per operation of a lifecycle, averaged (the first lifecycle, which
    prepares the statements and fills the pool, is left out)."""
    async with fresh_schema() as url, Ledger.open(url) as ledger:
        assert ledger._pg is not None
        database = ledger._pg.database
        totals = {"create_action": 0, "begin_attempt": 0, "apply": 0, "apply_many(2)": 0}

        def mark() -> int:
            return database.statements

        for n in range(lifecycles + 1):
            counted: dict[str, int] = {}
            at = mark()
            await ledger.create_action(
                f"rt-{n}", SmsIntent(recipient=RECIPIENT, body=f"m {n}"), RetryPolicy()
            )
            counted["create_action"], at = mark() - at, mark()
            record = await ledger.begin_attempt(f"rt-{n}", "rt-device")
            counted["begin_attempt"], at = mark() - at, mark()
            now = datetime.now(UTC)
            submitted = _core.record_submission(
                record, watermark_id=n, device_clock_ms=n + 1, now=now
            )
            record = await ledger.apply(submitted)
            counted["apply"], at = mark() - at, mark()
            confirmed = confirm_delivery(record, provider_object_id=n + 1, now=now)
            accepted = try_accept(confirmed.after, MatchVerdict(matched=True), now=now)
            results = await ledger.apply_many([confirmed, accepted])
            assert not [r for r in results if isinstance(r, Exception)], results
            counted["apply_many(2)"] = mark() - at
            if n:
                for key, value in counted.items():
                    totals[key] += value
        return {key: value / lifecycles for key, value in totals.items()}


def _process_cpu_s(pid: int, task: str = "") -> float | None:
    """User and system CPU of a process (or of its thread ``task``), None where unreadable
    (a server on another machine)."""
    try:
        with open(f"/proc/{pid}{task}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cpu_per_lifecycle(target: str, lifecycles: int) -> dict[str, float | None]:
    """Milliseconds of CPU per lifecycle on one process: the agent's, its PostgreSQL loop
    thread's, and its connections' server processes' (after a warm-up)."""
    from starebrain_actions.ledger import pg

    async with Ledger.open(target) as ledger:
        for n in range(30):
            await lifecycle(ledger, f"cpu-w{n}", "cpu-device", f"warm {n}", n + 1)
        servers: list[int] = []
        loop_task = ""
        if ledger._pg is not None:
            database = ledger._pg.database
            servers = [raw.get_server_pid() for raw in database._idle if pg._usable(raw)]
            loop_thread = pg._loop()._thread
            loop_task = f"/task/{loop_thread.native_id}"
        own = os.getpid()
        before = [_process_cpu_s(pid) for pid in servers]
        loop_before = _process_cpu_s(own, loop_task) if loop_task else None
        agent_before = time.process_time()
        for n in range(lifecycles):
            await lifecycle(ledger, f"cpu-{n}", "cpu-device", f"m {n}", n + 100)
        agent = time.process_time() - agent_before
        after = [_process_cpu_s(pid) for pid in servers]
        loop_after = _process_cpu_s(own, loop_task) if loop_task else None
    server: float | None = None
    if servers and None not in before and None not in after:
        server = sum(a - b for a, b in zip(after, before, strict=True))  # type: ignore[operator]
    loop = loop_after - loop_before if loop_after is not None and loop_before is not None else None
    per = 1000 / lifecycles
    return {
        "agent_ms": agent * per,
        "loop_thread_ms": None if loop is None else loop * per,
        "server_ms": None if server is None else server * per,
    }


async def cpu_figures(lifecycles: int) -> dict[str, dict[str, float | None]]:
    """``cpu_per_lifecycle`` on SQLite (a fresh file) and on PostgreSQL (a fresh schema)."""
    with tempfile.TemporaryDirectory(prefix="bench-pg-cpu-") as folder:
        lite = await cpu_per_lifecycle(str(Path(folder) / "cpu.db"), lifecycles)
    async with fresh_schema() as url:
        postgres = await cpu_per_lifecycle(url, lifecycles)
    return {"sqlite": lite, "postgresql": postgres}


def measure(quick: bool) -> dict[str, Any]:
    _quiet()
    figures: dict[str, Any] = {"quick": quick}
    tiny = smoke()
    figures["round_trips"] = asyncio.run(round_trips(5 if tiny else 20 if quick else 100))
    figures["cpu"] = asyncio.run(cpu_figures(10 if tiny else 50 if quick else 400))
    count = 2 if tiny else 4 if quick else PROCESSES
    rounds = 1 if quick else ROUNDS
    seconds = 0.3 if tiny else 1.0 if quick else 4.0
    life = asyncio.run(lifecycle_figures(seconds, (count,), rounds=rounds))
    figures["processes"] = count
    figures["pg_per_s"] = life[f"postgresql:{count}"]["per_s"]
    figures["sqlite_per_s"] = life[f"sqlite:{count}"]["per_s"]
    figures["ratios"] = life.get(f"ratios:{count}", [figures["pg_per_s"] / figures["sqlite_per_s"]])
    figures["ratio"] = life.get(f"ratio:{count}", figures["ratios"][0])
    return figures


def report(figures: dict[str, Any]) -> None:
    print("round trips per operation on PostgreSQL (statements sent, BEGIN/COMMIT included):")
    for key, value in figures["round_trips"].items():
        print(f"  {key:<15} {value:5.2f}")
    print(
        f"lifecycles per second, {figures['processes']} processes: PostgreSQL"
        f" {figures['pg_per_s']:.1f}/s, SQLite {figures['sqlite_per_s']:.1f}/s (medians);"
        f" ratio {figures['ratio']:.2f} (median of the rounds':"
        f" {', '.join(f'{r:.2f}' for r in figures['ratios'])})"
    )
    cpu = figures["cpu"]
    lite, postgres = cpu["sqlite"]["agent_ms"], cpu["postgresql"]
    print(
        f"CPU per lifecycle, 1 process: SQLite {lite:.2f} ms; PostgreSQL agent"
        f" {postgres['agent_ms']:.2f} ms (its loop thread {_ms(postgres['loop_thread_ms'])}),"
        f" server {_ms(postgres['server_ms'])}"
    )
    if postgres["server_ms"] is not None:
        both = postgres["agent_ms"] + postgres["server_ms"]
        print(f"  SQLite's CPU over PostgreSQL's (agent and server): {lite / both:.2f}")


def _ms(value: float | None) -> str:
    return "unknown (server elsewhere)" if value is None else f"{value:.2f} ms"


def rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    trips = figures["round_trips"]
    receipt, transition = trips["begin_attempt"], trips["apply"]
    quick = figures["quick"]
    return [
        {
            "work": "PostgreSQL: round trips per receipt (`begin_attempt`), per transition"
            " (`apply`), per `apply_many` of two",
            "figure": f"{receipt:.2f}, {transition:.2f}, {trips['apply_many(2)']:.2f}",
            "target": f"≤ {TARGET_ROUND_TRIPS} per receipt and per transition",
            "met": receipt <= TARGET_ROUND_TRIPS and transition <= TARGET_ROUND_TRIPS,
        },
        {
            "work": f"PostgreSQL vs SQLite: lifecycles/s, {figures['processes']} processes"
            " (same run)",
            "figure": f"PG {figures['pg_per_s']:.0f}/s, SQLite {figures['sqlite_per_s']:.0f}/s:"
            f" {figures['ratio']:.2f} (rounds: {', '.join(f'{r:.2f}' for r in figures['ratios'])})",
            "target": f"PG/SQLite ≥ {TARGET_RATIO} at {PROCESSES} processes",
            "met": None if quick else figures["ratio"] >= TARGET_RATIO,
        },
        {
            "work": "PostgreSQL vs SQLite: CPU per lifecycle, 1 process (agent + server)",
            "figure": _cpu_figure(figures["cpu"]),
            "target": "- (the rate's ratio a quiet machine gives)",
            "met": None,
        },
    ]


def _cpu_figure(cpu: dict[str, dict[str, float | None]]) -> str:
    lite = cpu["sqlite"]["agent_ms"] or 0.0
    agent, server = cpu["postgresql"]["agent_ms"] or 0.0, cpu["postgresql"]["server_ms"]
    if server is None:
        return f"SQLite {lite:.2f} ms, PG agent {agent:.2f} ms (server elsewhere)"
    return f"SQLite {lite:.2f} ms, PG {agent:.2f} + {server:.2f} ms: {lite / (agent + server):.2f}"


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure, print the details, and return the rows of the benchmark table."""
    figures = measure(quick)
    report(figures)
    return rows(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    figures = measure(args.quick)
    report(figures)
    for row in rows(figures):
        mark = {True: "met", False: "MISSED", None: "-"}[row["met"]]
        print(f"{row['work']}: {row['figure']} (target {row['target']}: {mark})")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
