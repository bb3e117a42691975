"""`resolve` is safe to get wrong: undoing a success needs --force and says a resend will
follow, repeating a ruling writes nothing, another action's dispatch id is named as such. On
both backends (``seeded_ledger`` is a file, or a PostgreSQL URL)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import Result

from starebrain_actions import (
    Ledger,
    MatchVerdict,
    RetryPolicy,
    SmsIntent,
    confirm_delivery,
    try_accept,
)
from tests.e2e.conftest import BODY, RECIPIENT, RunCli, Target, history_rows, json_of

pytestmark = pytest.mark.usefixtures("seeded_ledger")


@pytest.fixture
async def succeeded_with_budget(seeded_ledger: Path) -> str:
    """An action SUCCEEDED on its first of three attempts."""
    async with Ledger.open(seeded_ledger) as ledger:
        await ledger.create_action(
            "ok-3",
            SmsIntent(recipient=RECIPIENT, body=BODY),
            RetryPolicy(
                settle_after=timedelta(milliseconds=300),
                framework_settle_after=timedelta(milliseconds=200),
                maximum_attempts=3,
            ),
        )
        record = await ledger.begin_attempt("ok-3", "10.0.0.1:5555")
        confirm = confirm_delivery(record, provider_object_id=300, now=ledger.now())
        await ledger.apply(confirm)
        await ledger.apply(try_accept(confirm.after, MatchVerdict(matched=True), now=ledger.now()))
    return "ok-3"


def rule(run_cli: RunCli, action_id: str, ruling: str, *extra: str) -> Result:
    """`resolve ACTION_ID --as RULING --reason checked --operator alice EXTRA...`."""
    return run_cli(
        "resolve", action_id, "--as", ruling, "--reason", "checked", "--operator", "alice", *extra
    )


def test_undoing_a_success_needs_force_and_says_a_resend_follows(
    run_cli: RunCli, seeded_ledger: Target, succeeded_with_budget: str
) -> None:
    """Ruling a SUCCEEDED action not sent is refused without --force (exit 2, nothing
    written), saying the SMS would be sent again; with --force it is recorded and says a
    resend will follow."""
    action_id = succeeded_with_budget
    before = history_rows(seeded_ledger)
    refused = rule(run_cli, action_id, "not-sent")
    assert 2 == refused.exit_code, refused.output
    assert "needs force" in refused.stderr and "sends the SMS again" in refused.stderr
    assert before == history_rows(seeded_ledger)
    assert "SUCCEEDED" == json_of(run_cli("status", action_id, "--json"))["status"]
    forced = rule(run_cli, action_id, "not-sent", "--force")
    assert 0 == forced.exit_code, forced.output
    assert f"resolved {action_id} as not-sent by alice: now FAILED" in forced.stdout
    assert "a resend will follow" in forced.stdout
    assert before + 1 == history_rows(seeded_ledger)


def test_forced_not_sent_json_says_a_resend_will_follow(
    run_cli: RunCli, succeeded_with_budget: str
) -> None:
    """With --json the forced ruling reports `changed` and `resend_will_follow`."""
    result = rule(run_cli, succeeded_with_budget, "not-sent", "--force", "--json")
    assert 0 == result.exit_code, result.output
    data = json_of(result)
    assert (True, True, "FAILED") == (data["changed"], data["resend_will_follow"], data["status"])


def test_no_resend_when_the_budget_is_spent(run_cli: RunCli) -> None:
    """Undoing a success of an action with no attempt left says no resend follows."""
    result = rule(run_cli, "ok-1", "not-sent", "--force")
    assert 0 == result.exit_code, result.output
    assert "no resend will follow (budget_exhausted)" in result.stdout.lower()
    assert "a resend will follow" not in result.stdout
    as_json = rule(run_cli, "spent", "not-sent", "--json")
    assert False is json_of(as_json)["resend_will_follow"]


@pytest.mark.parametrize(
    ("action_id", "ruling"), [("waiting", "not-sent"), ("waiting", "sent"), ("ok-dup", "sent")]
)
def test_repeating_a_ruling_writes_nothing(
    run_cli: RunCli, seeded_ledger: Target, action_id: str, ruling: str
) -> None:
    """The same ruling twice: the second exits 0, says it is already ruled, and writes
    nothing (no history row, same version), in text and in JSON."""
    first = rule(run_cli, action_id, ruling)
    assert 0 == first.exit_code, first.output
    rows = history_rows(seeded_ledger)
    version = json_of(run_cli("status", action_id, "--json"))["latest"]["version"]
    again = rule(run_cli, action_id, ruling)
    assert 0 == again.exit_code, again.output
    assert f"is already ruled {ruling} by alice: nothing written" in again.stdout
    as_json = rule(run_cli, action_id, ruling, "--json")
    assert False is json_of(as_json)["changed"]
    assert rows == history_rows(seeded_ledger)
    assert version == json_of(run_cli("status", action_id, "--json"))["latest"]["version"]


def test_a_changed_ruling_is_not_a_repeat(run_cli: RunCli, seeded_ledger: Target) -> None:
    """Sent, then not-sent (forced): the second ruling is written."""
    assert 0 == rule(run_cli, "waiting", "sent").exit_code
    rows = history_rows(seeded_ledger)
    changed = rule(run_cli, "waiting", "not-sent", "--force")
    assert 0 == changed.exit_code, changed.output
    assert "resolved waiting as not-sent" in changed.stdout
    assert rows + 1 == history_rows(seeded_ledger)


def test_a_repeat_naming_another_row_is_refused(run_cli: RunCli) -> None:
    """A sent ruling naming another provider row than the one recorded is not a repeat: it
    is refused (exit 2)."""
    assert 0 == rule(run_cli, "waiting", "sent", "--row", "41").exit_code
    same = rule(run_cli, "waiting", "sent", "--row", "41")
    assert 0 == same.exit_code and "already ruled" in same.stdout
    other = rule(run_cli, "waiting", "sent", "--row", "42")
    assert 2 == other.exit_code, other.output
    assert "another provider row" in other.stderr


def test_a_dispatch_id_of_another_action_is_named(run_cli: RunCli, seeded_ledger: Target) -> None:
    """`--dispatch-id` of another action's attempt: exit 1, naming the action it belongs to;
    an unknown one lists the action's attempts; nothing is written."""
    other = json_of(run_cli("status", "ok-1", "--json"))["latest"]["dispatch_id"]
    own = json_of(run_cli("status", "waiting", "--json"))["latest"]["dispatch_id"]
    rows = history_rows(seeded_ledger)
    wrong = rule(run_cli, "waiting", "not-sent", "--dispatch-id", other)
    assert 1 == wrong.exit_code, wrong.output
    assert f"dispatch id {other} is attempt 1 of action ok-1, not of action waiting" in (
        wrong.stderr
    )
    unknown = rule(run_cli, "waiting", "not-sent", "--dispatch-id", "no-such-dispatch")
    assert 1 == unknown.exit_code, unknown.output
    assert "action waiting has no attempt with dispatch id no-such-dispatch" in unknown.stderr
    assert own in unknown.stderr
    assert rows == history_rows(seeded_ledger)
    right = rule(run_cli, "waiting", "not-sent", "--dispatch-id", own)
    assert 0 == right.exit_code, right.output
