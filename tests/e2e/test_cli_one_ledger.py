"""One default ledger: `SmsAgent.open()` without ``db`` opens the one the command line uses,
every command that opens a ledger says which in its help, and `starebrain status` without an
id says which it read (issue 36)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import _paths
from starebrain_actions.agent import SmsAgent
from starebrain_actions.cli.context import LEDGER_HELP
from starebrain_actions.cli.main import main
from tests.e2e.conftest import SEEDED, RunCli, Target

BODY = "Your code is 6021"
CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``$XDG_DATA_HOME`` and no ``$STAREBRAIN_DB``: the default ledger lives under
    this directory (``starebrain/ledger.db``), which does not exist yet."""
    monkeypatch.delenv("STAREBRAIN_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


async def test_the_agent_without_db_writes_the_ledger_the_commands_read(
    data_home: Path, phone: SimulatedPhone, adb_key_path: Path
) -> None:
    """`SmsAgent.open()` without ``db`` creates the default ledger (its directory 0700);
    `starebrain status` with no option reads that one, and a second agent on it resumes the
    action instead of sending again: the phone holds the message once."""
    for _ in range(2):
        async with SmsAgent.open(device=phone.serial, key_path=adb_key_path) as agent:
            outcome = await agent.send("otp-6021", "+12025550143", BODY, wait=60)
        assert "SUCCEEDED" == outcome.status.value
    ledger = data_home / "starebrain" / "ledger.db"
    assert (True, 0o700) == (ledger.exists(), ledger.parent.stat().st_mode & 0o777)
    code, out, _ = await asyncio.to_thread(_invoke, "status", "otp-6021", "--json")
    assert (0, "SUCCEEDED") == (code, json.loads(out)["status"])
    assert [BODY] == [row.body for row in phone.store.rows(types=[2])]


async def test_the_agent_without_db_follows_starebrain_db(
    ledger_target: Target,
    data_home: Path,
    phone: SimulatedPhone,
    adb_key_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``$STAREBRAIN_DB`` set (a file, or a PostgreSQL URL), the agent without ``db``
    and the command line both use it; the data directory is left alone."""
    monkeypatch.setenv("STAREBRAIN_DB", str(ledger_target))
    async with SmsAgent.open(device=phone.serial, key_path=adb_key_path) as agent:
        outcome = await agent.send("otp-6022", "+12025550143", BODY, wait=60)
    assert "SUCCEEDED" == outcome.status.value
    code, out, _ = await asyncio.to_thread(_invoke, "status", "--json")
    data = json.loads(out)
    assert (0, 1, "$STAREBRAIN_DB") == (code, data["actions"], data["named_by"])
    assert not data_home.exists()
    assert 1 == len(phone.store.rows(types=[2]))


def test_status_without_an_id_before_the_first_send(data_home: Path) -> None:
    """On a fresh machine `status` says where the ledger will be, that nothing named it,
    that it holds nothing yet, and exits 0; the directory is not created."""
    default = data_home / "starebrain" / "ledger.db"
    code, out, _ = _invoke("status")
    assert 0 == code
    assert [
        f"ledger:   {default}",
        "named by: the default: neither --db nor $STAREBRAIN_DB",
        "actions:  none: no ledger there yet (`starebrain send` creates it)",
    ] == out.splitlines()
    # docs/cli.md shows it, for a user whose home is /home/you
    documented = CLI_DOC.read_text(encoding="utf-8").split("```console\n$ starebrain status\n")
    shown = documented[1].split("```", 1)[0].replace("/home/you/.local/share", str(data_home))
    assert out == shown
    code, out, _ = _invoke("status", "--json")
    data = json.loads(out)
    assert (0, str(default), "default", False, None) == (
        code,
        data["ledger"],
        data["named_by"],
        data["exists"],
        data["actions"],
    )
    assert not data_home.exists()


def test_status_without_an_id_names_the_ledger_given(
    seeded_ledger: Target, run_cli: RunCli
) -> None:
    """With ``--db`` (a file or a URL, shown without a password), `status` names it, says
    `--db` named it, and counts its actions."""
    result = run_cli("status")
    assert 0 == result.exit_code, result.output
    assert ["ledger:", "named by:", "actions:"] == [
        line.split()[0] + (" by:" if line.startswith("named") else "")
        for line in result.stdout.splitlines()
    ]
    assert f"actions:  {len(SEEDED)}" == result.stdout.splitlines()[2]
    data = json.loads(run_cli("status", "--json").stdout)
    assert ("--db", True, len(SEEDED)) == (data["named_by"], data["exists"], data["actions"])


def test_status_without_an_id_on_an_empty_postgresql_schema(
    ledger_target: Target, run_cli: RunCli
) -> None:
    """A ledger nothing has been sent with yet (a missing file, an empty schema) is no
    error for `status` without an id: it holds no actions yet."""
    result = run_cli("status", "--json")
    assert (0, False, None) == (
        result.exit_code,
        json.loads(result.stdout)["exists"],
        json.loads(result.stdout)["actions"],
    )


def _all_commands() -> list[tuple[str, click.Command]]:
    """Every ``starebrain`` command and subcommand, by its path."""
    found: list[tuple[str, click.Command]] = []
    context = click.Context(main, info_name="starebrain")
    for name in main.list_commands(context):
        command = main.get_command(context, name)
        assert command is not None
        found.append((name, command))
        if isinstance(command, click.Group):
            found.extend((f"{name} {sub}", cmd) for sub, cmd in command.commands.items())
    return found


def test_every_command_that_opens_a_ledger_says_which_in_its_help() -> None:
    """`--help` of each command that opens the ledger ends with where it is; those that
    open none (the key, the simulator, the demo, migrate's two named ones) do not say so."""
    for path, _command in _all_commands():
        opens_none = path.split()[0] in {"demo", "key", "migrate", "simulator"}
        opens_none = opens_none or path == "mcp token"
        code, out, _ = _invoke(*path.split(), "--help")
        assert 0 == code, path
        said = " ".join(LEDGER_HELP.split()) in " ".join(out.split())
        assert (not opens_none) == said, path


def test_one_function_names_the_default_ledger(
    data_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_paths.default_ledger``: the data directory's file, else ``$STAREBRAIN_DB`` as given
    (an empty one is unset, as for ``--db``)."""
    assert data_home / "starebrain" / "ledger.db" == _paths.default_ledger()
    monkeypatch.setenv("STAREBRAIN_DB", "")
    assert _paths.default_db_path() == _paths.default_ledger()
    monkeypatch.setenv("STAREBRAIN_DB", "postgresql://sb@db.internal/starebrain")
    assert "postgresql://sb@db.internal/starebrain" == _paths.default_ledger()
