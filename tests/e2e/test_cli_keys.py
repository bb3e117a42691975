"""`starebrain key show|path|new`: the public key a phone authorises, and safe key files."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from android_bridge import Device, DeviceUnreachable
from android_bridge.simulator import SimulatedPhone
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh config home with no key and no $STAREBRAIN_ADB_KEY."""
    monkeypatch.delenv("STAREBRAIN_ADB_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def key(*args: str) -> Result:
    """Run `starebrain key ARGS` in-process."""
    return CliRunner().invoke(main, ["key", *args], catch_exceptions=False)


def mode(path: Path) -> int:
    """The permission bits of ``path``."""
    return stat.S_IMODE(path.stat().st_mode)


def default_path(home: Path) -> Path:
    """Where the default key lives under ``home``'s config (``key path`` says)."""
    result = key("path")
    assert 0 == result.exit_code, result.output
    path = Path(result.stdout.strip())
    assert path.is_relative_to(home)
    return path


def test_key_path_prints_the_path_in_use_and_creates_nothing(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`key path` prints --key, else $STAREBRAIN_ADB_KEY, else the default; it creates no
    file and says on stderr when none is there."""
    default = default_path(home)
    assert "adbkey" == default.name
    assert not default.exists()
    assert "no key there yet" in key("path").stderr
    monkeypatch.setenv("STAREBRAIN_ADB_KEY", str(tmp_path / "env-key"))
    assert str(tmp_path / "env-key") == key("path").stdout.strip()
    assert (
        str(tmp_path / "flag-key")
        == key("path", "--key", str(tmp_path / "flag-key")).stdout.strip()
    )
    data = json.loads(key("path", "--json").stdout)
    assert {"path": str(tmp_path / "env-key"), "exists": False} == {
        name: data[name] for name in ("path", "exists")
    }
    assert not (tmp_path / "env-key").exists()


def test_key_show_creates_the_default_key_0600_and_prints_its_public_line(home: Path) -> None:
    """On a fresh machine `key show` creates the default key (0600 files, 0700 directory) and
    prints the .pub line; the second call prints the same line and creates nothing."""
    first = key("show")
    assert 0 == first.exit_code, first.output
    path = default_path(home)
    public = Path(f"{path}.pub")
    assert (0o600, 0o600, 0o700) == (mode(path), mode(public), mode(path.parent))
    assert "created a new ADB key" in first.stderr
    assert public.read_text(encoding="ascii") == first.stdout.strip()
    second = key("show")
    assert first.stdout == second.stdout
    assert "created" not in second.stderr


async def test_key_show_is_what_a_phone_authorises(
    home: Path, phone_factory: PhoneFactory, tmp_path: Path
) -> None:
    """A phone whose adb_keys holds the line `key show` printed lets the key in; one holding
    another key's line does not."""
    path = tmp_path / "k" / "adbkey"
    assert 0 == key("new", "--key", str(path)).exit_code
    authorized = tmp_path / "adb_keys"
    authorized.write_text(key("show", "--key", str(path)).stdout, encoding="ascii")
    phone: SimulatedPhone = await phone_factory(authorized_keys_path=authorized)
    device = await Device.connect(phone.serial, key_path=path, connect_timeout_s=2)
    async with device:
        assert 2000 == (await device.facts()).uid
    other = tmp_path / "other" / "adbkey"
    assert 0 == key("new", "--key", str(other)).exit_code
    with pytest.raises(DeviceUnreachable):
        await Device.connect(phone.serial, key_path=other, connect_timeout_s=0.5)


def test_fingerprint_is_the_md5_of_the_decoded_key(home: Path) -> None:
    """The fingerprint (stderr, and in --json) is what the phone's prompt shows: MD5 of the
    base64-decoded key, upper-case hex pairs joined by ':'."""
    data = json.loads(key("show", "--json").stdout)
    blob = base64.b64decode(data["public_key"].split()[0])
    expected = ":".join(f"{b:02X}" for b in hashlib.md5(blob, usedforsecurity=False).digest())
    assert expected == data["fingerprint"]
    assert f"fingerprint {expected}" in key("show").stderr
    assert 524 == len(blob)  # Android's RSAPublicKey struct for a 2048-bit key


def test_key_show_refuses_a_missing_explicit_key(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --key or $STAREBRAIN_ADB_KEY naming a missing file is an error naming `key new`,
    and nothing is created there."""
    missing = tmp_path / "nowhere" / "adbkey"
    result = key("show", "--key", str(missing))
    assert 1 == result.exit_code
    assert f"no ADB key at {missing}" in result.stderr
    assert "starebrain key new" in result.stderr
    monkeypatch.setenv("STAREBRAIN_ADB_KEY", str(missing))
    assert 1 == key("show").exit_code
    assert not missing.parent.exists()


def test_key_show_refuses_a_loose_or_bad_key(home: Path, tmp_path: Path) -> None:
    """A key readable by others, or a file that is no key, is refused with the path."""
    path = tmp_path / "adbkey"
    assert 0 == key("new", "--key", str(path)).exit_code
    os.chmod(path, 0o644)
    loose = key("show", "--key", str(path))
    assert 1 == loose.exit_code
    assert "chmod 600" in loose.stderr
    path.write_text("not a key")
    os.chmod(path, 0o600)
    bad = key("show", "--key", str(path))
    assert 1 == bad.exit_code
    assert f"bad key file {path}" in bad.stderr


def test_key_new_refuses_to_overwrite_without_force(home: Path, tmp_path: Path) -> None:
    """`key new` on an existing key fails and leaves it as it was; --force replaces both files
    with a new pair, still 0600."""
    path = tmp_path / "keys" / "adbkey"
    first = key("new", "--key", str(path))
    assert 0 == first.exit_code, first.output
    before = path.read_bytes(), Path(f"{path}.pub").read_bytes()
    again = key("new", "--key", str(path))
    assert 1 == again.exit_code
    assert "already exists" in again.stderr and "--force" in again.stderr
    assert before == (path.read_bytes(), Path(f"{path}.pub").read_bytes())
    forced = key("new", "--key", str(path), "--force", "--json")
    assert 0 == forced.exit_code, forced.output
    data = json.loads(forced.stdout)
    assert (True, True) == (data["created"], data["replaced"])
    assert before[0] != path.read_bytes()
    assert data["public_key"] == Path(f"{path}.pub").read_text(encoding="ascii")
    assert (0o600, 0o600) == (mode(path), mode(Path(f"{path}.pub")))
    assert [] == [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_key_new_honours_the_environment(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$STAREBRAIN_ADB_KEY names where `key new` creates the key, as for every command."""
    path = tmp_path / "env" / "adbkey"
    monkeypatch.setenv("STAREBRAIN_ADB_KEY", str(path))
    result = key("new")
    assert 0 == result.exit_code, result.output
    assert (0o600, 0o700) == (mode(path), mode(path.parent))
    assert result.stdout.strip() == key("show").stdout.strip()


DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
FINGERPRINT = r"starebrain key: fingerprint (?:[0-9A-F]{2}:){15}[0-9A-F]{2}"


def test_docs_sample_of_key_show_is_what_it_prints(home: Path) -> None:
    """docs/cli.md's `key show` sample has the lines a first `key show` prints, in order
    (the public key shortened there with an ellipsis)."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    start = lines.index("$ starebrain key show") + 1
    created, public, printed = lines[start : start + 3]
    result = key("show")
    path = default_path(home)
    assert re.fullmatch(r"starebrain key: created a new ADB key at /\S+/adbkey", created)
    assert f"starebrain key: created a new ADB key at {path}" == result.stderr.splitlines()[0]
    assert re.fullmatch(r"QAAAA[A-Za-z0-9+/]+…[A-Za-z0-9+/]+=* \S+@\S+", public)
    assert re.fullmatch(r"QAAAA[A-Za-z0-9+/]+=* \S+@\S+", result.stdout.strip())
    assert re.fullmatch(FINGERPRINT, printed)
    assert re.fullmatch(FINGERPRINT, result.stderr.splitlines()[1])
    assert lines[start + 3].startswith("$ starebrain key show > ")


def test_key_json_fields_are_the_documented_ones(home: Path, tmp_path: Path) -> None:
    """`key new --json` prints exactly the fields docs/cli.md lists under Key; `key show
    --json` those but `replaced`."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Key\n") :]
    documented = {
        name
        for line in section.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([^`]+)`", line.split("|")[1])
    }
    new = json.loads(key("new", "--key", str(tmp_path / "k"), "--json").stdout)
    shown = json.loads(key("show", "--key", str(tmp_path / "k"), "--json").stdout)
    assert documented == set(new)
    assert documented - {"replaced"} == set(shown)
