"""`send --body-file`: a file or stdin as the body, the segment warning, and the refusal of a
body the phone's shell cannot take in one argument."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger
from starebrain_actions.cli.body import MAX_ARG_STRLEN, longest_send_script
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT, RunCli, Target

SENT = 2


async def send(
    ledger_path: Target, key: Path, serial: str, *args: str, stdin: bytes | None = None
) -> Result:
    """`starebrain --db L send --device SERIAL --key KEY ARGS`, off the phone's event loop."""
    argv = ["--db", str(ledger_path), "send", "--device", serial, "--key", str(key), *args]
    return await asyncio.to_thread(
        CliRunner().invoke, main, argv, input=stdin, catch_exceptions=False
    )


def sent_bodies(phone: SimulatedPhone) -> list[str | None]:
    """Bodies of the rows in the phone's sent box."""
    return [row.body for row in phone.store.rows(types=[SENT])]


async def test_body_file_is_the_body_and_matches_the_same_body_given_inline(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path, tmp_path: Path
) -> None:
    """A file's text (its final newline dropped) is sent; the same text with --body is the
    same intent, so the rerun resumes the action and sends nothing."""
    body_file = tmp_path / "body.txt"
    body_file.write_text(BODY + "\n", encoding="utf-8")
    first = await send(
        ledger_path, adb_key_path, phone.serial, "--to", RECIPIENT, "--body-file", str(body_file)
    )
    assert 0 == first.exit_code, first.output
    again = await send(ledger_path, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", BODY)
    assert 0 == again.exit_code, again.output
    assert first.stdout.split()[2] == again.stdout.split()[2]
    assert [BODY] == sent_bodies(phone)
    assert "" == first.stderr


async def test_body_from_stdin_drops_bom_and_one_crlf_only(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """`--body-file -` reads stdin as UTF-8: a byte-order mark and one final CRLF go, inner
    line breaks and a second final line ending stay."""
    phone = await phone_factory(app="aosp")
    text = "Line one\r\nLine two é\n"
    result = await send(
        ledger_path, adb_key_path, phone.serial, "--to", RECIPIENT, "--body-file", "-",
        stdin=b"\xef\xbb\xbf" + (text + "\r\n").encode("utf-8"),
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    assert [text] == sent_bodies(phone)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("--body", BODY, "--body-file", "-"), "not both", id="both"),
        pytest.param((), "--body TEXT or --body-file PATH", id="neither"),
        pytest.param(("--body-file", "/nonexistent/body.txt"), "cannot read", id="missing-file"),
    ],
)
def test_body_options_misused_are_exit_2_before_anything_is_recorded(
    run_cli: RunCli, ledger_path: Path, closed_port: int, args: tuple[str, ...], message: str
) -> None:
    """Both body options, neither, or a file that cannot be read: exit 2, no ledger."""
    result = run_cli("send", "--device", f"127.0.0.1:{closed_port}", "--to", RECIPIENT, *args)
    assert 2 == result.exit_code, result.output
    assert message in result.stderr
    assert not ledger_path.exists()


def test_body_file_not_utf8_is_exit_2(
    run_cli: RunCli, ledger_path: Path, closed_port: int, tmp_path: Path
) -> None:
    """A file that is not UTF-8 is refused with the offending byte and its offset."""
    body_file = tmp_path / "latin1.txt"
    body_file.write_bytes("Caf\xe9".encode("latin-1"))
    result = run_cli(
        "send", "--device", f"127.0.0.1:{closed_port}", "--to", RECIPIENT,
        "--body-file", str(body_file),
    )  # fmt: skip
    assert 2 == result.exit_code, result.output
    assert "not UTF-8 text (byte 0xe9 at offset 3)" in result.stderr
    assert not ledger_path.exists()


@pytest.mark.parametrize(
    ("body", "warning"),
    [
        pytest.param("a" * 200, "2 SMS segments (GSM-7: 200 septets, at most 153", id="gsm7"),
        pytest.param("{}" * 41, "2 SMS segments (GSM-7: 164 septets", id="extension-double"),
        pytest.param(
            "It\u2019s " * 15, "2 SMS segments (UCS-2: 75 UTF-16 code units, at most 67", id="ucs2"
        ),
        pytest.param("🙂" * 36, "2 SMS segments (UCS-2: 72 UTF-16 code units", id="emoji"),
    ],
)
async def test_multi_segment_body_warns_on_stderr(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path, body: str, warning: str
) -> None:
    """A body of more than one SMS says how many, in which encoding, on stderr only; the
    send goes ahead."""
    phone = await phone_factory(app="aosp")
    result = await send(
        ledger_path, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", body, "--json"
    )
    assert 0 == result.exit_code, result.output
    assert warning in result.stderr
    assert "starebrain send: warning:" not in result.stdout
    assert [body] == sent_bodies(phone)


async def test_ucs2_warning_names_the_character_that_forces_it(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """The warning names the first character GSM-7 cannot carry."""
    phone = await phone_factory(app="aosp")
    body = (
        "Your appointment is confirmed for Tuesday at 10 o\u2019clock; reply STOP to opt out now."
    )
    result = await send(ledger_path, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", body)
    assert 0 == result.exit_code, result.output
    assert "UCS-2 because of U+2019 RIGHT SINGLE QUOTATION MARK" in result.stderr


async def test_single_segment_body_gives_no_warning(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """160 septets are one SMS: nothing on stderr."""
    result = await send(
        ledger_path, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", "a" * 160
    )
    assert 0 == result.exit_code, result.output
    assert "" == result.stderr


def largest_accepted(send_path: str) -> int:
    """The longest body of 'a's the send check accepts on ``send_path``."""
    overhead = longest_send_script(RECIPIENT, "a", send_path) - 1
    return MAX_ARG_STRLEN - 1 - overhead


@pytest.mark.parametrize("send_path", ["ui", "framework", "auto"])
def test_body_over_the_shell_argument_limit_is_exit_2_and_nothing_is_recorded(
    run_cli: RunCli, ledger_path: Path, closed_port: int, tmp_path: Path, send_path: str
) -> None:
    """One byte over the limit (from a file, or quoting that grows it: single quotes) is
    refused with exit 2 before any ledger exists; at the limit the send goes on (and fails
    here only because nothing listens on the port: exit 7), except through the framework,
    which sends one SMS segment only (exit 2, no ledger either)."""
    size = largest_accepted(send_path)
    assert 120_000 < size < MAX_ARG_STRLEN
    device = f"127.0.0.1:{closed_port}"
    over = tmp_path / "over.txt"
    over.write_text("a" * (size + 1), encoding="utf-8")
    refused = run_cli(
        "send", "--device", device, "--to", RECIPIENT, "--send-path", send_path,
        "--body-file", str(over), "--wait", "1",
    )  # fmt: skip
    assert 2 == refused.exit_code, refused.output
    assert "too long for the phone's shell" in refused.stderr
    assert f"about {size} would fit" in refused.stderr
    assert not ledger_path.exists()
    quoted = tmp_path / "quotes.txt"
    quoted.write_text("'" + "a" * (size - 1), encoding="utf-8")
    assert 2 == run_cli(
        "send", "--device", device, "--to", RECIPIENT, "--send-path", send_path,
        "--body-file", str(quoted), "--wait", "1",
    ).exit_code  # fmt: skip
    at_limit = tmp_path / "limit.txt"
    at_limit.write_text("a" * size, encoding="utf-8")
    accepted = run_cli(
        "send", "--device", device, "--to", RECIPIENT, "--send-path", send_path,
        "--body-file", str(at_limit), "--wait", "1",
    )  # fmt: skip
    assert "too long" not in accepted.stderr
    if send_path == "framework":
        assert 2 == accepted.exit_code, accepted.output
        assert "send path framework cannot send this body" in accepted.stderr
        assert not ledger_path.exists()
    else:
        assert 7 == accepted.exit_code, accepted.output


def test_huge_stdin_is_refused_without_reading_it_all(
    run_cli: RunCli, ledger_path: Path, closed_port: int
) -> None:
    """Megabytes on stdin: exit 2, the limit named, no ledger."""
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["--db", str(ledger_path), "send", "--device", f"127.0.0.1:{closed_port}",
         "--to", RECIPIENT, "--body-file", "-"],
        input=b"a" * (4 * 1024 * 1024),
        catch_exceptions=False,
    )  # fmt: skip
    assert 2 == result.exit_code, result.output
    assert f"one argument ({MAX_ARG_STRLEN} bytes)" in result.stderr
    assert not ledger_path.exists()


async def test_the_largest_accepted_body_really_fits_on_the_phone(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """The limit is derived honestly: the longest body the check accepts, really sent, puts a
    command line of at most MAX_ARG_STRLEN - 1 bytes on the phone, and not far below it (the
    check's worst case is at most a few hundred bytes above what a send really writes). Only
    the app's path can take such a body: the framework sends one SMS segment."""
    phone = await phone_factory(app="aosp", android=14)
    body = "a" * largest_accepted("ui")
    result = await send(
        ledger_path, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", body,
        "--send-path", "ui", "--wait", "20",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    longest = max(len(command.encode("utf-8")) for command in phone.commands_run)
    assert MAX_ARG_STRLEN - 400 < longest <= MAX_ARG_STRLEN - 1
    assert [body] == sent_bodies(phone)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_samples_of_long_bodies_are_what_it_prints(run_cli: RunCli, closed_port: int) -> None:
    """docs/cli.md's segment warning is the one `send` prints for that body, and the body
    size it quotes for the limit is the one the check computes (within 100 bytes)."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    command = next(
        line for line in lines if line.startswith("$ starebrain send --to ") and "\u2019" in line
    )
    documented = lines[lines.index(command) + 1]
    body = re.search(r'--body "([^"]+)"', command)
    assert body is not None
    result = run_cli(
        "send", "--device", f"127.0.0.1:{closed_port}", "--to", RECIPIENT,
        "--body", body.group(1), "--wait", "1",
    )  # fmt: skip
    assert documented == result.stderr.splitlines()[0]
    quoted = re.search(r"up to about ([\d,]+) bytes", DOCS.read_text(encoding="utf-8"))
    assert quoted is not None
    assert abs(int(quoted.group(1).replace(",", "")) - largest_accepted("ui")) < 100


async def actions_in(target: Target) -> list[str]:
    """The action ids a ledger holds ([] when its file was never created)."""
    if isinstance(target, Path) and not target.exists():
        return []
    async with Ledger.open(target) as ledger:
        return [summary.action.action_id for summary in await ledger.summaries()]


@pytest.mark.parametrize(
    ("body", "count"),
    [
        pytest.param(
            "a" * 161, "2 SMS segments (GSM-7: 161 septets, one SMS holds 160)", id="gsm7"
        ),
        pytest.param(
            "ж" * 71, "2 SMS segments (UCS-2: 71 UTF-16 code units, one SMS holds 70)", id="ucs2"
        ),
    ],
)
async def test_framework_path_refuses_a_body_of_more_than_one_sms_before_anything_is_recorded(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path, body: str, count: str
) -> None:
    """`--send-path framework` sends one SMS segment (SMSDispatcher.sendText sends nothing
    for a longer text and still reports success): a longer body is exit 2, naming its
    segment count and the other ways, before the ledger or the phone is touched."""
    phone = await phone_factory(android=14)
    result = await send(
        ledger_target, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", body,
        "--send-path", "framework", "--wait", "5",
    )  # fmt: skip
    assert 2 == result.exit_code, result.output
    assert count in result.stderr
    assert "--send-path ui or --send-path auto" in result.stderr
    assert "shorten it to one SMS; nothing was recorded or sent" in result.stderr
    assert "warning" not in result.stderr
    assert [] == await actions_in(ledger_target)
    assert ([], []) == (phone.transmissions, phone.store.rows())
    assert [] == phone.commands_run
