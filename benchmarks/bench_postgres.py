#!/usr/bin/env python3
"""The PostgreSQL backend against SQLite, and a fleet of phones on one PostgreSQL ledger.

Run: ``python benchmarks/bench_postgres.py [--quick] [--only lifecycles,reconcile,fleet]``.
The server is ``$STAREBRAIN_TEST_PG`` or ``postgresql://postgres@127.0.0.1:5432/test``; each
case runs in a fresh schema of its own, dropped after (SQLite: a fresh file). Prints:

* **lifecycles per second** with 1, 4 and 16 agent processes (spawned once, reused), each
  with its own actions and its own device, for a fixed time, on PostgreSQL and on SQLite in
  the same run. A lifecycle is what an agent's successful send writes, through the public
  API: ``create_action``, ``begin_attempt``, ``apply`` of the submission, then ``apply_many``
  of the confirmation and the acceptance (as a reconcile pass applies them): four write
  transactions. The PG/SQLite ratio at 16 processes is the figure (SQLite has one writer);
* **the ledger side of a reconcile pass** at 1,000 in-flight attempts on one device, on each
  backend: ``recent_attempts``, ``actions``, ``claimed_provider_ids`` and one ``apply_pass``
  of 1,000 confirmations (planned by the pure core, not timed). No phone is read: this is
  what the backend adds to a pass (``bench_reconcile.py`` times the phone side). The
  attempts are seeded by plain INSERTs (the lease allows one in-flight attempt per device
  through ``begin_attempt``), the median of three passes is reported;
* **a fleet run**: simulated phones (30 ms latency, 200 ms radio send delay, the messaging
  app's default focus delay) in separate processes, agent processes grouped as "hosts", one
  PostgreSQL ledger; the actions spread over the phones, each phone's actions sent in order
  by its home process through ``SmsAgent.send``, and every twentieth action also given to a
  process of another host, started when the home process is expected to reach it (so the
  two race), on the ``ui`` path. Sends per second against the phones' own floor (a phone
  sends one message at a time: phones / the ui path's floor, ``floors.py``), target >= 80%, and
  the duplicates found in the phones' own stores (the same body sent twice; must be 0).
  Where the CPU went (the phones, the agents, the PostgreSQL server, the whole machine) is
  printed beside it. Full: 100 phones, 16 processes as 4 hosts, 10,000 actions; ``--quick``:
  10 phones, 4 processes as 2 hosts, 200 actions.

A fleet process keeps its PostgreSQL connections few (a statement pool of ``FLEET_POOL``, and
one connection for its reconcile locks): the default pool (4 per process) could
pass the server's ``max_connections`` (100) with 16 processes on a shared server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import logging
import multiprocessing
import os
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import structlog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import floors  # noqa: E402
from floors import LATENCY_MS, SEND_DELAY_MS  # noqa: E402
from smoke import smoke  # noqa: E402

from android_bridge import ensure_key  # noqa: E402
from android_bridge.simulator import SimulatedPhone  # noqa: E402
from starebrain_actions import (  # noqa: E402
    Ledger,
    MatchVerdict,
    RetryPolicy,
    SmsIntent,
    confirm_delivery,
    try_accept,
)
from starebrain_actions.core import transitions as _core  # noqa: E402

#: The server the benchmark puts its schemas on (a base URL, no search_path).
PG_ENV = "STAREBRAIN_TEST_PG"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
RECIPIENT = "+12025550143"
PROCESS_COUNTS = (1, 4, 16)
#: The pass's size: in-flight attempts on one device.
PASS_ATTEMPTS = 1_000
#: Fleet targets: sends per second against the phones' floor; duplicates.
TARGET_FLOOR_SHARE = 0.8
#: Every this many actions, one is also given to a second host.
DUPLICATE_EVERY = 20
#: A fleet process's PostgreSQL connections: statements, and session locks (module docstring).
FLEET_POOL = 3
#: The agents' own send limit, lifted (the simulated app is not rate limited).
NO_RATE_LIMIT = 1_000_000


# -- PostgreSQL schemas ---------------------------------------------------------------------


def pg_base_url() -> str:
    """``$STAREBRAIN_TEST_PG`` if set and not empty, else the local default server."""
    return os.environ.get(PG_ENV) or DEFAULT_PG_URL


def schema_url(base_url: str, schema: str) -> str:
    """``base_url`` whose connections land in ``schema`` (``search_path``)."""
    parts = urlsplit(base_url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    query = [(k, v) for k, v in query if k != "search_path"] + [("search_path", schema)]
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextlib.asynccontextmanager
async def fresh_schema() -> AsyncIterator[str]:
    """A URL on a new empty schema ``bench_<hex>``, dropped with everything in it after."""
    import asyncpg

    base = pg_base_url()
    schema = f"bench_{secrets.token_hex(6)}"
    conn = await asyncpg.connect(base, timeout=10)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
    finally:
        await conn.close()
    try:
        yield schema_url(base, schema)
    finally:
        conn = await asyncpg.connect(base, timeout=10, server_settings={"lock_timeout": "20s"})
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        finally:
            await conn.close()


def _quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


# -- 1. lifecycles per second with N processes ----------------------------------------------


async def lifecycle(ledger: Ledger, action_id: str, device: str, body: str, row: int) -> None:
    """One successful send's writes, as an agent and its reconcile pass make them."""
    await ledger.create_action(action_id, SmsIntent(recipient=RECIPIENT, body=body), RetryPolicy())
    record = await ledger.begin_attempt(action_id, device)
    now = datetime.now(UTC)
    submitted = _core.record_submission(record, watermark_id=row - 1, device_clock_ms=row, now=now)
    record = await ledger.apply(submitted)
    confirmed = confirm_delivery(record, provider_object_id=row, now=now)
    accepted = try_accept(confirmed.after, MatchVerdict(matched=True), now=now)
    results = await ledger.apply_many([confirmed, accepted])
    assert not [r for r in results if isinstance(r, Exception)], results


async def _timed_lifecycles(
    target: str, prefix: str, duration_s: float, inbox: Any, outbox: Any
) -> dict[str, Any]:
    """Lifecycles for ``duration_s`` from the start time the parent sends once every worker
    has opened its ledger and warmed up (told by a "ready" message)."""
    device = f"{prefix}-device"
    async with Ledger.open(target) as ledger:
        for n in range(3):
            await lifecycle(ledger, f"{prefix}-w{n}", device, f"warm {n}", n + 1)
        outbox.put({"ready": True})
        start_at = await asyncio.to_thread(inbox.get)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        done, end = 0, start_at + duration_s
        cpu = time.process_time()
        while time.time() < end:
            await lifecycle(ledger, f"{prefix}-{done}", device, f"m {done}", done + 10)
            done += 1
        return {"done": done, "finished": time.time(), "cpu_s": time.process_time() - cpu}


def _lifecycle_worker(inbox: Any, outbox: Any) -> None:
    """A worker process: runs lifecycle jobs from ``inbox`` until None."""
    _quiet()
    while True:
        job = inbox.get()
        if job is None:
            return
        try:
            outbox.put(asyncio.run(_timed_lifecycles(**job, inbox=inbox, outbox=outbox)))
        except Exception as exc:  # reported by the parent, which fails the case
            outbox.put({"error": repr(exc)})


@contextlib.asynccontextmanager
async def target_for(backend: str, folder: Path, name: str) -> AsyncIterator[str]:
    """A fresh, migrated ledger: a PostgreSQL schema (dropped after) or a new SQLite file."""
    if backend == "postgresql":
        async with fresh_schema() as url:
            async with Ledger.open(url):
                pass
            yield url
    else:
        path = folder / f"{name}.db"
        async with Ledger.open(path):
            pass
        yield str(path)


async def lifecycle_figures(
    duration_s: float, counts: tuple[int, ...], rounds: int = 1
) -> dict[str, Any]:
    """Lifecycles per second for each backend and process count (workers spawned once).
    ``rounds`` > 1: each count measured that many times, the backends alternating which goes
    first, on a shared machine whose load drifts; the figures are each backend's median, and
    ``ratios:N`` lists each round's PG/SQLite ratio (``ratio:N`` their median)."""
    context = multiprocessing.get_context("spawn")
    outbox = context.Queue()
    workers = []
    for _ in range(max(counts)):
        inbox = context.Queue()
        process = context.Process(target=_lifecycle_worker, args=(inbox, outbox), daemon=True)
        process.start()
        workers.append((process, inbox))
    figures: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-pg-") as tmp:
            measured: dict[str, list[dict[str, Any]]] = {}
            for count, round_ in ((c, r) for c in counts for r in range(rounds)):
                order = ("postgresql", "sqlite") if round_ % 2 == 0 else ("sqlite", "postgresql")
                for backend in order:
                    name = f"life-{count}-{round_}"
                    async with target_for(backend, Path(tmp), name) as target:
                        used = workers[:count]
                        for index, (_process, inbox) in enumerate(used):
                            job = {
                                "target": target,
                                "prefix": f"p{index}",
                                "duration_s": duration_s,
                            }
                            inbox.put(job)
                        ready = [outbox.get(timeout=120) for _ in used]
                        errors = [r["error"] for r in ready if "error" in r]
                        if errors:
                            raise RuntimeError(f"{backend}, {count} processes: {errors[0]}")
                        start_at = time.time() + 0.2
                        for _process, inbox in used:
                            inbox.put(start_at)
                        results = [outbox.get(timeout=120) for _ in used]
                    errors = [r["error"] for r in results if "error" in r]
                    if errors:
                        raise RuntimeError(f"{backend}, {count} processes: {errors[0]}")
                    elapsed = max(r["finished"] for r in results) - start_at
                    done = sum(r["done"] for r in results)
                    measured.setdefault(f"{backend}:{count}", []).append(
                        {
                            "lifecycles": done,
                            "seconds": elapsed,
                            "per_s": done / elapsed,
                            "agent_cpu_s": sum(r["cpu_s"] for r in results),
                        }
                    )
            for key, runs in measured.items():
                figures[key] = sorted(runs, key=lambda run: run["per_s"])[len(runs) // 2]
            if rounds > 1:
                for count in counts:
                    ratios = [
                        pg["per_s"] / lite["per_s"]
                        for pg, lite in zip(
                            measured[f"postgresql:{count}"],
                            measured[f"sqlite:{count}"],
                            strict=True,
                        )
                    ]
                    figures[f"ratios:{count}"] = ratios
                    figures[f"ratio:{count}"] = statistics.median(ratios)
    finally:
        for _process, inbox in workers:
            inbox.put(None)
        for process, _inbox in workers:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    return figures


# -- 2. the ledger side of a reconcile pass -------------------------------------------------

_SEED_ACTION = (
    "INSERT INTO actions (action_id, fingerprint, intent_json, maximum_attempts, policy_json,"
    " created_at, deadline) VALUES (?, ?, ?, 3, ?, ?, NULL)"
)
_SEED_ATTEMPT = (
    "INSERT INTO attempts (dispatch_id, action_id, attempt, device, delivery,"
    " provider_object_id, provider_kind, dispatched_at, confirmed_at, version, last_event,"
    " last_event_at, last_actor) VALUES (?, ?, 1, ?, 'CONFIRMED', ?, 'sms', ?, ?, 1, 'confirm',"
    " ?, 'bench')"
)


async def _seed_in_flight(target: str, device: str, count: int) -> None:
    """``count`` attempts on ``device`` confirmed by a row and awaiting acceptance (unresolved:
    VERIFYING), by plain INSERTs in one transaction, with the intent and policy text the
    ledger itself writes (taken from one real action). Only one attempt of a device may be
    PENDING (the lease's unique index), so a pass's 1,000 unresolved attempts are these."""
    async with Ledger.open(target) as ledger:
        action = await ledger.create_action(
            f"{device}-template", SmsIntent(recipient=RECIPIENT, body="pass"), RetryPolicy()
        )
    intent_json = json.dumps(
        {"body": "pass", "extras": {}, "recipient": RECIPIENT, "region": None},
        separators=(",", ":"),
        sort_keys=True,
    )
    from starebrain_actions.core.convert import converter, format_time
    from starebrain_actions.ledger.updates import to_json

    policy_json = to_json(converter.unstructure(action.policy))
    at = format_time(datetime.now(UTC) - timedelta(seconds=5))
    actions = [
        (f"{device}-{n}", action.fingerprint, intent_json, policy_json, at) for n in range(count)
    ]
    attempts = [
        (f"{device}-d{n}", f"{device}-{n}", device, n + 1, at, at, at) for n in range(count)
    ]
    if target.startswith("postgres"):
        import asyncpg

        from starebrain_actions.ledger.pg import translate

        conn = await asyncpg.connect(target)
        try:
            async with conn.transaction():
                await conn.executemany(translate(_SEED_ACTION)[0], actions)
                await conn.executemany(translate(_SEED_ATTEMPT)[0], attempts)
        finally:
            await conn.close()
    else:
        with contextlib.closing(sqlite3.connect(target)) as db, db:
            db.executemany(_SEED_ACTION, actions)
            db.executemany(_SEED_ATTEMPT, attempts)


async def _one_pass(target: str, device: str, count: int) -> dict[str, float]:
    """Seconds for each ledger call of a pass accepting ``count`` unresolved attempts."""
    await _seed_in_flight(target, device, count)
    timings: dict[str, float] = {}
    async with Ledger.open(target) as ledger:
        now = datetime.now(UTC)
        started = time.perf_counter()
        records = await ledger.recent_attempts(device, now - timedelta(minutes=5))
        timings["recent_attempts"] = time.perf_counter() - started
        assert count == len(records), len(records)
        mark = time.perf_counter()
        actions = await ledger.actions(record.action_id for record in records)
        timings["actions"] = time.perf_counter() - mark
        assert count == len(actions)
        mark = time.perf_counter()
        await ledger.claimed_provider_ids(device, 0)
        timings["claimed_provider_ids"] = time.perf_counter() - mark
        plan_started = time.perf_counter()
        verdict = MatchVerdict(matched=True)
        # the pure core's plan: not the backend's cost
        transitions = [try_accept(record, verdict, now=now) for record in records]
        planning = time.perf_counter() - plan_started
        mark = time.perf_counter()
        results, _added = await ledger.apply_pass(transitions, now=now)
        timings["apply_pass"] = time.perf_counter() - mark
        timings["total"] = time.perf_counter() - started - planning
        assert not [r for r in results if isinstance(r, Exception)]
    return timings


async def pass_figures(count: int, rounds: int) -> dict[str, Any]:
    """The median of ``rounds`` passes per backend, the backends interleaved."""
    found: dict[str, list[dict[str, float]]] = {"postgresql": [], "sqlite": []}
    with tempfile.TemporaryDirectory(prefix="bench-pg-") as tmp:
        async with (
            target_for("postgresql", Path(tmp), "pass") as pg,
            target_for("sqlite", Path(tmp), "pass") as lite,
        ):
            for number in range(rounds + 1):  # round 0 warms up
                for backend, target in (("postgresql", pg), ("sqlite", lite)):
                    timings = await _one_pass(target, f"pass{number}", count)
                    if number:
                        found[backend].append(timings)
    return {
        backend: {key: statistics.median(t[key] for t in runs) for key in runs[0]}
        for backend, runs in found.items()
    }


# -- 3. the fleet ---------------------------------------------------------------------------


#: The fleet's send path (named: ``auto`` would take the framework, whose floor differs).
FLEET_PATH: Final = "ui"


def send_floor_s() -> float:
    """What one send holds a phone for at least, on the fleet's path (``floors.py``; the
    phone sends one message at a time)."""
    return floors.send_floor_s(FLEET_PATH)


def _cpu_seconds_of(name: str) -> float:
    """CPU seconds used so far by every process called ``name`` and its ended children (e.g.
    the PostgreSQL server and its backends, when it runs on this machine); 0 when none can
    be read."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        if comm == name:
            fields = stat[stat.rindex(")") + 2 :].split()
            # utime, stime, and cutime, cstime: the server's ended backends count in its
            # postmaster's children's time once reaped
            total += sum(int(field) for field in fields[11:15])
    return total / tick


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (``/proc/stat``)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + fields[4]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def _phones_worker(
    root: str, first: int, count: int, authorized: str, outbox: Any, inbox: Any
) -> None:
    """A process serving ``count`` simulated phones until told to stop; reports its CPU.
    Between its go and stop signals, a ``"cpu"`` on its inbox is answered with the CPU
    seconds spent since the go signal. With ``$BENCH_PROFILE_PHONES`` naming a directory,
    each such process writes a cProfile of its work (timed in process CPU) there."""
    _quiet()
    profile_dir = os.environ.get("BENCH_PROFILE_PHONES")

    async def serve() -> None:
        phones = [
            SimulatedPhone(
                store_path=Path(root) / f"phone-{first + n}.db",
                authorized_keys_path=Path(authorized),
                latency_ms=LATENCY_MS,
                send_delay_ms=SEND_DELAY_MS,
            )
            for n in range(count)
        ]
        async with contextlib.AsyncExitStack() as stack:
            for phone in phones:
                await stack.enter_async_context(phone)
            outbox.put({"first": first, "serials": [phone.serial for phone in phones]})
            await asyncio.to_thread(inbox.get)  # the go signal: measure from here
            cpu = time.process_time()
            profile = cProfile.Profile(time.process_time) if profile_dir else None
            if profile is not None:
                profile.enable()
            while await asyncio.to_thread(inbox.get) == "cpu":  # until the stop signal
                outbox.put({"cpu_s": time.process_time() - cpu})
            cpu = time.process_time() - cpu
            if profile is not None:
                profile.disable()
                profile.dump_stats(Path(profile_dir or ".") / f"phones-{first}.prof")
            for phone in phones:
                await phone.wait_idle()
        outbox.put({"cpu_s": cpu})

    asyncio.run(serve())


def start_phones(
    root: Path, phones: int, processes: int
) -> tuple[Path, list[str], list[tuple[Any, Any]], Any]:
    """An ADB key in ``root`` and ``phones`` simulated phones served by ``processes``
    processes (``_phones_worker``, stores in ``root``), each waiting for its go signal: the
    key, the phones' serials in order, the (process, inbox) pairs and the box they answer
    on (``stop_phones`` ends them)."""
    context = multiprocessing.get_context("spawn")
    key = ensure_key(root / "adbkey")
    authorized = root / "adb_keys"
    authorized.write_text(Path(f"{key}.pub").read_text().strip() + "\n")
    box = context.Queue()
    servers = []
    share = -(-phones // processes)
    for first in range(0, phones, share):
        inbox = context.Queue()
        count = min(share, phones - first)
        process = context.Process(
            target=_phones_worker,
            args=(str(root), first, count, str(authorized), box, inbox),
            daemon=True,
        )
        process.start()
        servers.append((process, inbox))
    ready = sorted((box.get(timeout=120) for _ in servers), key=lambda answer: answer["first"])
    serials = [serial for answer in ready for serial in answer["serials"]]
    assert len(serials) == phones
    return key, serials, servers, box


def stop_phones(servers: list[tuple[Any, Any]], box: Any) -> float:
    """Stop the phone processes ``_phones_worker`` started (each a (process, inbox) pair,
    answering on ``box``); the CPU seconds they spent since their go signal, in all."""
    for _process, inbox in servers:
        inbox.put("stop")
    cpu = sum(box.get(timeout=120)["cpu_s"] for _ in servers)
    for process, _inbox in servers:
        process.join(timeout=30)
    return float(cpu)


async def _agent_run(job: dict[str, Any], barrier: Any) -> dict[str, Any]:
    from starebrain_actions.ledger import pg as _pg
    from starebrain_actions.orchestration.agent import SmsAgent

    url = job["url"]
    # keep this process's connections few (module docstring): the process's shared pool is
    # made here first, smaller (session locks take one more connection, whatever their number)
    database = _pg.PgDatabase.shared(url, max_size=FLEET_POOL)
    outcomes: list[tuple[str, str, float]] = []
    errors: list[str] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            agents = {}
            for serial in job["work"]:
                agents[serial] = await stack.enter_async_context(
                    SmsAgent.open(
                        db=url,
                        device=serial,
                        key_path=job["key"],
                        rate_limit=NO_RATE_LIMIT,
                        command_timeout_s=30.0,
                        send_path=FLEET_PATH,
                        # rows settle when first seen: the figures are the sends' work,
                        # not the wait for an app's SENT row to settle (30 min by default)
                        policy=RetryPolicy(
                            settle_after=timedelta(0), framework_settle_after=timedelta(0)
                        ),
                    )
                )
            await asyncio.to_thread(barrier.wait)
            started = time.time()
            cpu = time.process_time()

            async def drive(serial: str, work: list[tuple[str, str, float | None]]) -> None:
                agent = agents[serial]
                for action_id, body, at in work:
                    if at is not None:
                        await asyncio.sleep(max(0.0, started + at - time.time()))
                    try:
                        outcome = await agent.send(action_id, RECIPIENT, body, wait=120)
                        outcomes.append((action_id, outcome.status.name, time.time()))
                    except Exception as exc:  # counted and reported, the run goes on
                        errors.append(f"{action_id}: {exc!r}")

            await asyncio.gather(*(drive(s, w) for s, w in job["work"].items()))
            cpu = time.process_time() - cpu
    finally:
        await asyncio.to_thread(database.release)
    return {"outcomes": outcomes, "errors": errors, "started": started, "cpu_s": cpu}


def _agent_worker(job: dict[str, Any], barrier: Any, outbox: Any) -> None:
    _quiet()
    try:
        outbox.put(asyncio.run(_agent_run(job, barrier)))
    except Exception as exc:
        outbox.put({"error": repr(exc)})
        with contextlib.suppress(Exception):
            barrier.abort()


def plan_fleet(
    serials: list[str], actions: int, processes: int, hosts: int
) -> tuple[list[dict[str, list[tuple[str, str, float | None]]]], int]:
    """Each process's work: per phone, (action id, body, start offset or None) in order.

    Action ``i`` goes to phone ``i % phones``, whose home process is ``phone % processes``;
    every ``DUPLICATE_EVERY``-th action is also given to the same-numbered process of the
    next host, which starts it when the home process is expected to reach it."""
    per_host = processes // hosts
    work: list[dict[str, list[tuple[str, str, float | None]]]] = [{} for _ in range(processes)]
    position = [0] * len(serials)
    duplicated = 0
    for i in range(actions):
        phone = i % len(serials)
        serial = serials[phone]
        home = phone % processes
        item = (f"F-{i}", f"fleet message {i}")
        work[home].setdefault(serial, []).append((*item, None))
        if i % DUPLICATE_EVERY == DUPLICATE_EVERY // 2 and hosts > 1:
            other = (home + per_host) % processes
            at = position[phone] * send_floor_s()
            work[other].setdefault(serial, []).append((*item, at))
            duplicated += 1
        position[phone] += 1
    return work, duplicated


def _store_counts(root: Path, phones: int) -> tuple[int, int, int]:
    """(fleet rows sent, bodies sent more than once, extra copies) over the phones' stores."""
    sent = twice = extra = 0
    for n in range(phones):
        with contextlib.closing(sqlite3.connect(root / f"phone-{n}.db")) as db:
            rows = db.execute(
                "SELECT body, count(*) FROM sms WHERE type = 2 AND body LIKE 'fleet message %'"
                " GROUP BY body"
            ).fetchall()
        sent += len(rows)
        twice += sum(1 for _body, copies in rows if copies > 1)
        extra += sum(copies - 1 for _body, copies in rows)
    return sent, twice, extra


async def fleet_figures(
    phones: int, processes: int, hosts: int, actions: int, phone_processes: int
) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        key, serials, servers, phone_box = start_phones(root, phones, phone_processes)
        work, duplicated = plan_fleet(serials, actions, processes, hosts)
        results: list[dict[str, Any]] = []
        async with fresh_schema() as url:
            async with Ledger.open(url):
                pass
            barrier = context.Barrier(processes + 1)
            agent_box = context.Queue()
            agents = [
                context.Process(
                    target=_agent_worker,
                    args=({"url": url, "key": str(key), "work": work[n]}, barrier, agent_box),
                    daemon=True,
                )
                for n in range(processes)
            ]
            for process in agents:
                process.start()
            await asyncio.to_thread(barrier.wait, 300)
            started = time.time()
            for _process, inbox in servers:
                inbox.put("go")
            busy0, total0 = _machine_busy()
            pg0 = _cpu_seconds_of("postgres")
            results = [await asyncio.to_thread(agent_box.get, True, 3600) for _ in agents]
            busy1, total1 = _machine_busy()
            pg1 = _cpu_seconds_of("postgres")
            for process in agents:
                process.join(timeout=30)
            import asyncpg

            conn = await asyncpg.connect(url)
            try:
                confirmed = await conn.fetchval(
                    "SELECT count(*) FROM attempts WHERE delivery = 'CONFIRMED'"
                )
                attempts = await conn.fetchval("SELECT count(*) FROM attempts")
            finally:
                await conn.close()
        phones_cpu = stop_phones(servers, phone_box)
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise RuntimeError(f"fleet: an agent process failed: {errors[0]}")
        sent, twice, extra = _store_counts(root, phones)
    finished = max(t for r in results for _a, _s, t in r["outcomes"])
    elapsed = finished - started
    statuses: dict[str, int] = {}
    for r in results:
        for _action, status, _t in r["outcomes"]:
            statuses[status] = statuses.get(status, 0) + 1
    floor = phones / send_floor_s()
    cores = len(os.sched_getaffinity(0))
    return {
        "phones": phones,
        "processes": processes,
        "hosts": hosts,
        "actions": actions,
        "duplicated_actions": duplicated,
        "seconds": elapsed,
        "sent": sent,
        "sends_per_s": sent / elapsed,
        "floor_per_s": floor,
        "floor_share": sent / elapsed / floor,
        "bodies_sent_twice": twice,
        "extra_copies": extra,
        "ledger_attempts": attempts,
        "ledger_confirmed": confirmed,
        "outcomes": statuses,
        "errors": [e for r in results for e in r["errors"]][:5],
        "error_count": sum(len(r["errors"]) for r in results),
        "cpu": {
            "agents_s": sum(r["cpu_s"] for r in results),
            "phones_s": phones_cpu,
            "postgres_s": pg1 - pg0,
            "machine_busy_s": busy1 - busy0,
            "machine_total_s": total1 - total0,
            "cores": cores,
        },
    }


# -- the table ------------------------------------------------------------------------------


def _sizes(quick: bool) -> dict[str, Any]:
    if smoke():
        return {
            "duration_s": 0.2,
            "process_counts": (1,),
            "pass_count": 50,
            "pass_rounds": 1,
            "fleet": {"phones": 2, "processes": 2, "hosts": 2, "actions": 8},
            "phone_processes": 1,
        }
    if quick:
        return {
            "duration_s": 0.3,
            "process_counts": (1, 4),
            "pass_count": 200,
            "pass_rounds": 1,
            "fleet": {"phones": 4, "processes": 2, "hosts": 2, "actions": 40},
            "phone_processes": 1,
        }
    return {
        "duration_s": 5.0,
        "process_counts": PROCESS_COUNTS,
        "pass_count": PASS_ATTEMPTS,
        "pass_rounds": 3,
        "fleet": {"phones": 100, "processes": 16, "hosts": 4, "actions": 10_000},
        "phone_processes": 2,
    }


def measure(quick: bool, only: set[str] | None = None) -> dict[str, Any]:
    _quiet()
    sizes = _sizes(quick)
    figures: dict[str, Any] = {"quick": quick}
    if not only or "lifecycles" in only:
        figures["lifecycles"] = asyncio.run(
            lifecycle_figures(sizes["duration_s"], sizes["process_counts"])
        )
    if not only or "reconcile" in only:
        figures["pass_attempts"] = sizes["pass_count"]
        figures["pass"] = asyncio.run(pass_figures(sizes["pass_count"], sizes["pass_rounds"]))
    if not only or "fleet" in only:
        figures["fleet"] = asyncio.run(
            fleet_figures(**sizes["fleet"], phone_processes=sizes["phone_processes"])
        )
    return figures


def _counts(life: dict[str, Any]) -> list[int]:
    """The process counts measured (``--quick`` leaves 16 out)."""
    return sorted({int(key.split(":")[1]) for key in life if not key.startswith("ratio")})


def report(figures: dict[str, Any]) -> None:
    if "lifecycles" in figures:
        life = figures["lifecycles"]
        print("lifecycles per second (4 write transactions each), each process its own device:")
        for count in _counts(life):
            pg, lite = life[f"postgresql:{count}"], life[f"sqlite:{count}"]
            print(
                f"  {count:>2} process(es): PostgreSQL {pg['per_s']:8.1f}/s,"
                f" SQLite {lite['per_s']:8.1f}/s, ratio {pg['per_s'] / lite['per_s']:.2f}"
                f"  (agent CPU {pg['agent_cpu_s']:.1f} s / {lite['agent_cpu_s']:.1f} s)"
            )
    if "pass" in figures:
        print(f"ledger side of a reconcile pass, {figures['pass_attempts']:,} in-flight attempts:")
        for backend, timings in figures["pass"].items():
            parts = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in timings.items() if k != "total")
            print(f"  {backend:<10} {timings['total'] * 1000:8.1f} ms ({parts})")
    if "fleet" in figures:
        fleet = figures["fleet"]
        cpu = fleet["cpu"]
        print(
            f"fleet: {fleet['phones']} phones, {fleet['processes']} agent processes as"
            f" {fleet['hosts']} hosts, {fleet['actions']:,} actions"
            f" ({fleet['duplicated_actions']} given to two hosts):"
        )
        print(
            f"  {fleet['sent']:,} sent in {fleet['seconds']:.1f} s: {fleet['sends_per_s']:.1f}"
            f" sends/s against a floor of {fleet['floor_per_s']:.1f}/s"
            f" ({fleet['floor_share']:.0%}; per send {floors.explain(FLEET_PATH)})"
        )
        print(
            f"  duplicates in the phones' stores: {fleet['bodies_sent_twice']} bodies sent"
            f" twice ({fleet['extra_copies']} extra copies); ledger: {fleet['ledger_attempts']}"
            f" attempts, {fleet['ledger_confirmed']} confirmed; outcomes {fleet['outcomes']};"
            f" {fleet['error_count']} errors {fleet['errors']}"
        )
        wall = fleet["seconds"] * cpu["cores"]
        print(
            f"  CPU over the run ({cpu['cores']} cores, {wall:.0f} core-s): agents"
            f" {cpu['agents_s']:.1f} s, phones {cpu['phones_s']:.1f} s, PostgreSQL server"
            f" {cpu['postgres_s']:.1f} s, whole machine busy"
            f" {cpu['machine_busy_s']:.1f} of {cpu['machine_total_s']:.1f} s"
        )


def rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """The benchmark table's rows."""
    quick = figures["quick"]
    out: list[dict[str, Any]] = []
    if "lifecycles" in figures:
        life = figures["lifecycles"]
        counts = _counts(life)
        top = max(counts)
        ratio = life[f"postgresql:{top}"]["per_s"] / life[f"sqlite:{top}"]["per_s"]
        figure = "; ".join(
            f"{n}: PG {life[f'postgresql:{n}']['per_s']:.0f}/s,"
            f" SQLite {life[f'sqlite:{n}']['per_s']:.0f}/s"
            for n in counts
        )
        out.append(
            {
                "work": "PostgreSQL vs SQLite: lifecycles/s with"
                f" {', '.join(map(str, counts))} agent processes",
                "figure": f"{figure}; PG/SQLite at {top}: {ratio:.2f}",
                "target": "PG/SQLite > 1 at 16 processes (PG scales with processes)",
                "met": None if quick else ratio > 1,
            }
        )
    if "pass" in figures:
        passes = figures["pass"]
        pg, lite = passes["postgresql"]["total"], passes["sqlite"]["total"]
        out.append(
            {
                "work": f"PostgreSQL vs SQLite: ledger side of a reconcile pass,"
                f" {figures['pass_attempts']:,} in-flight attempts",
                "figure": f"PG {pg * 1000:.0f} ms, SQLite {lite * 1000:.0f} ms"
                f" (PG/SQLite {pg / lite:.2f})",
                "target": "(no target: the cost each backend adds to a pass)",
                "met": None,
            }
        )
    if "fleet" in figures:
        fleet = figures["fleet"]
        out.append(
            {
                "work": f"PostgreSQL fleet: {fleet['phones']} phones, {fleet['processes']}"
                f" agent processes as {fleet['hosts']} hosts, {fleet['actions']:,} actions",
                "figure": f"{fleet['sends_per_s']:.1f} sends/s = {fleet['floor_share']:.0%} of"
                f" the phones' floor ({fleet['floor_per_s']:.0f}/s);"
                f" {fleet['extra_copies']} duplicates",
                "target": f">= {TARGET_FLOOR_SHARE:.0%} of the floor, 0 duplicates",
                "met": fleet["extra_copies"] == 0
                and fleet["sent"] == fleet["actions"]
                and (quick or fleet["floor_share"] >= TARGET_FLOOR_SHARE),
            }
        )
    return out


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure, print the details, and return the rows of the benchmark table; with those of
    ``bench_pg_round_trips.py`` (round trips per receipt and per transition, and the
    lifecycle ratio at 16 processes in alternating rounds, issue 26)."""
    figures = measure(quick)
    report(figures)
    import bench_pg_round_trips

    return rows(figures) + bench_pg_round_trips.run(quick)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--only", default="", help="lifecycles, reconcile, fleet (comma-separated)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    figures = measure(args.quick, only)
    report(figures)
    for row in rows(figures):
        mark = {True: "met", False: "MISSED", None: "-"}[row["met"]]
        print(f"{row['work']}: {row['figure']} (target {row['target']}: {mark})")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
