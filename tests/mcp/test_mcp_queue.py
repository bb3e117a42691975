"""``send_sms`` with a ``pool`` (issue 26): the action is queued in the ledger for the workers
beside that pool's phones, reaching no phone, and the call returns at once with its id, its
status and its pool; the server's policy gate judges it then. Through the SDK's client, on a
server in this process (SQLite and PostgreSQL) and, for ``--clients``, a real HTTP server."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from starebrain_actions import Ledger
from starebrain_actions.core.model import DeliveryState, Status
from starebrain_actions.core.policy import Policy
from starebrain_actions.ledger.store import summarize
from starebrain_actions.mcp.results import next_step

from .conftest import (
    BODY,
    TO,
    client_on,
    error_text,
    http_client,
    http_server,
    server_args,
    sms_out,
    structured,
)
from .test_mcp_results import NOW, _action, _record

PhoneFactory = Callable[..., Any]

#: The gate of the tests where the gate lets the action go.
ALLOW = Policy(approve="never")


def queue_call(action_id: str = "Q-1", pool: str = "office", **more: Any) -> dict[str, Any]:
    return {"action_id": action_id, "to": TO, "body": BODY, "pool": pool, **more}


async def test_a_queued_action_is_planned_for_its_pool_and_no_phone_is_touched(
    target: Path | str, phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """The call returns at once with PLANNED, the pool, no attempt and no verdict; the ledger
    holds the action for the pool, due for a worker; the server's phone ran no command and
    sent nothing, and the ledger never met it. Repeating the call (with or without the pool)
    answers with the same action and queues nothing more; sms_status shows the pool."""
    phone = await phone_factory()
    async with client_on(
        target, adb_key_path, [phone.serial], gate=ALLOW, pools=("office",)
    ) as client:
        started = time.monotonic()
        queued = structured(await client.call_tool("send_sms", queue_call(wait_seconds=30)))
        took = time.monotonic() - started
        again = structured(await client.call_tool("send_sms", queue_call()))
        plain = structured(await client.call_tool("send_sms", {**queue_call(), "pool": None}))
        status = structured(await client.call_tool("sms_status", {"action_id": "Q-1"}))
    assert took < 5, took
    for result in (queued, again, plain, status):
        assert ("Q-1", "PLANNED", "office", 0) == (
            result["action_id"],
            result["status"],
            result["pool"],
            result["attempts"],
        ), result
        assert (None, None, None) == (result["policy"], result["claim"], result["latest"])
    assert queued["next_step"].startswith("Queued for pool 'office': nothing has been sent yet")
    assert "sms_status with action_id 'Q-1'" in queued["next_step"]
    assert ([], []) == (phone.commands_run, sms_out(phone))
    async with Ledger.open(target) as ledger:
        summary = await ledger.summary("Q-1")
        assert ("office", Status.PLANNED, []) == (
            summary.action.pool,
            summary.status,
            list(summary.attempts),
        )
        assert [] == list(await ledger.phones())
        tally = await ledger.queue_tally(now=ledger.now() + timedelta(seconds=1))
    assert {"office": {"total": 1, "waiting": 1, "later": 0, "claimed": 0}} == tally


async def test_a_claimed_action_shows_its_worker_and_phone(
    target: Path | str, adb_key_path: Path
) -> None:
    """Once a worker claims it, sms_status (and a repeated send_sms) name the worker and the
    phone it took the action for; no phone of the server is needed (a closed port)."""
    async with client_on(
        target, adb_key_path, ["127.0.0.1:9"], gate=ALLOW, pools=("office",)
    ) as client:
        structured(await client.call_tool("send_sms", queue_call()))
        async with Ledger.open(target) as ledger:
            claimed = await ledger.claim_next(
                "office", "phone-key-1", "worker-host:4242", now=ledger.now() + timedelta(seconds=1)
            )
        assert claimed is not None and "Q-1" == claimed.action_id
        status = structured(await client.call_tool("sms_status", {"action_id": "Q-1"}))
        again = structured(await client.call_tool("send_sms", queue_call()))
    for result in (status, again):
        assert "PLANNED" == result["status"]
        claim = result["claim"]
        assert ("worker-host:4242", "phone-key-1") == (claim["worker"], claim["device"]), claim
        assert "taken by worker worker-host:4242 for phone phone-key-1" in result["next_step"]


@pytest.mark.parametrize(
    ("gate", "verdict", "rule", "words"),
    [
        (Policy(approve="new"), "HOLD", "recipients.approve", "starebrain approve Q-1"),
        (
            Policy(approve="never", deny=("+1202*",)),
            "DENY",
            "recipients.deny",
            "never sent, by any path",
        ),
    ],
)
async def test_the_servers_gate_judges_a_queued_action_and_its_verdict_is_kept(
    target: Path | str, adb_key_path: Path, gate: Policy, verdict: str, rule: str, words: str
) -> None:
    """The server's gate (approval "new" by default) holds the first SMS to a number, or a
    deny rule denies it: the call returns PLANNED (DENIED for a DENY, which is final) with
    the verdict, the ledger keeps it, and the action is out of the queue (no worker looks at
    it until a person rules)."""
    async with client_on(
        target, adb_key_path, ["127.0.0.1:9"], gate=gate, pools=("office",)
    ) as client:
        queued = structured(await client.call_tool("send_sms", queue_call()))
        again = structured(await client.call_tool("send_sms", queue_call()))
        status = structured(await client.call_tool("sms_status", {"action_id": "Q-1"}))
    status_word = "DENIED" if verdict == "DENY" else "PLANNED"
    for result in (queued, again, status):
        assert (status_word, "office", verdict, rule) == (
            result["status"],
            result["pool"],
            result["policy"]["verdict"],
            result["policy"]["rule"],
        ), result
        assert words in result["next_step"], result["next_step"]
    if verdict == "HOLD":
        assert "Once approved, a worker of pool 'office' sends it" in queued["next_step"]
    async with Ledger.open(target) as ledger:
        summary = await ledger.summary("Q-1")
        assert verdict == (summary.action.gate or {}).get("verdict")
        assert [] == list(summary.attempts)
        tally = await ledger.queue_tally(now=ledger.now() + timedelta(hours=1))
        assert None is await ledger.claim_next(
            "office", "phone-key-1", "worker-host:1", now=ledger.now() + timedelta(hours=1)
        )
    assert {"office": {"total": 1, "waiting": 0, "later": 0, "claimed": 0}} == tally


async def test_a_pool_the_server_does_not_name_or_a_bad_one_is_refused_and_nothing_written(
    target: Path | str, adb_key_path: Path
) -> None:
    """A pool not among the server's --pool, a malformed name, pool with device, another
    text under a queued id: each a tool error that says nothing was queued, and the ledger
    holds only the one action queued properly. A server with no pool queues nothing."""
    async with client_on(
        target, adb_key_path, ["127.0.0.1:9"], gate=ALLOW, pools=("office", "lab")
    ) as client:
        unknown = error_text(await client.call_tool("send_sms", queue_call(pool="nowhere")))
        spaced = error_text(await client.call_tool("send_sms", queue_call(pool="two words")))
        both = error_text(await client.call_tool("send_sms", queue_call(device="127.0.0.1:9")))
        structured(await client.call_tool("send_sms", queue_call(action_id="Q-2", pool="lab")))
        changed = error_text(
            await client.call_tool("send_sms", {**queue_call("Q-2", pool="lab"), "body": "other"})
        )
    assert "unknown pool 'nowhere', nothing queued: the pools it may queue for are office, lab" in (
        unknown
    )
    assert "bad input, nothing queued" in spaced and "no spaces" in spaced
    assert "give device or pool, not both" in both
    assert "changed intent, nothing sent" in changed
    async with client_on(target, adb_key_path, ["127.0.0.1:9"], gate=ALLOW) as client:
        none = error_text(await client.call_tool("send_sms", queue_call()))
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert "this server queues for no pool (start it with --pool NAME" in none
    assert "pool" in tools["send_sms"].input_schema["properties"]
    async with Ledger.open(target) as ledger:
        assert {"Q-2"} == {summary.action.action_id for summary in await ledger.summaries()}


async def test_queued_actions_count_in_the_hourly_send_cap(
    target: Path | str, adb_key_path: Path
) -> None:
    """With --max-sends-per-hour 2, two actions queue and the third is refused (nothing
    written); a repeat of a queued one still answers with its status."""
    async with client_on(
        target,
        adb_key_path,
        ["127.0.0.1:9"],
        gate=ALLOW,
        pools=("office",),
        max_sends_per_hour=2,
    ) as client:
        for action_id in ("Q-1", "Q-2"):
            structured(await client.call_tool("send_sms", queue_call(action_id)))
        refused = error_text(await client.call_tool("send_sms", queue_call("Q-3")))
        repeat = structured(await client.call_tool("send_sms", queue_call("Q-1")))
    assert "send limit reached: 2 send(s) started on this server's phones or queued" in refused
    assert "no send was started for action Q-3" in refused and "Nothing was queued" in refused
    assert ("PLANNED", "office") == (repeat["status"], repeat["pool"])
    async with Ledger.open(target) as ledger:
        ids = {summary.action.action_id for summary in await ledger.summaries()}
    assert {"Q-1", "Q-2"} == ids


#: The tokens of the clients of ``clients_file``.
ALICE, BOB = "alice-" + "a" * 40, "bob-" + "b" * 40


@pytest.mark.slow
async def test_a_client_queues_only_for_the_pools_its_table_names(
    tmp_path: Path, db_path: Path, adb_key_path: Path, phone_factory: PhoneFactory
) -> None:
    """``starebrain mcp --http --clients FILE --pool office --pool lab``: alice (pools =
    ["office"]) queues Q-1 for office, kept as alice/Q-1 and shown to her as Q-1, but not for
    lab; bob (no pools) may queue for none; bob's Q-1 is not alice's. No phone is touched."""
    phone = await phone_factory()
    clients = tmp_path / "clients.toml"
    clients.write_text(
        f'[clients.alice]\ntoken = "{ALICE}"\npools = ["office"]\n\n'
        f'[clients.bob]\ntoken = "{BOB}"\n'
    )
    clients.chmod(0o600)
    args = server_args(
        db_path,
        adb_key_path,
        [phone],
        "--clients",
        str(clients),
        "--pool",
        "office",
        "--pool",
        "lab",
    )
    async with (
        http_server(args) as (url, _process),
        http_client(url, token=ALICE) as as_alice,
        http_client(url, token=BOB) as as_bob,
    ):
        queued = structured(await as_alice.call_tool("send_sms", queue_call()))
        lab = error_text(await as_alice.call_tool("send_sms", queue_call("Q-2", pool="lab")))
        bob = error_text(await as_bob.call_tool("send_sms", queue_call()))
        bob_reads = error_text(await as_bob.call_tool("sms_status", {"action_id": "Q-1"}))
        alice_reads = structured(await as_alice.call_tool("sms_status", {"action_id": "Q-1"}))
    for result in (queued, alice_reads):
        assert ("Q-1", "PLANNED", "office") == (
            result["action_id"],
            result["status"],
            result["pool"],
        )
    assert "unknown pool 'lab', nothing queued: the pools it may queue for are office" in lab
    assert "this client may queue for no pool" in bob
    assert "no action 'Q-1'" in bob_reads
    assert ([], []) == (phone.commands_run, sms_out(phone))
    async with Ledger.open(db_path) as ledger:
        ids = {summary.action.action_id for summary in await ledger.summaries()}
        assert "office" == (await ledger.summary("alice/Q-1")).action.pool
    assert {"alice/Q-1"} == ids


def test_a_queued_actions_next_steps_leave_the_sending_to_its_workers() -> None:
    """A queued action that failed, or is in quiet hours, is its workers' to retry: the
    step says so and points to sms_status, never to another send_sms."""
    queued = attrs.evolve(_action(), pool="office")
    failed = _record(timedelta(hours=1), delivery=DeliveryState.FAILED, failed_at=NOW)
    step = next_step(summarize(queued, [failed], NOW), now=NOW)
    assert "A worker of pool 'office' retries it from 2026-11-29T12:00:" in step, step
    assert "on its own; call sms_status with action_id 'A-17' to follow it" in step, step
    assert "send_sms again" not in step
    until = "2026-11-30T07:00:00.000000Z"
    gate = {"verdict": "WAIT", "rule": "limits.quiet_hours", "detail": "quiet", "until": until}
    step = next_step(summarize(attrs.evolve(queued, gate=gate), [], NOW), now=NOW)
    assert f"A worker of pool 'office' sends it after {until}" in step, step
    assert "send_sms again" not in step


def test_a_clients_pools_are_checked_when_the_clients_file_is_read(tmp_path: Path) -> None:
    """pools = [...] is a list of pool names; a client without it may queue for none, the
    server's own token for every pool of the server's."""
    from starebrain_actions.mcp.auth import UNSCOPED, McpAuthError, load_clients

    path = tmp_path / "clients.toml"
    for pools, wrong in (('"office"', "is a list of pool names"), ('["a b"]', "no spaces")):
        path.write_text(f'[clients.alice]\ntoken = "{ALICE}"\npools = {pools}\n')
        path.chmod(0o600)
        with pytest.raises(McpAuthError, match=wrong):
            load_clients(path)
    path.write_text(
        f'[clients.alice]\ntoken = "{ALICE}"\npools = ["office"]\n\n'
        f'[clients.bob]\ntoken = "{BOB}"\n'
    )
    clients = load_clients(path)
    alice, bob = clients.scope_of("alice"), clients.scope_of("bob")
    server = ("office", "lab")
    assert (("office",), (), server) == tuple(
        scope.queue_pools(server) for scope in (alice, bob, UNSCOPED)
    )
    assert not alice.may_queue("office", ())
