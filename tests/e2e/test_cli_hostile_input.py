"""Hostile input gets one error line and the documented exit status, never a traceback:
non-finite or overflowing durations, bytes that are not UTF-8, lone surrogates through the
API, a ledger with garbage in its pages, ``--db /dev/null``, a newline after ``--device``."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner, Result

from starebrain_actions import InvalidInput, Ledger, SmsIntent
from starebrain_actions.cli.main import main
from tests.e2e.conftest import BODY, RECIPIENT, RunCli, seed_ledger, starebrain_command

SEND = ("send", "--device", "127.0.0.1:9", "--to", RECIPIENT, "--body", BODY)


def error_lines(result: Result) -> list[str]:
    """The lines of stderr that carry an error."""
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--wait", "nan"),
        ("--wait", "inf"),
        ("--wait", "1e400"),
        ("--wait", "1e300"),
        ("--grace", "nan"),
        ("--grace", "-inf"),
        ("--unverified-after", "NaN"),
        ("--unverified-after", "1e20"),
        ("--backoff", "nan"),
        ("--max-backoff", "inf"),
        ("--max-attempts", "99999999999999999999999"),
        ("--rate-limit", "99999999999999999999999"),
        ("--connect-timeout", "nan"),
        ("--command-timeout", "nan"),
    ],
)
def test_durations_and_counts_must_be_finite_and_bounded(
    run_cli: RunCli, ledger_path: Path, option: str, value: str
) -> None:
    """A duration that is nan, infinite or past ten years, or a count that overflows, is a
    usage error naming the option (exit 2), and nothing is created."""
    result = run_cli(*SEND, option, value)
    assert 2 == result.exit_code, result.output
    [line] = error_lines(result)
    assert option in line
    assert not ledger_path.exists()


def test_an_overflowing_list_limit_is_a_usage_error(run_cli: RunCli, ledger_path: Path) -> None:
    """`list --limit` past what SQLite can bind is refused before the ledger is read."""
    asyncio.run(seed_ledger(ledger_path, waiting_device="127.0.0.1:9"))
    result = run_cli("list", "--limit", str(2**64))
    assert 2 == result.exit_code, result.output
    assert "--limit" in error_lines(result)[0]


@pytest.mark.parametrize(
    "args",
    [
        [b"status", b"\xff"],
        [b"history", b"caf\xe9"],
        [*(arg.encode() for arg in SEND[:-1]), b"Your code is \xff\xfe"],
        [b"resolve", b"x", b"--as", b"sent", b"--reason", b"\xc3"],
        [b"--db", b"ledger-\xff.db", b"list"],
    ],
)
def test_arguments_that_are_not_utf8_are_usage_errors(tmp_path: Path, args: list[bytes]) -> None:
    """Bytes that are not UTF-8 anywhere on the command line: one error line quoting them,
    exit 2, no traceback, nothing created."""
    env = {k: v for k, v in os.environ.items() if k != "STAREBRAIN_DB"}
    db = [] if b"--db" in args else [b"--db", os.fsencode(tmp_path / "ledger.db")]
    result = subprocess.run(
        [*map(os.fsencode, starebrain_command()), *db, *args],
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    stderr = result.stderr.decode("utf-8", "replace")
    assert 2 == result.returncode, stderr
    assert "Traceback" not in stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert "is not valid UTF-8" in line and "\\x" in line
    assert [] == list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args",
    [
        [*SEND[:2], "127.0.0.1:5555\n", *SEND[3:]],
        ["reconcile", "--device", "127.0.0.1:5555\n"],
        ["nightly", "--device", "127.0.0.1:5555\n"],
    ],
)
def test_a_newline_after_the_device_is_a_usage_error(
    run_cli: RunCli, ledger_path: Path, args: list[str]
) -> None:
    """`--device 'HOST:PORT\\n'` (a pasted line) is refused as a usage error (exit 2)."""
    asyncio.run(seed_ledger(ledger_path, waiting_device="127.0.0.1:9"))
    before = ledger_path.read_bytes()
    result = run_cli(*args)
    assert 2 == result.exit_code, result.output
    [line] = error_lines(result)
    assert "--device" in line and "'127.0.0.1:5555\\n'" in line
    assert before == ledger_path.read_bytes()


# --------------------------------------------------------------------------- /dev/null

DEV_NULL_COMMANDS = [
    (["list"], 1),
    (["status", "x"], 1),
    (["history", "x"], 1),
    (["review"], 1),
    (["resolve", "x", "--as", "sent", "--reason", "r", "--operator", "o"], 1),
    (["reconcile"], 1),
    (list(SEND), 1),
    (["nightly"], 2),
    (["nightly", "--dry-run"], 2),
]


@pytest.fixture
def dev_null_siblings() -> Iterator[list[Path]]:
    """Files SQLite or the nightly lock would create next to /dev/null; a test fails if it
    creates one (one that was there before cannot be told apart, so it is left alone)."""
    siblings = [
        Path("/dev/null" + suffix) for suffix in ("-journal", "-wal", "-shm", ".nightly.lock")
    ]
    existing = {path for path in siblings if path.exists()}
    yield [path for path in siblings if path not in existing]


@pytest.mark.parametrize(("args", "code"), DEV_NULL_COMMANDS)
def test_dev_null_is_not_a_ledger(
    dev_null_siblings: list[Path], args: list[str], code: int
) -> None:
    """`--db /dev/null` is refused by every command with one line and its usage/error status,
    and nothing is created next to /dev/null."""
    result = CliRunner().invoke(main, ["--db", "/dev/null", *args], catch_exceptions=False)
    assert code == result.exit_code, result.output
    [line] = error_lines(result)
    assert "/dev/null is not a regular file" in line
    assert [] == [path for path in dev_null_siblings if path.exists()]


# --------------------------------------------------------------------------- damaged ledger


def damage(path: Path, *, header: bool = False) -> None:
    """Write garbage over every page but the first (``header``: over the first page's
    header fields, after the magic string)."""
    with sqlite3.connect(path) as db:
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    assert len(data) >= 3 * page_size
    if header:
        data[16:24] = b"\xff" * 8
    else:
        for offset in range(page_size, len(data)):
            data[offset] = (offset * 131 + 7) % 251
    path.write_bytes(bytes(data))


DAMAGED_COMMANDS = [
    (["list"], 1),
    (["status", "ok-1"], 1),
    (["history", "ok-1"], 1),
    (["review"], 1),
    (["resolve", "waiting", "--as", "not-sent", "--reason", "r", "--operator", "o"], 1),
    (["reconcile", "--device", "127.0.0.1:9"], 1),
    (["send", "--device", "127.0.0.1:9", "--to", RECIPIENT, "--body", BODY], 1),
    (["nightly"], 2),
    (["nightly", "--dry-run"], 2),
]


@pytest.mark.parametrize("header", [False, True], ids=["pages", "header"])
@pytest.mark.parametrize(("args", "code"), DAMAGED_COMMANDS)
def test_a_damaged_ledger_is_one_clear_error(
    run_cli: RunCli, ledger_path: Path, args: list[str], code: int, header: bool
) -> None:
    """A real ledger with garbage written into its pages (or its header): every command says
    the ledger is damaged in one line, with its exit status, and writes nothing."""
    asyncio.run(seed_ledger(ledger_path, waiting_device="127.0.0.1:9"))
    damage(ledger_path, header=header)
    before = ledger_path.read_bytes()
    result = run_cli(*args)
    assert code == result.exit_code, result.output
    [line] = error_lines(result)
    assert f"ledger {ledger_path} is damaged" in line
    assert "restore it from a backup" in line
    assert before == ledger_path.read_bytes()


# --------------------------------------------------------------------------- the API


async def test_lone_surrogates_through_the_ledger_api_are_invalid_input(
    ledger_path: Path,
) -> None:
    """Ids, reasons and operators holding a lone surrogate raise InvalidInput (never a
    UnicodeEncodeError from SQLite), and nothing is written."""
    await seed_ledger(ledger_path, waiting_device="127.0.0.1:9")
    async with Ledger.open(ledger_path) as ledger:
        before = await ledger.history("waiting")
        with pytest.raises(InvalidInput, match="not valid Unicode"):
            await ledger.summary("ok-\udcff")
        with pytest.raises(InvalidInput, match="not valid Unicode"):
            await ledger.history("\ud800")
        with pytest.raises(InvalidInput):
            await ledger.create_action("A-\udcff", SmsIntent(recipient=RECIPIENT, body=BODY))
        with pytest.raises(InvalidInput, match="not valid Unicode"):
            await ledger.resolve(
                "waiting", as_sent=False, reason="phone off \udcff", operator="alice"
            )
        with pytest.raises(InvalidInput, match="not valid Unicode"):
            await ledger.resolve("waiting", as_sent=False, reason="off", operator="\udc80")
        with pytest.raises(InvalidInput):
            await ledger.begin_attempt("planned", "127.0.0.1:\udcff")
        assert [] == await ledger.attempts("planned")
        assert before == await ledger.history("waiting")


def test_a_lone_surrogate_in_a_recipient_is_invalid_input() -> None:
    """A recipient holding a lone surrogate is InvalidInput."""
    with pytest.raises(InvalidInput):
        SmsIntent(recipient="+1202555\udcff0100", body=BODY)


async def test_an_action_whose_body_holds_a_lone_surrogate_is_invalid_input(
    ledger_path: Path,
) -> None:
    """Creating an action whose body holds a lone surrogate raises InvalidInput (its
    fingerprint cannot be computed), and nothing is written: the ledger's own guard, behind
    the intent's (an intent built with validators off, as a legacy row is read)."""
    with attrs.validators.disabled():
        intent = SmsIntent(recipient=RECIPIENT, body="Your code is \udcff")
    async with Ledger.open(ledger_path) as ledger:
        with pytest.raises(InvalidInput, match="not valid Unicode"):
            await ledger.create_action("A-1", intent)
        assert [] == await ledger.summaries()


def test_a_lone_surrogate_in_a_body_is_invalid_input() -> None:
    """A body holding a lone surrogate is refused when the intent is made: InvalidInput."""
    with pytest.raises(InvalidInput):
        SmsIntent(recipient=RECIPIENT, body="Your code is \udcff")


@pytest.mark.parametrize("action_id", ["A-17\n", "A-17\r\n", " A-17", "A-17 "])
def test_an_action_id_with_whitespace_at_an_end_is_a_usage_error(
    run_cli: RunCli, ledger_path: Path, action_id: str
) -> None:
    """``--action-id`` with a final newline (or a space at either end) is refused before
    anything is recorded or sent: never a second action beside ``A-17`` (issue 21, item 7)."""
    result = run_cli(*SEND, "--action-id", action_id)
    assert 2 == result.exit_code, result.output
    [line] = error_lines(result)
    assert "action id" in line
    assert not ledger_path.exists()
