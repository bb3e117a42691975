"""Several hosts, for real: separate agent processes share one PostgreSQL ledger and several
simulated phones while the test ``kill -9``s them, cuts their database connections in the
middle of transactions and restarts the server under them.

The server is the test's own (``tests._postgres.OwnServer``), never the shared one: it is
crashed and started again during the run. What is asserted comes from the phones' ground
truth (what really left each phone, and the rows its messaging app wrote), not from the
ledger's word.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import asyncpg
import pytest

from android_bridge import ensure_key
from android_bridge.simulator import Fault, SimulatedPhone
from starebrain_actions.core.model import LEASE_RELEASING_REVIEWS, Status
from starebrain_actions.ledger.store import Ledger
from starebrain_actions.orchestration.reconciler import reconcile_device
from starebrain_actions.phone.android import AndroidPhone
from tests._postgres import OwnServer
from tests.chaos.harness import (
    ActionSpec,
    PhoneRig,
    fence_dispatch_ids,
    send_outcomes,
    tally_sends,
    tracker_duplicates_of,
)

ROOT: Final = Path(__file__).resolve().parents[2]
HOSTS: Final = 4
PHONES: Final = 3
ACTIONS: Final = 42
#: share of the actions given to a second host as well (both race to send the same id)
SHARED: Final = 0.3
SEED: Final = 13
#: the phones whose framework jar proves nothing (``framework_jar="stripped"``, on a build of
#: their own: ``eng``): ``--send-path auto`` stays on the messaging app there, while the
#: others' jars prove the ``isms`` code and auto sends through the framework from the first
#: send (``service call isms``, rows and transmissions by ``com.android.shell``)
APP_PATH_PHONES: Final = frozenset({PHONES - 1})
#: chaos lasts this long at most; then the hosts get ``SETTLE_S`` more to finish
CHAOS_S: Final = 16.0
SETTLE_S: Final = 25.0
#: what every host is told (see tests/multihost/_host.py)
TIMINGS: Final = {
    "maximum_attempts": 5,
    "initial_interval_s": 0.2,
    "grace_s": 2.0,
    "unverified_after_s": 3.0,
    "command_timeout_s": 2.0,
    "void_after_s": 2.5,
    "send_wait_s": 3.0,
}


@pytest.fixture
def own_server() -> Iterator[OwnServer]:
    """A PostgreSQL server of this test's own (it is crashed and restarted), removed after."""
    server = OwnServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


class Run:
    """The hosts, the chaos, and what happened."""

    def __init__(self, server: OwnServer, workdir: Path) -> None:
        self.server = server
        self.workdir = workdir
        self.rng = random.Random(SEED)
        self.rigs: list[PhoneRig] = []
        self.counts: Counter[str] = Counter()
        self.actions = self._plan()
        self.lists = self._assign()
        self.running: dict[int, asyncio.subprocess.Process] = {}
        self.errors: Counter[str] = Counter()
        self.problems: list[str] = []
        self.chaos_over = asyncio.Event()
        self.deadline = time.time() + CHAOS_S + SETTLE_S
        self.key = workdir / "adbkey"

    def _plan(self) -> list[ActionSpec]:
        recipients = [f"+1202555{n:04d}" for n in range(140, 146)]
        codes = self.rng.sample(range(10000, 100000), k=ACTIONS)
        return [
            ActionSpec(
                action_id=f"mh-{index:03d}",
                recipient=recipients[index % len(recipients)],
                body=f"Multihost code {codes[index]}",
                phone=index % PHONES,
            )
            for index in range(ACTIONS)
        ]

    def _assign(self) -> list[list[ActionSpec]]:
        """Round robin over the hosts; some actions given to a second host too."""
        lists: list[list[ActionSpec]] = [[] for _ in range(HOSTS)]
        for index, spec in enumerate(self.actions):
            home = index % HOSTS
            lists[home].append(spec)
            if self.rng.random() < SHARED:
                other = (home + self.rng.randrange(1, HOSTS)) % HOSTS
                lists[other].insert(self.rng.randrange(len(lists[other]) + 1), spec)
                self.counts["shared_actions"] += 1
        return lists

    def host_url(self, host: int) -> str:
        # asyncpg sends unknown query parameters as server settings: the name tells the
        # test which backends are whose
        return f"{self.server.url}?application_name=host-{host}"

    # -- phones and hosts -----------------------------------------------------------------

    async def start_phones(self) -> None:
        self.key = ensure_key(self.workdir / "adbkey")
        keys = self.workdir / "adb_keys"
        keys.write_text(Path(f"{self.key}.pub").read_text(encoding="utf-8"), encoding="utf-8")
        for index in range(PHONES):
            app_path = index in APP_PATH_PHONES
            phone = SimulatedPhone(
                store_path=self.workdir / f"phone-{index}.db",
                authorized_keys_path=keys,
                build_type="eng" if app_path else "userdebug",
                send_delay_ms=30,
                seed=SEED * 10 + index,
                framework_jar="stripped" if app_path else "aosp",
            )
            await phone.start()
            rig = PhoneRig(index, phone, read_as_system=True)
            rig.seed_max_sms = phone.store.max_id()
            rig.attach()
            self.rigs.append(rig)

    async def host_slot(self, host: int) -> None:
        """Run one host until it exits on its own; start it again when it was killed."""
        runs = 0
        while time.time() < self.deadline:
            runs += 1
            spec = {
                **TIMINGS,
                "db": self.host_url(host),
                "key": str(self.key),
                "deadline": self.deadline,
                "phones": [{"serial": rig.serial} for rig in self.rigs],
                "actions": [
                    {"action_id": a.action_id, "to": a.recipient, "body": a.body, "phone": a.phone}
                    for a in self.lists[host]
                ],
            }
            path = self.workdir / f"host-{host}-{runs}.json"
            path.write_text(json.dumps(spec), encoding="utf-8")
            with (self.workdir / f"host-{host}.log").open("a", encoding="utf-8") as log:
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "tests.multihost._host",
                    str(path),
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log,
                )
                self.running[host] = process
                self.counts["host_starts"] += 1
                assert process.stdout is not None
                async for line in process.stdout:
                    self._line(host, line)
                code = await process.wait()
                del self.running[host]
            if code == 0:
                return
            if code == -signal.SIGKILL:
                await asyncio.sleep(self.rng.uniform(0.2, 0.6))
                continue
            self.problems.append(f"host {host} run {runs} exited {code} (see {log.name})")
            await asyncio.sleep(0.5)

    def _line(self, host: int, line: bytes) -> None:
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("event") == "error":
                self.errors[str(event.get("error"))] += 1
            elif event.get("event") == "outcome":
                self.counts["send_calls"] += 1

    # -- chaos ------------------------------------------------------------------------------

    async def killer(self) -> None:
        """``kill -9`` a random running host every 1.5 to 3 s."""
        while not self.chaos_over.is_set():
            await asyncio.sleep(self.rng.uniform(1.5, 3.0))
            live = sorted(h for h, p in self.running.items() if p.returncode is None)
            if self.chaos_over.is_set() or not live:
                continue
            with contextlib.suppress(ProcessLookupError):
                self.running[self.rng.choice(live)].send_signal(signal.SIGKILL)
                self.counts["kills"] += 1

    async def terminator(self) -> None:
        """Terminate the hosts' backends, preferring ones inside a transaction (``idle in
        transaction`` or running a statement of one), a burst every second or so; between
        bursts, check that no device has two lease-holding attempts."""
        while not self.chaos_over.is_set():
            await asyncio.sleep(self.rng.uniform(0.5, 1.2))
            try:
                conn = await asyncpg.connect(self.server.url, timeout=2)
            except Exception:
                continue  # the server is restarting
            try:
                await self._lease_check(conn)
                until = time.monotonic() + 1.0
                hit = False
                while not hit and time.monotonic() < until:
                    rows = await conn.fetch(
                        "SELECT pid, pg_terminate_backend(pid) AS done FROM pg_stat_activity"
                        " WHERE application_name LIKE 'host-%' AND xact_start IS NOT NULL"
                        " AND backend_xid IS NOT NULL"
                    )
                    hit = any(row["done"] for row in rows)
                    self.counts["terminated_in_write_transaction"] += sum(r["done"] for r in rows)
                    await asyncio.sleep(0.003)
                if not hit:
                    rows = await conn.fetch(
                        "SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity"
                        " WHERE application_name LIKE 'host-%'"
                    )
                    self.counts["terminated_idle"] += sum(r["done"] for r in rows)
            except Exception:
                continue
            finally:
                with contextlib.suppress(Exception):
                    await conn.close(timeout=2)

    async def _lease_check(self, conn: asyncpg.Connection) -> None:
        rows = await conn.fetch(
            "SELECT device, count(*) AS holders FROM attempts WHERE delivery = 'PENDING'"
            " AND coalesce(review_reason, '') <> ALL($1::text[]) GROUP BY device"
            " HAVING count(*) > 1",
            [reason.value for reason in LEASE_RELEASING_REVIEWS],
        )
        self.counts["lease_checks"] += 1
        for row in rows:
            self.problems.append(f"{row['holders']} lease holders on {row['device']}")

    async def restarter(self) -> None:
        """Crash the server once, a third of the way in, and start it again a second later."""
        await asyncio.sleep(CHAOS_S / 3)
        if self.chaos_over.is_set():
            return
        await asyncio.to_thread(self.server.crash)
        self.counts["server_crashes"] += 1
        await asyncio.sleep(1.0)
        if not await asyncio.to_thread(self.server.start_again):
            self.problems.append("the server did not start again after its crash")

    async def faults(self) -> None:
        """Arm ``duplicate-send`` (the messaging app sends twice) on each phone, twice (a
        framework send takes it and sends once: only the app doubles)."""
        armed = Counter[int]()
        while not self.chaos_over.is_set():
            await asyncio.sleep(0.3)
            for rig in self.rigs:
                if (
                    armed[rig.index] < 2
                    and Fault.DUPLICATE_SEND not in rig.phone.faults.remaining()
                ):
                    rig.phone.inject_fault(Fault.DUPLICATE_SEND)
                    armed[rig.index] += 1

    # -- the run ----------------------------------------------------------------------------

    async def run(self) -> None:
        async with Ledger.open(self.server.url):
            pass  # the schema, once, before the hosts race
        slots = [asyncio.create_task(self.host_slot(host)) for host in range(HOSTS)]
        actors = [
            asyncio.create_task(actor())
            for actor in (self.killer, self.terminator, self.restarter, self.faults)
        ]
        try:
            everything = asyncio.gather(*slots)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(everything), CHAOS_S)
            self.chaos_over.set()
            for actor in actors:
                await actor
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(everything, max(1.0, self.deadline - time.time()))
        finally:
            self.chaos_over.set()
            for task in (*actors, *slots):
                task.cancel()
            for process in self.running.values():
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        if self.running:
            self.problems.append(f"hosts {sorted(self.running)} still running at the deadline")
        for rig in self.rigs:
            async with asyncio.timeout(10):
                await rig.phone.wait_idle()
        await self.final_reconcile()

    async def final_reconcile(self) -> None:
        """Reconcile passes on every phone until nothing changes (they record the copies the
        app sent by itself as duplicates)."""
        async with Ledger.open(self.server.url) as ledger:
            for rig in self.rigs:
                phone = await AndroidPhone.connect(
                    rig.serial, key_path=self.key, command_timeout_s=5.0, read_as_system=True
                )
                try:
                    for _ in range(4):
                        report = await reconcile_device(
                            ledger, phone, void_after=timedelta(seconds=TIMINGS["void_after_s"])
                        )
                        if not report.changes:
                            break
                finally:
                    await phone.close()


def history_problems(attempts: dict[str, Any], history: list[Any]) -> list[str]:
    """Every attempt's history starts at ``created``, chains each row's "from" to the row
    before's "to", never leaves a final state (no operator here), has one row per version,
    and ends at the attempt's current states."""
    problems = []
    entries: dict[str, list[Any]] = defaultdict(list)
    for row in history:
        entries[row["dispatch_id"]].append(row)
    for dispatch_id, attempt in attempts.items():
        rows = entries.pop(dispatch_id, [])
        if not rows:
            problems.append(f"{dispatch_id} has no history")
            continue
        if (rows[0]["event"], rows[0]["to_delivery"], rows[0]["to_acceptance"]) != (
            "created",
            "PENDING",
            "PENDING",
        ):
            problems.append(f"history of {dispatch_id} starts with {rows[0]['event']}")
        if len(rows) != attempt["version"] + 1:
            problems.append(
                f"{dispatch_id}: {len(rows)} history rows, version {attempt['version']}"
            )
        last = rows[-1]
        if (last["to_delivery"], last["to_acceptance"]) != (
            attempt["delivery"],
            attempt["acceptance"],
        ):
            problems.append(f"{dispatch_id}: last history row is not its current states")
        for before, after in itertools.pairwise(rows):
            if (after["from_delivery"], after["from_acceptance"]) != (
                before["to_delivery"],
                before["to_acceptance"],
            ):
                problems.append(f"{dispatch_id}: history row {after['sequence']} breaks the chain")
            for axis in ("delivery", "acceptance"):
                if (
                    before[f"to_{axis}"] != "PENDING"
                    and after[f"to_{axis}"] != before[f"to_{axis}"]
                ):
                    problems.append(f"{dispatch_id}: {axis} left {before[f'to_{axis}']}")
    problems += [
        f"history of {dispatch_id}, an attempt that does not exist" for dispatch_id in entries
    ]
    return problems


def attempt_order_problems(attempts: dict[str, Any], history: list[Any]) -> list[str]:
    """Attempts of an action are numbered 1..n, and attempt k+1 was created only after attempt
    k was proven FAILED or REJECTED (no two attempts of one action in flight)."""
    problems = []
    created: dict[str, int] = {}
    proven: dict[str, int] = {}
    for row in history:
        created.setdefault(row["dispatch_id"], row["sequence"])
        if row["to_delivery"] == "FAILED" or row["to_acceptance"] == "REJECTED":
            proven.setdefault(row["dispatch_id"], row["sequence"])
    by_action: dict[str, list[Any]] = defaultdict(list)
    for attempt in sorted(attempts.values(), key=lambda a: (a["action_id"], a["attempt"])):
        by_action[attempt["action_id"]].append(attempt)
    for action_id, rows in by_action.items():
        if [row["attempt"] for row in rows] != list(range(1, len(rows) + 1)):
            problems.append(f"attempts of {action_id} numbered {[r['attempt'] for r in rows]}")
        for before, after in itertools.pairwise(rows):
            proof = proven.get(before["dispatch_id"])
            if proof is None or proof > created.get(after["dispatch_id"], 0):
                problems.append(
                    f"{action_id}: attempt {after['attempt']} before {before['attempt']} failed"
                )
    return problems


@pytest.mark.long(12)
@pytest.mark.slow
async def test_hosts_killed_cut_off_and_restarted_send_each_action_once(
    tmp_path: Path, own_server: OwnServer
) -> None:
    """Four agent processes ("hosts") on one PostgreSQL ledger drive three phones, some actions
    given to two hosts at once, while hosts are ``kill -9``ed and restarted, their backends
    are terminated mid-transaction and the server crashes and comes back. The phones show
    every action sent exactly once (a copy the messaging app sent by itself is the only
    second send, and the ledger records it as a duplicate), every message of an action is
    accounted for in the ledger, and the ledger's invariants hold."""
    run = Run(own_server, tmp_path)
    try:
        await run.start_phones()
        started = time.monotonic()
        await run.run()
        await check(run, own_server, f"work folder {tmp_path}; {time.monotonic() - started:.1f} s")
    finally:
        for rig in run.rigs:
            await rig.phone.stop()


async def check(run: Run, own_server: OwnServer, where: str) -> None:
    """What the phones show against the ledger (see the test's docstring)."""
    conn = await asyncpg.connect(own_server.url, timeout=10)
    try:
        attempts = {row["dispatch_id"]: row for row in await conn.fetch("SELECT * FROM attempts")}
        history = await conn.fetch("SELECT * FROM history ORDER BY sequence")
        duplicates = await conn.fetch("SELECT * FROM duplicates")
    finally:
        await conn.close()
    async with Ledger.open(own_server.url) as ledger:
        statuses = {a.action_id: (await ledger.summary(a.action_id)).status for a in run.actions}

    groups = {spec.intent_key: [spec] for spec in run.actions}
    outcomes = [o for rig in run.rigs for o in send_outcomes(rig, groups)]
    owner_of = {d: a["action_id"] for d, a in attempts.items()}
    tally = tally_sends(outcomes, owner_of, {s.action_id: s.intent_key for s in run.actions})
    tracker_duplicates, why = tracker_duplicates_of(groups, tally)
    explain = "\n".join(
        [
            where,
            f"counts: {dict(run.counts)}",
            f"host errors: {dict(run.errors)}",
            f"statuses: {Counter(s.value for s in statuses.values())}",
            *run.problems,
            *why,
        ]
    )
    assert [] == run.problems, explain
    # the chaos really happened
    assert run.counts["kills"] >= 2, explain
    assert run.counts["server_crashes"] == 1, explain
    assert run.counts["terminated_in_write_transaction"] >= 1, explain
    assert run.counts["shared_actions"] >= 5, explain

    # exactly one SMS per action: what left the phones, by body
    serial_index = {rig.serial: rig.index for rig in run.rigs}
    spec_of_body = {spec.body: spec for spec in run.actions}
    left: Counter[str] = Counter()
    doubled = sum(1 for o in outcomes if o.doubled and o.out)
    for rig in run.rigs:
        for transmission in rig.phone.transmissions:
            spec = spec_of_body.get(transmission.body)
            assert spec is not None and spec.phone == rig.index, explain
            left[spec.action_id] += 1
    assert 0 == tracker_duplicates, explain
    assert {s.action_id: 1 for s in run.actions} == {
        s.action_id: tally.out[s.intent_key] for s in run.actions
    }, explain
    assert ACTIONS + doubled == sum(left.values()), explain
    # both send paths ran: the framework's where the jar proves the code, the app's elsewhere
    paths = Counter((o.send.path, o.phone in APP_PATH_PHONES) for o in outcomes if o.out)
    assert paths[("framework", False)] >= 1 and paths[("app", True)] >= 1, f"{paths}\n{explain}"
    assert [] == [line for rig in run.rigs for line in rig.unrecorded_framework_sends()], explain
    assert {s.action_id: Status.SUCCEEDED for s in run.actions} == statuses, explain

    # no lost receipts: every row the phones wrote for an action is an attempt's confirmed
    # row or a recorded duplicate, and every send script that ran was an attempt's
    claimed = {
        (a["device"], a["provider_object_id"]): "attempt"
        for a in attempts.values()
        if a["provider_object_id"] is not None
    }
    for row in duplicates:
        key = (row["device"], row["provider_object_id"])
        assert key not in claimed, explain
        claimed[key] = "duplicate"
    assert doubled == len(duplicates), explain
    for rig in run.rigs:
        for row in rig.phone.store.rows(types=[2]):
            if row._id > rig.seed_max_sms:
                assert (rig.serial, row._id) in claimed, f"row {row._id} of {rig.serial}\n{explain}"
        assert set() == fence_dispatch_ids(rig) - set(attempts), explain
    for outcome in outcomes:
        assert outcome.intent is not None, explain
    for row in duplicates:
        assert attempts[row["dispatch_id"]]["delivery"] == "CONFIRMED", explain
        assert serial_index[row["device"]] == serial_index[attempts[row["dispatch_id"]]["device"]]

    # the ledger's invariants
    leases = Counter(
        a["device"]
        for a in attempts.values()
        if a["delivery"] == "PENDING"
        and (a["review_reason"] or "") not in {r.value for r in LEASE_RELEASING_REVIEWS}
    )
    assert all(count <= 1 for count in leases.values()), explain
    assert [] == history_problems(attempts, history), explain
    assert [] == attempt_order_problems(attempts, history), explain
