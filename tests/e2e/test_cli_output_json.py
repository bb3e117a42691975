"""`--json` is JSON: errors too, every object with `schema_version`, one name per field
across commands, and every shape's fields exactly as docs/cli.md and docs/nightly.md list."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, RetryPolicy, SmsIntent, fail_delivery
from starebrain_actions.cli.main import main
from starebrain_actions.orchestration.nightly.lock import nightly_lock
from tests.e2e.conftest import BODY, RECIPIENT, RunCli, json_of
from tests.e2e.test_cli_reconcile import in_flight_with_sent_row

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "nightly_reconcile.py"
ERROR_KEYS = {"error", "exit_code", "schema_version"}
#: Action summary fields only some commands print.
ONLY_SEND = {
    "exit_code",
    "action_id_derived",
    "earlier_message",
    "first_sent_at",
    "not_ready",
    "refused",
    "held_by",
    "gate",
}
ONLY_REVIEW = {"holds_phone", "awaits_approval"}
ONLY_RETRY = {"attempts_granted"}


def documented_fields(doc: str, heading: str) -> set[str]:
    """The field names in the first column of the table under ``### heading`` (or
    ``## heading``) of ``docs/<doc>``: every backticked name of that column."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#)", text + "\n#", re.S | re.M)
    assert match is not None, heading
    names: set[str] = set()
    for line in match.group(1).splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def keys(objects: Iterable[dict[str, Any]]) -> set[str]:
    """Every key of any of ``objects``."""
    return {key for item in objects for key in item}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["status", "nope", "--json"], 1, "nope"),
        (["history", "nope", "--json"], 1, "nope"),
        (["list", "--status", "DONE", "--json"], 2, "DONE"),
        (["list", "--json", "--frobnicate"], 2, "--frobnicate"),
        (["review", "--json", "--frobnicate"], 2, "--frobnicate"),
        (["resolve", "ghost", "--as", "sent", "--reason", "x", "--json"], 1, "ghost"),
        (["resolve", "ok-1", "--as", "maybe", "--reason", "x", "--json"], 2, "maybe"),
        (["resolve", "ok-1", "--json"], 2, "--as"),
        (["send", "--device", "nohost", "--to", RECIPIENT, "--body", "b", "--json"], 2, "nohost"),
        (["reconcile", "--device", "nohost", "--json"], 2, "nohost"),
        (["nightly", "--device", "nohost", "--json"], 2, "nohost"),
    ],
)
@pytest.mark.usefixtures("seeded_ledger")
def test_errors_are_json_on_stdout(
    run_cli: RunCli, args: list[str], code: int, needle: str
) -> None:
    """With `--json`, an error (usage errors included) is one JSON object on stdout with
    the exit status the command exits with; the human line stays on stderr."""
    result = run_cli(*args)
    assert code == result.exit_code, result.output
    data = json_of(result)
    assert ERROR_KEYS == set(data)
    assert (code, 1) == (data["exit_code"], data["schema_version"])
    assert needle in data["error"]
    assert "Error:" in result.stderr and needle in result.stderr


def test_a_changed_intent_is_a_json_error(
    run_cli: RunCli, seeded_ledger: Path, closed_port: int
) -> None:
    """`send --json` with a changed intent under an existing id: exit 2, JSON on stdout,
    nothing sent (the ledger answers before any phone is contacted)."""
    result = run_cli(
        "send", "--device", f"127.0.0.1:{closed_port}", "--to", RECIPIENT, "--body", "other",
        "--action-id", "ok-1", "--json",
    )  # fmt: skip
    assert 2 == result.exit_code, result.output
    data = json_of(result)
    assert 2 == data["exit_code"] and "changed intent" in data["error"]


def test_missing_ledger_is_a_json_error(run_cli: RunCli, tmp_path: Path) -> None:
    """Every command that takes `--json` reports a missing ledger as JSON, with its own
    exit status (1 for the read commands, 2 for the nightly job)."""
    missing = tmp_path / "none.db"
    for args, code in (
        (["status", "x"], 1),
        (["list"], 1),
        (["history", "x"], 1),
        (["review"], 1),
        (["resolve", "x", "--as", "sent", "--reason", "r"], 1),
        (["reconcile"], 1),
        (["nightly"], 2),
    ):
        result = run_cli(*args, "--json", db=missing)
        assert code == result.exit_code, (args, result.output)
        data = json_of(result)
        assert ERROR_KEYS == set(data) and code == data["exit_code"]
        assert str(missing) in data["error"]
    assert not missing.exists()


def test_without_json_errors_stay_off_stdout(run_cli: RunCli, tmp_path: Path) -> None:
    """Without `--json` an error is only the `Error:` line on stderr, as before."""
    result = run_cli("status", "x", db=tmp_path / "none.db")
    assert 1 == result.exit_code
    assert "" == result.stdout and result.stderr.startswith("Error: ")


def test_a_value_of_json_is_not_the_flag(run_cli: RunCli, tmp_path: Path) -> None:
    """Only a `--json` before `--` asks for JSON errors."""
    result = run_cli("status", "--", "--json", db=tmp_path / "none.db")
    assert 1 == result.exit_code
    assert "" == result.stdout


def test_script_errors_are_json(tmp_path: Path) -> None:
    """`scripts/nightly_reconcile.py --json` reports a usage error as JSON too (exit 2)."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--db", str(tmp_path / "none.db"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 2 == done.returncode, done.stderr
    assert 2 == json.loads(done.stdout)["exit_code"]


# --------------------------------------------------------------------------- shapes


@pytest.mark.usefixtures("seeded_ledger")
def test_read_shapes_have_their_documented_fields(run_cli: RunCli) -> None:
    """`status`, `list`, `review` and `history` print `schema_version` 1 on every object,
    and exactly the fields docs/cli.md lists for their shapes; `review` adds `holds_phone`,
    a phone hold, to each summary."""
    status = json_of(run_cli("status", "ok-dup", "--json"))
    listed = json_of(run_cli("list", "--json"))
    reviewed = json_of(run_cli("review", "--json"))
    history = json_of(run_cli("history", "ok-dup", "--json"))
    for item in [status, *listed, *reviewed, *history]:
        assert 1 == item["schema_version"]
    summary = documented_fields("cli.md", "Action summary")
    everywhere = summary - ONLY_SEND - ONLY_REVIEW - ONLY_RETRY
    assert everywhere == set(status)
    assert everywhere - {"duplicate_rows"} == keys(listed)
    assert keys(listed) | ONLY_REVIEW == keys(reviewed)
    holds = [item["holds_phone"] for item in reviewed if item["holds_phone"] is not None]
    assert holds and documented_fields("cli.md", "Phone hold") == keys(holds)
    assert (
        documented_fields("cli.md", "Attempt") == keys(status["attempts"]) == set(status["latest"])
    )
    assert documented_fields("cli.md", "Duplicate row") == keys(status["duplicate_rows"])
    assert documented_fields("cli.md", "History entry") == keys(history)
    assert ERROR_KEYS == documented_fields("cli.md", "Error")


def test_resolve_prints_a_summary(run_cli: RunCli, seeded_ledger: Path) -> None:
    """`resolve --json` prints the action summary, redacted, with `schema_version`."""
    data = json_of(run_cli("resolve", "ok-dup", "--as", "sent", "--reason", "ok", "--json"))
    assert 1 == data["schema_version"] and "SUCCEEDED" == data["status"]
    assert RECIPIENT not in json.dumps(data)


async def test_send_and_reconcile_shapes(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """`send --json` is a summary with `exit_code`, `action_id_derived`, `earlier_message`
    and `first_sent_at`; `reconcile --json` is a pass whose devices count unresolved
    attempts as `in_flight`, as the nightly report does; both have their documented fields
    and `schema_version`."""
    runner = CliRunner()
    base = ["--db", str(ledger_path)]
    sent = await asyncio.to_thread(
        runner.invoke,
        main,
        [*base, "send", "--device", phone.serial, "--to", RECIPIENT, "--body", BODY,
         "--key", str(adb_key_path), "--json"],
    )  # fmt: skip
    assert 0 == sent.exit_code, sent.output
    data = json.loads(sent.stdout)
    assert (1, 0, True, False) == (
        data["schema_version"],
        data["exit_code"],
        data["action_id_derived"],
        data["earlier_message"],
    )
    assert data["latest"]["dispatched_at"] == data["first_sent_at"]
    printed_by_send = documented_fields("cli.md", "Action summary") - ONLY_REVIEW - ONLY_RETRY
    assert printed_by_send - {"duplicate_rows"} == set(data)
    assert (None, None, None) == (data["not_ready"], data["held_by"], data["gate"])
    await in_flight_with_sent_row(ledger_path, phone, "A-17")
    passed = await asyncio.to_thread(
        runner.invoke, main, [*base, "reconcile", "--key", str(adb_key_path), "--json"]
    )
    assert 0 == passed.exit_code, passed.output
    result = json.loads(passed.stdout)
    assert 1 == result["schema_version"]
    assert documented_fields("cli.md", "Reconcile pass") == set(result)
    assert documented_fields("cli.md", "Reconcile device") == keys(result["devices"])
    assert documented_fields("cli.md", "Change") == keys(result["changes"])
    assert 0 == result["devices"][0]["in_flight"]
    night = await asyncio.to_thread(
        runner.invoke,
        main,
        [*base, "nightly", "--device", phone.serial, "--key", str(adb_key_path), "--json"],
    )
    device = json.loads(night.stdout)["devices"][0]
    assert (phone.serial, 0) == (device["device"], device["in_flight"])


async def test_retry_and_resume_shapes(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path, closed_port: int
) -> None:
    """`retry --json` is a summary with `attempts_granted` and the grant on the action;
    `resume --json` has its documented fields, a phone it could not use included."""
    async with Ledger.open(ledger_path) as ledger:
        await ledger.create_action(
            "R-1", SmsIntent(recipient=RECIPIENT, body=BODY), RetryPolicy(maximum_attempts=1)
        )
        record = await ledger.begin_attempt("R-1", phone.serial)
        await ledger.apply(fail_delivery(record, reason="nothing went out", now=ledger.now()))
    runner = CliRunner()
    base = ["--db", str(ledger_path)]
    granted = await asyncio.to_thread(
        runner.invoke, main, [*base, "retry", "R-1", "--reason", "r", "--operator", "o", "--json"]
    )
    assert 0 == granted.exit_code, granted.output
    data = json.loads(granted.stdout)
    printed_by_retry = documented_fields("cli.md", "Action summary") - ONLY_SEND - ONLY_REVIEW
    assert printed_by_retry - {"duplicate_rows"} == set(data)
    assert {"after_attempt", "attempts", "granted_at", "granted_by", "reason"} == set(
        data["action"]["grant"]
    )
    resumed = await asyncio.to_thread(
        runner.invoke,
        main,
        [*base, "resume", "--device", phone.serial, "--device", f"127.0.0.1:{closed_port}",
         "--wait", "5", "--key", str(adb_key_path), "--json"],
    )  # fmt: skip
    assert 7 == resumed.exit_code, resumed.output
    result = json.loads(resumed.stdout)
    assert documented_fields("cli.md", "Resume result") == set(result)
    devices = result["devices"]
    assert [True, False] == [device["resumed"] for device in devices]
    assert documented_fields("cli.md", "Resume device") == set(devices[0])
    assert set(devices[1]) == set(devices[0])
    assert (None, None) == (devices[1]["settled_by_read"], devices[1]["still_unresolved"])
    assert documented_fields("cli.md", "Resumed action") == keys(devices[0]["actions"])
    assert ["R-1"] == [item["action_id"] for item in devices[0]["actions"]]


def test_reconcile_with_nothing_in_flight_has_the_same_shape(
    run_cli: RunCli, ledger_path: Path
) -> None:
    """With nothing in flight `reconcile --json` still prints a pass: no device, no change,
    no times."""
    asyncio.run(seed_ledger_empty(ledger_path))
    data = json_of(run_cli("reconcile", "--json"))
    assert documented_fields("cli.md", "Reconcile pass") == set(data)
    assert (None, [], [], 1) == (
        data["started_at"],
        data["devices"],
        data["changes"],
        data["schema_version"],
    )


async def seed_ledger_empty(path: Path) -> None:
    """An empty ledger."""
    async with Ledger.open(path):
        pass


def test_nightly_report_fields_and_names(
    seeded_ledger: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    """The nightly report (stdout and `--report` alike) has `schema_version`, exactly the
    fields docs/nightly.md lists, the CLI's field names (`in_flight`, `review_reasons`,
    `superseded_reasons`, `duplicate_rows`) and, until schema 2, the old ones with the same
    values."""
    report_path = tmp_path / "report.json"
    result = run_cli("nightly", "--json", "--report", str(report_path))
    assert 1 == result.exit_code, result.output
    report = json_of(result)
    written = json.loads(report_path.read_text(encoding="utf-8"))
    assert {key: value for key, value in report.items() if key != "duration_s"} == {
        key: value for key, value in written.items() if key != "duration_s"
    }
    assert 1 == report["schema_version"]
    documented = documented_fields("nightly.md", "The report")
    top = {name.split("[")[0].split(".")[0] for name in documented if not name.startswith("*")}
    assert top == set(report)
    for device in report["devices"]:
        assert device["in_flight"] == device["in_flight_after"]
    assert report["duplicate_rows"] == report["duplicates"] != []
    status = json_of(run_cli("status", "bad-text", "--json"))
    line = next(item for item in report["review"] if item["action_id"] == "bad-text")
    assert status["review_reasons"] == line["review_reasons"] == line["reasons"]
    assert status["superseded_reasons"] == line["superseded_reasons"] == line["superseded"]


def test_nightly_busy_is_json(seeded_ledger: Path, ledger_path: Path, run_cli: RunCli) -> None:
    """A second nightly run while one holds the lock says so in JSON under `--json`, exit 0."""
    with nightly_lock(seeded_ledger):
        result = run_cli("nightly", "--json")
    assert 0 == result.exit_code, result.output
    data = json_of(result)
    assert documented_fields("cli.md", "Nightly report") == set(data)
    assert (0, 1) == (data["exit_code"], data["schema_version"])
    assert "another nightly run" in data["skipped"]
