"""The tools over a ledger in known states, through the SDK's client in-process: what each
status tells the model, the tool list, review, rulings and refusals that need no phone."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from mcp.client import Client

from starebrain_actions import Ledger, RetryPolicy, SmsIntent
from starebrain_actions.core.derived_ids import derive_action_id
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    DeliveryState,
    ReviewReason,
    Status,
)
from starebrain_actions.ledger.store import summarize
from starebrain_actions.mcp.config import ServerConfig
from starebrain_actions.mcp.results import next_step, sms_result
from starebrain_actions.mcp.server import build_server
from starebrain_actions.mcp.service import open_service
from tests.e2e.conftest import BODY, RECIPIENT, SEEDED, seed_ledger

from .conftest import error_text, structured

#: Where the seeded ledger's settled attempts were sent (never connected to).
SEEDED_DEVICE = "10.0.0.1:5555"

OpenClient = Callable[..., Any]


@pytest.fixture
async def seeded(tmp_path: Path, closed_port: int) -> Path:
    """A ledger with one action per state of ``SEEDED``; the in-flight one is on a closed port."""
    path = tmp_path / "ledger.db"
    await seed_ledger(path, waiting_device=f"127.0.0.1:{closed_port}")
    return path


@pytest.fixture
def closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def client_for(seeded: Path, closed_port: int) -> OpenClient:
    """``async with client_for(**config) as client``: the SDK's client on a server (in this
    process) over the seeded ledger, whose only phone is a closed loopback port unless told."""

    @asynccontextmanager
    async def open_client(**overrides: Any) -> AsyncIterator[Client]:
        overrides.setdefault("devices", (f"127.0.0.1:{closed_port}",))
        overrides.setdefault("connect_timeout_s", 0.5)
        config = ServerConfig(db=seeded, **overrides)
        async with open_service(config) as service, Client(build_server(service)) as client:
            yield client

    return open_client


async def test_each_status_tells_the_model_what_it_means_and_what_to_do(
    client_for: OpenClient,
) -> None:
    """sms_status of every seeded state: the status, both axes, review reasons, the id
    repeated and a next_step that never suggests resending under a new id."""
    expected_step = {
        "ok-1": "Done",
        "ok-dup": "a person must look (DUPLICATE)",
        "bad-text": "no resend is allowed",
        "spent": "Nothing went out, and a person must decide (BUDGET_EXHAUSTED)",
        "waiting": "the SMS may have gone out",
        "planned": "Nothing has been sent yet",
    }
    async with client_for() as client:
        for action_id, status in SEEDED.items():
            data = structured(await client.call_tool("sms_status", {"action_id": action_id}))
            assert (action_id, status) == (data["action_id"], data["status"])
            assert expected_step[action_id] in data["next_step"], data["next_step"]
            assert not data["action_id_derived"]
            assert data["record"] is None
            step = data["next_step"].lower()
            assert "new action_id" not in step or "do not" in step or "never" in step
    async with client_for() as client:
        spent = structured(await client.call_tool("sms_status", {"action_id": "spent"}))
        waiting = structured(await client.call_tool("sms_status", {"action_id": "waiting"}))
        planned = structured(await client.call_tool("sms_status", {"action_id": "planned"}))
    assert ("FAILED", "PENDING", ["BUDGET_EXHAUSTED"], True, 1, 1) == (
        spent["delivery"],
        spent["acceptance"],
        spent["review_reasons"],
        spent["settled"],
        spent["attempts"],
        spent["max_attempts"],
    )
    assert ("PENDING", "PENDING", False) == (
        waiting["delivery"],
        waiting["acceptance"],
        waiting["settled"],
    )
    assert (None, None, 0, None) == (
        planned["delivery"],
        planned["acceptance"],
        planned["attempts"],
        planned["latest"],
    )


async def test_tools_are_described_for_a_model_with_schemas(client_for: OpenClient) -> None:
    """The four tools (no resolve), JSON-schema'd arguments, structured output schemas, and
    descriptions that tell the model to reuse its action_id; reads are marked read-only."""
    async with client_for() as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert [
        "get_events",
        "get_replies",
        "list_review",
        "reconcile",
        "send_sms",
        "sms_status",
    ] == sorted(tools)
    send = tools["send_sms"]
    assert [
        "action_id",
        "to",
        "body",
        "wait_seconds",
        "device",
        "pool",
        "wait_settled",
        "not_after",
        "not_before",
    ] == list(send.input_schema["properties"])
    assert ["to", "body"] == send.input_schema["required"]
    assert "reuse exactly that action_id" in (send.description or "")
    assert "never sends a second SMS" in (send.description or "")
    assert send.output_schema is not None
    status_schema = json.dumps(send.output_schema)
    for status in Status:
        assert f'"{status.value}"' in status_schema
    for name in ("sms_status", "reconcile", "list_review"):
        assert tools[name].annotations is not None
        assert tools[name].annotations.read_only_hint is True, name
        assert tools[name].output_schema is not None, name
    assert send.annotations is not None and send.annotations.idempotent_hint is True


async def test_list_review_is_what_starebrain_review_lists(
    client_for: OpenClient, seeded: Path
) -> None:
    """list_review returns exactly the ledger's review queue, each with reasons and a step."""
    async with Ledger.open(seeded) as ledger:
        wanted = [summary.action.action_id for summary in await ledger.needing_review()]
    async with client_for() as client:
        data = structured(await client.call_tool("list_review", {}))
    assert wanted == [item["action_id"] for item in data["actions"]]
    assert len(wanted) == data["count"] >= 3
    assert all(item["needs_review"] and item["review_reasons"] for item in data["actions"])
    assert "do not resend" in data["next_step"]


async def test_resolve_is_a_tool_only_when_allowed(client_for: OpenClient, seeded: Path) -> None:
    """Without --allow-resolve there is no resolve tool (calling it is an error); with it, a
    ruling is recorded under the configured operator's name and clears the action."""
    async with client_for() as client:
        refused = await client.call_tool(
            "resolve", {"action_id": "waiting", "ruling": "not-sent", "reason": "checked"}
        )
    assert refused.is_error
    async with client_for(allow_resolve=True, operator="alice") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        data = structured(
            await client.call_tool(
                "resolve",
                {"action_id": "waiting", "ruling": "not-sent", "reason": "phone shows nothing"},
            )
        )
    assert "resolve" in names
    assert ("FAILED", "waiting") == (data["status"], data["action_id"])
    async with Ledger.open(seeded) as ledger:
        history = await ledger.history("waiting")
    assert "operator:alice" == history[-1].actor


async def test_refusals_that_need_no_phone(client_for: OpenClient) -> None:
    """A changed intent, a bad number and an unknown device are tool errors that say nothing
    was sent; a finished action is answered from the ledger without touching a phone (the
    server's only phone here is a closed port); an unknown id has no status."""
    async with client_for() as client:
        changed = await client.call_tool(
            "send_sms", {"action_id": "ok-1", "to": RECIPIENT, "body": "Your code is 9999"}
        )
        bad = await client.call_tool("send_sms", {"to": "not a number", "body": BODY})
        elsewhere = await client.call_tool(
            "send_sms", {"to": RECIPIENT, "body": BODY, "device": "10.9.9.9:5555"}
        )
        done = structured(
            await client.call_tool("send_sms", {"action_id": "ok-1", "to": RECIPIENT, "body": BODY})
        )
        unknown = await client.call_tool("sms_status", {"action_id": "never-sent"})
    assert "changed intent, nothing sent" in error_text(changed)
    assert "bad input, nothing sent" in error_text(bad)
    assert "unknown device" in error_text(elsewhere)
    assert ("SUCCEEDED", 1, True) == (done["status"], done["attempts"], done["settled"])
    assert "nothing was ever sent under that id" in error_text(unknown)


async def test_send_limit_refuses_before_recording_anything(
    client_for: OpenClient, seeded: Path
) -> None:
    """With the hour's sends used up (counted in the ledger: four attempts on the phone), a
    new action is a tool error naming the limit, before connecting, and nothing is written;
    a finished action still answers."""
    async with client_for(max_sends_per_hour=4, devices=(SEEDED_DEVICE,)) as client:
        over = await client.call_tool(
            "send_sms", {"action_id": "new-1", "to": RECIPIENT, "body": BODY}
        )
        done = structured(
            await client.call_tool("send_sms", {"action_id": "ok-1", "to": RECIPIENT, "body": BODY})
        )
    text = error_text(over)
    assert "send limit reached" in text and "--max-sends-per-hour 4" in text
    assert "Nothing was sent" in text
    assert "SUCCEEDED" == done["status"]
    async with Ledger.open(seeded) as ledger:
        assert [] == [s for s in await ledger.summaries() if s.action.action_id == "new-1"]


async def test_detailed_status_is_redacted_unless_shown(client_for: OpenClient) -> None:
    """detail=true adds the full record (as `status --json` prints it), with the number and
    the body hidden unless the server runs with --show-private."""
    async with client_for() as client:
        hidden = structured(
            await client.call_tool("sms_status", {"action_id": "ok-1", "detail": True})
        )
    async with client_for(show_private=True) as client:
        shown = structured(
            await client.call_tool("sms_status", {"action_id": "ok-1", "detail": True})
        )
    assert hidden["record"]["attempts"][0]["action_id"] == "ok-1"
    assert RECIPIENT not in json.dumps(hidden) and BODY not in json.dumps(hidden)
    assert RECIPIENT in json.dumps(shown) and BODY in json.dumps(shown)


# --------------------------------------------------------------------------- next_step (pure)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
    maximum_attempts=3,
    grace_window=timedelta(seconds=60),
)


def _action(action_id: str = "A-17") -> Action:
    intent = SmsIntent(recipient=RECIPIENT, body=BODY)
    return Action(
        action_id=action_id,
        fingerprint=intent.fingerprint,
        intent=intent,
        policy=POLICY,
        created_at=NOW - timedelta(hours=2),
    )


def _record(ago: timedelta, **fields: Any) -> ActionRecord:
    return ActionRecord(
        action_id="A-17",
        dispatch_id=f"d-{fields.pop('attempt', 1)}",
        attempt=1,
        device=SEEDED_DEVICE,
        dispatched_at=NOW - ago,
        **fields,
    )


CASES = {
    "in flight": (
        _record(timedelta(seconds=5)),
        Status.IN_FLIGHT,
        "call send_sms again with action_id 'A-17'",
    ),
    "unknown": (
        _record(timedelta(minutes=5)),
        Status.UNKNOWN,
        "Do not send it under a new action_id",
    ),
    "verifying": (
        _record(
            timedelta(seconds=5),
            delivery=DeliveryState.CONFIRMED,
            provider_object_id=9,
            confirmed_at=NOW,
        ),
        Status.VERIFYING,
        "its text is being checked",
    ),
    "failed, retry now": (
        _record(
            timedelta(hours=1), delivery=DeliveryState.FAILED, failed_at=NOW - timedelta(hours=1)
        ),
        Status.FAILED,
        "Call send_sms again with action_id 'A-17' to retry",
    ),
    "failed, backing off": (
        _record(timedelta(seconds=1), delivery=DeliveryState.FAILED, failed_at=NOW),
        Status.FAILED,
        "Call send_sms again with action_id 'A-17' from 2026-11-29T12:00:",
    ),
    "mismatch, resend allowed": (
        _record(
            timedelta(hours=1),
            delivery=DeliveryState.CONFIRMED,
            acceptance=AcceptanceState.REJECTED,
            provider_object_id=9,
            confirmed_at=NOW - timedelta(hours=1),
            rejected_at=NOW - timedelta(hours=1),
            review_reason=ReviewReason.MISMATCH,
        ),
        Status.MISMATCH,
        "to send the intended text once",
    ),
    "unverified": (
        _record(timedelta(hours=1), review_reason=ReviewReason.UNVERIFIED),
        Status.UNKNOWN,
        "Do not send it again under any action_id",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_next_step_for_states_a_seeded_ledger_does_not_hold(case: str) -> None:
    """Each unsettled state gets its own instruction, naming the action id to reuse."""
    record, status, wanted = CASES[case]
    summary = summarize(_action(), [record], NOW)
    assert status == summary.status
    step = next_step(summary, now=NOW)
    assert wanted in step, step
    result = sms_result(summary, now=NOW)
    assert (step, "A-17", False) == (result.next_step, result.action_id, result.action_id_derived)
    assert (result.retry_at is not None) == (case == "failed, backing off")


def test_a_derived_id_is_reported_as_derived() -> None:
    """An id equal to the one the CLI derives from the intent is reported as derived."""
    action = _action(derive_action_id(SmsIntent(recipient=RECIPIENT, body=BODY)))
    assert sms_result(summarize(action, [], NOW), now=NOW).action_id_derived
    assert "The send is starting" in next_step(summarize(action, [], NOW), now=NOW, sending=True)


def test_a_settling_send_says_when_it_settles_and_never_to_resend() -> None:
    """Issue 21, item 2: a confirmed row that has not settled is VERIFYING with ``settles_at``
    (the time its confirmation noted) and a next_step in its own words; the same row in
    review as UNSETTLED is a person's (no settles_at); a row the phone marked failed after
    showing it sent says nothing went out."""
    settling = _record(
        timedelta(minutes=6),
        delivery=DeliveryState.CONFIRMED,
        provider_object_id=9,
        confirmed_at=NOW - timedelta(minutes=6),
        evidence={"settles_at": "2026-11-29T12:20:00.000000Z"},
    )
    result = sms_result(summarize(_action(), [settling], NOW), now=NOW)
    assert (Status.VERIFYING, "2026-11-29T12:20:00.000000Z") == (result.status, result.settles_at)
    assert "Sent by the phone, not yet settled" in result.next_step
    assert "2026-11-29T12:20:00" in result.next_step and "do not send it again" in result.next_step
    unsettled = attrs.evolve(settling, review_reason=ReviewReason.UNSETTLED)
    review = sms_result(summarize(_action(), [unsettled], NOW), now=NOW)
    assert (None, True) == (review.settles_at, review.needs_review)
    assert "not yet settled" not in review.next_step
    assert "Do not send it again" in review.next_step
    failed = attrs.evolve(
        settling,
        acceptance=AcceptanceState.REJECTED,
        rejected_at=NOW,
        evidence={**settling.evidence, "failed_after_sent": True},
    )
    rejected = sms_result(summarize(_action(), [failed], NOW), now=NOW)
    assert (Status.MISMATCH, None) == (rejected.status, rejected.settles_at)
    assert "marked it failed" in rejected.next_step
