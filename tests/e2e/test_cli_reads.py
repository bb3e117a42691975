"""The read commands (status, list, history, review) and resolve, on real ledger files."""

from __future__ import annotations

import asyncio
import io
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from starebrain_actions import ActionSummary, Ledger, confirm_delivery
from starebrain_actions.cli.main import main
from starebrain_actions.render.output import Output
from starebrain_actions.render.records import render_list
from tests.e2e.conftest import BODY, RECIPIENT, SEEDED, RunCli, history_rows, json_of

pytestmark = pytest.mark.usefixtures("seeded_ledger")


def test_status_text(run_cli: RunCli) -> None:
    """`status` prints the status, the attempts' two axes, and redacts the number and body."""
    result = run_cli("status", "bad-text")
    assert 0 == result.exit_code, result.output
    assert "MISMATCH" in result.stdout
    assert "CONFIRMED" in result.stdout and "REJECTED" in result.stdout
    assert "+1•••••0100" in result.stdout
    assert RECIPIENT not in result.stdout
    assert BODY not in result.stdout
    assert f"<{len(BODY)} chars sha256:" in result.stdout


def test_status_show_private(run_cli: RunCli) -> None:
    """`status --show-private` shows the operator the real number and body."""
    result = run_cli("status", "ok-1", "--show-private")
    assert 0 == result.exit_code, result.output
    assert RECIPIENT in result.stdout
    assert BODY in result.stdout


def test_status_json(run_cli: RunCli) -> None:
    """`status --json` is the converter's record, redacted, with the duplicate rows."""
    result = run_cli("status", "ok-dup", "--json")
    assert 0 == result.exit_code, result.output
    data = json_of(result)
    assert "SUCCEEDED" == data["status"]
    assert ["DUPLICATE"] == data["review_reasons"]
    assert data["needs_review"] is True
    assert 1 == data["duplicates"]
    assert 99 == data["duplicate_rows"][0]["provider_object_id"]
    assert RECIPIENT not in result.stdout and BODY not in result.stdout
    assert "CONFIRMED" == data["latest"]["delivery"]
    assert "ACCEPTED" == data["latest"]["acceptance"]


def test_status_json_show_private(run_cli: RunCli) -> None:
    """`status --json --show-private` keeps the intent as stored."""
    data = json_of(run_cli("status", "ok-1", "--json", "--show-private"))
    assert RECIPIENT == data["action"]["intent"]["recipient"]
    assert BODY == data["action"]["intent"]["body"]


def test_status_unknown_action(run_cli: RunCli) -> None:
    """An unknown action id is a clear error naming it, exit 1."""
    result = run_cli("status", "no-such-action")
    assert 1 == result.exit_code
    assert "no-such-action" in result.stderr


def test_list_text_and_json(run_cli: RunCli) -> None:
    """`list` shows every action with its derived status, in text and in JSON."""
    text = run_cli("list")
    assert 0 == text.exit_code, text.output
    for action_id, status in SEEDED.items():
        line = next(line for line in text.stdout.splitlines() if line.startswith(action_id + " "))
        assert status in line
    data = json_of(run_cli("list", "--json"))
    assert SEEDED == {item["action"]["action_id"]: item["status"] for item in data}


def test_list_filters(run_cli: RunCli, closed_port: int) -> None:
    """`list --status` (any case), `--device` and `--limit` narrow the list."""
    by_status = json_of(run_cli("list", "--status", "mismatch", "--json"))
    assert ["bad-text"] == [item["action"]["action_id"] for item in by_status]
    by_device = json_of(run_cli("list", "--device", f"127.0.0.1:{closed_port}", "--json"))
    assert ["waiting"] == [item["action"]["action_id"] for item in by_device]
    assert 2 == len(json_of(run_cli("list", "--limit", "2", "--json")))
    assert "no actions match" in run_cli("list", "--device", "10.9.9.9:5555").stdout


def test_list_bad_status_lists_valid_ones(run_cli: RunCli) -> None:
    """A status name that does not exist is a usage error (exit 2) listing the valid ones."""
    result = run_cli("list", "--status", "DONE")
    assert 2 == result.exit_code
    assert "succeeded" in result.stderr.lower() and "unknown" in result.stderr.lower()


def test_history_text_and_json(run_cli: RunCli) -> None:
    """`history` lists every transition with time, actor and evidence, in text and JSON."""
    text = run_cli("history", "bad-text")
    assert 0 == text.exit_code, text.output
    for event in ("created", "confirm", "reject"):
        assert event in text.stdout
    assert "PENDING->CONFIRMED" in text.stdout
    assert "reconciler" in text.stdout
    assert "Your cod 4821" not in text.stdout  # evidence bodies are redacted too
    data = json_of(run_cli("history", "bad-text", "--json"))
    assert ["created", "confirm", "reject"] == [entry["event"] for entry in data]
    assert all(entry["at"].endswith("Z") for entry in data)
    assert "Your cod 4821" not in str(data)
    private = json_of(run_cli("history", "bad-text", "--json", "--show-private"))
    assert "Your cod 4821" == private[-1]["evidence"]["body"]


def test_history_unknown_action(run_cli: RunCli) -> None:
    """`history` of an unknown action is a clear error, exit 1."""
    result = run_cli("history", "nope")
    assert 1 == result.exit_code
    assert "nope" in result.stderr


def test_review_text_and_json(run_cli: RunCli) -> None:
    """`review` lists the actions that need a person, with their reasons, then the phones
    held by an unresolved attempt; its JSON lists the holder too, with `holds_phone`."""
    text = run_cli("review")
    assert 0 == text.exit_code, text.output
    needing, _, held = text.stdout.partition("phones held by an unresolved attempt")
    assert "ok-dup" in needing and "DUPLICATE" in needing
    assert "bad-text" in needing and "MISMATCH" in needing
    assert "spent" in needing and "BUDGET_EXHAUSTED" in needing
    assert "ok-1 " not in text.stdout
    assert "waiting " not in needing and "waiting " in held
    data = json_of(run_cli("review", "--json"))
    reasons = {item["action"]["action_id"]: item["review_reasons"] for item in data}
    assert {
        "ok-dup": ["DUPLICATE"],
        "bad-text": ["MISMATCH", "BUDGET_EXHAUSTED"],
        "spent": ["BUDGET_EXHAUSTED"],
        "waiting": [],
    } == reasons
    holds = {item["action"]["action_id"]: item["holds_phone"] for item in data}
    assert ["waiting"] == [action for action, hold in holds.items() if hold is not None]
    assert data[-1]["latest"]["dispatch_id"] == holds["waiting"]["dispatch_id"]


def test_resolve_is_recorded_in_history(run_cli: RunCli) -> None:
    """`resolve --as not-sent` settles the action, clears review and is kept in history."""
    result = run_cli(
        "resolve",
        "ok-dup",
        "--as",
        "sent",
        "--reason",
        "customer got two, apologised",
        "--operator",
        "alice",
    )
    assert 0 == result.exit_code, result.output
    assert "resolved ok-dup as sent by alice" in result.stdout
    history = json_of(run_cli("history", "ok-dup", "--json"))
    last = history[-1]
    assert "resolve_sent" == last["event"]
    assert "operator:alice" == last["actor"]
    assert "customer got two, apologised" == last["evidence"]["reason"]
    review = json_of(run_cli("review", "--json"))
    assert "ok-dup" not in [item["action"]["action_id"] for item in review]


def test_resolve_operator_defaults_to_user(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without `--operator` the resolution is signed with $USER."""
    monkeypatch.setenv("USER", "bob")
    result = run_cli("resolve", "waiting", "--as", "not-sent", "--reason", "phone was off")
    assert 0 == result.exit_code, result.output
    data = json_of(run_cli("status", "waiting", "--json"))
    assert "FAILED" == data["status"]
    assert "bob" == data["latest"]["resolved_by"]
    assert "operator:bob" == json_of(run_cli("history", "waiting", "--json"))[-1]["actor"]


def test_resolve_errors(run_cli: RunCli) -> None:
    """Resolving an unknown action, one without attempts, or with a bad ruling fails clearly."""
    unknown = run_cli("resolve", "ghost", "--as", "sent", "--reason", "x")
    assert 1 == unknown.exit_code and "ghost" in unknown.stderr
    empty = run_cli("resolve", "planned", "--as", "sent", "--reason", "x")
    assert 1 == empty.exit_code and "no attempt" in empty.stderr
    bad = run_cli("resolve", "ok-1", "--as", "maybe", "--reason", "x")
    assert 2 == bad.exit_code


def test_missing_ledger_is_not_created(tmp_path: Path, run_cli: RunCli) -> None:
    """Read commands refuse a ledger that does not exist instead of creating one."""
    missing = tmp_path / "elsewhere" / "none.db"
    for args in (["list"], ["status", "x"], ["review"], ["history", "x"]):
        result = run_cli(*args, db=missing)
        assert 1 == result.exit_code
        assert str(missing) in result.stderr
    assert not missing.exists()


def test_unreadable_ledger(tmp_path: Path, run_cli: RunCli) -> None:
    """A file that is not a ledger is named in a clear error, exit 1."""
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    result = run_cli("list", db=junk)
    assert 1 == result.exit_code
    assert "cannot use the ledger" in result.stderr and str(junk) in result.stderr


def test_default_db_from_environment(
    tmp_path: Path, seeded_ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`STAREBRAIN_DB` names the ledger; without it the XDG data dir is used, not created."""
    monkeypatch.setenv("STAREBRAIN_DB", str(seeded_ledger))
    assert 0 == CliRunner().invoke(main, ["status", "ok-1"]).exit_code
    monkeypatch.delenv("STAREBRAIN_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    result = CliRunner().invoke(main, ["list"])
    assert 1 == result.exit_code
    assert str(tmp_path / "xdg" / "starebrain" / "ledger.db") in result.stderr
    assert not (tmp_path / "xdg").exists()


def test_rich_tables_on_a_tty(seeded_ledger: Path) -> None:
    """On a TTY the same data is laid out by rich for the terminal's width, without a box:
    wide enough, one line per row as in piped output; narrower, rows span bands, every
    value still whole."""

    async def load() -> tuple[list[ActionSummary], datetime]:
        async with Ledger.open(seeded_ledger) as ledger:
            return await ledger.summaries(), ledger.now()

    summaries, now = asyncio.run(load())
    wide, narrow = io.StringIO(), io.StringIO()
    render_list(Output(rich=True, stream=wide, width=120), summaries, now=now, show_private=False)
    render_list(Output(rich=True, stream=narrow, width=60), summaries, now=now, show_private=False)
    for text in (wide.getvalue(), narrow.getvalue()):
        assert "│" not in text and "┃" not in text
        assert "bad-text" in text and "MISMATCH" in text
        assert RECIPIENT not in text
    assert 1 + len(SEEDED) == len(wide.getvalue().splitlines())
    assert all(len(line) <= 60 for line in narrow.getvalue().splitlines())
    assert len(narrow.getvalue().splitlines()) > 2 * len(SEEDED)


def test_ledger_untouched_by_reads(seeded_ledger: Path, ledger_path: Path, run_cli: RunCli) -> None:
    """Read commands write nothing: the history table is the same before and after."""
    before = history_rows(seeded_ledger)
    for args in (["list"], ["status", "ok-1"], ["review"], ["history", "ok-1"]):
        assert 0 == run_cli(*args).exit_code
    assert before == history_rows(seeded_ledger)


def test_log_level_writes_redacted_events_to_stderr(run_cli: RunCli) -> None:
    """`--log-level info` logs the ledger's events on stderr, never on stdout, and without
    the phone number."""
    result = run_cli(
        "--log-level", "info", "resolve", "spent", "--as", "not-sent", "--reason", "checked",
        "--operator", "carol", "--json",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    assert "operator_resolved_not_sent" in result.stderr
    assert "operator_resolved_not_sent" not in result.stdout
    json_of(result)  # stdout stays pure JSON
    assert RECIPIENT not in result.stderr


def test_a_stale_or_unforced_ruling_is_refused(run_cli: RunCli, ledger_path: Path) -> None:
    """The operator looked at an unresolved attempt; a read confirmed it a moment later. A
    not-sent ruling with --expect <what they saw> is refused (look again); without --expect,
    ruling a CONFIRMED attempt not sent needs --force; with it, it is recorded as forced."""
    seen = json_of(run_cli("status", "waiting", "--json"))["latest"]

    async def confirm_meanwhile() -> None:
        async with Ledger.open(ledger_path) as ledger:
            record = await ledger.get_attempt(seen["dispatch_id"])
            await ledger.apply(confirm_delivery(record, provider_object_id=900, now=ledger.now()))

    asyncio.run(confirm_meanwhile())
    stale = run_cli(
        "resolve", "waiting", "--as", "not-sent", "--reason", "x", "--expect", str(seen["version"])
    )
    assert 1 == stale.exit_code and "look again" in stale.stderr, stale.output
    unforced = run_cli("resolve", "waiting", "--as", "not-sent", "--reason", "x")
    assert 2 == unforced.exit_code and "needs force" in unforced.output, unforced.output
    forced = run_cli("resolve", "waiting", "--as", "not-sent", "--reason", "x", "--force")
    assert 0 == forced.exit_code, forced.output
    assert True is json_of(run_cli("history", "waiting", "--json"))[-1]["evidence"]["forced"]


def test_a_sent_ruling_claims_the_row_it_names(run_cli: RunCli) -> None:
    """`resolve --as sent --row ID` records the provider row the operator found."""
    result = run_cli("resolve", "waiting", "--as", "sent", "--reason", "seen it", "--row", "41")
    assert 0 == result.exit_code, result.output
    latest = json_of(run_cli("status", "waiting", "--json"))["latest"]
    assert (41, "sms") == (latest["provider_object_id"], latest["provider_kind"])
