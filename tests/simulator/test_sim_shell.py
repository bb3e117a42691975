"""The phone's shell dialect: quoting, status, operators, and the device commands."""

from __future__ import annotations

import asyncio
import re
import shlex
import time

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner
from hypothesis import given, settings
from hypothesis import strategies as st

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._shell import Output, Shell
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect


async def _cat(argv: list[str], stdin: str) -> Output:
    return Output.out(stdin)


def run(line: str) -> tuple[str, int]:
    """Run ``line`` in a fresh shell with only the builtins and ``cat``."""
    return asyncio.run(Shell({"cat": _cat}).run(line))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("echo hello   world", "hello world\n"),
        ("echo 'a  b' \"c  d\" e\\ f", "a  b c  d e f\n"),
        ("echo 'it'\\''s'", "it's\n"),
        ('echo "say \\"hi\\" \\$HOME \\\\"', 'say "hi" $HOME \\\n'),
        ("false; echo $?; true; echo $?", "1\n0\n"),
        (
            'nosuch; echo "__SB_EXIT:$?"',
            "/system/bin/sh: nosuch: inaccessible or not found\n__SB_EXIT:127\n",
        ),
        ("true && echo yes || echo no", "yes\n"),
        ("false && echo yes || echo no", "no\n"),
        ("false || false || echo last", "last\n"),
        ("echo a;echo b\necho c", "a\nb\nc\n"),
        ("echo 'a\\nb'", "a\nb\n"),
        ("echo -n one; echo two", "onetwo\n"),
        ("echo -E 'raw\\n'", "raw\\n\n"),
        ('echo "$(echo inner)" `echo back`', "inner back\n"),
        ("echo $(printf 'a  b')", "a b\n"),
        ("nosuch 2>/dev/null; echo $?", "127\n"),
        ("echo hidden >/dev/null; echo shown", "shown\n"),
        ("echo piped | cat", "piped\n"),
        ("printf '%s|%d\\n' text 42", "text|42\n"),
        ('x=5; echo "x is $x"', "x is 5\n"),
        ("echo '' | cat; echo end", "\nend\n"),
        ("exit 3; echo never", ""),
        ("echo '$(not run)' \"\\`nor this\\`\"", "$(not run) `nor this`\n"),
        ("# just a comment", ""),
        ("echo 'a\\cb'; echo c", "abc\n"),
        ("echo '\\x41\\u00e9\\0101'", "A\u00e9A\n"),
        ("echo $(false) $?", "0\n"),
        ('x=1 | true; echo "[$x]"', "[]\n"),
        ("exit 4 | true; echo $?", "0\n"),
        ("for_ifs=$(printf 'a\\rb c'); printf '<%s>' $for_ifs", "<a\rb><c>"),
        ("printf 'x\\x41\\101\\cz'; echo", "xAA\n"),
    ],
)
def test_shell_dialect(line: str, expected: str) -> None:
    """The shell parses and runs each line as mksh would."""
    assert expected == run(line)[0]


@pytest.mark.parametrize(
    ("line", "message", "status"),
    [
        ("echo 'open", "/system/bin/sh: no closing quote\n", 1),
        ("&& echo x", "/system/bin/sh: syntax error: '&&' unexpected\n", 1),
        ("echo a;; echo b", "/system/bin/sh: syntax error: ';;' unexpected\n", 1),
        ("echo a |", "/system/bin/sh: syntax error: 'newline' unexpected\n", 1),
    ],
)
def test_syntax_errors_run_nothing(line: str, message: str, status: int) -> None:
    """A line that does not parse prints an error, runs nothing, and fails."""
    assert (message, status) == run(line)


def test_exit_status_of_last_command_is_returned() -> None:
    """The shell's status is the last command's, which is what $? shows next."""
    assert ("", 127) == run("nosuch 2>/dev/null")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")))
def test_quoted_text_round_trips(text: str) -> None:
    """Any text quoted with shlex.quote comes back byte for byte through printf '%s'."""
    assert (text, 0) == run(f"printf '%s' {shlex.quote(text)}")


async def test_device_commands(phone: SimulatedPhone, adb_signer: PythonRSASigner) -> None:
    """getprop, id, whoami and date answer as a US phone's shell user would."""
    device = await connect(phone, adb_signer)
    try:
        assert "us\n" == await device.shell("getprop gsm.sim.operator.iso-country")
        assert "America/New_York\n" == await device.shell("getprop persist.sys.timezone")
        assert "fallback\n" == await device.shell("getprop no.such.prop fallback")
        listing = await device.shell("getprop")
        assert "[ro.product.model]: [Starebrain Simulated Phone]\n" in listing
        identity = await device.shell("id")
        assert identity.startswith("uid=2000(shell) gid=2000(shell) groups=2000(shell),")
        assert "shell\n" == await device.shell("whoami")
        assert re.fullmatch(r"\d{13}\n", await device.shell("date +%s%3N"))
    finally:
        await device.close()


async def test_region_sets_country_and_timezone(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """The region decides the SIM country property and the timezone."""
    phone = await phone_factory(region="GB")
    device = await connect(phone, adb_signer)
    assert "gb\nEurope/London\n" == await device.shell(
        "getprop gsm.sim.operator.iso-country; getprop persist.sys.timezone"
    )
    await device.close()


async def test_sentinels_report_each_command_status(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """Several commands joined with exit sentinels each report their own real status."""
    device = await connect(phone, adb_signer)
    output = await device.shell(
        'content query --uri content://sms; echo "__SB_EXIT:$?"; '
        'input; echo "__SB_EXIT:$?"; '
        'frob; echo "__SB_EXIT:$?"'
    )
    await device.close()
    assert re.findall(r"__SB_EXIT:(\d+)", output) == ["0", "1", "127"]


async def test_injection_attempt_is_stored_literally(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """A quoted body full of shell syntax reaches the store unchanged and is logged verbatim."""
    body = "$(reboot); `id` && echo pwned | tee x; 'quoted' \"double\" \\back"
    line = (
        "am start -W -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body "
        f"{shlex.quote(body)}; input keyevent 22; input keyevent 66"
    )
    device = await connect(phone, adb_signer)
    await device.shell(line)
    await device.close()
    assert [body] == [row.body for row in phone.store.rows()]
    assert [line] == phone.commands_run


async def test_unquoted_substitution_really_runs(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """An unquoted $(...) is expanded by the phone's shell, so a quoting bug shows in the store."""
    device = await connect(phone, adb_signer)
    await device.shell(
        "am start -W -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body"
        " $(echo expanded); input keyevent 22; input keyevent 66"
    )
    await device.close()
    assert ["expanded"] == [row.body for row in phone.store.rows()]


async def test_am_bad_arguments_raise_like_the_activity_manager(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """A missing option value prints the Java exception and exits 255, opening nothing."""
    device = await connect(phone, adb_signer)
    output = await device.shell(
        'am start -a android.intent.action.SENDTO --es sms_body; echo "rc=$?"'
    )
    await device.close()
    assert output.startswith(
        "Exception occurred while executing 'start':\n"
        'java.lang.IllegalArgumentException: Argument expected after "--es"\n\tat '
    )
    assert output.endswith("rc=255\n")


async def test_input_without_arguments_prints_usage(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """input with no command prints its usage and exits 1."""
    device = await connect(phone, adb_signer)
    output = await device.shell('input; echo "rc=$?"')
    await device.close()
    assert output.startswith("Usage: input [<source>] [-d DISPLAY_ID] <command> [<arg>...]\n")
    assert output.endswith("rc=1\n")


async def test_toybox_date_prints_the_device_clock_in_milliseconds(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """``date +%s%3N`` is the device clock in ms: ``%N`` is nine digits of nanoseconds and
    ``%3N`` their first three (``puts_time``, toys/posix/date.c, toybox in Android 10 to 15)."""
    phone = await phone_factory(clock_skew_ms=-3_600_000)
    device = await connect(phone, adb_signer)
    before = time.time_ns() // 1_000_000 - 3_600_000
    output = await device.shell("date +%s%3N; date +%s; date +%N; date +%3N; date -u +%Y%m%d%H%M%S")
    after = time.time_ns() // 1_000_000 - 3_600_000
    await device.close()
    millis, seconds, nanos, first_three, utc = output.splitlines()
    assert re.fullmatch(r"\d{13}", millis)
    assert before <= int(millis) <= after
    assert int(millis) // 1000 <= int(seconds) <= after // 1000
    assert re.fullmatch(r"\d{9}", nanos)
    assert re.fullmatch(r"\d{3}", first_three)
    hours = {time.strftime("%Y%m%d%H", time.gmtime(ms / 1000)) for ms in (before, after)}
    assert utc[:10] in hours
