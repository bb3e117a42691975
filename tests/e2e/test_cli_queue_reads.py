"""Issue 26: `status` and `list` show the queue and where each action went, from any host;
`devices` shows which worker holds which phone, with its heartbeat. The state is made with the
ledger's own API (``enqueue``, ``hold_phones``, ``claim_next``, ``release``), on both
backends, and read back through the CLI."""

from __future__ import annotations

import json
import socket
from datetime import timedelta

import pytest

from starebrain_actions import Ledger, RetryPolicy, SmsIntent, fail_delivery
from starebrain_actions.cli.options import DEVICE_ENV
from starebrain_actions.core.policy import Policy
from starebrain_actions.ledger.queue import STALE_AFTER, PhoneWorker
from tests.e2e.conftest import BODY, RECIPIENT, RunCli, Target, json_of
from tests.e2e.test_cli_devices import documented_fields

#: The two workers: one beating, one whose heartbeat stopped (older than STALE_AFTER).
LIVE, DEAD = "host-a:101", "host-b:202"
#: Where each action of the scenario went, as `list`'s device column says it.
WHERE = {
    "q-claimed": f"claimed:{LIVE}",
    "q-wait": "queued:default",
    "q-later": "queued:default",
    "q-held": "pool:default",
    "q-spent": "phone-b",
    "plain": "-",
}


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(autouse=True)
def _no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)


@pytest.fixture
async def queued_ledger(ledger_target: Target, closed_port: int) -> dict[str, str]:
    """A ledger with a queue: in pool `default`, an action a live worker drives on
    `phone-a`, one due now, one due in an hour, one the policy gate holds for a person (it
    left the queue with no attempt); in pool `bulk`, one whose only attempt failed on
    `phone-b` (out of budget: it left the queue), whose worker's heartbeat stopped; and an
    action never queued. Returns each phone's address."""
    addresses = {"phone-a": f"127.0.0.1:{closed_port}", "phone-b": f"127.0.0.1:{free_port()}"}
    intent = SmsIntent(recipient=RECIPIENT, body=BODY)
    async with Ledger.open(ledger_target) as ledger:
        now = ledger.now()
        old = now - STALE_AFTER - timedelta(seconds=60)
        for name, worker, pool, beat, doing in (
            ("phone-a", LIVE, "default", now, "sending q-claimed"),
            ("phone-b", DEAD, "bulk", old, "reading the phone"),
        ):
            host, pid = worker.split(":")
            holder = PhoneWorker(
                device=name, worker=worker, host=host, pid=int(pid), pool=pool,
                address=addresses[name], claimed_at=beat, heartbeat_at=beat, doing=doing,
            )  # fmt: skip
            assert {} == await ledger.hold_phones(holder, [(name, addresses[name])])
        await ledger.enqueue("q-claimed", intent)
        claimed = await ledger.claim_next("default", "phone-a", LIVE)
        assert claimed is not None and "q-claimed" == claimed.action_id
        await ledger.enqueue("q-later", intent)
        later = await ledger.claim_next("default", "phone-a", LIVE)
        assert later is not None and "q-later" == later.action_id
        await ledger.release("q-later", LIVE, not_before=now + timedelta(hours=1))
        await ledger.enqueue("q-held", intent, gate=Policy(approve="always"))
        await ledger.enqueue("q-spent", intent, RetryPolicy(maximum_attempts=1), pool="bulk")
        spent = await ledger.claim_next("bulk", "phone-b", DEAD)
        assert spent is not None and "q-spent" == spent.action_id
        record = await ledger.begin_attempt("q-spent", "phone-b")
        await ledger.apply(fail_delivery(record, reason="nothing went out", now=ledger.now()))
        assert await ledger.release("q-spent", DEAD) is None
        await ledger.enqueue("q-wait", intent)
        await ledger.create_action("plain", intent)
    return addresses


def test_status_shows_the_worker_and_phone_driving_a_claimed_action(
    run_cli: RunCli, queued_ledger: dict[str, str]
) -> None:
    """A claimed action: its pool, the worker and the phone driving it, since when; its JSON
    carries `pool`, `queue_after` and `claim` in `action`; the number and body stay
    redacted."""
    result = run_cli("status", "q-claimed")
    assert 0 == result.exit_code, result.output
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    assert "default" == fields["pool"].strip()
    assert fields["queue"].strip().startswith(f"claimed by worker {LIVE} on phone phone-a since ")
    assert RECIPIENT not in result.stdout and BODY not in result.stdout
    data = json_of(run_cli("status", "q-claimed", "--json"))
    action = data["action"]
    assert "default" == action["pool"]
    assert {"worker", "device", "claimed_at"} == set(action["claim"])
    assert (LIVE, "phone-a") == (action["claim"]["worker"], action["claim"]["device"])
    assert action["claim"]["claimed_at"].endswith("Z") and action["queue_after"] is not None
    assert RECIPIENT not in json.dumps(data) and BODY not in json.dumps(data)


@pytest.mark.usefixtures("queued_ledger")
def test_status_says_when_a_worker_looks_next_or_that_it_left_the_queue(
    run_cli: RunCli,
) -> None:
    """Unclaimed: due now, due later (its `queue_after`), or out of the queue (held by the
    gate with no attempt; out of budget after its attempt failed). A never-queued action
    shows no queue at all."""

    def queue_line(action_id: str) -> str:
        result = run_cli("status", action_id)
        assert 0 == result.exit_code, result.output
        return next((line for line in result.stdout.splitlines() if line.startswith("queue:")), "")

    assert "waiting: due now" in queue_line("q-wait")
    later = json_of(run_cli("status", "q-later", "--json"))["action"]
    assert later["claim"] is None
    assert f"a worker looks at it again from {later['queue_after']}" in queue_line("q-later")
    assert "left the queue" in queue_line("q-held")
    assert "left the queue" in queue_line("q-spent")
    spent = json_of(run_cli("status", "q-spent", "--json"))["action"]
    assert ("bulk", None, None) == (spent["pool"], spent["queue_after"], spent["claim"])
    plain = run_cli("status", "plain")
    assert "" == queue_line("plain") and "pool:" not in plain.stdout
    assert (None, None, None) == tuple(
        json_of(run_cli("status", "plain", "--json"))["action"][key]
        for key in ("pool", "queue_after", "claim")
    )


@pytest.mark.usefixtures("queued_ledger")
def test_list_says_where_each_action_went_and_tallies_the_queue(run_cli: RunCli) -> None:
    """`list`'s device column: the phone of the latest attempt, else `claimed:WORKER`,
    `queued:POOL` or `pool:POOL`; a footer tallies each pool's queue. The JSON stays a bare
    array of summaries."""
    result = run_cli("list")
    assert 0 == result.exit_code, result.output
    lines = result.stdout.splitlines()
    header = lines[0].split()
    column = header.index("device")
    rows = {line.split()[0]: line.split() for line in lines[1:] if not line.startswith("queue:")}
    assert WHERE == {action_id: row[column] for action_id, row in rows.items()}
    assert (
        "queue: bulk 0 waiting, 0 later, 0 claimed; default 1 waiting, 1 later, 1 claimed"
        == lines[-1]
    )
    assert RECIPIENT not in result.stdout
    data = json_of(run_cli("list", "--json"))
    assert isinstance(data, list) and set(WHERE) == {item["action"]["action_id"] for item in data}
    assert {"q-claimed": LIVE} == {
        item["action"]["action_id"]: item["action"]["claim"]["worker"]
        for item in data
        if item["action"]["claim"] is not None
    }


@pytest.mark.usefixtures("queued_ledger")
def test_list_pool_filter(run_cli: RunCli) -> None:
    """`--pool` keeps the actions queued for that pool (its tally alone in the footer); with
    `--limit`, the limit counts the actions kept; an unknown pool lists none."""
    default = json_of(run_cli("list", "--pool", "default", "--json"))
    assert ["q-wait", "q-held", "q-later", "q-claimed"] == [
        item["action"]["action_id"] for item in default
    ]
    assert ["q-wait", "q-held"] == [
        item["action"]["action_id"]
        for item in json_of(run_cli("list", "--pool", "default", "--limit", "2", "--json"))
    ]
    bulk = run_cli("list", "--pool", "bulk")
    assert 0 == bulk.exit_code, bulk.output
    assert ["q-spent"] == [line.split()[0] for line in bulk.stdout.splitlines()[1:-1]]
    assert "queue: bulk 0 waiting, 0 later, 0 claimed" == bulk.stdout.splitlines()[-1]
    none = run_cli("list", "--pool", "nowhere")
    assert ["no actions match"] == none.stdout.splitlines()
    assert [] == json_of(run_cli("list", "--pool", "nowhere", "--json"))


def test_list_without_a_queue_has_no_footer(run_cli: RunCli, seeded_ledger: Target) -> None:
    """A ledger with no queued action: no queue line, the device column as before."""
    lines = run_cli("list").stdout.splitlines()
    assert not any(line.startswith("queue:") for line in lines)


def test_devices_shows_the_worker_holding_each_phone(
    run_cli: RunCli, queued_ledger: dict[str, str]
) -> None:
    """`devices` lists the phones workers hold (phone-a has no attempt yet), each with its
    worker, pool, heartbeat's age and what it does; a heartbeat older than STALE_AFTER is
    `STALE`. `--json`'s `worker` object has the documented fields."""
    text = run_cli("devices", "--timeout", "0.5")
    assert 1 == text.exit_code, text.output  # no phone answers: both are closed ports
    rows = {line.split()[0]: line for line in text.stdout.splitlines()[1:]}
    assert set(queued_ledger.values()) == set(rows)
    live = rows[queued_ledger["phone-a"]]
    assert f"{LIVE} [default] beat " in live and ": sending q-claimed" in live
    assert "STALE" not in live
    dead = rows[queued_ledger["phone-b"]]
    assert f"{DEAD} [bulk] STALE (beat " in dead and ": reading the phone" in dead
    data = json_of(run_cli("devices", "--timeout", "0.5", "--json"))
    by_phone = {device["phone"]: device for device in data["devices"]}
    assert {"phone-a", "phone-b"} == set(by_phone)
    for phone, worker, stale in (("phone-a", LIVE, False), ("phone-b", DEAD, True)):
        held = by_phone[phone]["worker"]
        assert documented_fields("Device worker") == set(held)
        assert (worker, stale, queued_ledger[phone]) == (
            held["worker"], held["stale"], held["address"]
        )  # fmt: skip
        assert by_phone[phone]["device"] == queued_ledger[phone]
    assert by_phone["phone-b"]["worker"]["heartbeat_age"] >= STALE_AFTER.total_seconds()
    assert 0 <= by_phone["phone-a"]["worker"]["heartbeat_age"] < STALE_AFTER.total_seconds()
    assert ("host-b", 202, "bulk") == tuple(
        by_phone["phone-b"]["worker"][key] for key in ("host", "pid", "pool")
    )


def test_devices_without_workers_says_none(
    run_cli: RunCli, seeded_ledger: Target, closed_port: int
) -> None:
    """A phone no worker holds: `-` in the `worker` column, `worker` null in JSON."""
    data = json_of(run_cli("devices", "--timeout", "0.5", "--json"))
    assert data["devices"] and all(device["worker"] is None for device in data["devices"])
    text = run_cli("devices", "--timeout", "0.5")
    header = text.stdout.splitlines()[0].split()
    assert "worker" == header[-2]
