"""One rule for every file and directory starebrain creates (``android_bridge._private_files``):
directories 0700, files holding keys, messages or a ledger 0600, whatever the umask, on every
path that creates them: the first ``send``, ``key new``, ``key show``, the simulator."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from android_bridge import ensure_key
from android_bridge._private_files import (
    ensure_private_file,
    make_private_dirs,
    write_private_file,
)
from android_bridge.simulator import SimulatedPhone
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory

RECIPIENT = "+12025550100"
BODY = "Your code is 4821"
_LISTENING = re.compile(r"^listening on 127\.0\.0\.1:(\d+) ")


def mode(path: Path) -> int:
    """The permission bits of ``path`` (not following a symlink)."""
    return stat.S_IMODE(path.lstat().st_mode)


def modes_under(root: Path) -> dict[str, int]:
    """Every file and directory under ``root`` (itself included), by path relative to
    ``root``'s parent, with its permission bits."""
    found = {root.name: mode(root)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root.parent))] = mode(path)
    return found


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual umask (022), under which a file made without care is 0644: the rule, not the
    umask, must make it 0600."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loose_umask: None) -> Path:
    """A fresh home: config and data directories not yet created, no key, no ledger."""
    monkeypatch.delenv("STAREBRAIN_ADB_KEY", raising=False)
    monkeypatch.delenv("STAREBRAIN_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path


def test_rule_makes_dirs_0700_and_files_0600_whatever_the_umask(tmp_path: Path) -> None:
    """Each missing directory is made 0700 (a stricter umask cannot narrow it, a looser one
    cannot widen it); a file 0600; an existing directory keeps its mode."""
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    for umask in (0o000, 0o022, 0o277):
        previous = os.umask(umask)
        try:
            deep = existing / f"u{umask:o}" / "a" / "b"
            make_private_dirs(deep)
            write_private_file(deep / "key", b"secret")
            assert ensure_private_file(deep / "store.db")
            assert not ensure_private_file(deep / "store.db")  # there: left as it is
        finally:
            os.umask(previous)
        assert {
            f"u{umask:o}": 0o700,
            f"u{umask:o}/a": 0o700,
            f"u{umask:o}/a/b": 0o700,
            f"u{umask:o}/a/b/key": 0o600,
            f"u{umask:o}/a/b/store.db": 0o600,
        } == modes_under(existing / f"u{umask:o}")
    assert 0o755 == mode(existing)


def test_rule_never_writes_through_a_symlink(tmp_path: Path) -> None:
    """A symlink planted where a key is to be written is refused; its target is untouched."""
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    (tmp_path / "adbkey.pub").symlink_to(target)
    with pytest.raises(FileExistsError):
        write_private_file(tmp_path / "adbkey.pub", b"attacker's choice")
    assert not ensure_private_file(tmp_path / "adbkey.pub")
    assert b"precious" == target.read_bytes()


async def test_first_send_creates_key_ledger_and_their_dirs_private(
    home: Path, phone_factory: PhoneFactory
) -> None:
    """The first `send`, with nothing configured, creates the ADB key pair (both 0600), the
    ledger (0600) and the directories it makes (0700), and the SMS goes out."""
    phone = await phone_factory(allow_new_keys=True)
    (home / "data").mkdir()  # the XDG directory is the user's; starebrain's own is made below
    argv = ["send", "--device", phone.serial, "--to", RECIPIENT, "--body", BODY, "--wait", "10"]
    result = await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)
    assert 0 == result.exit_code, result.output
    assert [BODY] == [row.body for row in phone.store.rows(types=[2])]
    assert {
        "config": 0o700,
        "config/starebrain": 0o700,
        "config/starebrain/adbkey": 0o600,
        "config/starebrain/adbkey.pub": 0o600,
    } == modes_under(home / "config")
    ledger_dir = home / "data" / "starebrain"
    assert 0o700 == mode(ledger_dir)
    assert {0o600} == {mode(path) for path in ledger_dir.iterdir()}, sorted(ledger_dir.iterdir())


def test_ensure_key_writes_a_missing_public_key_0600(home: Path, tmp_path: Path) -> None:
    """A private key whose public half is missing gets it back, 0600 like the private one."""
    key = ensure_key(tmp_path / "keys" / "adbkey")
    public = Path(f"{key}.pub")
    line = public.read_bytes()
    public.unlink()
    assert key == ensure_key(key)
    assert line == public.read_bytes()
    assert {"keys": 0o700, "keys/adbkey": 0o600, "keys/adbkey.pub": 0o600} == modes_under(
        tmp_path / "keys"
    )


@pytest.mark.parametrize("command", [["key", "new"], ["key", "show"]])
def test_key_commands_create_the_pair_by_the_same_rule(home: Path, command: list[str]) -> None:
    """`key new` and `key show` (creating the default key) make the same modes as the first
    send: both files 0600, the directories 0700."""
    result = CliRunner().invoke(main, command, catch_exceptions=False)
    assert 0 == result.exit_code, result.output
    assert {
        "config": 0o700,
        "config/starebrain": 0o700,
        "config/starebrain/adbkey": 0o600,
        "config/starebrain/adbkey.pub": 0o600,
    } == modes_under(home / "config")


def test_key_new_force_replaces_the_pair_0600(home: Path, tmp_path: Path) -> None:
    """`key new --force` over an existing key writes the new pair 0600 too."""
    key = tmp_path / "k" / "adbkey"
    first = CliRunner().invoke(main, ["key", "new", "--key", str(key)], catch_exceptions=False)
    assert 0 == first.exit_code, first.output
    Path(f"{key}.pub").chmod(0o644)  # as a send of an older version left it
    again = CliRunner().invoke(
        main, ["key", "new", "--key", str(key), "--force"], catch_exceptions=False
    )
    assert 0 == again.exit_code, again.output
    assert {"k": 0o700, "k/adbkey": 0o600, "k/adbkey.pub": 0o600} == modes_under(tmp_path / "k")


async def test_simulated_phone_store_is_0600_in_private_dirs(
    tmp_path: Path, authorized_keys_path: Path, loose_umask: None
) -> None:
    """The simulated phone's store, which holds message bodies, is created 0600 (its journal
    files too), in directories created 0700."""
    store = tmp_path / "phones" / "one" / "sms.db"
    phone = SimulatedPhone(
        store_path=store, authorized_keys_path=authorized_keys_path, host="127.0.0.1", port=0
    )
    await phone.start()
    await phone.stop()
    found = modes_under(tmp_path / "phones")
    assert {"phones": 0o700, "phones/one": 0o700, "phones/one/sms.db": 0o600} == {
        name: bits for name, bits in found.items() if not name.endswith(("-wal", "-shm"))
    }
    assert {0o600} >= {bits for name, bits in found.items() if name.endswith(("-wal", "-shm"))}


def test_simulator_command_creates_config_dir_and_store_private(home: Path, tmp_path: Path) -> None:
    """`starebrain simulator` run first, as a real process with the usual umask, creates the
    config directory and its `simulator` directory 0700, `sms.db` 0600, and its console file
    (`sms.db.console`, the token of `receive-sms`) 0600, removed when it stops."""
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config")}
    launch = "import os; os.umask(0o022); from starebrain_actions.cli.main import main; main()"
    process = subprocess.Popen(
        [sys.executable, "-c", launch, "simulator", "--port", "0", "--allow-new-keys"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert _LISTENING.match(line), (line, process.stderr.read() if process.stderr else "")
        found = modes_under(home / "config")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)
    assert {
        "config": 0o700,
        "config/starebrain": 0o700,
        "config/starebrain/simulator": 0o700,
        "config/starebrain/simulator/sms.db": 0o600,
        "config/starebrain/simulator/sms.db.console": 0o600,
    } == {name: bits for name, bits in found.items() if not name.endswith(("-wal", "-shm"))}
    assert {0o600} >= {bits for name, bits in found.items() if name.endswith(("-wal", "-shm"))}
    assert not (home / "config/starebrain/simulator/sms.db.console").exists()


def test_the_simulated_phones_authorised_keys_file_is_private(tmp_path: Path) -> None:
    """The simulated phone's `adb_keys`, created when a key is allowed (its directory too),
    is 0600 in a 0700 directory under the usual umask, as every file starebrain makes."""
    from android_bridge._keys import ensure_key, public_key_line
    from android_bridge.simulator._auth import AuthorizedKeys

    key = ensure_key(tmp_path / "key" / "adbkey")
    keys = AuthorizedKeys(tmp_path / "phone" / "keys" / "adb_keys")
    previous = os.umask(0o022)
    try:
        keys.add(public_key_line(key))
    finally:
        os.umask(previous)
    assert (0o700, 0o600) == (
        stat.S_IMODE((tmp_path / "phone" / "keys").stat().st_mode),
        stat.S_IMODE((tmp_path / "phone" / "keys" / "adb_keys").stat().st_mode),
    )
