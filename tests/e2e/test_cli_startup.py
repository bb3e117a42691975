"""What the ``starebrain`` command imports before it works: start-up cost is paid only by the
commands that need it (the figure itself is a benchmark, ``benchmarks/bench_startup.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from starebrain_actions.cli import devices as _cli_devices
from starebrain_actions.cli.main import _Group, main
from starebrain_actions.cli.options import DEVICE_ENV

#: Modules no read command needs: structlog's console (it imports rich's tracebacks and
#: pygments), rich's console (piped output is laid out without it), cattrs (records are
#: read by the fast path), phonenumbers (stored recipients the fingerprint vouches for are
#: not parsed again), the ADB stack and the simulated phone.
HEAVY = (
    "structlog",
    "rich.console",
    "pygments",
    "cattrs",
    "phonenumbers",
    "adb_shell",
    "cryptography",
    "android_bridge._device",
    "android_bridge.simulator",
    "starebrain_actions.orchestration.agent",
    "starebrain_actions.cli.demo",
    "starebrain_actions.cli.devices",
)

#: Modules the one-action read commands (``status``, ``history``) need not: they read
#: through ``open_read_only`` on the main thread, not through the async ``Ledger``.
ASYNC = ("asyncio", "aiosqlite", "starebrain_actions.ledger.store", "tempfile")

#: Runs the command as the console script does, then lists the heavy modules it loaded.
PROBE = """
import json, sys
from starebrain_actions.cli.main import main
code = 0
if len(sys.argv) > 1:
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
heavy = json.loads({heavy!r})
print(json.dumps({{"code": code, "loaded": [m for m in heavy if m in sys.modules]}}),
      file=sys.stderr)
"""


def probe(*args: str, heavy: tuple[str, ...] = HEAVY) -> tuple[int, list[str], str]:
    """Exit status, ``heavy`` modules loaded and stdout of ``starebrain ARGS`` in a fresh
    interpreter with stdout piped."""
    env = {**os.environ}
    env.pop("STAREBRAIN_DB", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=json.dumps(heavy)), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["loaded"], done.stdout


def test_importing_the_cli_loads_no_heavy_module() -> None:
    """Importing the command line imports neither structlog, rich's console, cattrs, the ADB
    stack nor the simulated phone."""
    code, loaded, _ = probe()
    assert (0, []) == (code, loaded)


def test_status_on_a_missing_ledger_loads_no_heavy_module(tmp_path: Path) -> None:
    """``starebrain status X`` on a missing ledger fails as before, having loaded nothing
    heavy."""
    code, loaded, _ = probe("--db", str(tmp_path / "missing.db"), "status", "X")
    assert (1, []) == (code, loaded)


def test_status_list_and_history_of_a_real_ledger_load_no_heavy_module(
    seeded_ledger: Path,
) -> None:
    """The read commands print a real ledger's actions (piped) without structlog, rich's
    console, cattrs or the ADB stack."""
    for args in (["status", "ok-dup"], ["list"], ["history", "bad-text"], ["review"]):
        code, loaded, out = probe("--db", str(seeded_ledger), *args)
        assert (args, []) == (args, loaded)
        assert code in (0, 1)  # review exits 1 when something needs a person
        assert out.strip()


@pytest.mark.parametrize("as_json", [[], ["--json"]], ids=["text", "json"])
def test_status_and_history_of_a_real_ledger_load_no_asyncio(
    seeded_ledger: Path, ledger_path: Path, as_json: list[str]
) -> None:
    """``status`` and ``history`` (found, or not) print a real ledger's action without
    importing asyncio, aiosqlite or the async ledger."""
    for args in (["status", "ok-dup"], ["history", "bad-text"], ["status", "no-such-action"]):
        code, loaded, out = probe("--db", str(seeded_ledger), *args, *as_json, heavy=ASYNC)
        assert (args, []) == (args, loaded)
        assert (0 if args[1] != "no-such-action" else 1) == code
        assert out.strip() or args[1] == "no-such-action"


def test_status_output_in_a_fresh_process_is_the_in_process_output(seeded_ledger: Path) -> None:
    """The lazily imported process prints exactly what the fully loaded one prints."""
    from click.testing import CliRunner

    in_process = CliRunner().invoke(main, ["--db", str(seeded_ledger), "status", "bad-text"])
    code, _, out = probe("--db", str(seeded_ledger), "status", "bad-text")
    assert (in_process.exit_code, in_process.stdout) == (code, out)


def test_help_loads_no_heavy_module_nor_the_simulated_phone() -> None:
    """``starebrain --help`` lists every command without importing one of the lazy ones:
    neither the simulated phone, the agent, asyncio, the ADB stack nor structlog."""
    code, loaded, out = probe("--help", heavy=(*HEAVY, *ASYNC))
    assert (0, []) == (code, loaded)
    assert "simulator" in out.split("Commands:")[1]


@pytest.mark.parametrize("name", sorted(_Group.LAZY_COMMANDS))
def test_a_lazy_command_is_listed_in_its_own_words(name: str) -> None:
    """The sentence ``--help`` lists a lazy command by is the one its own help starts with,
    at every width the listing may be cut to."""
    import click

    ctx = click.Context(main, info_name="starebrain")
    stand_in = main.listed_command(ctx, name)
    command = main.get_command(ctx, name)
    assert stand_in is not None
    assert command is not None
    assert (False, False) == (command.hidden, command.deprecated)
    for limit in range(10, 400):
        assert command.get_short_help_str(limit) == stand_in.get_short_help_str(limit)


def test_help_lists_every_command_the_lazy_ones_included() -> None:
    """``starebrain --help`` still lists every command, and each lazily imported one is the
    command of its name."""
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["--help"])
    assert 0 == result.exit_code
    listed = result.stdout.split("Commands:")[1]
    for name in sorted(set(main.commands) | set(_Group.LAZY_COMMANDS)):
        assert f"\n  {name} " in listed
    for name in _Group.LAZY_COMMANDS:
        command = main.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None
        assert name == command.name
        assert 0 == CliRunner().invoke(main, [name, "--help"]).exit_code
    # every command loaded now: the listing is the same as the lazy one
    assert result.stdout == CliRunner().invoke(main, ["--help"]).stdout


def test_an_unknown_command_is_still_a_usage_error() -> None:
    """A name that is no command, lazy or not, exits 2 naming it."""
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["no-such-command"])
    assert 2 == result.exit_code
    assert "no-such-command" in result.output


def test_the_device_variable_is_the_devices_command_one() -> None:
    """The CLI's copy of the device variable's name is the ``devices`` command's."""
    assert _cli_devices.DEVICE_ENV == DEVICE_ENV


@pytest.mark.parametrize("json_output", [False, True])
def test_a_ledger_event_of_a_read_command_is_still_rendered(
    tmp_path: Path, json_output: bool
) -> None:
    """A read command configures logging on its first event: the event is rendered on
    stderr as ``configure_logging`` renders it, and structlog was not imported before."""
    script = f"""
import logging, sys
from starebrain_actions import _logging
_logging.configure_logging_on_first_event(level=logging.INFO, json={json_output!r})
before = "structlog" in sys.modules
_logging.get_logger("starebrain.test").warning("probe_event", action_id="a-1", body="secret")
print(before)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "False" == done.stdout.strip()
    assert "probe_event" in done.stderr
    assert "a-1" in done.stderr
    assert "secret" not in done.stderr  # redacted, as ever
    if json_output:
        assert "probe_event" == json.loads(done.stderr.strip().splitlines()[-1])["event"]


@pytest.mark.parametrize("first", ["bridge", "library"])
def test_logging_set_up_on_first_event_renders_whoever_writes_first(first: str) -> None:
    """Set up for the first event: events below the level import nothing; then the first
    one written, a bridge event or another library's record, is rendered as
    ``configure_logging`` renders it (JSON lines here), and so is every later one."""
    script = f"""
import logging, sys
from starebrain_actions import _logging
from android_bridge._log import get_logger as bridge_logger
_logging.configure_logging_on_first_event(level=logging.WARNING, json=True)
_logging.get_logger("starebrain.test").info("quiet_event")
bridge_logger("android_bridge.test").debug("quiet_bridge_event")
print("structlog" in sys.modules)
if {first!r} == "bridge":
    bridge_logger("android_bridge.test").warning("bridge_event", device="127.0.0.1:5555")
else:
    logging.getLogger("adb_shell.test").warning("library record")
_logging.get_logger("starebrain.test").warning("later_event", action_id="a-1")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "False" == done.stdout.strip()
    lines = [json.loads(line) for line in done.stderr.strip().splitlines()]
    expected = "bridge_event" if first == "bridge" else "library record"
    assert [expected, "later_event"] == [line["event"] for line in lines]
    assert ["warning", "warning"] == [line["level"] for line in lines]
    assert "quiet_event" not in done.stderr
