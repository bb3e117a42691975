"""The nightly job's report, exit statuses and archive, on real ledgers and phones."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, SmsIntent, Status
from starebrain_actions.cli.main import main
from tests.e2e.conftest import BODY, RECIPIENT, RunCli, Target, json_of
from tests.e2e.test_cli_reconcile import in_flight_with_sent_row

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "nightly_reconcile.py"


async def nightly(ledger_path: Target, key: Path, *args: str) -> Result:
    """Run `starebrain --db L nightly --key KEY ARGS` off the phone's event loop."""
    argv = ["--db", str(ledger_path), "nightly", "--key", str(key), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


def test_report_of_a_ledger_that_needs_a_person(
    seeded_ledger: Path, run_cli: RunCli, tmp_path: Path, closed_port: int
) -> None:
    """The JSON report counts statuses and lists mismatches, duplicates, spent budgets, the
    dead device and the review items; exit 1 because people must look."""
    report_path = tmp_path / "reports" / "latest.json"
    report_path.parent.mkdir()  # --report creates no directory
    result = run_cli("nightly", "--report", str(report_path))
    assert 1 == result.exit_code, result.output
    report = json.loads(report_path.read_text(encoding="utf-8"))
    dead = f"127.0.0.1:{closed_port}"
    # every status listed, zeros included
    assert {status.value: 0 for status in Status} | {
        "PLANNED": 1,
        "UNKNOWN": 1,
        "SUCCEEDED": 2,
        "MISMATCH": 1,
        "FAILED": 1,
    } == report["status_counts"]
    assert {"under_1h": 0, "1h_to_24h": 1, "1d_to_7d": 0, "over_7d": 0} == report[
        "unresolved_by_age"
    ]
    assert ["waiting"] == [line["action_id"] for line in report["unresolved"]]
    assert ["bad-text"] == [line["action_id"] for line in report["mismatches"]]
    assert [("ok-dup", 99)] == [
        (line["action_id"], line["provider_object_id"]) for line in report["duplicates"]
    ]
    assert 1 == report["duplicates_total"]
    assert {"bad-text", "spent"} == {line["action_id"] for line in report["budget_exhausted"]}
    assert [dead] == report["unreachable_devices"]
    assert {"ok-dup", "bad-text", "spent"} == {line["action_id"] for line in report["review"]}
    assert report["needs_person"] is True and 1 == report["exit_code"]
    assert any(dead in reason for reason in report["attention"])
    assert [] == [p.name for p in report_path.parent.iterdir() if p.name != "latest.json"]
    assert RECIPIENT not in report_path.read_text() and BODY not in report_path.read_text()
    assert "NEEDS A PERSON" in result.stdout
    assert f"device {dead}: UNREACHABLE" in result.stdout


def test_unreachable_device_fails_nothing(
    seeded_ledger: Path, run_cli: RunCli, closed_port: int
) -> None:
    """A device that is down is reported, not fatal: its attempt stays unresolved, never FAILED,
    and only an error note is added to its history."""
    result = run_cli("nightly", "--json")
    assert 1 == result.exit_code
    report = json_of(result)
    device = report["devices"][0]
    assert (f"127.0.0.1:{closed_port}", False, 1) == (
        device["device"],
        device["reachable"],
        device["in_flight_after"],
    )
    status = json_of(run_cli("status", "waiting", "--json"))
    assert "UNKNOWN" == status["status"]
    events = [entry["event"] for entry in json_of(run_cli("history", "waiting", "--json"))]
    assert {"created", "note_error"} == set(events)


async def test_clean_night_exits_0(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, tmp_path: Path
) -> None:
    """A lost reply is settled by the nightly pass; with nothing left for people, exit 0
    (on both backends)."""
    await in_flight_with_sent_row(ledger_target, phone, "A-17")
    report_path = tmp_path / "night.json"
    result = await nightly(ledger_target, adb_key_path, "--report", str(report_path))
    assert 0 == result.exit_code, result.output
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["needs_person"] is False and [] == report["attention"]
    assert 1 == report["status_counts"]["SUCCEEDED"]
    changes = report["devices"][0]["changes"]
    assert ["confirm", "accept"] == [change["event"] for change in changes]
    assert "nothing needs a person" in result.stdout
    assert "A-17" in result.stdout


def test_empty_ledger_exits_0(run_cli: RunCli, ledger_path: Path) -> None:
    """A ledger with nothing in it is a quiet night: exit 0, no device read."""
    asyncio.run(_create(ledger_path))
    result = run_cli("nightly", "--json")
    assert 0 == result.exit_code, result.output
    assert [] == json_of(result)["devices"]


async def _create(path: Path) -> None:
    async with Ledger.open(path):
        pass


def test_usage_errors_exit_2(run_cli: RunCli, tmp_path: Path, ledger_path: Path) -> None:
    """A missing ledger, a malformed device or an unknown option is a usage error: exit 2."""
    missing = run_cli("nightly", db=tmp_path / "nope.db")
    assert 2 == missing.exit_code and "nope.db" in missing.stderr
    assert not (tmp_path / "nope.db").exists()
    asyncio.run(_create(ledger_path))
    assert 2 == run_cli("nightly", "--device", "nohost").exit_code
    assert 2 == run_cli("nightly", "--frobnicate").exit_code


def test_archive_plain_directory_suffixes_same_day(
    seeded_ledger: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    """`--archive DIR` keeps a dated Markdown copy; a second run the same day gets `-2`."""
    archive = tmp_path / "archive"
    run_cli("nightly", "--archive", str(archive))
    run_cli("nightly", "--archive", str(archive))
    names = sorted(path.name for path in archive.iterdir())
    assert 2 == len(names)
    day = names[-1].removesuffix(".md")
    assert [f"{day}-2.md", f"{day}.md"] == names
    text = (archive / f"{day}.md").read_text(encoding="utf-8")
    assert text.startswith(f"# starebrain nightly report {day}")
    assert "## Mismatches" in text and "bad-text" in text
    assert RECIPIENT not in text and BODY not in text


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_archive_into_git_commits_each_night(
    seeded_ledger: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    """When the archive is a git repository each report is committed by `starebrain nightly`."""
    archive = tmp_path / "audit"
    archive.mkdir()
    subprocess.run(["git", "init", "-q", str(archive)], check=True)
    first = run_cli("nightly", "--archive", str(archive))
    assert 1 == first.exit_code, first.output
    assert "committed as" in first.stdout
    run_cli("nightly", "--archive", str(archive))
    log = subprocess.run(
        ["git", "-C", str(archive), "log", "--format=%an <%ae>|%s", "--name-only"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert 2 == log.count("starebrain nightly <nightly@localhost>|nightly report")
    assert "action(s) need review" in log
    status = subprocess.run(
        ["git", "-C", str(archive), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "" == status


def test_script_wrapper_runs_the_same_job(seeded_ledger: Path, tmp_path: Path) -> None:
    """`python scripts/nightly_reconcile.py --db L` is the same job with the same exit status."""
    report_path = tmp_path / "script.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--db", str(seeded_ledger), "--report", str(report_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 1 == done.returncode, done.stderr
    assert "NEEDS A PERSON" in done.stdout
    assert 1 == json.loads(report_path.read_text(encoding="utf-8"))["exit_code"]


async def test_attempt_unresolved_for_days_needs_a_person(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """An attempt still unproven after more than a day on a reachable phone (no fence to ask,
    nothing found) goes to review as UNVERIFIED, which frees its phone: the report lists it
    under 1d-7d, asks a person and exits 1."""
    old = datetime.now(UTC) - timedelta(days=2)
    async with Ledger.open(ledger_path) as ledger:
        intent = SmsIntent(recipient=RECIPIENT, body=BODY)
        await ledger.create_action("old-1", intent, now=old)
        await ledger.begin_attempt("old-1", phone.serial, now=old)
    result = await nightly(ledger_path, adb_key_path, "--json")
    assert 1 == result.exit_code, result.output
    report = json.loads(result.stdout)
    assert 1 == report["unresolved_by_age"]["1d_to_7d"]
    assert report["devices"][0]["reachable"] is True
    assert ["1 action(s) need review", "1 attempt(s) unresolved past their limit"] == report[
        "attention"
    ]
    assert [["UNVERIFIED"]] == [line["reasons"] for line in report["review"]]


def test_a_pass_that_cannot_start_still_reports(
    seeded_ledger: Path, run_cli: RunCli, adb_key_path: Path, tmp_path: Path
) -> None:
    """When the pass cannot run at all (an ADB key readable by others) the report is still
    written, each device carries the error, and nothing changes state."""
    loose = tmp_path / "loose-adbkey"
    loose.write_bytes(adb_key_path.read_bytes())
    loose.chmod(0o644)
    result = run_cli("nightly", "--key", str(loose), "--json")
    assert 1 == result.exit_code, result.output
    device = json_of(result)["devices"][0]
    assert device["reachable"] is False
    assert device["error"].startswith("KeyPermissionError")
    assert "UNKNOWN" == json_of(run_cli("status", "waiting", "--json"))["status"]
