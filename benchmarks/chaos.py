"""Long chaos runs: the ledger agent against a naive retry-on-timeout agent, same workload.

Run: ``python benchmarks/chaos.py --actions 300 --seed 7`` (``--help`` for the knobs). Each
run starts simulated phones, agent processes it ``kill -9``s and restarts, concurrent
reconcile passes, human messages to the same recipients, twins, outages, every fault of the
simulator, the owner deleting the latest conversation, a factory reset of phone 0 at the same
address and senders reaching the phones by a second address (see ``tests/chaos/harness.py``),
lets the system settle, and measures from the
phones' own stores: tracker-caused duplicate SMS, lost receipts, invariant violations and
lies (all must be 0 for the ledger agent). The same workload then runs with a naive agent
that sends through the bridge's dispatcher and retries on any error, with no ledger. With
``--worker`` the same workload runs once more in worker mode: the actions queued for one pool
and sent by ``starebrain worker`` processes over both phones, killed and restarted (its
metrics must be 0 too); ``--worker-only`` runs that alone.

Prints a table of the runs, the ledger (and worker) runs' outcomes and faults, and what explains any
non-zero figure; the work folders (ledger, phones' stores, ``sends.jsonl``, ``humans.json``,
the children's logs) are kept with ``--keep``. Exits 1 when a metric of the ledger agent is
not zero (or one of the worker mode's, with ``--worker``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos.harness import ChaosConfig, ChaosReport, format_table, iter_details, run_chaos


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actions", type=int, default=300, help="actions, twins included")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--phones", type=int, choices=(1, 2), default=2)
    parser.add_argument("--workers", type=int, default=6, help="sender processes")
    parser.add_argument("--twins", type=int, default=None, help="twin pairs (default: 5%%)")
    parser.add_argument(
        "--cli-senders",
        type=float,
        default=0.25,
        help="share of the senders that run `starebrain send` per action",
    )
    parser.add_argument(
        "--chaos-seconds", type=float, default=None, help="default: 0.6 s per action"
    )
    parser.add_argument("--settle-seconds", type=float, default=None, help="default: 60 s+")
    parser.add_argument("--kill-every", type=float, default=2.0, help="mean seconds")
    parser.add_argument("--outage-every", type=float, default=8.0, help="mean seconds")
    parser.add_argument("--human-every", type=float, default=1.0, help="mean seconds")
    parser.add_argument(
        "--operator-after",
        type=float,
        default=10.0,
        help="an operator rules (from what the phones show) on an attempt holding its phone in"
        " review this many seconds; negative: never (the phone waits for a person)",
    )
    parser.add_argument(
        "--delete-every",
        type=float,
        default=6.0,
        help="mean seconds between two deletions of a phone's latest conversation (<0: never)",
    )
    parser.add_argument(
        "--wipe-at",
        type=float,
        default=None,
        help="seconds into the chaos when phone 0 is factory-reset (default: 40%% of the"
        " chaos; <0: never)",
    )
    parser.add_argument(
        "--alias-senders",
        type=float,
        default=0.5,
        help="share of the senders that reach the phones by localhost:PORT",
    )
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--naive-tries", type=int, default=3)
    parser.add_argument("--no-naive", action="store_true", help="skip the naive agent's run")
    parser.add_argument(
        "--worker",
        action="store_true",
        help="also run the workload in worker mode (queued for a pool, `starebrain worker`s)",
    )
    parser.add_argument("--worker-only", action="store_true", help="run the worker mode alone")
    parser.add_argument("--keep", action="store_true", help="keep the work folders")
    return parser


def _config(args: argparse.Namespace, agent: str) -> ChaosConfig:
    twins = args.twins if args.twins is not None else max(1, args.actions // 20)
    chaos = args.chaos_seconds if args.chaos_seconds is not None else max(25.0, 0.6 * args.actions)
    settle = args.settle_seconds if args.settle_seconds is not None else 60.0 + 0.1 * args.actions
    wipe_at = args.wipe_at if args.wipe_at is not None else 0.4 * chaos
    return ChaosConfig(
        seed=args.seed,
        actions=args.actions,
        twins=twins,
        phones=args.phones,
        workers=args.workers,
        cli_senders=args.cli_senders,
        agent=agent,
        naive_tries=args.naive_tries,
        chaos_s=chaos,
        settle_s=settle,
        kill_every_s=args.kill_every,
        outage_every_s=args.outage_every,
        human_every_s=args.human_every,
        max_attempts=args.max_attempts,
        operator_after_s=args.operator_after if args.operator_after >= 0 else None,
        delete_every_s=args.delete_every if args.delete_every >= 0 else None,
        wipe_at_s=wipe_at if wipe_at >= 0 else None,
        alias_senders=args.alias_senders,
    )


def _say(text: str) -> None:
    print(f"-- {text}", flush=True)


async def _run(args: argparse.Namespace, root: Path) -> list[ChaosReport]:
    if args.worker_only:
        return [await run_chaos(_config(args, "worker"), root / "worker", say=_say)]
    reports = [await run_chaos(_config(args, "ledger"), root / "ledger", say=_say)]
    if args.worker:
        reports.append(await run_chaos(_config(args, "worker"), root / "worker", say=_say))
    if not args.no_naive:
        reports.append(await run_chaos(_config(args, "naive"), root / "naive", say=_say))
    return reports


def main() -> int:
    args = _parser().parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    root = Path(tempfile.mkdtemp(prefix="starebrain-chaos-"))
    try:
        reports = asyncio.run(_run(args, root))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    checked = [report for report in reports if report.config.agent != "naive"]
    print()
    print(format_table(reports))
    for report in checked:
        agent = report.config.agent
        print()
        print(f"{agent} agent, actions at the end:")
        for name, count in sorted(report.statuses.items()):
            print(f"  {name:28} {count}")
        print(f"{agent} agent, faults consumed (both phones):")
        for name, count in report.faults_consumed.items():
            print(f"  {name:28} {count}")
        print(f"{agent} agent, workload:")
        for name, count in sorted(report.counts.items()):
            print(f"  {name:28} {count}")
    for report in reports:
        lines = list(iter_details(report))
        if lines:
            print(f"\n{report.config.agent} agent, details:")
            for line in lines:
                print(f"  {line}")
    if args.keep:
        print(f"\nwork folders kept in {root}")
    for report in checked:
        print(
            f"\nseed {args.seed}: {report.config.agent} agent"
            f" {'clean' if report.clean else 'NOT CLEAN'}"
            f" ({report.tracker_duplicates} duplicates, {report.lost_receipts} lost receipts,"
            f" {report.invariant_violations} invariant violations, {report.lies} lies)"
        )
    return 0 if all(report.clean for report in checked) else 1


if __name__ == "__main__":
    raise SystemExit(main())
