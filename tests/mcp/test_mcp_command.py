"""``starebrain mcp``'s command line: usage errors, and a clear message without the SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from starebrain_actions.cli.main import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_usage_errors_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No phone, a malformed phone address (given or in $STAREBRAIN_DEVICE), a malformed
    --http address or region, a duration that is not a finite number: exit 2, and no ledger
    is created."""
    monkeypatch.delenv("STAREBRAIN_DEVICE", raising=False)
    db = tmp_path / "ledger.db"
    cases = [
        ["mcp"],
        ["mcp", "--device", "no-port"],
        ["mcp", "--device", "127.0.0.1:5555", "--http", "localhost"],
        ["mcp", "--device", "127.0.0.1:5555", "--region", "USA"],
        # durations are finite seconds, as everywhere in the CLI
        ["mcp", "--device", "127.0.0.1:5555", "--grace", "nan"],
        ["mcp", "--device", "127.0.0.1:5555", "--backoff", "inf"],
        ["mcp", "--device", "127.0.0.1:5555", "--command-timeout", "nan"],
    ]
    for args in cases:
        code, output = run("--db", str(db), *args)
        assert 2 == code, (args, output)
    # HTTP: a non-loopback bind without --allow-remote; HTTP options without --http;
    # malformed --allow-host / --allow-origin
    phone = ["mcp", "--device", "127.0.0.1:5555"]
    http_cases = [
        [*phone, "--http", "0.0.0.0:8767"],
        [*phone, "--http", "192.0.2.7:8767"],
        [*phone, "--http", "[::]:8767"],
        [*phone, "--allow-remote"],
        [*phone, "--clients", str(tmp_path / "clients.toml")],
        [*phone, "--allow-host", "sms.example"],
        [*phone, "--http", "127.0.0.1:0", "--allow-origin", "sms.example"],
        [*phone, "--http", "127.0.0.1:0", "--allow-origin", "https://sms.example/mcp"],
        [*phone, "--http", "127.0.0.1:0", "--allow-host", "http://sms.example"],
        [*phone, "--max-sends-per-hour", "-1"],
    ]
    for args in http_cases:
        code, output = run("--db", str(db), *args)
        assert 2 == code, (args, output)
    code, output = run("--db", str(db), *phone, "--http", "0.0.0.0:8767")
    assert "--allow-remote" in output and "TLS" in output
    monkeypatch.setenv("STAREBRAIN_DEVICE", "127.0.0.1:5555 no-port")
    code, output = run("--db", str(db), "mcp")
    assert 2 == code and "no-port" in output
    assert not db.exists()


@pytest.mark.slow
def test_without_the_sdk_the_command_says_how_to_install_it(tmp_path: Path) -> None:
    """In a process where the MCP SDK cannot be imported, `starebrain mcp` exits 1 naming the
    extra to install, and the other commands still work."""
    script = (
        "import sys; sys.modules['mcp'] = None\n"
        "from starebrain_actions.cli.main import main\n"
        "main(sys.argv[1:])"
    )
    db = str(tmp_path / "l.db")
    missing = subprocess.run(
        [sys.executable, "-c", script, "--db", db, "mcp", "--device", "127.0.0.1:5555"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    other = subprocess.run(
        [sys.executable, "-c", script, "--db", db, "review"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 1 == missing.returncode, missing.stderr
    assert "pip install 'starebrain-actions[mcp]'" in missing.stderr
    assert "" == missing.stdout
    assert "no ledger at" in other.stderr


def test_a_clients_file_others_can_read_is_refused(tmp_path: Path) -> None:
    """A --clients file readable by group or others, or with a short token, stops the server
    before it opens the ledger: exit 1, saying why."""
    db = tmp_path / "ledger.db"
    clients = tmp_path / "clients.toml"
    clients.write_text('[clients.alice]\ntoken = "' + "a" * 40 + '"\n')
    clients.chmod(0o644)
    args = ["--db", str(db), "mcp", "--device", "127.0.0.1:5555", "--http", "127.0.0.1:0"]
    code, output = run(*args, "--clients", str(clients))
    assert 1 == code and "chmod 600" in output, output
    clients.write_text('[clients.alice]\ntoken = "short"\n')
    clients.chmod(0o600)
    code, output = run(*args, "--clients", str(clients))
    assert 1 == code and "at least 32" in output, output
    assert not db.exists()


def test_the_default_hourly_limit_is_in_the_help() -> None:
    """--max-sends-per-hour has a default, and the help says why."""
    code, output = run("mcp", "--help")
    assert 0 == code
    assert "[default: 20; x>=0]" in " ".join(output.split())
